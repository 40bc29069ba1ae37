"""Judge session request and response models."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmjudge.catalog.schemas import RowError
from llmjudge.judging.formats import VerdictFormat
from llmjudge.judging.prompts import DEFAULT_CRITERIA, build_judge_messages
from llmjudge.sessions.models import MAX_WORKERS

Mode = Literal["pillar_sample", "round_robin", "free_for_all"]
Sampling = Literal["fixed", "bootstrap", "weighted"]
SessionStatus = Literal["draft", "running", "paused", "completed", "cancelled", "failed"]
ComparisonStatus = Literal["pending", "running", "completed", "failed", "cancelled"]

_CRITERION = re.compile(r"^[A-Za-z][A-Za-z0-9_\- ]{0,59}$")


class SessionIn(BaseModel):
    """A tournament: which pillars, how threads are paired, who judges, on what criteria."""

    model_config = ConfigDict(extra="forbid")
    session_name: str = Field(min_length=1, max_length=200)
    pillar_ids: list[int] = Field(min_length=1, max_length=1000)
    comparison_mode: Mode = "pillar_sample"
    samples_per_pillar: int = Field(default=5, ge=1, le=100_000)
    repetitions_per_pair: int = Field(default=1, ge=1, le=100)
    max_threads_per_pillar: int | None = Field(default=None, ge=1)
    position_swap: bool = True
    sampling: Sampling = "fixed"
    worker_count: int = Field(default=8, ge=1, le=MAX_WORKERS)
    calculate_elo: bool = True
    judge_model_id: int | None = Field(
        default=None, description="unset = the built-in simulated judge"
    )
    baseline_pillar_id: int | None = None
    match_by_prompt_key: bool = False
    criteria: list[str] = Field(default_factory=lambda: list(DEFAULT_CRITERIA), max_length=20)
    prompt_template: str | None = Field(
        default=None,
        max_length=20_000,
        description="user prompt with {thread_a}, {thread_b} (fenced) or {answer_a}, "
        "{answer_b} (the answers as written), and optionally {criteria} and {prompt} (the "
        "prompt the threads answer); unset = the built-in prompt",
    )
    system_prompt: str | None = Field(
        default=None,
        max_length=20_000,
        description='the judge\'s system message; unset = the built-in one, "" = none',
    )
    verdict_format: VerdictFormat | None = Field(
        default=None,
        description="how the judge's answers are read: json (built-in), tags, or labels "
        "rules {pattern, winner, strength, ignore_case} with a match policy; on_unparsed "
        "fail or tie. Unset = json",
    )
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, description="unset = random")
    auto_start: bool = False

    @field_validator("session_name")
    @classmethod
    def strip_name(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("session_name must not be blank")
        return v

    @field_validator("pillar_ids")
    @classmethod
    def unique_pillars(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("pillar_ids must not repeat a pillar")
        return v

    @field_validator("criteria")
    @classmethod
    def check_criteria(cls, v: list[str]) -> list[str]:
        v = [c.strip() for c in v]
        if not v:
            raise ValueError("at least one criterion is needed")
        bad = [c for c in v if not _CRITERION.match(c)]
        if bad:
            raise ValueError(
                f"criteria must start with a letter and use letters, digits, _, - or spaces "
                f"(at most 60 characters): {bad}"
            )
        if len({c.lower() for c in v}) != len(v):
            raise ValueError("criteria must not repeat")
        return v

    @field_validator("prompt_template")
    @classmethod
    def check_template(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        build_judge_messages(content_a="a", content_b="b", template=v)  # ValueError -> 422
        return v

    @model_validator(mode="after")
    def check_baseline(self) -> SessionIn:
        if self.baseline_pillar_id is not None:
            if self.baseline_pillar_id not in self.pillar_ids:
                raise ValueError(
                    f"baseline_pillar_id {self.baseline_pillar_id} is not among pillar_ids"
                )
            if self.comparison_mode == "free_for_all":
                raise ValueError("a baseline pillar needs round_robin or pillar_sample mode")
        return self


class JudgeModelOut(BaseModel):
    id: int
    name: str
    provider_kind: str
    simulated: bool


class Counts(BaseModel):
    total: int = 0
    pending: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0


class SessionSummary(BaseModel):
    id: int
    name: str
    status: SessionStatus
    comparison_mode: Mode | Literal["imported"]
    pillar_ids: list[int]
    worker_count: int
    judge_model: JudgeModelOut | None
    total: int
    completed: int
    failed: int
    progress: float = Field(description="(completed + failed) / total")
    cost_usd: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class SessionOut(SessionSummary):
    options: dict[str, Any]
    criteria: list[str]
    prompt_template: str | None
    system_prompt: str | None = None
    verdict_format: dict[str, Any] | None = None
    error: str | None
    counts: Counts = Field(description="from the comparison rows")
    input_tokens: int
    output_tokens: int


class EstimateOut(BaseModel):
    total_threads: int
    base_comparisons: int = Field(description="one pass, without swapped twins")
    total_comparisons: int
    worker_count: int
    minutes: float = Field(description="at worker_count workers")
    minutes_by_workers: dict[int, float]
    latency_s: float = Field(description="seconds per call assumed")
    input_tokens: int
    output_tokens: int
    cost_usd: float
    judge_model: JudgeModelOut
    warnings: list[str]
    recommended_repetitions: int | None


class ComparisonOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    session_id: int
    queue_position: int
    thread_a_id: int
    thread_b_id: int
    thread_a_title: str | None = None
    thread_b_title: str | None = None
    pillar_a_id: int
    pillar_b_id: int
    pillar_a_name: str | None = None
    pillar_b_name: str | None = None
    repetition: int
    swap_group: int
    is_swap: bool
    status: ComparisonStatus
    worker_id: str | None
    attempts: int
    claimed_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    winner: Literal["A", "B", "TIE"] | None
    confidence: float | None
    scores_a: dict[str, float] | None
    scores_b: dict[str, float] | None
    reasoning: str | None
    parse_error: str | None
    error: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float | None
    cache_hit: bool


class ComparisonDetail(ComparisonOut):
    raw_response: str | None
    lease_expires_at: datetime | None


class ComparisonPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[ComparisonOut]


class RetryResult(BaseModel):
    session: SessionOut
    requeued: int


class JudgmentImportOut(BaseModel):
    session_id: int
    session_name: str
    total: int
    completed: int
    failed: int = Field(description="judgments the parser could not read (stored as failed)")
    swap_pairs: int = Field(description="comparisons stored as the swapped twin of another")
    criteria: list[str]
    parse_failures: list[RowError] = Field(description="first 200 unreadable judgments")
    labels: int = Field(default=0, description="reference labels the rows carried, stored")


class ThreadComparison(BaseModel):
    """One finished comparison seen from a thread: its side, its opponent, how it ended."""

    id: int
    session_id: int
    session_name: str
    side: Literal["A", "B"]
    opponent_id: int
    opponent_name: str
    opponent_pillar: str = Field(description='"deleted" when the opponent is gone')
    status: ComparisonStatus
    outcome: Literal["won", "lost", "tie", "failed"]
    confidence: float | None
    own_scores: dict[str, float]
    opponent_scores: dict[str, float]
    reasoning: str | None
    error: str | None = Field(description="the parse error or call error of a failed one")
    completed_at: datetime | None


class ThreadComparisons(BaseModel):
    thread_id: int
    limit: int = Field(description="at most this many items, the latest first")
    totals: dict[str, int] = Field(
        description="won, lost, tie and failed over all the thread's finished comparisons"
    )
    items: list[ThreadComparison]


class ThreadLabelOut(BaseModel):
    title: str = Field(description="the thread's title, else its external id, else its id")
    pillar: str


class ModeCount(BaseModel):
    """Comparisons one comparison mode would make with the other options as they are."""

    comparisons: int | None = Field(description="null when the mode cannot run")
    reason: str | None = Field(description="why the mode cannot run with these options")
