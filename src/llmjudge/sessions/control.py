"""Judge sessions: control (start, pause, resume, cancel, retry, delete) and the
fail-fast connection test a start makes. Each move is one locked transition of the
session row (``_transition``) that wakes the worker pools (``notify_work``) and publishes
the new status; the comparisons themselves are the queue's (``sessions.run.jobs``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import Conflict, Invalid, NotFound
from llmjudge.infra.events.hub import EventHub
from llmjudge.providers import LLMCall, LLMModel, Provider
from llmjudge.sessions.models import Comparison, JudgeSession
from llmjudge.sessions.reads import get_session, judge_model, session_row
from llmjudge.sessions.run.claims import notify_work
from llmjudge.sessions.run.jobs import is_setup_error
from llmjudge.sessions.run.judging import session_topic
from llmjudge.sessions.schemas import RetryResult, SessionOut

__all__ = [
    "ConnectionTester",
    "cancel_session",
    "check_connection",
    "delete_session",
    "pause_session",
    "publish_status",
    "resume_session",
    "retry_failed",
    "set_running",
    "start_session",
]


class ConnectionTester(Protocol):
    """What the start flow needs of the LLM service (`POST /api/providers/{id}/test`)."""

    async def test_connection(self, provider_id: int, *, model: str | None = None) -> Any: ...


async def check_connection(
    db: AsyncSession, llm: ConnectionTester | None, m: LLMModel, p: Provider
) -> None:
    """Fail fast: before a session starts on a provider that has never answered, make one
    tiny test call; a wrong key, URL or model, or no connection at all, stops the start here
    (422 with the cause) instead of failing every comparison. The simulator needs no test."""
    if llm is None or p.kind == "simulator":
        return
    answered = await db.scalar(
        select(LLMCall.id)
        .where(LLMCall.provider_id == p.id, LLMCall.status == "ok", LLMCall.cache_hit.is_(False))
        .limit(1)
    )
    if answered is not None:
        return
    result = await llm.test_connection(p.id, model=m.model)
    # Only what no retry can cure stops the start (a wrong key, URL or model, no connection);
    # a 429 or a 5xx now is what the session's retries are for.
    if not result.ok and is_setup_error(result.error):
        raise Invalid(
            f"test connection to provider {p.name} (model {m.model}) failed: {result.error}. "
            "Fix the provider in Settings → Providers; the session was not started"
        )


def publish_status(hub: EventHub | None, session_id: int, status: str) -> None:
    if hub is not None:
        hub.publish_nowait(session_topic(session_id), "session_status", {"status": status})


async def set_running(db: AsyncSession, s: JudgeSession) -> None:
    s.status = "running"
    if s.started_at is None:
        s.started_at = func.now()
    s.finished_at = None
    await db.flush()
    await notify_work(await db.connection(), s.id)


async def _transition(
    db: AsyncSession, session_id: int, allowed: Sequence[str], verb: str
) -> JudgeSession:
    s = await session_row(db, session_id, lock=True)
    if s.status not in allowed:
        status = s.status
        await db.rollback()
        raise Conflict(
            f"session {session_id} is {status}: only a {' or '.join(allowed)} session can be {verb}"
        )
    return s


async def _committed(
    db: AsyncSession, hub: EventHub | None, session_id: int, status: str
) -> SessionOut:
    """End a move: commit it, tell the session's listeners its new status, read it back."""
    await db.commit()
    publish_status(hub, session_id, status)
    return await get_session(db=db, session_id=session_id)


async def start_session(
    *,
    db: AsyncSession,
    session_id: int,
    hub: EventHub | None = None,
    llm: ConnectionTester | None = None,
) -> SessionOut:
    """draft -> running: its comparisons become claimable (after `check_connection`; for a
    panel, every member's)."""
    current = await session_row(db, session_id)
    model_ids = (
        [m.get("model_id") for m in current.panel["members"]]
        if current.panel
        else [current.judge_model_id]
    )
    wanted = [i for i in model_ids if i is not None]
    if llm is not None and current.status == "draft" and wanted:
        # Tested before the row is locked: the call may take seconds.
        for model_id in wanted:
            m, provider = await judge_model(db, model_id)
            await check_connection(db, llm, m, provider)
        await db.commit()  # end the read transaction before locking
    s = await _transition(db, session_id, ("draft",), "started")
    await set_running(db, s)
    return await _committed(db, hub, session_id, "running")


async def pause_session(
    *, db: AsyncSession, session_id: int, hub: EventHub | None = None
) -> SessionOut:
    """running -> paused: running comparisons finish, no new ones are claimed."""
    s = await _transition(db, session_id, ("running",), "paused")
    s.status = "paused"
    # Wakes the pools so they give back items they claimed ahead for this session.
    await notify_work(await db.connection(), session_id)
    return await _committed(db, hub, session_id, "paused")


async def resume_session(
    *, db: AsyncSession, session_id: int, hub: EventHub | None = None
) -> SessionOut:
    """paused -> running (clearing the reason a circuit breaker gave for the pause)."""
    s = await _transition(db, session_id, ("paused",), "resumed")
    s.error = None
    await set_running(db, s)
    return await _committed(db, hub, session_id, "running")


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
    return await _committed(db, hub, session_id, "cancelled")


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
        await set_running(db, s)
    elif requeued and s.status == "running":
        await notify_work(await db.connection(), session_id)
    await db.commit()
    if requeued:
        publish_status(hub, session_id, s.status)
    return RetryResult(session=await get_session(db=db, session_id=session_id), requeued=requeued)


async def delete_session(*, db: AsyncSession, session_id: int, hub: EventHub | None = None) -> None:
    """Delete a session and its comparisons (results of calls in flight are discarded)."""
    result = await db.execute(
        delete(JudgeSession).where(JudgeSession.id == session_id).returning(JudgeSession.id)
    )
    if result.first() is None:
        raise NotFound(f"session {session_id} not found")
    await db.commit()
    publish_status(hub, session_id, "deleted")
