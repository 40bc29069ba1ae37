"""The judge queue's SQL: claim, heartbeat, finish (complete / retry / fail / release).

Work items are ``comparisons`` rows; ``sessions.jobs`` hands this SQL to the generic pool
(``queue.pool``). The claim token of a running item is the pair
(``worker_id``, ``attempts``) written by the claim: only the holder of the current token can
finish the item, so a late result from a worker whose lease expired (and whose item was
claimed again) is discarded, and each item is counted exactly once. A finish updates the
session's counters in the same transaction as the rows it changed, so the counters always
equal the rows.

Every function takes an ``AsyncConnection`` and runs its statements in the caller's
transaction; the caller commits. The votes a finish carries are written by ``votes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import BindParameter, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    Integer,
    SmallInteger,
    String,
    Text,
)

__all__ = [
    "WORK_CHANNEL",
    "Claimed",
    "Finish",
    "FinishedSession",
    "JudgeVote",
    "RunningSession",
    "claim",
    "finish",
    "notify_work",
    "renew",
    "running_sessions",
    "ANSWER_TYPES",
    "VOTE_COLUMNS",
    "array_params",
    "token",
]

# NOTIFY channel that wakes idle dispatchers (payload: the session id).
WORK_CHANNEL = "llmjudge_work"

FinishStatus = Literal["completed", "failed", "pending"]
VoteStatus = Literal["voted", "missing", "skipped"]


@dataclass(frozen=True, slots=True)
class Claimed:
    id: int
    session_id: int
    queue_position: int
    thread_a_id: int
    thread_b_id: int | None  # None: thread A graded alone (mode single)
    pillar_a_id: int
    pillar_b_id: int | None
    repetition: int
    swap_group: int
    is_swap: bool
    attempts: int  # including this claim
    worker_id: str

    @property
    def group_id(self) -> int:
        """The queue's group of an item is its session (``worker_count`` bounds it)."""
        return self.session_id


@dataclass(frozen=True, slots=True)
class RunningSession:
    id: int
    worker_count: int


@dataclass(slots=True)  # not frozen: made per judge call, twice as fast
class JudgeVote:
    """One judge's answer to one comparison, as ``comparison_votes`` stores it: a single
    judge is member 0 of a panel of one. ``voted``, ``missing`` (failed after its retries,
    or its answer did not parse) or ``skipped`` (a cascade stopped before it).

    A ``Finish`` carries one more as its ``answer``: what the comparison row stores (the
    single judge's own answer, or a panel's aggregate and total spend)."""

    member: int = 0
    model_id: int | None = None
    judge: str = ""
    status: VoteStatus = "missing"
    winner: str | None = None
    confidence: float | None = None
    scores_a: dict[str, float] | None = None
    scores_b: dict[str, float] | None = None
    reasoning: str | None = None
    raw_response: str | None = None
    score: float | None = None  # a grade (mode single); winner is then None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float | None = None
    cache_hit: bool = False
    error: str | None = None
    strength: int | None = None  # 2 "much better", 1 "better"; None: a tie, or no strengths
    prob_a: float | None = None  # P(A is better): a logprobs judge's, or a panel's mean


@dataclass(frozen=True, slots=True)
class Finish:
    """The end of one attempt. ``status``: ``completed`` (a verdict), ``failed`` (for
    good), or ``pending`` (back to the queue: a retry, or a release with ``refund``).

    ``answer`` is what the comparison row stores: a single judge's vote (its member-0 vote
    row is copied from there), or a panel's aggregate. A panel's ``votes`` are its members'
    answers, written to ``comparison_votes`` with the finish that applies (none for a
    retry), and it says how many voted on the aggregate and how many were asked (None for
    one judge)."""

    id: int
    worker_id: str
    attempts: int  # the claim's token: must still match the row
    status: FinishStatus
    started_at: datetime | None = None
    answer: JudgeVote = field(default_factory=JudgeVote)  # none: no judge call was made
    parse_error: str | None = None
    error: str | None = None
    refund: bool = False  # a release: the attempt does not count
    votes: tuple[JudgeVote, ...] = ()
    votes_cast: int | None = None
    votes_asked: int | None = None


def token(held: Claimed | Finish) -> dict[str, Any]:
    """The claim token of an item, as a ``Finish``'s first fields."""
    return {"id": held.id, "worker_id": held.worker_id, "attempts": held.attempts}


