"""A worker process without the web app (``llmjudge worker``): a judge pool and a persona
training runner against the database until SIGINT/SIGTERM, then a graceful stop (drain,
give back unfinished items)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from sqlalchemy.exc import DBAPIError

from llmjudge.config import Settings
from llmjudge.db.engine import make_engine, make_sessionmaker
from llmjudge.db.migrate import current
from llmjudge.events.hub import EventHub
from llmjudge.personas.training import TrainingRunner
from llmjudge.providers.service import LLMService
from llmjudge.queue.pool import WorkerPool

__all__ = ["WorkerStartError", "run_worker_process"]

log = logging.getLogger(__name__)


class WorkerStartError(RuntimeError):
    """The worker cannot run against this database (unreachable, or not migrated: the web
    app or `llmjudge db upgrade` migrates it)."""


async def run_worker_process(
    settings: Settings,
    *,
    concurrency: int,
    stop: asyncio.Event | None = None,
    drain_timeout_s: float = 30.0,
) -> WorkerPool:
    """Run a pool until ``stop`` is set (default: until SIGINT or SIGTERM)."""
    engine = make_engine(
        settings.database_url or "",
        pool_size=settings.db_pool_size,
        pooled=settings.database_pooled,
    )
    # Persona locks are session-level: behind a transaction pooler they need a direct line.
    direct = (
        make_engine(settings.direct_database_url, pool_size=4)
        if settings.database_pooled
        else engine
    )
    try:
        try:
            rev, head = await current(engine)
        except (OSError, DBAPIError) as exc:
            raise WorkerStartError(f"cannot reach the database: {exc}") from None
        if rev != head:
            raise WorkerStartError(
                f"database revision is {rev or '(empty)'}, code needs {head}: "
                "run `llmjudge db upgrade` or start `llmjudge serve` first"
            )
        sessionmaker = make_sessionmaker(engine)
        llm = LLMService(sessionmaker, settings)
        hub = EventHub(settings.direct_database_url, listen=False)
        await hub.start()
        pool = WorkerPool(
            engine=engine,
            llm=llm,
            hub=hub,
            concurrency=concurrency,
            lease_s=settings.lease_seconds,
            drain_timeout_s=drain_timeout_s,
            claim_engine=direct,
        )
        await pool.start()
        # Personas are claimed with an advisory lock, so any number of processes can run one.
        runner = TrainingRunner(engine=direct, sessionmaker=sessionmaker, llm=llm, hub=hub)
        await runner.start()
        # Long-lived startup objects out of the collector's full passes (see app.py).
        gc.collect()
        gc.freeze()
        if stop is None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            log.info("stopping worker pool %s: draining %d calls", pool.prefix, pool.in_flight)
            await runner.stop()
            await pool.stop()
            await hub.stop()
            await llm.aclose()
        return pool
    finally:
        await engine.dispose()
        if direct is not engine:
            await direct.dispose()
