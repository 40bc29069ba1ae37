"""Judge session request and response models (an adaptive session's state and estimate
are in ``sessions.adaptive.schemas``)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from llmjudge.catalog import RowError
from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.judging.grading import check_grading_template
from llmjudge.core.judging.panels import SCORE_AGGREGATIONS
from llmjudge.core.judging.prompts import DEFAULT_CRITERIA, build_judge_messages
from llmjudge.sessions.models import MAX_WORKERS

Mode = Literal["pillar_sample", "round_robin", "free_for_all", "single"]
# Adaptive sessions plan round by round (sessions.adaptive.rounds): not a fixed plan, so not a Mode.
CreateMode = Mode | Literal["adaptive"]
Sampling = Literal["fixed", "bootstrap", "weighted"]
SessionStatus = Literal["draft", "running", "paused", "completed", "cancelled", "failed"]
ComparisonStatus = Literal["pending", "running", "completed", "failed", "cancelled"]
Execution = Literal["live", "batch"]

_CRITERION = re.compile(r"^[A-Za-z][A-Za-z0-9_\- ]{0,59}$")


MAX_PANEL = 9


class PanelMemberIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model_id: int
    weight: float | None = Field(default=None, ge=0, le=1000, description="weighted only")


class CascadeIn(BaseModel):
    """When a cascade stops (``judging.panels.CascadePolicy``) and, for the estimate, the
    share of comparisons expected to stop at each member (from a calibration)."""

    model_config = ConfigDict(extra="forbid")
    rule: Literal["confidence", "agreement", "swap"] = "confidence"
    threshold: float = Field(default=0.8, ge=0, le=1)
    expected_stop_share: list[float] | None = Field(
        default=None,
        description="per member, summing to 1; unset = the estimate assumes every member is asked",
    )


class PanelIn(BaseModel):
    """Several judges per comparison (members in order: a cascade asks the first first, so
    list the cheapest first) and how their votes become the comparison's verdict."""

    model_config = ConfigDict(extra="forbid")
    members: list[PanelMemberIn] = Field(min_length=2, max_length=MAX_PANEL)
    rule: Literal["majority", "mean", "median", "weighted", "calibrated", "cascade"] = Field(
        default="majority",
        description="pairs: majority, mean, weighted, calibrated or cascade; single-answer "
        "grading: mean or median of the members' grades",
    )
    cascade: CascadeIn | None = None
    calibration_session_id: int | None = Field(
        default=None,
        description="calibrated: learn the weights from this panel session's votes against "
        "reference labels (same members in the same order)",
    )

    @model_validator(mode="after")
    def check_rule(self) -> PanelIn:
        if self.rule == "weighted" and any(m.weight is None for m in self.members):
            raise ValueError("weighted needs a weight on every member")
        if self.rule == "calibrated" and self.calibration_session_id is None:
            raise ValueError("calibrated needs calibration_session_id (a labelled panel run)")
        if self.rule == "cascade":
            self.cascade = self.cascade or CascadeIn()
            share = self.cascade.expected_stop_share
            if share is not None and (
                len(share) != len(self.members)
                or any(x < 0 for x in share)
                or abs(sum(share) - 1) > 1e-6
            ):
                raise ValueError("expected_stop_share: one share >= 0 per member, summing to 1")
        return self


class AdaptiveIn(BaseModel):
    """An adaptive tournament: what is ranked, when to stop, how pairs are chosen."""

    model_config = ConfigDict(extra="forbid")
    unit: Literal["threads", "pillars"] = Field(
        default="threads",
        description="threads: rank the threads of the pillars; pillars: rank the pillars "
        "(each comparison is two pillars' answers to one prompt key both answered)",
    )
    rule: Literal["ranking", "top_k", "budget"] = Field(
        default="ranking",
        description="ranking: rank intervals stable or every neighbour separated; top_k: "
        "the top k separated from the rest; budget: spend it all",
    )
    k: int = Field(default=5, ge=1, le=100_000, description="top_k: how many")
    confidence: float = Field(default=0.95, ge=0.6, le=0.999)
    tolerance: float = Field(
        default=0.01,
        gt=0,
        le=0.5,
        description="ranking: the rank intervals count as stable when their mean width "
        "moves by less than this share of the field over each of the last two ninths of "
        "the results (larger stops sooner)",
    )
    budget_comparisons: int | None = Field(default=None, ge=1, le=10_000_000)
    budget_usd: float | None = Field(default=None, gt=0, le=1_000_000)
    strategy: Literal["information", "swiss", "random"] = Field(
        default="information",
        description="information: expected variance reduction where the order is still "
        "uncertain; swiss: neighbours in the current order; random: a baseline",
    )
    position: Literal["once", "both"] = Field(
        default="once",
        description="once: each pair judged once in a random order (half price) plus a "
        "share of swapped twins; both: every pair in both orders",
    )
    swap_share: float = Field(default=0.1, ge=0, le=1)
    epsilon: float = Field(default=0.1, ge=0, le=1, description="share of random pairs")
    min_games: int = Field(default=3, ge=1, le=1000)
    batch_size: int | None = Field(
        default=None, ge=1, le=100_000, description="unset: grows with the spend"
    )

    @model_validator(mode="after")
    def check_budget(self) -> AdaptiveIn:
        if self.rule == "budget" and self.budget_comparisons is None and self.budget_usd is None:
            raise ValueError("the budget rule needs budget_comparisons or budget_usd")
        return self


