"""Judge comparisons as a kind of queued work (``queue.work.WorkKind``).

The generic pool (``queue.pool``) claims, heartbeats and batches; this kind says what that
means for ``comparisons``: its SQL (``sessions.claims``), a session as the group (its
``worker_count`` bounds the comparisons judged at once per process), judging one comparison
(``run.panel_judging``), and the session events (``comparison_complete``, ``session_status``,
``workers_status``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.infra.events.hub import EventHub
from llmjudge.infra.queue.pool import WorkerPool
from llmjudge.infra.queue.work import Group, Token, WorkKind, Written
from llmjudge.infra.rowfiles import storable_text, unstorable_text
from llmjudge.providers import ModelPricing
from llmjudge.sessions.run.claims import (
    WORK_CHANNEL,
    Claimed,
    Finish,
    FinishedSession,
    claim,
    finish,
    notify_work,
    renew,
    running_sessions,
    token,
)
from llmjudge.sessions.run.judging import (
    MAX_ATTEMPTS,
    ChatService,
    SessionConfig,
    ThreadCache,
    session_topic,
)
from llmjudge.sessions.run.panel_judging import (
    PanelConfig,
    judge_comparison,
    panel_config,
    solo_panel,
)
from llmjudge.sessions.run.votes import write_votes

__all__ = ["BREAKER_ERRORS", "Breaker", "JudgeComparisons", "comparison_pool", "is_setup_error"]

# Identical consecutive provider errors that pause a session (LLMJUDGE_BREAKER_ERRORS).
BREAKER_ERRORS = 5
# Errors no retry can cure: the provider's setup is wrong (clients.py words them so).
_SETUP_ERRORS = (
    "invalid api key",
    "model not found",
    "connection error",
    "invalid base url",
    "http headers cannot carry",
)


def is_setup_error(error: str | None) -> bool:
    """An authentication, connection or unknown-model error: the same on every call."""
    return error is not None and any(p in error.lower() for p in _SETUP_ERRORS)


class Breaker:
    """Per session, in this process: how many identical setup errors came in a row.

    Pure bookkeeping (no I/O): `record` says when a session has reached the threshold; a
    verdict or a different error starts the count again. With several worker processes each
    counts its own results, so a session pauses after at most N per process.
    """

    def __init__(self, threshold: int = BREAKER_ERRORS) -> None:
        self.threshold = threshold
        self._runs: dict[int, tuple[str, int]] = {}

    def record(self, session_id: int, error: str | None) -> str | None:
        """The pause reason when this result trips the breaker, else None."""
        if self.threshold <= 0 or not is_setup_error(error):
            self._runs.pop(session_id, None)
            return None
        assert error is not None
        last, count = self._runs.get(session_id, ("", 0))
        count = count + 1 if last == error else 1
        self._runs[session_id] = (error, count)
        if count < self.threshold:
            return None
        del self._runs[session_id]
        return (
            f"paused after {count} identical provider errors in a row: {error[:500]} "
            "(fix the provider, then resume)"
        )


class Prices(Protocol):
    @property
    def pricing(self) -> ModelPricing: ...


class JudgeLLM(ChatService, Protocol):
    async def model_info(self, model_id: int) -> Prices: ...


class JudgeComparisons(WorkKind[Claimed, Finish]):
    name = "comparisons"
    channel = WORK_CHANNEL

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        llm: JudgeLLM,
        hub: EventHub | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        breaker_errors: int = BREAKER_ERRORS,
    ) -> None:
        self.engine = engine
        self.breaker = Breaker(breaker_errors)
        self.llm = llm
        self.hub = hub
        self.max_attempts = max_attempts
        self._configs: dict[int, SessionConfig] = {}
        self._panels: dict[int, PanelConfig] = {}
        self._threads = ThreadCache()

    # -- the queue's SQL ------------------------------------------------------------------

    async def groups(self, conn: AsyncConnection) -> Sequence[Group]:
        return [Group(s.id, s.worker_count) for s in await running_sessions(conn)]

    async def claim(
        self, conn: AsyncConnection, *, group_id: int, worker_ids: Sequence[str], lease_s: float
    ) -> list[Claimed]:
        return await claim(conn, session_id=group_id, worker_ids=worker_ids, lease_s=lease_s)

    async def renew(
        self, conn: AsyncConnection, *, held: Sequence[Token], lease_s: float
    ) -> set[int]:
        return await renew(conn, held=held, lease_s=lease_s)

    async def write(self, conn: AsyncConnection, results: Sequence[Finish]) -> Written:
        sessions = await finish(conn, results)
        by_id = {i: s.id for s in sessions for i in s.applied}
        for f in results:
            session_id = by_id.get(f.id)
            if session_id is None or f.refund:
                continue
            reason = self.breaker.record(session_id, f.error if f.status != "completed" else None)
            if reason is not None:
                await self._trip(conn, session_id, reason)
        applied = set(by_id)
        await write_votes(conn, results, applied)  # every judge's answer, in the same transaction
        return Written(applied=applied, extra=sessions)

    async def _trip(self, conn: AsyncConnection, session_id: int, reason: str) -> None:
        """Pause a running session with the reason (only if still running: a person may
        have paused or cancelled it meanwhile); the pools give back what they hold."""
        paused = await conn.execute(
            text(
                "UPDATE judge_sessions SET status = 'paused', error = :reason "
                "WHERE id = :id AND status = 'running' RETURNING id"
            ),
            {"id": session_id, "reason": reason},
        )
        if paused.first() is None:
            return
        await notify_work(conn, session_id)
        if self.hub is not None:
            self.hub.publish_nowait(
                session_topic(session_id), "session_status", {"status": "paused", "error": reason}
            )

    def give_back(self, item: Claimed) -> Finish:
        return Finish(**token(item), status="pending", refund=True)

    # -- running one ----------------------------------------------------------------------

    async def prepare(self, group_id: int, items: Sequence[Claimed]) -> None:
        await self._config(group_id)
        thread_ids = [t for i in items for t in (i.thread_a_id, i.thread_b_id) if t is not None]
        if self._threads.due():  # re-imported threads: every few seconds, one small query
            async with self.engine.connect() as conn:
                await self._threads.revalidate(conn)
        if any(self._threads.get(t) is None for t in thread_ids):
            async with self.engine.connect() as conn:
                await self._threads.load(conn, thread_ids)

    async def session(self, session_id: int) -> tuple[SessionConfig, PanelConfig]:
        """The session's configuration and its panel (a single judge: a panel of one)."""
        config = await self._config(session_id)
        return config, self._panels[session_id]

    @property
    def threads(self) -> ThreadCache:
        return self._threads

    async def _config(self, session_id: int) -> SessionConfig:
        config = self._configs.get(session_id)
        if config is not None:
            return config
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT criteria, prompt_template, judge_model_id, panel, "
                        "system_prompt, verdict_format FROM judge_sessions WHERE id = :id"
                    ),
                    {"id": session_id},
                )
            ).one()
        criteria, template, model_id, panel, system_prompt, verdict_format = row
        prices = await self._prices(model_id)
        config = SessionConfig(
            session_id,
            tuple(criteria),
            template,
            model_id,
            prices,
            system_prompt=system_prompt,
            # Validated when the session was created; None is the built-in JSON reading.
            verdict_format=VerdictFormat.model_validate(verdict_format or {}),
        )
        self._panels[session_id] = (
            panel_config(panel, [await self._prices(m.get("model_id")) for m in panel["members"]])
            if panel
            else solo_panel(config)
        )
        self._configs[session_id] = config
        return config

    async def _prices(self, model_id: int | None) -> ModelPricing:
        if model_id is not None:
            with contextlib.suppress(LookupError):  # deleted: the judging says so
                return (await self.llm.model_info(model_id)).pricing
        return ModelPricing()

    async def run(self, item: Claimed) -> Finish:
        finish = await judge_comparison(
            llm=self.llm,
            item=item,
            config=self._configs[item.session_id],  # prepare() loaded it
            threads=self._threads,
            panel=self._panels[item.session_id],
            publish=self.hub.publish_nowait if self.hub is not None else None,
            max_attempts=self.max_attempts,
            wants_stream=self.hub.wants_stream if self.hub is not None else None,
        )
        return storable_finish(finish)

    def poisoned(self, result: Finish, reason: str) -> Finish:
        return Finish(
            **token(result),
            status="failed",
            started_at=result.started_at,
            error=f"the result could not be stored: {storable_text(reason)}"[:2000],
        )

    # -- events ---------------------------------------------------------------------------

    def after_written(self, batch: Sequence[Finish], written: Written) -> None:
        if self.hub is None:
            return
        sessions: list[FinishedSession] = written.extra  # type: ignore[assignment]
        by_id = {i: s.id for s in sessions for i in s.applied}
        for f in batch:
            session_id = by_id.get(f.id)
            if session_id is not None and not f.refund:
                self.hub.publish_nowait(session_topic(session_id), *_finish_event(f))
        for s in sessions:
            if s.status in ("completed", "failed"):
                self.hub.publish_nowait(session_topic(s.id), "session_status", {"status": s.status})

    async def report(
        self, conn: AsyncConnection, pool: WorkerPool[Any, Any], group_ids: Collection[int]
    ) -> None:
        if self.hub is None:
            return
        rows = await conn.execute(
            text(
                "SELECT id, status, worker_count, total, completed, failed "
                "FROM judge_sessions WHERE id = ANY(:ids)"
            ),
            {"ids": list(group_ids)},
        )
        for row in rows.all():
            self.hub.publish_nowait(session_topic(row[0]), "workers_status", status(pool, row))


