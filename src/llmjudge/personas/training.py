"""Who runs the calibration loop (``loop.PersonaLoop``) in this process.

``TrainingRunner`` runs one asyncio task per persona in status ``training`` in this process.
A task holds a PostgreSQL session-level advisory lock on its own connection for as long as
it runs, so two processes never run the same persona, and a crashed process's lock goes with
its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from llmjudge.personas.events import Publisher
from llmjudge.personas.loop import LLM, PersonaLoop
from llmjudge.personas.models import Persona, PersonaDecision, PersonaIteration

log = logging.getLogger(__name__)

# pg_advisory_lock(classid, objid): this class id is for persona loops ("pers").
LOCK_CLASS = 0x70657273


# -- the runner ------------------------------------------------------------------------------


class TrainingRunner:
    """One asyncio task per persona in status ``training``, in this process.

    It scans every ``poll_s`` (or at once after ``wake()``), claims each runnable persona
    with an advisory lock and advances it. ``stop()`` lets in-flight model calls finish and
    their results be stored (up to ``drain_s``), then cancels what is left.
    """

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        sessionmaker: async_sessionmaker[AsyncSession],
        llm: LLM,
        hub: Publisher | None = None,
        concurrency: int = 16,
        poll_s: float = 2.0,
        watch_s: float = 1.0,
        drain_s: float = 10.0,
    ) -> None:
        self.engine = engine
        self.sessionmaker = sessionmaker
        self.llm = llm
        self.hub = hub
        self.concurrency = concurrency
        self.poll_s = poll_s
        self.watch_s = watch_s
        self.drain_s = drain_s
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._stops: dict[int, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._main: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._closing.clear()
        self._main = asyncio.create_task(self._scan_forever(), name="persona-runner")

    def wake(self) -> None:
        """Scan now (after a start, a resume, or the last review of an iteration)."""
        self._wake.set()

    def is_running(self, persona_id: int) -> bool:
        task = self._tasks.get(persona_id)
        return task is not None and not task.done()

    def stop_persona(self, persona_id: int) -> None:
        """Ask this process's loop of the persona to stop after the calls in flight."""
        stop = self._stops.get(persona_id)
        if stop is not None:
            stop.set()

    async def wait_persona(self, persona_id: int) -> None:
        """Wait until this process's loop of the persona (if any) has exited."""
        task = self._tasks.get(persona_id)
        if task is not None:
            await asyncio.wait({task})

    async def stop(self) -> None:
        self._closing.set()
        self._wake.set()
        for stop in self._stops.values():
            stop.set()
        tasks = [t for t in (self._main, *self._tasks.values()) if t is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.drain_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _scan_forever(self) -> None:
        while not self._closing.is_set():
            try:
                for persona_id in await self._runnable():
                    if not self.is_running(persona_id) and not self._closing.is_set():
                        self._spawn(persona_id)
            except Exception:
                log.exception("persona runner scan failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            self._wake.clear()

    async def _runnable(self) -> list[int]:
        """Personas in training that are not waiting for human reviews."""
        waiting = (
            select(PersonaIteration.persona_id)
            .join(PersonaDecision, PersonaDecision.iteration_id == PersonaIteration.id)
            .where(
                PersonaIteration.status == "awaiting_review",
                PersonaDecision.human_agrees.is_(None),
            )
        )
        async with self.sessionmaker() as db:
            ids = await db.scalars(
                select(Persona.id)
                .where(Persona.status == "training", Persona.id.not_in(waiting))
                .order_by(Persona.id)
            )
            return list(ids)

    def _spawn(self, persona_id: int) -> None:
        stop = asyncio.Event()
        self._stops[persona_id] = stop
        task = asyncio.create_task(self._run(persona_id, stop), name=f"persona-{persona_id}")
        self._tasks[persona_id] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._tasks.get(persona_id) is t:
                del self._tasks[persona_id]
                self._stops.pop(persona_id, None)

        task.add_done_callback(done)

    async def _run(self, persona_id: int, stop: asyncio.Event) -> None:
        async with self.engine.connect() as conn:
            if not await _try_lock(conn, persona_id):
                return  # another process runs it
            watcher = asyncio.create_task(self._watch(persona_id, stop))
            try:
                await PersonaLoop(self, persona_id, stop).run()
            except Exception:
                log.exception("persona %s: training loop failed", persona_id)
                with contextlib.suppress(Exception):
                    await PersonaLoop(self, persona_id, stop).pause(
                        "internal error in the training loop (see the server log); resume to retry"
                    )
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
                await _unlock(conn, persona_id)

    async def _watch(self, persona_id: int, stop: asyncio.Event) -> None:
        """Stop the loop when someone (any process) pauses the persona or the budget runs
        out; both are checked every ``watch_s``."""
        loop = PersonaLoop(self, persona_id, stop)
        while not stop.is_set():
            await asyncio.sleep(self.watch_s)
            try:
                async with self.sessionmaker() as db:
                    persona = await db.get(Persona, persona_id)
                if persona is None or persona.status != "training":
                    stop.set()
                elif await loop._budget_reached(persona):
                    stop.set()
            except Exception:
                log.exception("persona %s: status check failed", persona_id)


async def _try_lock(conn: AsyncConnection, persona_id: int) -> bool:
    got = await conn.scalar(
        text("SELECT pg_try_advisory_lock(:c, :o)"), {"c": LOCK_CLASS, "o": persona_id}
    )
    await conn.commit()  # session-level lock: it outlives the transaction
    return bool(got)


async def _unlock(conn: AsyncConnection, persona_id: int) -> None:
    try:
        await conn.execute(
            text("SELECT pg_advisory_unlock(:c, :o)"), {"c": LOCK_CLASS, "o": persona_id}
        )
        await conn.commit()
    except BaseException:
        # Never hand a connection that may still hold the lock back to the pool.
        await conn.invalidate()
        raise
