"""Comparison plans: from a session's options to its plan, and the ONE way comparison rows
are written in bulk (a new session's plan, and an imported session's judged plan).

Rows go in with PostgreSQL COPY, which takes a million-row plan in seconds. A plan alone
(every row pending) is encoded by numpy straight into the binary COPY format; a plan with
its results (an import) carries text and JSON per row, so asyncpg encodes those records.
Both write the same identity columns (`PLAN_COLUMNS`) from the same `PlanArrays`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, get_args

import numpy as np
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import Pillar, Thread
from llmjudge.core.tournaments.pairing import (
    PlanArrays,
    PlanOptions,
    ThreadRef,
    build_plan_arrays,
    count_plan,
)
from llmjudge.infra.errors import Invalid
from llmjudge.sessions.schemas import Mode, SessionIn

__all__ = [
    "PLAN_COLUMNS",
    "PLAN_FIELDS",
    "RESULT_COLUMNS",
    "StoredResult",
    "analyze_comparisons",
    "build_plan",
    "copy_rows",
    "insert_plan",
    "mode_counts",
    "plan_options",
    "plan_threads",
    "stored_options",
]

log = logging.getLogger(__name__)

# What a plan decides about each comparison, in COPY order.
PLAN_COLUMNS = (
    "session_id",
    "queue_position",
    "thread_a_id",
    "thread_b_id",
    "pillar_a_id",
    "pillar_b_id",
    "repetition",
    "swap_group",
    "is_swap",
)
# What a finished judgment adds (fields of `StoredResult`, in order).
RESULT_COLUMNS = (
    "status",
    "attempts",
    "completed_at",
    "winner",
    "confidence",
    "scores_a",
    "scores_b",
    "reasoning",
    "raw_response",
    "parse_error",
    "strength",
    "prob_a",
)


class StoredResult(NamedTuple):
    """A judgment stored with its comparison (an import): one value per RESULT_COLUMNS."""

    status: str
    attempts: int
    completed_at: datetime
    winner: str | None
    confidence: float | None
    scores_a: str | None  # JSON text for the jsonb column
    scores_b: str | None
    reasoning: str | None
    raw_response: str | None
    parse_error: str | None
    strength: int | None = None  # 2 strong (A>>B), 1 weak; None without a strength
    prob_a: float | None = None  # P(A is better): an imported preference


# -- options to plan ----------------------------------------------------------------------


# The plan options a session request names as the planner does (mode and seed aside).
PLAN_FIELDS = {f.name for f in dataclasses.fields(PlanOptions)} - {"mode", "seed"}


def plan_options(data: SessionIn, seed: int) -> PlanOptions:
    return PlanOptions(
        mode=data.comparison_mode,
        seed=seed,
        **data.model_dump(include=PLAN_FIELDS),
    )


def stored_options(data: SessionIn, seed: int) -> dict[str, Any]:
    """The plan options kept on the session (its `options` column)."""
    return data.model_dump(include=PLAN_FIELDS | {"calculate_elo"}) | {"seed": seed}


async def plan_threads(db: AsyncSession, pillar_ids: Sequence[int]) -> list[ThreadRef]:
    """The pillars' threads; unknown pillar ids are a 422 that names them."""
    found = set(await db.scalars(select(Pillar.id).where(Pillar.id.in_(list(pillar_ids)))))
    missing = [p for p in pillar_ids if p not in found]
    if missing:
        raise Invalid(f"unknown pillar ids: {', '.join(map(str, missing))}")
    rows = await db.execute(
        select(Thread.id, Thread.pillar_id, Thread.prompt_key).where(
            Thread.pillar_id.in_(list(pillar_ids))
        )
    )
    return [ThreadRef(*r) for r in rows.all()]


def build_plan(threads: Sequence[ThreadRef], options: PlanOptions) -> PlanArrays:
    try:
        return build_plan_arrays(threads, options)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def mode_counts(
    data: SessionIn, sizes: Mapping[int, int]
) -> dict[Mode, tuple[int | None, str | None]]:
    """Comparisons each mode would make with the other options as they are: (count, None),
    or (None, why not). Key-matched plans cannot be counted from sizes: (None, None)."""
    base = plan_options(data, 0)
    counts: dict[Mode, tuple[int | None, str | None]] = {}
    for mode in get_args(Mode):
        baseline = None if mode in ("free_for_all", "single") else base.baseline_pillar_id
        options = dataclasses.replace(base, mode=mode, baseline_pillar_id=baseline)
        if options.match_by_prompt_key and mode != "single":  # single grades every thread
            counts[mode] = (None, None)
            continue
        try:
            counts[mode] = (count_plan(sizes, options), None)
        except ValueError as exc:
            counts[mode] = (None, str(exc))
    return counts


