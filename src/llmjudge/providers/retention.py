"""Retention of the model-call history: ``llm_calls`` and ``llm_cache`` rows older than
``LLMJUDGE_RETENTION_DAYS`` are deleted, in small batches, by a periodic job every worker
process runs (``RetentionJob``) and by ``llmjudge db cleanup``.

A persona's spend (and its training budget) is the sum of its calls, so the calls of a
persona that still exists are kept; sessions keep their own cost counters and lose nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.infra.queue.periodic import Periodic

__all__ = ["DEFAULT_INTERVAL_S", "Cleaned", "RetentionJob", "cleanup"]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 3600.0
BATCH = 5000  # rows per statement: short transactions, no long lock on a busy table
# Two processes cleaning at once would only race over the same rows: one at a time.
_LOCK_KEY = 0x6C6C6D_7265_74  # "llm" "ret"

_DELETE_CALLS = text(
    "DELETE FROM llm_calls WHERE id IN ("
    " SELECT c.id FROM llm_calls c WHERE c.created_at < :cutoff"
    " AND (c.persona_id IS NULL"
    "      OR NOT EXISTS (SELECT 1 FROM personas p WHERE p.id = c.persona_id))"
    " LIMIT :batch)"
)
_DELETE_CACHE = text(
    "DELETE FROM llm_cache WHERE key IN ("
    " SELECT key FROM llm_cache WHERE created_at < :cutoff LIMIT :batch)"
)


@dataclass(frozen=True, slots=True)
class Cleaned:
    calls: int
    cache: int
    skipped: bool = False  # another process held the cleanup lock


async def cleanup(
    engine: AsyncEngine, *, days: int, now: datetime | None = None, batch: int = BATCH
) -> Cleaned:
    """Delete the rows older than ``days`` (0: keep everything); how many of each."""
    if days <= 0:
        return Cleaned(0, 0)
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    counts = {"calls": 0, "cache": 0}
    async with engine.connect() as lock_conn:
        got = await lock_conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": _LOCK_KEY})
        await lock_conn.commit()
        if not got:
            return Cleaned(0, 0, skipped=True)
        try:
            for name, stmt in (("calls", _DELETE_CALLS), ("cache", _DELETE_CACHE)):
                while True:
                    async with engine.begin() as conn:
                        res = await conn.execute(stmt, {"cutoff": cutoff, "batch": batch})
                    counts[name] += res.rowcount  # type: ignore[attr-defined]
                    if res.rowcount < batch:  # type: ignore[attr-defined]
                        break
        finally:
            await lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_KEY})
            await lock_conn.commit()
    return Cleaned(counts["calls"], counts["cache"])


class RetentionJob:
    """A runner (``queue.registry.Runner``) that cleans every ``interval_s``, first soon
    after start; a failed cleanup (the database away) is tried again from a minute on."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        days: int,
        interval_s: float = DEFAULT_INTERVAL_S,
        first_delay_s: float = 60.0,
    ) -> None:
        self.engine = engine
        self.days = days
        self.runs = 0
        self._loop = Periodic(
            "llm-retention",
            self._clean,
            interval_s=interval_s,
            first_s=first_delay_s,
            retry_s=min(60.0, interval_s),
            stop_timeout_s=1.0,
        )

    async def start(self) -> None:
        if self.days > 0:
            await self._loop.start()

    def wake(self) -> None:
        self._loop.wake()

    async def stop(self) -> None:
        # A cancelled batch rolls back: the next cleanup deletes it.
        await self._loop.stop()

    async def _clean(self) -> None:
        done = await cleanup(self.engine, days=self.days)
        self.runs += 1
        if done.calls or done.cache:
            log.info(
                "retention: deleted %d calls and %d cache entries older than %d days",
                done.calls,
                done.cache,
                self.days,
            )
