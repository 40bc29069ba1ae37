"""Judge sessions (tournaments) and their comparisons, which are also the work queue."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from llmjudge.infra.db.base import Base, created_at_column, owned_by, refers_to

SESSION_STATUSES = ("draft", "running", "paused", "completed", "cancelled", "failed")
COMPARISON_STATUSES = ("pending", "running", "completed", "failed", "cancelled")
# "imported": judgments made elsewhere (POST /api/sessions/import); never planned or run.
# "adaptive": comparisons appended round by round (sessions.rounds), rounds in AdaptiveRound.
# "single": each thread graded alone (a comparison row without a second thread, a score).
COMPARISON_MODES = (
    "pillar_sample",
    "round_robin",
    "free_for_all",
    "imported",
    "adaptive",
    "single",
)
MAX_WORKERS = 1024
# How a session's judge calls go: one by one through the gateway, or as provider batch jobs
# (sessions.run.batches).
EXECUTIONS = ("live", "batch")


class JudgeSession(Base):
    __tablename__ = "judge_sessions"
    __table_args__ = (
        CheckConstraint(f"status IN {SESSION_STATUSES!r}", name="status"),
        CheckConstraint(f"comparison_mode IN {COMPARISON_MODES!r}", name="mode"),
        CheckConstraint(f"worker_count BETWEEN 1 AND {MAX_WORKERS}", name="workers"),
        CheckConstraint(f"execution IN {EXECUTIONS!r}", name="execution"),
        CheckConstraint(
            "completed >= 0 AND failed >= 0 AND completed + failed <= total", name="counts"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20), default="draft", server_default="draft")
    comparison_mode: Mapped[str] = mapped_column(String(20))
    pillar_ids: Mapped[list[int]] = mapped_column(ARRAY(Integer))
    # samples_per_pillar, repetitions_per_pair, max_threads_per_pillar, position_swap,
    # calculate_elo, baseline_pillar_id, match_by_prompt_key, sampling, seed
    options: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict, server_default="{}")
    worker_count: Mapped[int] = mapped_column(Integer, default=8, server_default="8")
    execution: Mapped[str] = mapped_column(String(10), default="live", server_default="live")
    judge_model_id: Mapped[int | None] = refers_to("llm_models", index=True)
    criteria: Mapped[list[str]] = mapped_column(JSONB, default=list, server_default="[]")
    prompt_template: Mapped[str | None] = mapped_column(Text)
    # A judge's own system message and verdict format (judging.formats), so a published judge
    # prompt runs unchanged; None means the built-in ones.
    system_prompt: Mapped[str | None] = mapped_column(Text)
    verdict_format: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # A panel of judges instead of judge_model_id alone (sessions.schemas.PanelIn):
    # {"rule", "members": [{"model_id", "label", "weight"}], "cascade": {"rule", "threshold"}}.
    panel: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = created_at_column()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Denormalised, updated in the same transaction as the comparisons they count.
    total: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    completed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    failed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # Adaptive sessions: why the selector stopped ("rule", "budget", "exhausted"); while
    # None a drained adaptive session waits for its next round instead of completing.
    stop_reason: Mapped[str | None] = mapped_column(Text)


class AdaptiveRound(Base):
    """One round of an adaptive session: the queue positions it appended and the fit and
    stopping decision it was planned from. (session, round) is the primary key, so a round
    is appended at most once whichever process plans it."""

    __tablename__ = "adaptive_rounds"
    __table_args__ = (CheckConstraint("size >= 0 AND spent >= 0 AND round >= 0", name="counts"),)

    session_id: Mapped[int] = owned_by("judge_sessions", primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    first_position: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)  # comparisons appended (0: the stop)
    spent: Mapped[int] = mapped_column(Integer)  # judge calls planned before this round
    results: Mapped[int] = mapped_column(Integer)  # verdicts the fit used
    width: Mapped[float | None] = mapped_column(Float)  # mean rank-interval width
    progress: Mapped[str] = mapped_column(Text, default="", server_default="")
    done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    needed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    stop: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    reason: Mapped[str | None] = mapped_column(Text)
    theta: Mapped[list[float] | None] = mapped_column(JSONB)  # the warm start of the next fit
    # how each appended comparison was chosen (adaptive.SOURCE_*), by queue position, and
    # the uniform share's per-pair draw probability (NULL: no uniform pair this round)
    sources: Mapped[list[int] | None] = mapped_column(ARRAY(SmallInteger))
    random_propensity: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = created_at_column()


class JudgeAnswer:
    """The columns of a judge's answer: one judge's on its vote row; on a comparison, its
    one judge's answer, or a panel's aggregate verdict and total spend."""

    winner: Mapped[str | None] = mapped_column(String(3))
    confidence: Mapped[float | None] = mapped_column(Float)
    # single-answer grading: the grade on the session's scale (scores_a: per criterion)
    score: Mapped[float | None] = mapped_column(Float)
    scores_a: Mapped[dict[str, float] | None] = mapped_column(JSONB)
    scores_b: Mapped[dict[str, float] | None] = mapped_column(JSONB)
    reasoning: Mapped[str | None] = mapped_column(Text)
    raw_response: Mapped[str | None] = mapped_column(Text)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    latency_s: Mapped[float | None] = mapped_column(Float)
    cache_hit: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    error: Mapped[str | None] = mapped_column(Text)
    # P(the answer shown as A is better), where the judge gives a probability (its token
    # log probabilities, or an imported preference); NULL for a hard verdict alone.
    prob_a: Mapped[float | None] = mapped_column(Float)


class Comparison(JudgeAnswer, Base):
    __tablename__ = "comparisons"
    __table_args__ = (
        CheckConstraint(f"status IN {COMPARISON_STATUSES!r}", name="status"),
        CheckConstraint("winner IS NULL OR winner IN ('A', 'B', 'TIE')", name="winner"),
        CheckConstraint("strength IS NULL OR strength IN (1, 2)", name="strength"),
        CheckConstraint("prob_a IS NULL OR (prob_a >= 0 AND prob_a <= 1)", name="prob_a"),
        CheckConstraint("(thread_b_id IS NULL) = (pillar_b_id IS NULL)", name="second"),
        # One row per planned item: a plan inserted twice fails instead of doubling work.
        UniqueConstraint("session_id", "queue_position"),
        Index(
            "ix_comparisons_claim",
            "session_id",
            "queue_position",
            postgresql_where=text("status = 'pending'"),
        ),
        Index(
            "ix_comparisons_lease",
            "lease_expires_at",
            postgresql_where=text("status = 'running'"),
        ),
        Index("ix_comparisons_session_status", "session_id", "status"),
        # The thread page lists every comparison a thread took part in.
        Index("ix_comparisons_thread_a_id", "thread_a_id"),
        Index("ix_comparisons_thread_b_id", "thread_b_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    session_id: Mapped[int] = owned_by("judge_sessions")
    # No foreign keys to threads and pillars: results are history, and deleting a thread must
    # neither be blocked by nor silently delete (and so miscount) a session's comparisons.
    queue_position: Mapped[int] = mapped_column(Integer)
    thread_a_id: Mapped[int] = mapped_column(Integer)
    # NULL: thread A graded alone (a session of mode single)
    thread_b_id: Mapped[int | None] = mapped_column(Integer)
    pillar_a_id: Mapped[int] = mapped_column(Integer)
    pillar_b_id: Mapped[int | None] = mapped_column(Integer)
    repetition: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    swap_group: Mapped[int] = mapped_column(Integer)
    is_swap: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    status: Mapped[str] = mapped_column(String(10), default="pending", server_default="pending")
    worker_id: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # 2 a strong verdict (A>>B), 1 a weak one (A>B); NULL when the format has no strengths
    strength: Mapped[int | None] = mapped_column(SmallInteger)
    parse_error: Mapped[str | None] = mapped_column(Text)
    # Panel sessions: members that voted on the aggregate, and members asked (a cascade
    # stops early); None for a single judge.
    votes_cast: Mapped[int | None] = mapped_column(SmallInteger)
    votes_asked: Mapped[int | None] = mapped_column(SmallInteger)


VOTE_STATUSES = ("voted", "missing", "skipped")


class ComparisonVote(JudgeAnswer, Base):
    """One judge's answer to one comparison: a panel member's, or a single judge's as
    member 0. ``missing``: it failed after its retries (or its answer never parsed);
    ``skipped``: a cascade stopped before it."""

    __tablename__ = "comparison_votes"
    __table_args__ = (
        CheckConstraint(f"status IN {VOTE_STATUSES!r}", name="status"),
        CheckConstraint("winner IS NULL OR winner IN ('A', 'B', 'TIE')", name="winner"),
        CheckConstraint("prob_a IS NULL OR (prob_a >= 0 AND prob_a <= 1)", name="prob_a"),
        UniqueConstraint("comparison_id", "member"),
        Index("ix_comparison_votes_session_id", "session_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    comparison_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("comparisons.id", ondelete="CASCADE")
    )
    session_id: Mapped[int] = owned_by("judge_sessions")
    member: Mapped[int] = mapped_column(SmallInteger)
    model_id: Mapped[int | None] = refers_to("llm_models")
    judge: Mapped[str] = mapped_column(String(200), default="", server_default="")
    status: Mapped[str] = mapped_column(String(10))
    strength: Mapped[float | None] = mapped_column(Float)


# A provider batch job's states: ours before it is sent (prepared, uploaded, submitting),
# then the provider's (OpenAI's names; Anthropic's in_progress / canceling / ended map onto
# them); ``applied_at`` marks a job whose results are applied.
BATCH_STATES = (
    "prepared",
    "uploaded",
    "submitting",
    "validating",
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "expired",
    "cancelling",
    "cancelled",
)


class ProviderBatch(Base):
    """One batch job at a judge's provider, of a session (``sessions.run.batches``) or of a
    persona's training iteration (its judge's labels, ``personas.batch_labels``)."""

    __tablename__ = "provider_batches"
    __table_args__ = (
        UniqueConstraint("provider_id", "provider_batch_id", name="uq_provider_batches_remote"),
        Index(
            "ix_provider_batches_open", "session_id", postgresql_where=text("applied_at IS NULL")
        ),
        Index(
            "ix_provider_batches_persona_open",
            "persona_id",
            postgresql_where=text("applied_at IS NULL"),
        ),
        CheckConstraint(
            "(session_id IS NULL) <> (persona_id IS NULL) "
            "AND (persona_id IS NULL) = (iteration_id IS NULL)",
            name="one_owner",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    session_id: Mapped[int | None] = owned_by("judge_sessions", index=True)
    persona_id: Mapped[int | None] = owned_by("personas")
    iteration_id: Mapped[int | None] = owned_by("persona_iterations")
    provider_id: Mapped[int] = mapped_column(Integer)
    model_id: Mapped[int] = mapped_column(Integer)
    provider_kind: Mapped[str] = mapped_column(String(20))
    provider_batch_id: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(20), default="prepared", server_default="prepared")
    requests: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    succeeded: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    errored: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    input_file_id: Mapped[str | None] = mapped_column(String(200))
    output_file_id: Mapped[str | None] = mapped_column(String(200))
    error_file_id: Mapped[str | None] = mapped_column(String(200))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = created_at_column()
    submitting_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    submitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    polled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ProviderBatchRequest(Base):
    """One request of a batch job: its ``custom_id`` and the comparison (and attempt, the
    claim token's half that changes) it answers, or a persona job's pair; stored before the
    job is sent."""

    __tablename__ = "provider_batch_requests"

    batch_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("provider_batches.id", ondelete="CASCADE"), primary_key=True
    )
    custom_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    comparison_id: Mapped[int | None] = mapped_column(BigInteger, index=True)
    pair_id: Mapped[int | None] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer)
    member: Mapped[int] = mapped_column(SmallInteger, default=0, server_default="0")
    request: Mapped[dict[str, Any]] = mapped_column(JSONB)