class SessionIn(BaseModel):
    """A tournament: which pillars, how threads are paired, who judges, on what criteria."""

    model_config = ConfigDict(extra="forbid")
    session_name: str = Field(min_length=1, max_length=200)
    pillar_ids: list[int] = Field(min_length=1, max_length=1000)
    comparison_mode: CreateMode = "pillar_sample"
    samples_per_pillar: int = Field(default=5, ge=1, le=100_000)
    repetitions_per_pair: int = Field(default=1, ge=1, le=100)
    max_threads_per_pillar: int | None = Field(default=None, ge=1)
    position_swap: StrictBool = Field(
        default=True,
        description="planned modes: judge each pair in both orders; an adaptive session "
        "orders its pairs by adaptive.position instead",
    )
    sampling: Sampling = "fixed"
    worker_count: int = Field(default=8, ge=1, le=MAX_WORKERS)
    calculate_elo: StrictBool = True
    judge_model_id: int | None = Field(
        default=None, description="unset = the built-in simulated judge"
    )
    panel: PanelIn | None = Field(
        default=None, description="several judges instead of judge_model_id alone"
    )
    baseline_pillar_id: int | None = None
    match_by_prompt_key: StrictBool = False
    criteria: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CRITERIA),
        max_length=20,
        description="what the judge scores; unset = answer quality (MT-Bench style) when "
        "every thread of the chosen pillars has a prompt key, else the counselling set",
    )
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
        "fail or tie; or logprobs with a token map {a, b, tie, ignore_case, top_logprobs} "
        "(OpenAI-compatible judges only: P(A is better) is stored as prob_a). Unset = json. "
        "Mode single: score {pattern, scale} or likert {scale}, unset = score (MT-Bench's "
        "1-10 [[rating]]); weighted true grades by the judge's token probabilities (G-Eval: "
        "sum of s * p(s) over the scale; OpenAI-compatible judges only)",
    )
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, description="unset = random")
    auto_start: StrictBool = False
    execution: Execution = Field(
        default="live",
        description="live: each judge call as it comes; batch: the calls go to the "
        "provider's batch API (OpenAI Batch, Anthropic Message Batches) at its batch price, "
        "answered within 24 hours",
    )
    batch_fallback: Literal["none", "live"] = Field(
        default="none",
        description="execution batch on a judge or a panel member without a batch API (the "
        "simulator, Gemini), or a cascade panel: none refuses the session, live runs it live; "
        "live also judges live the requests a batch job could not answer (expired, "
        "cancelled)",
    )
    adaptive: AdaptiveIn | None = Field(
        default=None, description="comparison_mode adaptive: its options (defaults if unset)"
    )

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
    def blank_template(cls, v: str | None) -> str | None:
        return None if v is None or not v.strip() else v

    @model_validator(mode="after")
    def check_template(self) -> SessionIn:
        if self.prompt_template is None:
            return self
        if self.comparison_mode == "single":  # ValueError -> 422
            check_grading_template(self.prompt_template)
        else:
            build_judge_messages(content_a="a", content_b="b", template=self.prompt_template)
        return self

    @model_validator(mode="after")
    def check_single(self) -> SessionIn:
        """Single-answer grading reads a grade (a score format, by default MT-Bench's 1-10
        ``[[rating]]``); pairs read a verdict."""
        fmt = self.verdict_format
        if self.comparison_mode != "single":
            if fmt is not None and fmt.grades:
                raise ValueError(
                    f"a {fmt.kind} verdict format grades single threads: use comparison_mode "
                    "single, or a json, tags or labels format for pairs"
                )
            if self.panel is not None and self.panel.rule == "median":
                raise ValueError("median aggregates grades: a panel on pairs cannot use it")
            return self
        if fmt is None:
            self.verdict_format = VerdictFormat(kind="score")
        elif not fmt.grades:
            raise ValueError(
                f"single-answer grading reads a grade: its verdict format must be score or "
                f"likert, not {fmt.kind}"
            )
        if self.baseline_pillar_id is not None:
            raise ValueError("single-answer grading has no baseline pillar")
        if self.panel is not None and self.panel.rule not in SCORE_AGGREGATIONS:
            raise ValueError(
                f"a panel of graders takes the mean or median of their grades, not "
                f"{self.panel.rule}"
            )
        return self

    @model_validator(mode="after")
    def check_adaptive(self) -> SessionIn:
        if self.comparison_mode == "adaptive":
            if self.adaptive is None:
                self.adaptive = AdaptiveIn()
            if self.baseline_pillar_id is not None:
                raise ValueError("an adaptive session has no baseline pillar")
            if self.panel is not None:  # rounds are planned for one judge's answers
                raise ValueError("an adaptive session has one judge: a panel needs a planned mode")
            if self.match_by_prompt_key:  # rounds pair any two players; see adaptive.unit
                raise ValueError(
                    "an adaptive session does not match by prompt key: ranking threads pairs "
                    "them across prompts, ranking pillars (adaptive.unit = pillars) compares "
                    "their answers to the same prompt"
                )
            if self.adaptive.unit == "pillars" and len(self.pillar_ids) < 2:
                raise ValueError("ranking pillars needs at least two pillars")
        elif self.adaptive is not None:
            raise ValueError("adaptive options need comparison_mode adaptive")
        return self

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


