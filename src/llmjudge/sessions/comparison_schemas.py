"""A session's comparisons as the API answers them: one comparison (with a panel's votes),
a page of them, and a thread's own record across sessions."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from llmjudge.sessions.schemas import ComparisonStatus


class ComparisonOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    session_id: int
    queue_position: int
    thread_a_id: int
    thread_b_id: int | None = Field(description="null: thread A graded alone (mode single)")
    thread_a_title: str | None = None
    thread_b_title: str | None = None
    pillar_a_id: int
    pillar_b_id: int | None
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
    strength: int | None = Field(
        default=None,
        description="2 a strong verdict (A>>B), 1 a weak one (A>B); null when the verdict "
        "format has no strengths",
    )
    prob_a: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="P(the answer shown as A is better): from the judge's token log "
        "probabilities (a logprobs verdict format), a panel's mean, or an imported "
        "preference; null for a hard verdict alone",
    )
    confidence: float | None
    score: float | None = Field(default=None, description="mode single: the grade")
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


class VoteOut(BaseModel):
    """One panel member's answer to a comparison."""

    model_config = ConfigDict(from_attributes=True)
    member: int
    model_id: int | None
    judge: str
    status: str
    winner: str | None
    prob_a: float | None = Field(default=None, description="this judge's P(A is better)")
    confidence: float | None
    score: float | None = None
    scores_a: dict[str, float] | None
    scores_b: dict[str, float] | None
    reasoning: str | None
    raw_response: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float | None
    cache_hit: bool
    error: str | None


class ComparisonDetail(ComparisonOut):
    raw_response: str | None
    lease_expires_at: datetime | None
    votes_cast: int | None = None
    votes_asked: int | None = None
    votes: list[VoteOut] = Field(default_factory=list, description="a panel's members")


class ComparisonPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[ComparisonOut]


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
