"""Judge sessions: create (plan + queue), estimate, control, and read results.

A session's comparisons are inserted when it is created (so its size and estimate are
exact) with PostgreSQL COPY, which takes a million-row plan in seconds. Starting a session
makes its comparisons claimable; workers (see ``sessions.jobs``) do the rest.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Select, Text, cast, delete, func, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from llmjudge.catalog.models import Pillar, Thread
from llmjudge.errors import Conflict, Invalid, NotFound
from llmjudge.events.hub import EventHub
from llmjudge.judging.prompts import build_judge_messages, estimate_tokens
from llmjudge.providers.models import LLMModel, Provider
from llmjudge.providers.simulator import SimulatorParams
from llmjudge.sessions.claims import notify_work
from llmjudge.sessions.estimate import ModelCost, estimate_plan
from llmjudge.sessions.models import Comparison, JudgeSession
from llmjudge.sessions.pairing import PlanArrays, PlanOptions, ThreadRef, build_plan_arrays
from llmjudge.sessions.schemas import (
    ComparisonDetail,
    ComparisonOut,
    ComparisonPage,
    Counts,
    EstimateOut,
    JudgeModelOut,
    RetryResult,
    SessionIn,
    SessionOut,
    SessionSummary,
)
from llmjudge.sessions.worker import session_topic

__all__ = [
    "BUILTIN_JUDGE",
    "DEFAULT_LATENCY_S",
    "cancel_session",
    "create_session",
    "delete_session",
    "estimate_new",
    "estimate_session",
    "get_comparison",
    "get_session",
    "insert_plan",
    "list_comparisons",
    "list_sessions",
    "pause_session",
    "resume_session",
    "retry_failed",
    "start_session",
]

log = logging.getLogger(__name__)

BUILTIN_JUDGE = "simulated-judge"
ANALYZE_AFTER_ROWS = 50_000
# Seconds per call assumed for a model that has never been called.
DEFAULT_LATENCY_S = 2.0
_COPY_COLUMNS = (
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


# -- helpers ------------------------------------------------------------------------------


def plan_options(data: SessionIn, seed: int) -> PlanOptions:
    return PlanOptions(
        mode=data.comparison_mode,
        samples_per_pillar=data.samples_per_pillar,
        repetitions_per_pair=data.repetitions_per_pair,
        max_threads_per_pillar=data.max_threads_per_pillar,
        position_swap=data.position_swap,
        sampling=data.sampling,
        baseline_pillar_id=data.baseline_pillar_id,
        match_by_prompt_key=data.match_by_prompt_key,
        seed=seed,
    )


def _stored_options(data: SessionIn, seed: int) -> dict[str, Any]:
    return {
        "samples_per_pillar": data.samples_per_pillar,
        "repetitions_per_pair": data.repetitions_per_pair,
        "max_threads_per_pillar": data.max_threads_per_pillar,
        "position_swap": data.position_swap,
        "calculate_elo": data.calculate_elo,
        "baseline_pillar_id": data.baseline_pillar_id,
        "match_by_prompt_key": data.match_by_prompt_key,
        "sampling": data.sampling,
        "seed": seed,
    }


def _session_in(s: JudgeSession) -> SessionIn:
    o = s.options
    return SessionIn(
        session_name=s.name,
        pillar_ids=list(s.pillar_ids),
        comparison_mode=s.comparison_mode,  # type: ignore[arg-type]
        samples_per_pillar=o.get("samples_per_pillar", 5),
        repetitions_per_pair=o.get("repetitions_per_pair", 1),
        max_threads_per_pillar=o.get("max_threads_per_pillar"),
        position_swap=o.get("position_swap", True),
        sampling=o.get("sampling", "fixed"),
        worker_count=s.worker_count,
        calculate_elo=o.get("calculate_elo", True),
        judge_model_id=s.judge_model_id,
        baseline_pillar_id=o.get("baseline_pillar_id"),
        match_by_prompt_key=o.get("match_by_prompt_key", False),
        criteria=list(s.criteria),
        prompt_template=s.prompt_template,
        seed=o.get("seed", 0),
    )


async def _judge_model(db: AsyncSession, model_id: int | None) -> tuple[LLMModel, Provider]:
    stmt = select(LLMModel, Provider).join(Provider, Provider.id == LLMModel.provider_id)
    if model_id is None:
        row = (await db.execute(stmt.where(LLMModel.name == BUILTIN_JUDGE))).first()
        if row is None:
            raise Invalid(f"no judge_model_id given and the built-in {BUILTIN_JUDGE} is missing")
    else:
        row = (await db.execute(stmt.where(LLMModel.id == model_id))).first()
        if row is None:
            raise Invalid(f"judge model {model_id} does not exist")
    return row[0], row[1]


def _model_out(m: LLMModel, p: Provider) -> JudgeModelOut:
    return JudgeModelOut(
        id=m.id, name=m.name, provider_kind=p.kind, simulated=p.kind == "simulator"
    )


def _latency(m: LLMModel, p: Provider) -> float:
    if m.observed_latency_s is not None:
        return m.observed_latency_s
    if p.kind == "simulator":
        return SimulatorParams.from_settings(p.settings or {}).latency_ms_mean / 1000
    return DEFAULT_LATENCY_S


async def _threads(db: AsyncSession, pillar_ids: Sequence[int]) -> list[ThreadRef]:
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


def _plan(threads: Sequence[ThreadRef], options: PlanOptions) -> PlanArrays:
    try:
        return build_plan_arrays(threads, options)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


# -- estimate -----------------------------------------------------------------------------


async def _estimate(
    db: AsyncSession, data: SessionIn, seed: int, planned: int | None = None
) -> EstimateOut:
    m, p = await _judge_model(db, data.judge_model_id)
    options = plan_options(data, seed)
    threads = await _threads(db, data.pillar_ids)
    sizes = {pid: 0 for pid in data.pillar_ids}
    for t in threads:
        sizes[t.pillar_id] += 1
    if data.match_by_prompt_key and planned is None:
        planned = len(_plan(threads, options))
    avg_chars = await db.scalar(
        select(func.avg(func.length(cast(Thread.content, Text)))).where(
            Thread.pillar_id.in_(data.pillar_ids)
        )
    )
    cost = ModelCost(
        input_per_million=m.input_price_per_million,
        output_per_million=m.output_price_per_million,
        latency_s=_latency(m, p),
        tokens_in_per_call=_prompt_tokens(data) + 2 * math.ceil(float(avg_chars or 0) / 4),
        tokens_out_per_call=_answer_tokens(data.criteria),
    )
    names = dict((await db.execute(select(Pillar.id, Pillar.name))).all())
    try:
        est = estimate_plan(
            sizes,
            options,
            cost,
            pillar_names=names,
            chosen_workers=data.worker_count,
            planned_comparisons=planned,
        )
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    return EstimateOut(
        total_threads=est.total_threads,
        base_comparisons=est.base_comparisons,
        total_comparisons=est.total_comparisons,
        worker_count=data.worker_count,
        minutes=math.ceil(est.total_comparisons / data.worker_count) * cost.latency_s / 60,
        minutes_by_workers=est.minutes_by_workers,
        latency_s=cost.latency_s,
        input_tokens=est.input_tokens,
        output_tokens=est.output_tokens,
        cost_usd=est.cost_usd,
        judge_model=_model_out(m, p),
        warnings=est.warnings,
        recommended_repetitions=est.recommended_repetitions,
    )


def _prompt_tokens(data: SessionIn) -> int:
    """Tokens of the judge prompt around two empty threads."""
    messages = build_judge_messages(
        content_a="", content_b="", criteria=data.criteria, template=data.prompt_template
    )
    return sum(estimate_tokens(m["content"]) for m in messages)


def _answer_tokens(criteria: Sequence[str]) -> int:
    """Tokens of a typical verdict: the JSON object with a three-sentence reasoning."""
    scores = {c: 4 for c in criteria}
    answer = {
        "winner": "A",
        "confidence": 0.85,
        "scores": {"A": scores, "B": scores},
        "reasoning": "x" * 300,
    }
    return estimate_tokens(json.dumps(answer))


async def estimate_new(*, db: AsyncSession, data: SessionIn) -> EstimateOut:
    """What a session would make and cost; nothing is stored."""
    return await _estimate(db, data, data.seed if data.seed is not None else 0)


async def estimate_session(*, db: AsyncSession, session_id: int) -> EstimateOut:
    """The estimate of an existing session (its real plan size)."""
    s = await _get(db, session_id)
    if s.comparison_mode == "imported":
        raise Conflict("an imported session was judged elsewhere: it has no plan to estimate")
    return await _estimate(db, _session_in(s), s.options.get("seed", 0), planned=s.total)


# -- create -------------------------------------------------------------------------------


_PG_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, no extension
_PG_COPY_TRAILER = b"\xff\xff"
_INT_COLUMNS = len(_COPY_COLUMNS) - 1  # all int4 but the last, is_swap (bool)
_ROW = np.dtype(
    [("fields", ">i2")]
    + [item for k in range(_INT_COLUMNS) for item in ((f"n{k}", ">i4"), (f"v{k}", ">i4"))]
    + [("n_swap", ">i4"), ("v_swap", "u1")]
)


def copy_rows(session_id: int, plan: PlanArrays, start: int, stop: int) -> bytes:
    """Rows ``start:stop`` of the plan in PostgreSQL's binary COPY format, built by numpy
    (no Python object per value: a million rows take well under a second)."""
    rows = np.empty(stop - start, dtype=_ROW)
    rows["fields"] = len(_COPY_COLUMNS)
    columns = (
        np.full(stop - start, session_id),
        np.arange(start, stop),
        plan.thread_a[start:stop],
        plan.thread_b[start:stop],
        plan.pillar_a[start:stop],
        plan.pillar_b[start:stop],
        plan.repetition[start:stop],
        plan.swap_group[start:stop],
    )
    for k, values in enumerate(columns):
        rows[f"n{k}"] = 4
        rows[f"v{k}"] = values
    rows["n_swap"] = 1
    rows["v_swap"] = plan.is_swap[start:stop]
    return rows.tobytes()


async def insert_plan(
    db: AsyncSession, session_id: int, plan: PlanArrays, *, chunk: int = 100_000
) -> int:
    """COPY the plan's rows into ``comparisons`` inside the caller's transaction."""
    n = len(plan)

    async def source() -> AsyncIterator[bytes]:
        yield _PG_COPY_HEADER
        for start in range(0, n, chunk):
            yield copy_rows(session_id, plan, start, min(n, start + chunk))
        yield _PG_COPY_TRAILER

    raw = await (await db.connection()).get_raw_connection()
    await raw.driver_connection.copy_to_table(
        "comparisons", source=source(), columns=_COPY_COLUMNS, format="binary"
    )
    return n


async def create_session(
    *, db: AsyncSession, data: SessionIn, hub: EventHub | None = None
) -> SessionOut:
    """Validate, build the plan, store the session and its comparisons in one transaction;
    start it at once with ``auto_start``."""
    m, _ = await _judge_model(db, data.judge_model_id)
    seed = data.seed if data.seed is not None else secrets.randbelow(2**31)
    threads = await _threads(db, data.pillar_ids)
    plan = _plan(threads, plan_options(data, seed))
    s = JudgeSession(
        name=data.session_name,
        status="draft",
        comparison_mode=data.comparison_mode,
        pillar_ids=list(data.pillar_ids),
        options=_stored_options(data, seed),
        worker_count=data.worker_count,
        judge_model_id=m.id,
        criteria=list(data.criteria),
        prompt_template=data.prompt_template,
        total=len(plan),
    )
    db.add(s)
    await db.flush()
    await insert_plan(db, s.id, plan)
    if data.auto_start:
        await _set_running(db, s)
    await db.commit()
    if len(plan) >= ANALYZE_AFTER_ROWS:
        await _analyze(db)
    _publish_status(hub, s.id, s.status)
    return await get_session(db=db, session_id=s.id)


async def _analyze(db: AsyncSession) -> None:
    """Fresh planner statistics after a big plan: without them PostgreSQL reads a whole new
    session to list a page of it, until autovacuum gets round to it."""
    try:
        await db.execute(text("ANALYZE comparisons"))
        await db.commit()
    except DBAPIError as exc:  # e.g. not the table's owner: only slower reads follow
        await db.rollback()
        log.info("ANALYZE comparisons skipped: %s", exc)


# -- read ---------------------------------------------------------------------------------


async def _get(db: AsyncSession, session_id: int, *, lock: bool = False) -> JudgeSession:
    stmt = select(JudgeSession).where(JudgeSession.id == session_id)
    if lock:
        stmt = stmt.with_for_update()
    s = (await db.scalars(stmt.execution_options(populate_existing=True))).first()
    if s is None:
        raise NotFound(f"session {session_id} not found")
    return s


def _summary_fields(s: JudgeSession, model: JudgeModelOut | None) -> dict[str, Any]:
    return {
        "id": s.id,
        "name": s.name,
        "status": s.status,
        "comparison_mode": s.comparison_mode,
        "pillar_ids": list(s.pillar_ids),
        "worker_count": s.worker_count,
        "judge_model": model,
        "total": s.total,
        "completed": s.completed,
        "failed": s.failed,
        "progress": (s.completed + s.failed) / s.total if s.total else 0.0,
        "cost_usd": s.cost_usd,
        "created_at": s.created_at,
        "started_at": s.started_at,
        "finished_at": s.finished_at,
    }


def _sessions_query() -> Select[Any]:
    return (
        select(JudgeSession, LLMModel, Provider)
        .outerjoin(LLMModel, LLMModel.id == JudgeSession.judge_model_id)
        .outerjoin(Provider, Provider.id == LLMModel.provider_id)
    )


async def list_sessions(
    *, db: AsyncSession, status: str | None = None, limit: int = 100, offset: int = 0
) -> list[SessionSummary]:
    """Newest first, with progress from the session counters."""
    stmt = _sessions_query().order_by(JudgeSession.id.desc()).limit(limit).offset(offset)
    if status is not None:
        stmt = stmt.where(JudgeSession.status == status)
    rows = (await db.execute(stmt)).all()
    return [
        SessionSummary(**_summary_fields(s, _model_out(m, p) if m is not None else None))
        for s, m, p in rows
    ]


async def get_session(*, db: AsyncSession, session_id: int) -> SessionOut:
    """The session with counts per status computed from its comparison rows.

    Counters and row counts come from ONE statement, hence one snapshot: read separately,
    a result committed in between would make them disagree."""
    per_status = (
        select(Comparison.status, func.count().label("n"))
        .where(Comparison.session_id == session_id)
        .group_by(Comparison.status)
        .subquery()
    )
    counts_json = select(
        func.coalesce(
            func.jsonb_object_agg(per_status.c.status, per_status.c.n), text("'{}'::jsonb")
        )
    ).scalar_subquery()
    row = (
        await db.execute(
            _sessions_query()
            .add_columns(counts_json)
            .where(JudgeSession.id == session_id)
            .execution_options(populate_existing=True)
        )
    ).first()
    if row is None:
        raise NotFound(f"session {session_id} not found")
    s, m, p, counts = row
    return SessionOut(
        **_summary_fields(s, _model_out(m, p) if m is not None else None),
        options=s.options,
        criteria=list(s.criteria),
        prompt_template=s.prompt_template,
        error=s.error,
        counts=Counts(total=sum(counts.values()), **counts),
        input_tokens=s.input_tokens,
        output_tokens=s.output_tokens,
    )


def _comparison_query(session_id: int) -> Select[Any]:
    ta, tb = aliased(Thread), aliased(Thread)
    pa, pb = aliased(Pillar), aliased(Pillar)
    return (
        select(Comparison, ta.title, tb.title, pa.name, pb.name)
        .outerjoin(ta, ta.id == Comparison.thread_a_id)
        .outerjoin(tb, tb.id == Comparison.thread_b_id)
        .outerjoin(pa, pa.id == Comparison.pillar_a_id)
        .outerjoin(pb, pb.id == Comparison.pillar_b_id)
        .where(Comparison.session_id == session_id)
    )


def _comparison_fields(row: Sequence[Any]) -> dict[str, Any]:
    c, title_a, title_b, name_a, name_b = row
    fields = {k: getattr(c, k) for k in ComparisonDetail.model_fields if hasattr(c, k)}
    return fields | {
        "thread_a_title": title_a,
        "thread_b_title": title_b,
        "pillar_a_name": name_a,
        "pillar_b_name": name_b,
    }


async def list_comparisons(
    *,
    db: AsyncSession,
    session_id: int,
    status: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> ComparisonPage:
    """A page of comparisons in queue order, with thread titles and pillar names."""
    await _get(db, session_id)
    count = select(func.count()).where(Comparison.session_id == session_id)
    stmt = _comparison_query(session_id)
    if status is not None:
        count = count.where(Comparison.status == status)
        stmt = stmt.where(Comparison.status == status)
    total = await db.scalar(count)
    rows = (
        await db.execute(stmt.order_by(Comparison.queue_position).limit(limit).offset(offset))
    ).all()
    return ComparisonPage(
        total=total or 0,
        limit=limit,
        offset=offset,
        items=[ComparisonOut(**_comparison_fields(r)) for r in rows],
    )


async def get_comparison(
    *, db: AsyncSession, session_id: int, comparison_id: int
) -> ComparisonDetail:
    row = (
        await db.execute(_comparison_query(session_id).where(Comparison.id == comparison_id))
    ).first()
    if row is None:
        raise NotFound(f"comparison {comparison_id} of session {session_id} not found")
    return ComparisonDetail(**_comparison_fields(row))


# -- control ------------------------------------------------------------------------------


def _publish_status(hub: EventHub | None, session_id: int, status: str) -> None:
    if hub is not None:
        hub.publish_nowait(session_topic(session_id), "session_status", {"status": status})


async def _set_running(db: AsyncSession, s: JudgeSession) -> None:
    s.status = "running"
    if s.started_at is None:
        s.started_at = func.now()
    s.finished_at = None
    await db.flush()
    await notify_work(await db.connection(), s.id)


async def _transition(
    db: AsyncSession, session_id: int, allowed: Sequence[str], verb: str
) -> JudgeSession:
    s = await _get(db, session_id, lock=True)
    if s.status not in allowed:
        status = s.status
        await db.rollback()
        raise Conflict(
            f"session {session_id} is {status}: only a {' or '.join(allowed)} session can be {verb}"
        )
    return s


async def start_session(
    *, db: AsyncSession, session_id: int, hub: EventHub | None = None
) -> SessionOut:
    """draft -> running: its comparisons become claimable."""
    s = await _transition(db, session_id, ("draft",), "started")
    await _set_running(db, s)
    await db.commit()
    _publish_status(hub, session_id, "running")
    return await get_session(db=db, session_id=session_id)


async def pause_session(
    *, db: AsyncSession, session_id: int, hub: EventHub | None = None
) -> SessionOut:
    """running -> paused: running comparisons finish, no new ones are claimed."""
    s = await _transition(db, session_id, ("running",), "paused")
    s.status = "paused"
    # Wakes the pools so they give back items they claimed ahead for this session.
    await notify_work(await db.connection(), session_id)
    await db.commit()
    _publish_status(hub, session_id, "paused")
    return await get_session(db=db, session_id=session_id)


async def resume_session(
    *, db: AsyncSession, session_id: int, hub: EventHub | None = None
) -> SessionOut:
    """paused -> running."""
    s = await _transition(db, session_id, ("paused",), "resumed")
    await _set_running(db, s)
    await db.commit()
    _publish_status(hub, session_id, "running")
    return await get_session(db=db, session_id=session_id)


async def cancel_session(
    *, db: AsyncSession, session_id: int, hub: EventHub | None = None
) -> SessionOut:
    """Pending comparisons become cancelled (so do running ones whose worker died);
    running ones finish and their results are kept."""
    s = await _transition(db, session_id, ("draft", "running", "paused"), "cancelled")
    await db.execute(
        update(Comparison)
        .where(
            Comparison.session_id == session_id,
            (Comparison.status == "pending")
            | ((Comparison.status == "running") & (Comparison.lease_expires_at < func.now())),
        )
        .values(status="cancelled", worker_id=None, lease_expires_at=None)
    )
    s.status = "cancelled"
    s.finished_at = func.now()
    await notify_work(await db.connection(), session_id)  # pools drop what they hold ahead
    await db.commit()
    _publish_status(hub, session_id, "cancelled")
    return await get_session(db=db, session_id=session_id)


async def retry_failed(
    *, db: AsyncSession, session_id: int, hub: EventHub | None = None
) -> RetryResult:
    """Failed comparisons go back to the queue with fresh attempts; a finished session
    runs again."""
    s = await _transition(db, session_id, ("running", "paused", "completed", "failed"), "retried")
    if s.comparison_mode == "imported":
        # Re-judging would mix the configured judge's verdicts into someone else's.
        raise Conflict("an imported session cannot be re-judged; import the judgments again")
    result = await db.execute(
        update(Comparison)
        .where(Comparison.session_id == session_id, Comparison.status == "failed")
        .values(
            status="pending",
            attempts=0,
            worker_id=None,
            error=None,
            parse_error=None,
            completed_at=None,
        )
        .returning(Comparison.id)
    )
    requeued = len(result.all())
    s.failed -= requeued
    if requeued and s.status in ("completed", "failed"):
        await _set_running(db, s)
    elif requeued and s.status == "running":
        await notify_work(await db.connection(), session_id)
    await db.commit()
    if requeued:
        _publish_status(hub, session_id, s.status)
    return RetryResult(session=await get_session(db=db, session_id=session_id), requeued=requeued)


async def delete_session(*, db: AsyncSession, session_id: int, hub: EventHub | None = None) -> None:
    """Delete a session and its comparisons (results of calls in flight are discarded)."""
    result = await db.execute(
        delete(JudgeSession).where(JudgeSession.id == session_id).returning(JudgeSession.id)
    )
    if result.first() is None:
        raise NotFound(f"session {session_id} not found")
    await db.commit()
    _publish_status(hub, session_id, "deleted")
