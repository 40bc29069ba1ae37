"""Long-running jobs, each held by one process at a time through a PostgreSQL advisory lock.

For work that is not a stream of short leased rows but one loop per key (a persona's
training): a ``LockedJob`` lists the keys that need running and runs one; the
``LockedRunner`` scans every ``poll_s`` (or at once after ``wake()``), takes a session-level
``pg_try_advisory_lock(lock_class, key)`` on a connection of its own for each key not
running here, and runs the job while it holds it. A process that dies drops its locks with
its connections, so another one picks the key up at its next scan (``queue.periodic``: a
failed scan is logged and tried again). ``stop()`` asks every job to stop, waits
``drain_s``, then cancels what is left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from llmjudge.infra.queue.periodic import Periodic

__all__ = ["LockedJob", "LockedRunner", "try_lock", "unlock"]


class LockedJob(Protocol):
    name: str
    lock_class: int  # the advisory lock's first key: one per kind of job

    async def runnable(self) -> Sequence[int]:
        """Keys that need running now."""
        ...

    async def run(self, key: int, stop: asyncio.Event) -> None:
        """Run ``key`` while this process holds its lock; return soon after ``stop``."""
        ...


class LockedRunner:
    """One asyncio task per runnable key of ``job`` whose lock this process wins."""

    def __init__(
        self, *, engine: AsyncEngine, job: LockedJob, poll_s: float = 2.0, drain_s: float = 10.0
    ) -> None:
        self.engine = engine
        self.job = job
        self.poll_s = poll_s
        self.drain_s = drain_s
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._stops: dict[int, asyncio.Event] = {}
        self._held: set[int] = set()  # keys whose lock this process holds now
        self._closing = False
        self._scan = Periodic(
            f"{job.name} runner scan", self._spawn_runnable, interval_s=poll_s, first_s=0
        )

    async def start(self) -> None:
        self._closing = False
        await self._scan.start()

    def wake(self) -> None:
        """Scan now."""
        self._scan.wake()

    def is_running(self, key: int) -> bool:
        """Whether this process holds ``key``'s lock and runs it (not merely trying to)."""
        return key in self._held

    def stop_key(self, key: int) -> None:
        """Ask this process's run of ``key`` to stop."""
        stop = self._stops.get(key)
        if stop is not None:
            stop.set()

    async def wait_key(self, key: int) -> None:
        """Wait until this process's run of ``key`` (if any) has exited."""
        task = self._tasks.get(key)
        if task is not None:
            await asyncio.wait({task})

    async def stop(self) -> None:
        self._closing = True
        for stop in self._stops.values():
            stop.set()
        started = time.monotonic()
        await self._scan.stop(timeout_s=self.drain_s)
        tasks = list(self._tasks.values())
        if not tasks:
            return
        left = max(0.0, self.drain_s - (time.monotonic() - started))
        _, pending = await asyncio.wait(tasks, timeout=left)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _spawn_runnable(self) -> None:
        for key in await self.job.runnable():
            if key not in self._tasks and not self._closing:
                self._spawn(key)

    def _spawn(self, key: int) -> None:
        stop = asyncio.Event()
        self._stops[key] = stop
        task = asyncio.create_task(self._run(key, stop), name=f"{self.job.name}-{key}")
        self._tasks[key] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._tasks.get(key) is t:
                del self._tasks[key]
                self._stops.pop(key, None)

        task.add_done_callback(done)

    async def _run(self, key: int, stop: asyncio.Event) -> None:
        async with self.engine.connect() as conn:
            if not await try_lock(conn, self.job.lock_class, key):
                return  # another process runs it
            self._held.add(key)
            try:
                await self.job.run(key, stop)
            finally:
                self._held.discard(key)
                await unlock(conn, self.job.lock_class, key)


async def try_lock(conn: AsyncConnection, lock_class: int, key: int) -> bool:
    got = await conn.scalar(
        text("SELECT pg_try_advisory_lock(:c, :o)"), {"c": lock_class, "o": key}
    )
    await conn.commit()  # session-level lock: it outlives the transaction
    return bool(got)


async def unlock(conn: AsyncConnection, lock_class: int, key: int) -> None:
    try:
        await conn.execute(text("SELECT pg_advisory_unlock(:c, :o)"), {"c": lock_class, "o": key})
        await conn.commit()
    except BaseException:
        # Never hand a connection that may still hold the lock back to the pool.
        await conn.invalidate()
        raise