@dataclass(frozen=True, slots=True)
class FinishedSession:
    """A session touched by a finish, with its counters after it. A running or paused
    session with nothing left to do ends ``completed`` (``failed`` when no comparison
    succeeded); since a finish applies only to running items, such a status here means
    this finish ended it."""

    id: int
    status: str
    total: int
    completed: int
    failed: int
    applied: list[int] = field(default_factory=list)  # ids of the finishes that hit a row


# Each column a judge's answer shares between a comparison row and a vote row, with the
# SQL type its array binds as in the unnest statements (``strength`` differs: see models).
ANSWER_TYPES: dict[str, Any] = {
    "winner": String,
    "confidence": Float,
    "scores_a": JSONB,
    "scores_b": JSONB,
    "reasoning": Text,
    "raw_response": Text,
    "input_tokens": Integer,
    "output_tokens": Integer,
    "cost_usd": Float,
    "latency_s": Float,
    "cache_hit": Boolean,
    "prob_a": Float,
    "score": Float,
}


def array_params(types: Mapping[str, Any]) -> list[BindParameter[Any]]:
    """One array parameter per column, for ``unnest``."""
    return [bindparam(name, type_=ARRAY(type_)) for name, type_ in types.items()]


# Two index-friendly halves (pending items by the partial claim index, expired leases by the
# partial lease index), each locked with SKIP LOCKED; expired items go first.
_CLAIM = text(
    """
    WITH live AS (
        SELECT 1 FROM judge_sessions WHERE id = :session_id AND status = 'running'
    ), expired AS (
        SELECT c.id, c.queue_position, 0 AS rank
        FROM comparisons c
        WHERE c.status = 'running' AND c.lease_expires_at < now()
          AND c.session_id = :session_id AND EXISTS (SELECT 1 FROM live)
        ORDER BY c.lease_expires_at
        LIMIT :n
        FOR UPDATE OF c SKIP LOCKED
    ), pending AS (
        SELECT c.id, c.queue_position, 1 AS rank
        FROM comparisons c
        WHERE c.session_id = :session_id AND c.status = 'pending' AND EXISTS (SELECT 1 FROM live)
        ORDER BY c.queue_position
        LIMIT :n
        FOR UPDATE OF c SKIP LOCKED
    ), numbered AS (
        SELECT id, row_number() OVER (ORDER BY rank, queue_position) AS rn
        FROM (SELECT * FROM expired UNION ALL SELECT * FROM pending) AS candidates
    )
    UPDATE comparisons c
    SET status = 'running',
        worker_id = (CAST(:worker_ids AS text[]))[numbered.rn],
        attempts = c.attempts + 1,
        lease_expires_at = now() + make_interval(secs => :lease_s),
        claimed_at = now(),
        started_at = NULL
    FROM numbered
    WHERE c.id = numbered.id AND numbered.rn <= :n
    RETURNING c.id, c.session_id, c.queue_position, c.thread_a_id, c.thread_b_id,
              c.pillar_a_id, c.pillar_b_id, c.repetition, c.swap_group, c.is_swap,
              c.attempts, c.worker_id
    """
)


async def claim(
    conn: AsyncConnection, *, session_id: int, worker_ids: Sequence[str], lease_s: float
) -> list[Claimed]:
    """Claim up to ``len(worker_ids)`` items of session ``session_id`` if it is running, one
    per worker id: first items whose lease expired (their worker died), then pending ones
    in queue order."""
    if not worker_ids:
        return []
    rows = await conn.execute(
        _CLAIM,
        {
            "session_id": session_id,
            "n": len(worker_ids),
            "worker_ids": list(worker_ids),
            "lease_s": float(lease_s),
        },
    )
    order = {w: i for i, w in enumerate(worker_ids)}  # = claim order (expired, then queue)
    return sorted((Claimed(*row) for row in rows.all()), key=lambda c: order[c.worker_id])


_RENEW = text(
    """
    UPDATE comparisons c
    SET lease_expires_at = now() + make_interval(secs => :lease_s)
    FROM unnest(CAST(:ids AS bigint[]), CAST(:worker_ids AS text[]), CAST(:attempts AS int[]))
         AS h(id, worker_id, attempts)
    WHERE c.id = h.id AND c.status = 'running'
      AND c.worker_id = h.worker_id AND c.attempts = h.attempts
    RETURNING c.id
    """
)


