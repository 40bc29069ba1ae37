"""The batch runner's SQL (``sessions.run.batches``): claim a session's pending comparisons
into a stored batch job, record each step of the job, give comparisons back.

A batch job's comparisons are claimed like a live worker's (status ``running``, a claim
token ``worker_id`` = ``batch:<job id>`` and ``attempts``), with a lease as long as a job
may take: the job row is what resumes them, not the lease. Every result is applied through
``claims.finish`` with that token, so a result applied once is never applied again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from llmjudge.sessions.models import ProviderBatch
from llmjudge.sessions.run.claims import Claimed

__all__ = [
    "StoredBatch",
    "StoredRequest",
    "batch_by_id",
    "batch_group",
    "batch_worker",
    "claim_for_batch",
    "give_back",
    "load_claims",
    "load_requests",
    "new_batch",
    "open_batches",
    "persona_batches",
    "session_batches",
    "store_requests",
    "update_batch",
]

# A job's claims are leased for 30 days (``_CLAIM``): a job may take 24 hours at the
# provider and its results may wait for a stopped worker; the job row resumes them.


@dataclass(frozen=True, slots=True)
class StoredBatch:
    id: int
    session_id: int | None  # None: a persona's job (``persona_id``, ``iteration_id``)
    persona_id: int | None
    iteration_id: int | None
    provider_id: int
    model_id: int
    provider_kind: str
    provider_batch_id: str | None
    state: str
    requests: int
    bytes: int
    succeeded: int
    errored: int
    input_file_id: str | None
    output_file_id: str | None
    error_file_id: str | None
    cancel_requested: bool
    error: str | None
    created_at: datetime
    submitting_at: datetime | None
    submitted_at: datetime | None
    ended_at: datetime | None
    applied_at: datetime | None

    @property
    def worker_id(self) -> str:
        return batch_worker(self.id)


@dataclass(frozen=True, slots=True)
class StoredRequest:
    custom_id: str
    comparison_id: int | None  # None: a persona job's request (``pair_id``)
    attempts: int
    member: int
    request: dict[str, Any]
    pair_id: int | None = None


def batch_worker(batch_id: int) -> str:
    """The claim token's worker id of a batch job's comparisons."""
    return f"batch:{batch_id}"


_FIELDS = [getattr(ProviderBatch, f.name) for f in dataclasses.fields(StoredBatch)]


async def session_batches(conn: AsyncConnection, session_id: int) -> list[StoredBatch]:
    rows = await conn.execute(
        select(*_FIELDS).where(ProviderBatch.session_id == session_id).order_by(ProviderBatch.id)
    )
    return [StoredBatch(*r) for r in rows.all()]


async def open_batches(conn: AsyncConnection, session_id: int) -> list[StoredBatch]:
    rows = await conn.execute(
        select(*_FIELDS)
        .where(ProviderBatch.session_id == session_id, ProviderBatch.applied_at.is_(None))
        .order_by(ProviderBatch.id)
    )
    return [StoredBatch(*r) for r in rows.all()]


async def batch_by_id(conn: AsyncConnection, batch_id: int) -> StoredBatch:
    row = (await conn.execute(select(*_FIELDS).where(ProviderBatch.id == batch_id))).one()
    return StoredBatch(*row)


async def persona_batches(
    conn: AsyncConnection, persona_id: int, *, open_only: bool = False
) -> list[StoredBatch]:
    """A persona's batch jobs (its training's judge labels), oldest first."""
    where = [ProviderBatch.persona_id == persona_id]
    if open_only:
        where.append(ProviderBatch.applied_at.is_(None))
    rows = await conn.execute(select(*_FIELDS).where(*where).order_by(ProviderBatch.id))
    return [StoredBatch(*r) for r in rows.all()]


async def batch_group(conn: AsyncConnection, batch_id: int) -> list[StoredBatch]:
    """The jobs that carry the same claims as job ``batch_id`` (a panel's: one job per
    member model, created together), itself included, oldest first. The oldest is the
    group's lead: its id is the claims' token (``batch_worker``)."""
    ids = await conn.scalars(
        text(
            "SELECT DISTINCT r.batch_id FROM provider_batch_requests r JOIN "
            "(SELECT comparison_id, attempts FROM provider_batch_requests "
            "WHERE batch_id = :b LIMIT 1) one USING (comparison_id, attempts)"
        ),
        {"b": batch_id},
    )
    rows = await conn.execute(
        select(*_FIELDS).where(ProviderBatch.id.in_({batch_id, *ids})).order_by(ProviderBatch.id)
    )
    return [StoredBatch(*r) for r in rows.all()]


async def new_batch(
    conn: AsyncConnection,
    *,
    session_id: int | None = None,
    persona: tuple[int, int] | None = None,
    provider_id: int,
    model_id: int,
    kind: str,
) -> int:
    """A new job row of a session, or of a persona's iteration (``persona``: its id and the
    iteration's)."""
    persona_id, iteration_id = persona or (None, None)
    return int(
        await conn.scalar(
            text(
                "INSERT INTO provider_batches (session_id, persona_id, iteration_id, "
                "provider_id, model_id, provider_kind) "
                "VALUES (:s, :pe, :it, :p, :m, :k) RETURNING id"
            ),
            {
                "s": session_id,
                "pe": persona_id,
                "it": iteration_id,
                "p": provider_id,
                "m": model_id,
                "k": kind,
            },
        )
    )


