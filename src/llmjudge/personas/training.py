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
from collections.abc import Awaitable, Callable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from llmjudge.infra.queue.locks import LockedRunner
from llmjudge.personas.events import Publisher
from llmjudge.personas.loop import LLM, PersonaLoop
from llmjudge.personas.models import Persona, PersonaDecision, PersonaIteration

log = logging.getLogger(__name__)

# pg_advisory_lock(classid, objid): this class id is for persona loops ("pers").
LOCK_CLASS = 0x70657273


# -- the runner ------------------------------------------------------------------------------


class TrainingRunner:
    """Persona training as a job of the generic advisory-locked runner (``queue.locks``):
    one asyncio task per persona in status ``training`` whose lock this process wins.

    It scans every ``poll_s`` (or at once after ``wake()``), claims each runnable persona
    with an advisory lock and advances it. ``stop()`` lets in-flight model calls finish and
    their results be stored (up to ``drain_s``), then cancels what is left.
    """

    name = "persona"
    lock_class = LOCK_CLASS

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
        batch_poll_s: float = 30.0,
        batch_poll_max_s: float = 600.0,
        batch_hook: Callable[[str, int], Awaitable[None]] | None = None,
    ) -> None:
        self.engine = engine
        # A persona in batch mode polls its judge's batch jobs (``batch_labels``).
        self.batch_poll_s = batch_poll_s
        self.batch_poll_max_s = batch_poll_max_s
        self.batch_hook = batch_hook
        self.sessionmaker = sessionmaker
        self.llm = llm
        self.hub = hub
        self.concurrency = concurrency
        self.watch_s = watch_s
        self._runner = LockedRunner(engine=engine, job=self, poll_s=poll_s, drain_s=drain_s)

    async def start(self) -> None:
        await self._runner.start()

    def wake(self) -> None:
        """Scan now (after a start, a resume, or the last review of an iteration)."""
        self._runner.wake()

    def is_running(self, persona_id: int) -> bool:
        return self._runner.is_running(persona_id)

    def stop_persona(self, persona_id: int) -> None:
        """Ask this process's loop of the persona to stop after the calls in flight."""
        self._runner.stop_key(persona_id)

    async def stop(self) -> None:
        await self._runner.stop()

    async def runnable(self) -> list[int]:
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

    async def run(self, persona_id: int, stop: asyncio.Event) -> None:
        """The loop of one persona, while this process holds its lock."""
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