def status(pool: WorkerPool[Any, Any], row: Sequence[Any]) -> dict[str, Any]:
    """``workers_status`` data for one session: this process's workers on it."""
    session_id, state, worker_count, total, completed, failed = row
    workers = [
        {"worker_id": s.id, "state": "judging", "comparison_id": s.item_id}
        for s in pool.slots
        if s.group_id == session_id
    ]
    remaining = total - completed - failed
    return {
        "process": pool.prefix,
        "status": state,
        "workers": workers,
        "busy": len(workers),
        "idle": max(0, min(worker_count, pool.concurrency) - len(workers)),
        # Exact with one worker process; with several, their busy workers are in it too.
        "queue_pending": max(0, remaining - len(workers)) if state == "running" else 0,
        "remaining": remaining,
        "completed": completed,
        "failed": failed,
        "total": total,
    }


_TEXT_FIELDS = ("parse_error", "error")
_VOTE_TEXT_FIELDS = ("reasoning", "raw_response", "error", "judge")


def _storable(value: Any, fields: Sequence[str]) -> Any:
    """``value`` with what PostgreSQL text refuses (NUL, lone surrogates) replaced by
    U+FFFD in its text ``fields``: a judge may answer anything."""
    changes = {
        name: storable_text(text_)
        for name in fields
        if isinstance(text_ := getattr(value, name), str) and unstorable_text(text_) is not None
    }
    return dataclasses.replace(value, **changes) if changes else value


