"""The worker pool: one per process (web app or ``llmjudge worker``).

- One **dispatcher** claims batches, per running session, sized by the free slots: at most
  the session's ``worker_count`` in flight in this process, and at most ``concurrency`` in
  all (the gateway's per-provider limits bound the model calls further). NOTIFY on
  ``llmjudge_work`` wakes it (session start, resume, retry); it also polls every ``poll_s``,
  which is how items of dead workers are found once their lease expires.
- Each claimed item runs in a task on a **worker slot** with a stable id
  ``{hostname}:{pid}:{n}`` (the claim records it, and only that holder may finish the item).
- A judging slot also holds its **next** item, claimed ahead under its id, and starts it the
  moment it frees if the session still runs (else gives it back): slots do not wait for a
  claim round, so they do not move in waves. Only judging counts against ``worker_count``.
- A **completer** writes results in batches (one transaction for many finishes, counters
  included); a **heartbeat** renews the leases of everything held, in one UPDATE every
  ``lease_s / 3``; a **status** task publishes ``workers_status`` once per second per
  active session.
- ``stop()`` stops claiming, lets running calls finish for ``drain_timeout_s``, cancels the
  rest and gives their items back to the queue (without spending an attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import socket
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmjudge.events.hub import EventHub, asyncpg_dsn, listen_forever
from llmjudge.providers.service import LLMService
from llmjudge.queue.claims import (
    WORK_CHANNEL,
    Claimed,
    Finish,
    FinishedSession,
    RunningSession,
    claim,
    finish,
    renew,
    running_sessions,
)
from llmjudge.sessions.worker import (
    MAX_ATTEMPTS,
    SessionConfig,
    ThreadCache,
    judge_comparison,
    session_topic,
)

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_LEASE_S", "WorkerPool", "WorkerSlot"]

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 1024
DEFAULT_LEASE_S = 30.0
FINISH_BATCH = 500
_pool_numbers = itertools.count()
_DB_ERRORS = (OSError, SQLAlchemyError, DBAPIError)


@dataclass(slots=True)
class WorkerSlot:
    id: str
    comparison_id: int | None = None
    session_id: int | None = None
    next: Claimed | None = None  # claimed ahead: starts when this one ends

    @property
    def state(self) -> str:
        return "idle" if self.comparison_id is None else "judging"


def default_prefix() -> str:
    """``host:pid``, with a suffix for the second and later pool of one process (tests)."""
    n = next(_pool_numbers)
    base = f"{socket.gethostname()}:{os.getpid()}"
    return base if n == 0 else f"{base}.{n}"


class WorkerPool:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        llm: LLMService,
        hub: EventHub | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease_s: float = DEFAULT_LEASE_S,
        poll_s: float = 1.0,
        status_interval_s: float = 1.0,
        drain_timeout_s: float = 30.0,
        max_attempts: int = MAX_ATTEMPTS,
        prefix: str | None = None,
        listen: bool = True,
        claim_engine: AsyncEngine | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.engine = engine
        # The claim connection lives long in autocommit: behind a transaction pooler it
        # needs an unpooled engine (config.database_direct_url).
        self.claim_engine = claim_engine or engine
        self.llm = llm
        self.hub = hub
        self.concurrency = concurrency
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.status_interval_s = status_interval_s
        self.drain_timeout_s = drain_timeout_s
        self.max_attempts = max_attempts
        self.prefix = prefix or default_prefix()
        self.listen = listen
        self.slots = [WorkerSlot(f"{self.prefix}:{n}") for n in range(concurrency)]
        self.judged = 0  # finishes written (all outcomes), for logs and tests
        self.discarded = 0  # finishes whose claim had been lost (lease expired, re-claimed)
        self._free = list(range(concurrency - 1, -1, -1))  # a stack: low slot numbers first
        self._busy: Counter[int] = Counter()
        self._held: dict[int, Claimed] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._configs: dict[int, SessionConfig] = {}
        self._threads = ThreadCache()
        self._outbox: list[Finish] = []
        self._outbox_ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._stopping = False
        self._services: list[asyncio.Task[None]] = []
        self._completer: asyncio.Task[None] | None = None
        self._active: dict[int, float] = {}  # session id -> when last busy here
        self._rotation = 0
        self._sessions: list[RunningSession] = []
        self._sessions_read = -math.inf  # monotonic time of the last read of running sessions

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        self._completer = asyncio.create_task(self._complete_loop(), name="pool-completer")
        self._services = [
            asyncio.create_task(self._dispatch_loop(), name="pool-dispatcher"),
            asyncio.create_task(self._heartbeat_loop(), name="pool-heartbeat"),
        ]
        if self.hub is not None:
            self._services.append(asyncio.create_task(self._status_loop(), name="pool-status"))
        if self.listen:
            dsn = asyncpg_dsn(self.engine.url.render_as_string(hide_password=False))
            ready = asyncio.Event()
            self._services.append(
                asyncio.create_task(
                    listen_forever(dsn, WORK_CHANNEL, self._work_notified, ready=ready),
                    name="pool-listener",
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), 10)
        log.info("worker pool %s started (%d slots)", self.prefix, self.concurrency)

    async def stop(self, drain_timeout_s: float | None = None) -> None:
        """Stop claiming, drain, give unfinished items back, write every result."""
        if self._completer is None:
            return
        self._stopping = True
        self.wake()
        dispatcher = self._services[0]
        with contextlib.suppress(asyncio.CancelledError):
            await dispatcher
        timeout = self.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        if self._tasks:
            _, unfinished = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
        self._outbox_ready.set()
        try:
            await asyncio.wait_for(self._completer, timeout + 5)
        except TimeoutError:
            log.error(
                "worker pool %s: %d results could not be written", self.prefix, len(self._outbox)
            )
        self._completer = None
        for task in self._services[1:]:
            task.cancel()
        await asyncio.gather(*self._services[1:], return_exceptions=True)
        self._services = []
        log.info("worker pool %s stopped", self.prefix)

    def wake(self) -> None:
        """Look for work now (NOTIFY, a freed slot)."""
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    # -- dispatching ----------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        # Freed slots wait for a claim round, and every await of a round queues behind the
        # other tasks' callbacks, so in steady state a round is one statement: the claim, on
        # a connection of its own (no checkout, no ping, no BEGIN/COMMIT: a claim is one
        # atomic statement), with the running sessions re-read only now and then.
        delay = 0.1
        conn: AsyncConnection | None = None
        try:
            while not self._stopping:
                self._wake.clear()
                try:
                    if conn is None:
                        conn = await self.claim_engine.connect()
                        await conn.execution_options(isolation_level="AUTOCOMMIT")
                    claimed = await self._claim_round(conn)
                    delay = 0.1
                except Exception:  # the database, or a bug: keep the process serving
                    log.exception("worker pool %s: claiming failed; retrying", self.prefix)
                    await _discard(conn)
                    conn = None
                    self._sessions_read = -math.inf
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                if claimed and self._free:
                    continue  # there may be more to take right away
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
                if not self._stopping:  # let a few more slots free up: bigger batches
                    await asyncio.sleep(0.005 if self._free else 0.02)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    def _work_notified(self, _payload: str = "") -> None:
        """NOTIFY on the work channel: a session started, resumed or got work back."""
        self._sessions_read = -math.inf
        self.wake()

    async def _claim_round(self, conn: AsyncConnection) -> int:
        if time.monotonic() - self._sessions_read >= self.poll_s:
            self._sessions = await running_sessions(conn)
            self._sessions_read = time.monotonic()
            self._release_stale()
        sessions = self._sessions
        if not sessions:
            return 0
        self._rotation = (self._rotation + 1) % len(sessions)
        total = 0
        for s in sessions[self._rotation :] + sessions[: self._rotation]:
            if self._stopping:
                break
            room = max(0, min(s.worker_count - self._busy[s.id], len(self._free)))
            ahead = [n for n, w in enumerate(self.slots) if w.session_id == s.id and w.next is None]
            if not room and not ahead:
                continue
            fresh = [self._free.pop() for _ in range(room)]
            slots = fresh + ahead  # the claim serves them in this order: idle slots first
            try:
                items = await claim(
                    conn,
                    session_id=s.id,
                    worker_ids=[self.slots[n].id for n in slots],
                    lease_s=self.lease_s,
                )
            except BaseException:
                self._free.extend(reversed(fresh))
                raise
            if len(items) < len(slots):  # the session ran dry, ended or was paused: look again
                self._sessions_read = -math.inf
            by_worker = {self.slots[n].id: n for n in slots}
            used = {by_worker[item.worker_id] for item in items}
            self._free.extend(n for n in reversed(fresh) if n not in used)
            if items:
                await self._launch(s.id, items, by_worker, set(ahead))
                total += len(items)
        return total

    def _release_stale(self) -> None:
        """Give back the items claimed ahead for sessions no longer running (paused, ended)."""
        running = {s.id for s in self._sessions}
        for w in self.slots:
            if w.next is not None and w.next.session_id not in running:
                self._outbox.append(_refund(w.next))
                w.next = None
                self._outbox_ready.set()

    async def _launch(
        self, session_id: int, items: list[Claimed], slots: dict[str, int], ahead: set[int]
    ) -> None:
        for item in items:
            self._held[item.id] = item
        self._active[session_id] = time.monotonic()
        try:
            config = await self._config(session_id)
            thread_ids = [t for i in items for t in (i.thread_a_id, i.thread_b_id)]
            if any(self._threads.get(t) is None for t in thread_ids):
                async with self.engine.connect() as conn:
                    await self._threads.load(conn, thread_ids)
        except _DB_ERRORS as exc:
            log.warning("worker pool %s: could not load work (%s); releasing it", self.prefix, exc)
            self._free.extend(slots[i.worker_id] for i in items if slots[i.worker_id] not in ahead)
            self._outbox.extend(_refund(item) for item in items)
            self._outbox_ready.set()
            self.wake()
            return
        for item in items:
            n = slots[item.worker_id]
            slot = self.slots[n]
            if n in ahead and slot.comparison_id is not None:
                slot.next = item  # _done starts it
                continue
            if n in ahead:  # its slot freed while this was being claimed
                self._free.remove(n)
            self._start(n, item, config)

    def _start(self, slot: int, item: Claimed, config: SessionConfig) -> None:
        s = self.slots[slot]
        s.comparison_id, s.session_id = item.id, item.session_id
        self._busy[item.session_id] += 1
        task = asyncio.create_task(self._run(slot, item, config))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _config(self, session_id: int) -> SessionConfig:
        config = self._configs.get(session_id)
        if config is not None:
            return config
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT criteria, prompt_template, judge_model_id "
                        "FROM judge_sessions WHERE id = :id"
                    ),
                    {"id": session_id},
                )
            ).one()
        criteria, template, model_id = row
        prices = (0.0, 0.0)
        if model_id is not None:
            with contextlib.suppress(LookupError):  # deleted: judge_comparison says so
                info = await self.llm.model_info(model_id)
                prices = (info.input_price_per_million, info.output_price_per_million)
        config = SessionConfig(session_id, tuple(criteria), template, model_id, *prices)
        self._configs[session_id] = config
        return config

    async def _run(self, slot: int, item: Claimed, config: SessionConfig) -> None:
        result: Finish | None = None
        try:
            result = await judge_comparison(
                llm=self.llm,
                item=item,
                config=config,
                threads=self._threads,
                publish=self.hub.publish_nowait if self.hub is not None else None,
                max_attempts=self.max_attempts,
            )
        finally:
            self._done(slot, item, result or _refund(item))

    def _done(self, slot: int, item: Claimed, result: Finish) -> None:
        """Queue the result for the completer and start the slot's next item, or free the
        slot (never blocks)."""
        s = self.slots[slot]
        self._busy[item.session_id] -= 1
        self._active[item.session_id] = time.monotonic()
        self._outbox.append(result)
        nxt, s.next = s.next, None
        running = {r.id for r in self._sessions}
        if nxt is not None and not self._stopping and nxt.session_id in running:
            self._start(slot, nxt, self._configs[nxt.session_id])
        else:
            if nxt is not None:
                self._outbox.append(_refund(nxt))
            s.comparison_id = s.session_id = None
            self._free.append(slot)
        self._outbox_ready.set()
        self.wake()

    # -- completing -----------------------------------------------------------------------

    async def _complete_loop(self) -> None:
        delay = 0.1
        while True:
            if not self._outbox:
                if self._stopping and not self._tasks:
                    return
                self._outbox_ready.clear()
                await self._outbox_ready.wait()
                continue
            if not self._stopping:
                await asyncio.sleep(0.05)  # gather a batch
            batch = _one_per_item(self._outbox[:FINISH_BATCH])
            try:
                async with self.engine.begin() as conn:
                    sessions = await finish(conn, batch)
                delay = 0.1
            except Exception:
                log.exception("worker pool %s: writing results failed; retrying", self.prefix)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            written = {id(f) for f in batch}
            self._outbox = [f for f in self._outbox if id(f) not in written]
            self._after_finish(batch, sessions)

    def _after_finish(self, batch: Sequence[Finish], sessions: list[FinishedSession]) -> None:
        applied = {i for s in sessions for i in s.applied}
        for f in batch:
            item = self._held.pop(f.id, None)
            self.judged += 1
            if f.id not in applied:
                self.discarded += 1
                log.info("discarded the result of comparison %d: its claim was lost", f.id)
                continue
            if f.status == "pending":
                self.wake()  # back in the queue: claimable now, not at the next poll
            if self.hub is not None and item is not None and not f.refund:
                self.hub.publish_nowait(session_topic(item.session_id), *_finish_event(f))
        if self.hub is not None:
            for s in sessions:
                if s.status in ("completed", "failed"):
                    self.hub.publish_nowait(
                        session_topic(s.id), "session_status", {"status": s.status}
                    )

    # -- leases and status ----------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            held = [(i.id, i.worker_id, i.attempts) for i in self._held.values()]
            if not held:
                continue
            try:
                async with self.engine.begin() as conn:
                    kept = await renew(conn, held=held, lease_s=self.lease_s)
            except _DB_ERRORS as exc:
                log.warning("worker pool %s: heartbeat failed (%s)", self.prefix, exc)
                continue
            # Not renewed and not finished here meanwhile: another worker claimed it.
            finishing = {f.id for f in self._outbox}
            lost = [
                i for i, _, _ in held if i not in kept and i in self._held and i not in finishing
            ]
            if lost:
                log.warning(
                    "worker pool %s: %d leases were lost to other workers", self.prefix, len(lost)
                )

    async def _status_loop(self) -> None:
        assert self.hub is not None
        while True:
            await asyncio.sleep(self.status_interval_s)
            now = time.monotonic()
            recent = [s for s, t in self._active.items() if now - t < 3 * self.status_interval_s]
            for s in [s for s, t in self._active.items() if now - t >= 3 * self.status_interval_s]:
                del self._active[s]
            if not recent:
                continue
            try:
                async with self.engine.connect() as conn:
                    rows = await conn.execute(
                        text(
                            "SELECT id, status, worker_count, total, completed, failed "
                            "FROM judge_sessions WHERE id = ANY(:ids)"
                        ),
                        {"ids": recent},
                    )
                    counters = rows.all()
            except _DB_ERRORS as exc:
                log.warning("worker pool %s: status query failed (%s)", self.prefix, exc)
                continue
            for row in counters:
                self.hub.publish_nowait(session_topic(row[0]), "workers_status", self.status(row))

    def status(self, row: Sequence[Any]) -> dict[str, Any]:
        """``workers_status`` data for one session: this process's workers on it."""
        session_id, status, worker_count, total, completed, failed = row
        workers = [
            {"worker_id": s.id, "state": s.state, "comparison_id": s.comparison_id}
            for s in self.slots
            if s.session_id == session_id
        ]
        remaining = total - completed - failed
        return {
            "process": self.prefix,
            "status": status,
            "workers": workers,
            "busy": len(workers),
            "idle": max(0, min(worker_count, self.concurrency) - len(workers)),
            # Exact with one worker process; with several, their busy workers are in it too.
            "queue_pending": max(0, remaining - len(workers)) if status == "running" else 0,
            "remaining": remaining,
            "completed": completed,
            "failed": failed,
            "total": total,
        }