_CLAIM = text(
    """
    WITH picked AS (
        SELECT c.id FROM comparisons c
        WHERE c.session_id = :s AND c.status = 'pending'
          AND EXISTS (SELECT 1 FROM judge_sessions WHERE id = :s AND status = 'running')
        ORDER BY c.queue_position
        LIMIT :n
        FOR UPDATE OF c SKIP LOCKED
    )
    UPDATE comparisons c
    SET status = 'running', worker_id = :worker, attempts = c.attempts + 1,
        lease_expires_at = now() + make_interval(days => 30), claimed_at = now(), started_at = now()
    FROM picked WHERE c.id = picked.id
    RETURNING c.id, c.session_id, c.queue_position, c.thread_a_id, c.thread_b_id,
              c.pillar_a_id, c.pillar_b_id, c.repetition, c.swap_group, c.is_swap,
              c.attempts, c.worker_id
    """
)


async def claim_for_batch(
    conn: AsyncConnection, *, session_id: int, batch_id: int, n: int
) -> list[Claimed]:
    """Up to ``n`` pending comparisons of a running session, in queue order, for a job."""
    rows = await conn.execute(_CLAIM, {"s": session_id, "n": n, "worker": batch_worker(batch_id)})
    return sorted((Claimed(*r) for r in rows.all()), key=lambda c: c.queue_position)


async def give_back(conn: AsyncConnection, items: Sequence[Claimed]) -> None:
    """Claimed comparisons that did not fit in the job go back unjudged (their attempt
    refunded) in the claiming transaction."""
    if not items:
        return
    await conn.execute(
        text(
            "UPDATE comparisons SET status = 'pending', worker_id = NULL, "
            "attempts = attempts - 1, lease_expires_at = NULL, claimed_at = NULL, "
            "started_at = NULL WHERE id = ANY(:ids) AND status = 'running'"
        ),
        {"ids": [i.id for i in items]},
    )


async def store_requests(
    conn: AsyncConnection, batch_id: int, requests: Sequence[StoredRequest], size: int
) -> None:
    await conn.execute(
        text(
            "INSERT INTO provider_batch_requests "
            "(batch_id, custom_id, comparison_id, attempts, member, request, pair_id) "
            "SELECT :b, * FROM unnest(CAST(:cids AS text[]), CAST(:comparisons AS bigint[]), "
            "CAST(:attempts AS int[]), CAST(:members AS int2[]), CAST(:requests AS jsonb[]), "
            "CAST(:pairs AS int[]))"
        ),
        {
            "b": batch_id,
            "cids": [r.custom_id for r in requests],
            "comparisons": [r.comparison_id for r in requests],
            "attempts": [r.attempts for r in requests],
            "members": [r.member for r in requests],
            "requests": [_json(r.request) for r in requests],
            "pairs": [r.pair_id for r in requests],
        },
    )
    await update_batch(conn, batch_id, requests=len(requests), bytes=size)


def _json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


async def load_requests(conn: AsyncConnection, batch_id: int) -> list[StoredRequest]:
    rows = await conn.execute(
        text(
            "SELECT custom_id, comparison_id, attempts, member, request, pair_id "
            "FROM provider_batch_requests WHERE batch_id = :b "
            "ORDER BY comparison_id, pair_id, member"
        ),
        {"b": batch_id},
    )
    return [StoredRequest(*r) for r in rows.all()]


async def load_claims(conn: AsyncConnection, batch_id: int) -> dict[int, Claimed]:
    """A job's comparisons as their claims (by id), tokens as the job stored them."""
    rows = await conn.execute(
        text(
            "SELECT c.id, c.session_id, c.queue_position, c.thread_a_id, c.thread_b_id, "
            "c.pillar_a_id, c.pillar_b_id, c.repetition, c.swap_group, c.is_swap, "
            "r.attempts, :worker FROM provider_batch_requests r "
            "JOIN comparisons c ON c.id = r.comparison_id WHERE r.batch_id = :b"
        ),
        {"b": batch_id, "worker": batch_worker(batch_id)},
    )
    return {r[0]: Claimed(*r) for r in rows.all()}


async def update_batch(conn: AsyncConnection, batch_id: int, **values: Any) -> None:
    """Set columns of a job row (``stamp`` names timestamp columns set to now())."""
    stamps: Sequence[str] = values.pop("stamp", ())
    await conn.execute(
        update(ProviderBatch)
        .where(ProviderBatch.id == batch_id)
        .values(**values, **{name: func.now() for name in stamps})
    )