async def renew(
    conn: AsyncConnection, *, held: Sequence[tuple[int, str, int]], lease_s: float
) -> set[int]:
    """Extend the leases of ``held`` (id, worker_id, attempts) items in one statement;
    returns the ids still held (an item missing from it was claimed by someone else)."""
    if not held:
        return set()
    ids, workers, attempts = (list(col) for col in zip(*held, strict=True))
    rows = await conn.execute(
        _RENEW, {"ids": ids, "worker_ids": workers, "attempts": attempts, "lease_s": lease_s}
    )
    return {row[0] for row in rows.all()}


_FINISH = text(
    """
    WITH f AS (
        SELECT * FROM unnest(
            CAST(:ids AS bigint[]), CAST(:worker_ids AS text[]), CAST(:attempts AS int[]),
            CAST(:statuses AS text[]), CAST(:started_at AS timestamptz[]),
            CAST(:winner AS text[]), CAST(:confidence AS float8[]),
            CAST(:scores_a AS jsonb[]), CAST(:scores_b AS jsonb[]), CAST(:reasoning AS text[]),
            CAST(:raw_response AS text[]), CAST(:parse_error AS text[]), CAST(:error AS text[]),
            CAST(:input_tokens AS int[]), CAST(:output_tokens AS int[]),
            CAST(:cost_usd AS float8[]), CAST(:latency_s AS float8[]),
            CAST(:cache_hit AS bool[]), CAST(:refund AS bool[]), CAST(:strength AS int2[]),
            CAST(:prob_a AS float8[]), CAST(:score AS float8[])
        ) AS f(id, worker_id, attempts, status, started_at, winner, confidence,
               scores_a, scores_b, reasoning, raw_response, parse_error, error,
               input_tokens, output_tokens, cost_usd, latency_s, cache_hit, refund, strength,
               prob_a, score)
    ), done AS (
        UPDATE comparisons c
        -- An item given back to a cancelled session ends cancelled, not pending forever.
        SET status = CASE WHEN f.status = 'pending' AND EXISTS (
                              SELECT 1 FROM judge_sessions js
                              WHERE js.id = c.session_id AND js.status = 'cancelled')
                          THEN 'cancelled' ELSE f.status END,
            worker_id = CASE WHEN f.status = 'pending' THEN NULL ELSE c.worker_id END,
            attempts = c.attempts - CASE WHEN f.refund THEN 1 ELSE 0 END,
            lease_expires_at = NULL,
            started_at = COALESCE(f.started_at, c.started_at),
            completed_at = CASE WHEN f.status = 'pending' THEN NULL ELSE now() END,
            winner = f.winner,
            confidence = f.confidence,
            scores_a = f.scores_a,
            scores_b = f.scores_b,
            reasoning = f.reasoning,
            raw_response = COALESCE(f.raw_response, c.raw_response),
            parse_error = CASE WHEN f.refund THEN c.parse_error ELSE f.parse_error END,
            error = CASE WHEN f.refund THEN c.error ELSE f.error END,
            input_tokens = c.input_tokens + f.input_tokens,
            output_tokens = c.output_tokens + f.output_tokens,
            cost_usd = c.cost_usd + f.cost_usd,
            latency_s = COALESCE(f.latency_s, c.latency_s),
            cache_hit = f.cache_hit,
            strength = f.strength,
            prob_a = f.prob_a,
            score = f.score
        FROM f
        WHERE c.id = f.id AND c.status = 'running'
          AND c.worker_id = f.worker_id AND c.attempts = f.attempts
        RETURNING c.id, c.session_id, c.status, f.input_tokens, f.output_tokens, f.cost_usd
    ), per_session AS (
        SELECT session_id,
               count(*) FILTER (WHERE status = 'completed') AS completed,
               count(*) FILTER (WHERE status = 'failed') AS failed,
               sum(input_tokens) AS input_tokens,
               sum(output_tokens) AS output_tokens,
               sum(cost_usd) AS cost_usd,
               array_agg(id) AS ids
        FROM done GROUP BY session_id
    )
    UPDATE judge_sessions s
    SET completed = s.completed + p.completed,
        failed = s.failed + p.failed,
        input_tokens = s.input_tokens + p.input_tokens,
        output_tokens = s.output_tokens + p.output_tokens,
        cost_usd = s.cost_usd + p.cost_usd,
        -- A drained adaptive session waits for its next round (sessions.rounds) until
        -- the selector has stopped it.
        status = CASE WHEN s.status NOT IN ('running', 'paused')
                           OR s.completed + p.completed + s.failed + p.failed < s.total
                           OR (s.comparison_mode = 'adaptive' AND s.stop_reason IS NULL)
                      THEN s.status
                      WHEN s.completed + p.completed = 0 THEN 'failed'
                      ELSE 'completed' END,
        finished_at = CASE WHEN s.status IN ('running', 'paused')
                            AND s.completed + p.completed + s.failed + p.failed = s.total
                            AND (s.comparison_mode <> 'adaptive' OR s.stop_reason IS NOT NULL)
                           THEN now() ELSE s.finished_at END
    FROM per_session p
    WHERE s.id = p.session_id
    RETURNING s.id, s.status, s.total, s.completed, s.failed, p.ids
    """
).bindparams(
    *array_params(
        {
            "ids": BigInteger,
            "worker_ids": String,
            "attempts": Integer,
            "statuses": String,
            "started_at": DateTime(timezone=True),
            "parse_error": Text,
            "error": Text,
            "refund": Boolean,
            "strength": SmallInteger,
        }
        | ANSWER_TYPES
    )
)


