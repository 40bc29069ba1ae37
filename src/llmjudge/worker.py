"""Composition root of the workers: which kinds of work a process runs, and the worker
process without the web app (``llmjudge worker``).

Kinds registered: judge comparisons (a ``WorkerPool`` of ``sessions.jobs``),
persona training (``personas.training.TrainingRunner`` on the advisory-locked runner) and
the rounds of adaptive sessions (``sessions.rounds.AdaptiveRounds``, advisory-locked too),
the provider batch jobs of batch sessions (``sessions.run.batches``, advisory-locked),
finished sessions' stored figures (``analysis.FigureStore``, advisory-locked),
plus the provider rate shares (``providers.shares``) and the call-history retention job. The
worker process runs every kind against the database until SIGINT/SIGTERM, then stops
gracefully (drain, give back unfinished items).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from llmjudge.analysis import FigureStore
from llmjudge.infra.config import Settings
from llmjudge.infra.db.engine import make_sessionmaker, process_engines
from llmjudge.infra.db.migrate import current
from llmjudge.infra.events.hub import EventHub
from llmjudge.infra.queue.locks import LockedRunner
from llmjudge.infra.queue.pool import DEFAULT_CONCURRENCY, WorkerPool
from llmjudge.infra.queue.registry import Workers
from llmjudge.personas.training import TrainingRunner
from llmjudge.providers.llm import LLMService
from llmjudge.providers.retention import RetentionJob
from llmjudge.providers.shares import RateShares
from llmjudge.sessions.adaptive.rounds import AdaptiveRounds
from llmjudge.sessions.pages.results import default_figures
from llmjudge.sessions.run.batches import BatchRunner
from llmjudge.sessions.run.jobs import comparison_pool

__all__ = [
    "ADAPTIVE",
    "BATCHES",
    "COMPARISONS",
    "FIGURES",
    "PERSONAS",
    "RATE_SHARES",
    "RETENTION",
    "WorkerStartError",
    "build_workers",
    "run_worker_process",
]

log = logging.getLogger(__name__)

COMPARISONS = "comparisons"
PERSONAS = "personas"
RETENTION = "retention"
RATE_SHARES = "rate_shares"
ADAPTIVE = "adaptive-rounds"
BATCHES = "batches"
FIGURES = "stored-figures"


class WorkerStartError(RuntimeError):
    """The worker cannot run against this database (unreachable, or not migrated: the web
    app or `llmjudge db upgrade` migrates it)."""


# Young objects collected every this many allocations (CPython's default: 2,000). A judge
# call allocates thousands that live through its ~200 ms wait: with the default they were
# promoted and scanned again and again. Same-run A/B of bench/throughput.py at 256 workers,
# CPU per comparison: default 1.22 ms against 0.90 ms at 50,000; 20,000 1.09 ms against
# 1.00 ms at 100,000. The cost: cyclic garbage waits longer (a few megabytes).
YOUNG_COLLECTION_EVERY = 100_000


def settle_heap() -> None:
    """Once a process has started: its startup objects live as long as it does, so they
    leave the collector's passes (which otherwise stall every request and worker 0.1-0.3 s
    at a time), and young objects are collected less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)


def build_workers(
    *,
    engine: AsyncEngine,
    sessionmaker: async_sessionmaker[AsyncSession],
    llm: LLMService,
    hub: EventHub,
    settings: Settings,
    concurrency: int = DEFAULT_CONCURRENCY,
    drain_timeout_s: float = 30.0,
    direct_engine: AsyncEngine | None = None,
) -> Workers:
    """Every kind of work, registered (not started). ``direct_engine`` (unpooled, behind a
    transaction pooler) carries the long-lived connections: the claim connection and the
    persona loops' session-level advisory locks."""
    direct = direct_engine or engine
    workers = Workers()
    # First: provider rate limits are split among the live processes before any call.
    workers.register(RATE_SHARES, RateShares(engine, llm.gateway.set_rate_share))
    workers.register(
        COMPARISONS,
        comparison_pool(
            engine=engine,
            llm=llm,
            hub=hub,
            concurrency=concurrency,
            lease_s=settings.lease_seconds,
            breaker_errors=settings.breaker_errors,
            drain_timeout_s=drain_timeout_s,
            claim_engine=direct,
        ),
    )
    # Personas are claimed with an advisory lock, so any number of processes can run one;
    # a start resumes personas left in status "training" by a previous run.
    workers.register(
        PERSONAS,
        TrainingRunner(
            engine=direct,
            sessionmaker=sessionmaker,
            llm=llm,
            hub=hub,
            batch_poll_s=settings.batch_poll_seconds,
            batch_poll_max_s=settings.batch_poll_max_seconds,
        ),
    )
    # Old call history and cache entries, hourly (an advisory lock: one process at a time).
    workers.register(RETENTION, RetentionJob(engine, days=settings.retention_days))
    # Adaptive sessions' rounds: one loop per running session, in the process holding its
    # advisory lock; registered after the pool so it stops first.
    workers.register(
        ADAPTIVE,
        LockedRunner(
            engine=engine, job=AdaptiveRounds(sessionmaker=sessionmaker, hub=hub), poll_s=1.0
        ),
    )
    # Batch sessions: one loop per session, polling its provider batch jobs.
    workers.register(
        BATCHES,
        LockedRunner(
            engine=engine,
            job=BatchRunner(
                engine=engine,
                llm=llm,
                hub=hub,
                poll_s=settings.batch_poll_seconds,
                poll_max_s=settings.batch_poll_max_seconds,
            ),
            poll_s=2.0,
        ),
    )
    # A finished session's results figures, computed once and stored (one session at a
    # time per process, each in the process holding its advisory lock).
    workers.register(
        FIGURES,
        LockedRunner(
            engine=direct,
            job=FigureStore(sessionmaker=sessionmaker, figures=default_figures),
            poll_s=5.0,
        ),
    )
    return workers


async def run_worker_process(
    settings: Settings,
    *,
    concurrency: int,
    stop: asyncio.Event | None = None,
    drain_timeout_s: float = 30.0,
) -> WorkerPool:
    """Run every kind of work until ``stop`` is set (default: until SIGINT or SIGTERM);
    returns the comparison pool (for its counters)."""
    async with process_engines(settings) as (engine, direct):
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
        workers = build_workers(
            engine=engine,
            sessionmaker=sessionmaker,
            llm=llm,
            hub=hub,
            settings=settings,
            concurrency=concurrency,
            drain_timeout_s=drain_timeout_s,
            direct_engine=direct,
        )
        pool = workers.get(COMPARISONS)
        assert isinstance(pool, WorkerPool)
        await workers.start()
        settle_heap()
        if stop is None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            log.info("stopping worker pool %s: draining %d calls", pool.prefix, pool.in_flight)
            await workers.stop()
            await hub.stop()
            await llm.aclose()
        return pool