async def _discard(conn: AsyncConnection | None) -> None:
    """Close a connection that may be broken (its server restarted) without raising."""
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.invalidate()
        with contextlib.suppress(Exception):
            await conn.close()


def _refund(item: Claimed) -> Finish:
    return Finish(
        id=item.id, worker_id=item.worker_id, attempts=item.attempts, status="pending", refund=True
    )


def _one_per_item(items: list[Finish]) -> list[Finish]:
    """The first finish of each item (an item is held once, so duplicates cannot happen
    unless a claim was lost and won again; the later one waits for the next batch)."""
    seen: set[int] = set()
    batch = []
    for f in items:
        if f.id not in seen:
            seen.add(f.id)
            batch.append(f)
    return batch


def _finish_event(f: Finish) -> tuple[str, dict[str, Any]]:
    if f.status == "pending":
        return "comparison_retry", {
            "comparison_id": f.id,
            "worker_id": f.worker_id,
            "attempt": f.attempts,
            "error": f.parse_error or f.error,
        }
    return "comparison_complete", {
        "comparison_id": f.id,
        "ts": time.time(),  # when published (epoch seconds): lets clients measure delivery
        "worker_id": f.worker_id,
        "status": f.status,
        "winner": f.winner,
        "confidence": f.confidence,
        "scores_a": f.scores_a,
        "scores_b": f.scores_b,
        "error": f.parse_error or f.error if f.status == "failed" else None,
    }