class PromptCacheOut(BaseModel):
    """What the providers' prompt caches did for a session's judge calls (from their
    accounting rows in ``llm_calls``)."""

    calls: int = Field(default=0, description="judge calls that read from or wrote to the cache")
    cached_input_tokens: int = Field(default=0, description="input tokens read from the cache")
    cache_write_tokens: int = Field(default=0, description="input tokens written to the cache")
    saving_usd: float = Field(
        default=0.0,
        description="against the full input price for every token (writes above it count "
        "against); already taken off cost_usd",
    )
    input_tokens: int = Field(default=0, description="the session's input tokens, all calls")
    cached_share: float | None = Field(
        default=None,
        description="cached_input_tokens / input_tokens; null without input tokens",
    )


class SessionSummary(BaseModel):
    id: int
    name: str
    status: SessionStatus
    comparison_mode: Mode | Literal["imported", "adaptive"]
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
    execution: Execution = "live"
    options: dict[str, Any]
    criteria: list[str]
    prompt_template: str | None
    system_prompt: str | None = None
    verdict_format: dict[str, Any] | None = None
    error: str | None
    counts: Counts = Field(description="from the comparison rows")
    input_tokens: int
    output_tokens: int
    panel: dict[str, Any] | None = None
    prompt_cache: PromptCacheOut = Field(
        default_factory=PromptCacheOut, description="the providers' prompt caches"
    )


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
    panel_members: int = Field(default=1, description="judge calls per comparison (at most)")
    worst_case_cost_usd: float | None = Field(
        default=None, description="a cascade: asking every member every time"
    )
    over_limit: bool = Field(
        default=False, description="more comparisons than one session may make: cannot be created"
    )
    max_comparisons: int = Field(default=0, description="the most one session may make")
    batch_cost_usd: float | None = Field(
        default=None,
        description="the same calls through the provider's batch API (the model's "
        "batch_discount off); null when the judge has no batch API",
    )
    batch_unavailable: str | None = Field(
        default=None, description="why this judge cannot run in batch mode"
    )


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
    judges: list[str] = Field(default_factory=list, description="a panel's judges, in order")
    aggregation: str | None = Field(default=None, description="a panel's aggregation rule")
    labels: int = Field(default=0, description="reference labels the rows carried, stored")


class ModeCount(BaseModel):
    """Comparisons one comparison mode would make with the other options as they are."""

    comparisons: int | None = Field(description="null when the mode cannot run")
    reason: str | None = Field(description="why the mode cannot run with these options")


class BatchOut(BaseModel):
    """One provider batch job of a batch session (``sessions.run.batches``)."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    provider_kind: str
    provider_batch_id: str | None
    state: str = Field(
        description="prepared, uploaded, submitting (not yet at the provider); validating, "
        "in_progress, finalizing, cancelling (at the provider); completed, failed, expired, "
        "cancelled (ended); see applied_at"
    )
    requests: int
    succeeded: int
    errored: int
    error: str | None
    created_at: datetime
    submitted_at: datetime | None
    ended_at: datetime | None
    applied_at: datetime | None = Field(description="when its results were applied")