# -- storage ------------------------------------------------------------------------------


_PG_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, no extension
_PG_COPY_TRAILER = b"\xff\xff"
_INT_COLUMNS = len(PLAN_COLUMNS) - 1  # all int4 but the last, is_swap (bool)
_ROW = np.dtype(
    [("fields", ">i2")]
    + [item for k in range(_INT_COLUMNS) for item in ((f"n{k}", ">i4"), (f"v{k}", ">i4"))]
    + [("n_swap", ">i4"), ("v_swap", "u1")]
)


# A plan of single threads (mode single) leaves the second thread and pillar NULL.
_SINGLE_COLUMNS = tuple(c for c in PLAN_COLUMNS if c not in ("thread_b_id", "pillar_b_id"))
_SINGLE_INTS = len(_SINGLE_COLUMNS) - 1
_SINGLE_ROW = np.dtype(
    [("fields", ">i2")]
    + [item for k in range(_SINGLE_INTS) for item in ((f"n{k}", ">i4"), (f"v{k}", ">i4"))]
    + [("n_swap", ">i4"), ("v_swap", "u1")]
)


def _columns_of(plan: PlanArrays) -> tuple[str, ...]:
    return _SINGLE_COLUMNS if plan.single else PLAN_COLUMNS


def _plan_columns(
    session_id: int, plan: PlanArrays, start: int, stop: int, first_position: int = 0
) -> tuple[Any, ...]:
    """The values of ``_columns_of(plan)`` for rows ``start:stop``, as arrays (is_swap
    last)."""
    second = (
        ()
        if plan.thread_b is None or plan.pillar_b is None
        else (plan.thread_b[start:stop], plan.pillar_b[start:stop])
    )
    return (
        np.full(stop - start, session_id),
        np.arange(start, stop) + first_position,
        plan.thread_a[start:stop],
        *second[:1],
        plan.pillar_a[start:stop],
        *second[1:],
        plan.repetition[start:stop],
        plan.swap_group[start:stop],
        plan.is_swap[start:stop],
    )


def copy_rows(
    session_id: int, plan: PlanArrays, start: int, stop: int, first_position: int = 0
) -> bytes:
    """Rows ``start:stop`` of the plan in PostgreSQL's binary COPY format, built by numpy
    (no Python object per value: a million rows take well under a second)."""
    rows = np.empty(stop - start, dtype=_SINGLE_ROW if plan.single else _ROW)
    rows["fields"] = len(_columns_of(plan))
    *ints, is_swap = _plan_columns(session_id, plan, start, stop, first_position)
    for k, values in enumerate(ints):
        rows[f"n{k}"] = 4
        rows[f"v{k}"] = values
    rows["n_swap"] = 1
    rows["v_swap"] = is_swap
    return rows.tobytes()


async def insert_plan(
    db: AsyncSession,
    session_id: int,
    plan: PlanArrays,
    *,
    results: Sequence[StoredResult] | None = None,
    chunk: int = 100_000,
    first_position: int = 0,
) -> int:
    """COPY the plan's rows into ``comparisons`` inside the caller's transaction; queue
    positions follow plan order from ``first_position`` (an adaptive round appends).
    Without ``results`` every row is pending (a new session); with them (one per row) each
    row is stored finished (an import)."""
    n = len(plan)
    if results is not None and len(results) != n:
        raise ValueError(f"{len(results)} results for a plan of {n} comparisons")
    raw = await (await db.connection()).get_raw_connection()
    if results is None:

        async def source() -> AsyncIterator[bytes]:
            yield _PG_COPY_HEADER
            for start in range(0, n, chunk):
                yield copy_rows(session_id, plan, start, min(n, start + chunk), first_position)
            yield _PG_COPY_TRAILER

        await raw.driver_connection.copy_to_table(
            "comparisons", source=source(), columns=_columns_of(plan), format="binary"
        )
        return n
    columns = [c.tolist() for c in _plan_columns(session_id, plan, 0, n, first_position)]
    records = (
        (*identity, *result)
        for identity, result in zip(zip(*columns, strict=True), results, strict=True)
    )
    await raw.driver_connection.copy_records_to_table(
        "comparisons", records=records, columns=(*_columns_of(plan), *RESULT_COLUMNS)
    )
    return n


async def analyze_comparisons(db: AsyncSession) -> None:
    """Fresh planner statistics after a big plan: without them PostgreSQL reads a whole new
    session to list a page of it, until autovacuum gets round to it."""
    try:
        await db.execute(text("ANALYZE comparisons"))
        await db.commit()
    except DBAPIError as exc:  # e.g. not the table's owner: only slower reads follow
        await db.rollback()
        log.info("ANALYZE comparisons skipped: %s", exc)
