"""The worker pool: runs one registered kind of work (``queue.work.WorkKind``) in a process
(web app or ``llmjudge worker``). It knows no table: the kind claims, renews and writes.

- One **dispatcher** claims batches, per claimable group (a running session), sized by the
  free slots: at most the group's ``concurrency`` in flight in this process, and at most
  ``concurrency`` in all. NOTIFY on the kind's channel wakes it; it also polls every
  ``poll_s``, which is how items of dead workers are found once their lease expires.
- Each claimed item runs in a task on a **worker slot** with a stable id
  ``{hostname}:{pid}:{n}`` (the claim records it, and only that holder may finish the item).
- A busy slot also holds its **next** item, claimed ahead under its id, and starts it the
  moment it frees if the group is still claimable (else gives it back): slots do not wait
  for a claim round, so they do not move in waves. Only running items count against the
  group's concurrency.
- A **completer** writes results in batches (one transaction for many finishes, counters
  included); a **heartbeat** renews the leases of everything held, in one UPDATE every
  ``lease_s / 3``; a **status** task lets the kind report once per second on the groups
  active here (``workers_status`` for sessions). Holds are keyed by claim token, so a
  stale result of a lost claim never drops a newer claim's hold.
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
from typing import Any, Generic, TypeVar

from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmjudge.infra.db.faults import is_data_problem
from llmjudge.infra.events.hub import asyncpg_dsn, listen_forever
from llmjudge.infra.queue.periodic import Periodic
from llmjudge.infra.queue.work import Group, Item, Result, Token, WorkKind, Written, token

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_LEASE_S", "WorkerPool", "WorkerSlot", "default_prefix"]

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 1024
DEFAULT_LEASE_S = 30.0
FINISH_BATCH = 500
_pool_numbers = itertools.count()
_DB_ERRORS = (OSError, SQLAlchemyError, DBAPIError)
I = TypeVar("I", bound=Item)  # noqa: E741
R = TypeVar("R", bound=Result)


@dataclass(slots=True)
class WorkerSlot:
    id: str
    item_id: int | None = None
    group_id: int | None = None
    next: Any = None  # an item claimed ahead: starts when this one ends

    @property
    def state(self) -> str:
        return "idle" if self.item_id is None else "busy"


def default_prefix() -> str:
    """``host:pid``, with a suffix for the second and later pool of one process (tests)."""
    n = next(_pool_numbers)
    base = f"{socket.gethostname()}:{os.getpid()}"
    return base if n == 0 else f"{base}.{n}"


class WorkerPool(Generic[I, R]):
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        kind: WorkKind[I, R],
        concurrency: int = DEFAULT_CONCURRENCY,
        lease_s: float = DEFAULT_LEASE_S,
        poll_s: float = 1.0,
        status_interval_s: float = 1.0,
        drain_timeout_s: float = 30.0,
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
        self.kind = kind
        self.concurrency = concurrency
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.status_interval_s = status_interval_s
        self.drain_timeout_s = drain_timeout_s
        self.prefix = prefix or default_prefix()
        self.listen = listen and kind.channel is not None
        self.slots = [WorkerSlot(f"{self.prefix}:{n}") for n in range(concurrency)]
        self.finished = 0  # results written (all outcomes), for logs and tests
        self.discarded = 0  # results whose claim had been lost (lease expired, re-claimed)
        self._free = list(range(concurrency - 1, -1, -1))  # a stack: low slot numbers first
        self._busy: Counter[int] = Counter()
        # Keyed by claim token: a stale result of a lost claim pops nothing of a newer one.
        self._held: dict[Token, I] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._outbox: list[R] = []
        self._outbox_ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._stopping = False
        self._services: list[asyncio.Task[None]] = []
        # Failures are logged and retried at the next interval (the lease outlives three).
        self._periodic = [
            Periodic(
                f"worker pool {self.prefix} heartbeat", self._renew_leases, interval_s=lease_s / 3
            ),
            Periodic(
                f"worker pool {self.prefix} status",
                self._report_status,
                interval_s=status_interval_s,
            ),
        ]
        self._completer: asyncio.Task[None] | None = None
        self._active: dict[int, float] = {}  # group id -> when last busy here
        self._rotation = 0
        self._groups: list[Group] = []
        self._live: set[int] = set()
        self._groups_read = -math.inf  # monotonic time of the last read of the groups

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        self._completer = asyncio.create_task(self._complete_loop(), name="pool-completer")
        self._services = [asyncio.create_task(self._dispatch_loop(), name="pool-dispatcher")]
        for loop in self._periodic:
            await loop.start()
        if self.listen and self.kind.channel is not None:
            dsn = asyncpg_dsn(self.engine.url.render_as_string(hide_password=False))
            ready = asyncio.Event()
            self._services.append(
                asyncio.create_task(
                    listen_forever(dsn, self.kind.channel, self._work_notified, ready=ready),
                    name="pool-listener",
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), 10)
        log.info(
            "worker pool %s (%s) started (%d slots)", self.prefix, self.kind.name, self.concurrency
        )

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
        for loop in self._periodic:
            await loop.stop(timeout_s=0)  # no lease or status is worth waiting for now
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
        # atomic statement), with the claimable groups re-read only now and then.
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
                    self._groups_read = -math.inf
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
        """NOTIFY on the kind's channel: a group started, resumed or got work back."""
        self._groups_read = -math.inf
        self.wake()

    async def _claim_round(self, conn: AsyncConnection) -> int:
        if time.monotonic() - self._groups_read >= self.poll_s:
            self._groups = list(await self.kind.groups(conn))
            self._live = {g.id for g in self._groups}
            self._groups_read = time.monotonic()
            self._release_stale()
        groups = self._groups
        if not groups:
            return 0
        self._rotation = (self._rotation + 1) % len(groups)
        total = 0
        for g in groups[self._rotation :] + groups[: self._rotation]:
            if self._stopping:
                break
            room = max(0, min(g.concurrency - self._busy[g.id], len(self._free)))
            ahead = (
                [n for n, w in enumerate(self.slots) if w.group_id == g.id and w.next is None]
                if self.kind.claim_ahead
                else []
            )
            if not room and not ahead:
                continue
            fresh = [self._free.pop() for _ in range(room)]
            slots = fresh + ahead  # the claim serves them in this order: idle slots first
            try:
                items = await self.kind.claim(
                    conn,
                    group_id=g.id,
                    worker_ids=[self.slots[n].id for n in slots],
                    lease_s=self.lease_s,
                )
            except BaseException:
                self._free.extend(reversed(fresh))
                raise
            if len(items) < len(slots):  # the group ran dry, ended or was paused: look again
                self._groups_read = -math.inf
            by_worker = {self.slots[n].id: n for n in slots}
            used = {by_worker[item.worker_id] for item in items}
            self._free.extend(n for n in reversed(fresh) if n not in used)
            if items:
                await self._launch(g.id, items, by_worker, set(ahead))
                total += len(items)
        return total

    def _release_stale(self) -> None:
        """Give back the items claimed ahead for groups no longer claimable (paused, ended)."""
        for w in self.slots:
            if w.next is not None and w.next.group_id not in self._live:
                self._outbox.append(self.kind.give_back(w.next))
                w.next = None
                self._outbox_ready.set()

    async def _launch(
        self, group_id: int, items: list[I], slots: dict[str, int], ahead: set[int]
    ) -> None:
        for item in items:
            self._held[token(item)] = item
        self._active[group_id] = time.monotonic()
        try:
            await self.kind.prepare(group_id, items)
        except _DB_ERRORS as exc:
            log.warning("worker pool %s: could not load work (%s); releasing it", self.prefix, exc)
            self._free.extend(slots[i.worker_id] for i in items if slots[i.worker_id] not in ahead)
            self._outbox.extend(self.kind.give_back(item) for item in items)
            self._outbox_ready.set()
            self.wake()
            return
        for item in items:
            n = slots[item.worker_id]
            slot = self.slots[n]
            if n in ahead and slot.item_id is not None:
                slot.next = item  # _done starts it
                continue
            if n in ahead:  # its slot freed while this was being claimed
                self._free.remove(n)
            self._start(n, item)

    def _start(self, slot: int, item: I) -> None:
        s = self.slots[slot]
        s.item_id, s.group_id = item.id, item.group_id
        self._busy[item.group_id] += 1
        task = asyncio.create_task(self._run(slot, item))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, slot: int, item: I) -> None:
        result: R | None = None
        try:
            result = await self.kind.run(item)
        finally:
            self._done(slot, item, result if result is not None else self.kind.give_back(item))

    def _done(self, slot: int, item: I, result: R) -> None:
        """Queue the result for the completer and start the slot's next item, or free the
        slot (never blocks)."""
        s = self.slots[slot]
        self._busy[item.group_id] -= 1
        self._active[item.group_id] = time.monotonic()
        self._outbox.append(result)
        nxt, s.next = s.next, None
        if nxt is not None and not self._stopping and nxt.group_id in self._live:
            self._start(slot, nxt)
        else:
            if nxt is not None:
                self._outbox.append(self.kind.give_back(nxt))
            s.item_id = s.group_id = None
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
                await self._write_isolating(batch)
                delay = 0.1
            except Exception:
                log.exception("worker pool %s: writing results failed; retrying", self.prefix)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            done = {id(f) for f in batch}
            self._outbox = [f for f in self._outbox if id(f) not in done]

    async def _write_isolating(self, batch: list[R]) -> None:
        """Write ``batch``; when the database refuses a value in it, bisect to the results
        it refuses and end only those, with the reason (``kind.poisoned``). Anything else
        (the database away) raises, and the whole batch is retried later."""
        try:
            async with self.engine.begin() as conn:
                written = await self.kind.write(conn, batch)
        except Exception as exc:
            if not is_data_problem(exc):
                raise
            if len(batch) > 1:
                half = len(batch) // 2
                await self._write_isolating(batch[:half])
                await self._write_isolating(batch[half:])
                return
            await self._write_poisoned(batch[0], exc)
            return
        self._after_write(batch, written)

    async def _write_poisoned(self, result: R, exc: Exception) -> None:
        reason = _reason(exc)
        log.error(
            "worker pool %s: the database refuses the result of %s item %d (%s); failing it",
            self.prefix,
            self.kind.name,
            result.id,
            reason,
        )
        replacement = self.kind.poisoned(result, reason)
        if replacement is not None:
            try:
                async with self.engine.begin() as conn:
                    written = await self.kind.write(conn, [replacement])
            except Exception as again:
                if not is_data_problem(again):
                    raise
                log.error("worker pool %s: item %d: %s", self.prefix, result.id, _reason(again))
            else:
                self._after_write([replacement], written)
                return
        # Nothing writable: stop holding it, so its lease runs out instead of being renewed.
        self._held.pop(token(result), None)
        self.finished += 1

    def _after_write(self, batch: Sequence[R], written: Written) -> None:
        for f in batch:
            self._held.pop(token(f), None)
            self.finished += 1
            if f.id not in written.applied:
                self.discarded += 1
                log.info(
                    "discarded the result of %s item %d: its claim was lost", self.kind.name, f.id
                )
                continue
            if f.status == "pending":
                self.wake()  # back in the queue: claimable now, not at the next poll
        self.kind.after_written(batch, written)

    # -- leases and status ----------------------------------------------------------------

    async def _renew_leases(self) -> None:
        held = list(self._held)
        if not held:
            return
        async with self.engine.begin() as conn:
            kept = await self.kind.renew(conn, held=held, lease_s=self.lease_s)
        # Not renewed and not finished here meanwhile: another worker claimed it.
        finishing = {token(f) for f in self._outbox}
        lost = [t for t in held if t[0] not in kept and t in self._held and t not in finishing]
        if lost:
            log.warning(
                "worker pool %s: %d leases were lost to other workers", self.prefix, len(lost)
            )

    async def _report_status(self) -> None:
        now = time.monotonic()
        recent = [g for g, t in self._active.items() if now - t < 3 * self.status_interval_s]
        for g in [g for g, t in self._active.items() if now - t >= 3 * self.status_interval_s]:
            del self._active[g]
        if recent:
            async with self.engine.connect() as conn:
                await self.kind.report(conn, self, recent)


async def _discard(conn: AsyncConnection | None) -> None:
    """Close a connection that may be broken (its server restarted) without raising."""
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.invalidate()
        with contextlib.suppress(Exception):
            await conn.close()


def _reason(exc: BaseException) -> str:
    """The database's one-line reason, without the statement or its parameters."""
    orig = getattr(exc, "orig", None)
    cause = getattr(orig, "__cause__", None) or orig or exc
    return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"[:500]


def _one_per_item(items: list[R]) -> list[R]:
    """The first result of each item (an item is held once, so duplicates cannot happen
    unless a claim was lost and won again; the later one waits for the next batch)."""
    seen: set[int] = set()
    batch = []
    for f in items:
        if f.id not in seen:
            seen.add(f.id)
            batch.append(f)
    return batch