def storable_finish(f: Finish) -> Finish:
    """``f`` made storable: the model's answer, reasoning and errors, its own and its
    votes'."""
    out = _storable(f, _TEXT_FIELDS)
    answer = _storable(f.answer, _VOTE_TEXT_FIELDS)
    votes = tuple(_storable(v, _VOTE_TEXT_FIELDS) for v in f.votes)
    changes: dict[str, Any] = {}
    if answer is not f.answer:
        changes["answer"] = answer
    if any(a is not b for a, b in zip(votes, f.votes, strict=True)):
        changes["votes"] = votes
    return dataclasses.replace(out, **changes) if changes else out


_EVENT_VOTE = ("member", "judge", "status", "winner", "confidence", "score", "cost_usd", "error")


def _finish_event(f: Finish) -> tuple[str, dict[str, Any]]:
    if f.status == "pending":
        return "comparison_retry", {
            "comparison_id": f.id,
            "worker_id": f.worker_id,
            "attempt": f.attempts,
            "error": f.parse_error or f.error,
        }
    answer = f.answer
    return "comparison_complete", {
        "comparison_id": f.id,
        "ts": time.time(),  # when published (epoch seconds): lets clients measure delivery
        "worker_id": f.worker_id,
        "status": f.status,
        "winner": answer.winner,
        "confidence": answer.confidence,
        "score": answer.score,
        "scores_a": answer.scores_a,
        "scores_b": answer.scores_b,
        "error": f.parse_error or f.error if f.status == "failed" else None,
        # A panel: how many voted, and each member's answer (the live lane shows them all).
        "votes_cast": f.votes_cast,
        "votes_asked": f.votes_asked,
        "votes": [{name: getattr(v, name) for name in _EVENT_VOTE} for v in f.votes]
        if f.votes_asked is not None and f.votes
        else None,
    }


def comparison_pool(
    *,
    engine: AsyncEngine,
    llm: JudgeLLM,
    hub: EventHub | None = None,
    max_attempts: int = MAX_ATTEMPTS,
    breaker_errors: int = BREAKER_ERRORS,
    **options: Any,
) -> WorkerPool[Claimed, Finish]:
    """A worker pool that judges comparisons (options: ``WorkerPool``'s)."""
    kind = JudgeComparisons(
        engine=engine,
        llm=llm,
        hub=hub,
        max_attempts=max_attempts,
        breaker_errors=breaker_errors,
    )
    return WorkerPool(engine=engine, kind=kind, **options)