_LOCK_SESSIONS = text(
    """
    SELECT s.id FROM judge_sessions s
    WHERE s.id IN (SELECT c.session_id FROM comparisons c WHERE c.id = ANY(:ids))
    ORDER BY s.id
    FOR NO KEY UPDATE OF s
    """
).bindparams(bindparam("ids", type_=ARRAY(BigInteger)))


# The comparison row's columns taken from a finish's answer; the rest are the finish's own.
_ANSWER_COLUMNS = (*ANSWER_TYPES, "strength")
VOTE_COLUMNS = ("member", "model_id", "judge", "status", *_ANSWER_COLUMNS, "error")


def _columns(items: Sequence[Finish]) -> dict[str, list[Any]]:
    answers = [f.answer for f in items]
    return {
        "ids": [f.id for f in items],
        "worker_ids": [f.worker_id for f in items],
        "attempts": [f.attempts for f in items],
        "statuses": [f.status for f in items],
        "started_at": [f.started_at for f in items],
        "parse_error": [f.parse_error for f in items],
        "error": [f.error for f in items],
        "refund": [f.refund for f in items],
    } | {name: [getattr(a, name) for a in answers] for name in _ANSWER_COLUMNS}


async def finish(conn: AsyncConnection, items: Sequence[Finish]) -> list[FinishedSession]:
    """Apply many finishes in one statement, exactly once each: a finish whose token
    (worker_id, attempts) no longer matches a running row is ignored. Bumps the session
    counters by what was applied and completes sessions with nothing left to do."""
    if not items:
        return []
    if len({f.id for f in items}) != len(items):
        raise ValueError("one finish per comparison per batch")
    # One lock order with cancel/pause (session row, then its comparisons): lock the
    # sessions first, or a finish holding comparison rows and a cancel holding the session
    # row wait for each other (40P01).
    await conn.execute(_LOCK_SESSIONS, {"ids": [f.id for f in items]})
    rows = await conn.execute(_FINISH, _columns(items))
    return [FinishedSession(*r[:5], applied=list(r[5])) for r in rows.all()]


async def running_sessions(conn: AsyncConnection) -> list[RunningSession]:
    rows = await conn.execute(
        # Batch sessions' comparisons go to provider batch jobs (sessions.run.batches).
        text(
            "SELECT id, worker_count FROM judge_sessions "
            "WHERE status = 'running' AND execution = 'live' ORDER BY id"
        )
    )
    return [RunningSession(*r) for r in rows.all()]


async def notify_work(conn: AsyncConnection, session_id: int) -> None:
    """Wake idle dispatchers (delivered when the caller's transaction commits)."""
    await conn.execute(
        text("SELECT pg_notify(:channel, :payload)"),
        {"channel": WORK_CHANNEL, "payload": str(session_id)},
    )
