"""PostgreSQL storage behind the gateway: the response cache and batched call accounting.

Accounting rows are buffered in memory and written in batches (every ``flush_interval_s``,
0.2 s by default, or as soon as ``batch_size`` rows wait), so a model call never waits for an
INSERT. The price: a crash (kill -9, power loss) loses at most the rows of the last window,
and a database outage loses the batches that fail to write (logged). Only accounting rows are
at risk this way; comparison results and every other domain row are written by their own
services in their own transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.providers.base import ChatResult
from llmjudge.providers.gateway import CallRecord
from llmjudge.providers.models import LLMCacheEntry, LLMCall

log = logging.getLogger(__name__)

_RESULT_FIELDS = frozenset(f.name for f in dataclasses.fields(ChatResult))
# related[...] entries that get their own indexed/typed column.
_RELATED_COLUMNS = ("session_id", "persona_id", "comparison_id", "model_id")


def result_to_json(result: ChatResult) -> dict[str, Any]:
    data = dataclasses.asdict(result)
    data.pop("cached", None)
    return data


def result_from_json(data: Mapping[str, Any]) -> ChatResult:
    """Tolerates fields added or removed since the entry was written."""
    return ChatResult(**{k: v for k, v in data.items() if k in _RESULT_FIELDS and k != "cached"})


class PgCache:
    """``ResponseCache`` in the ``llm_cache`` table, shared by every process."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker

    async def get(self, key: str) -> ChatResult | None:
        async with self._sessionmaker() as db:
            data = await db.scalar(
                update(LLMCacheEntry)
                .where(LLMCacheEntry.key == key)
                .values(hits=LLMCacheEntry.hits + 1)
                .returning(LLMCacheEntry.result)
            )
            await db.commit()
        return None if data is None else result_from_json(data)

    async def put(self, key: str, result: ChatResult) -> None:
        async with self._sessionmaker() as db:
            await db.execute(
                pg_insert(LLMCacheEntry)
                .values(key=key, result=result_to_json(result))
                .on_conflict_do_nothing(index_elements=["key"])
            )
            await db.commit()


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


# CallRecord fields stored as they are in their ``llm_calls`` columns.
_RECORD_COLUMNS = (
    "provider_id",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_s",
    "attempts",
    "cache_hit",
    "status",
    "error",
)


def call_row(rec: CallRecord) -> dict[str, Any]:
    """The ``llm_calls`` row of a record; known related ids get their own columns."""
    related = {k: v for k, v in rec.related.items()}
    row: dict[str, Any] = {k: _int_or_none(related.get(k)) for k in _RELATED_COLUMNS}
    row.update(
        {k: getattr(rec, k) for k in _RECORD_COLUMNS},
        purpose=rec.purpose[:100],
        model=rec.model[:300],
        related=related,
    )
    return row


class PgAccounting:
    """``Accounting`` into ``llm_calls``, written in batches by a background task."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        flush_interval_s: float = 0.2,
        batch_size: int = 200,
        max_pending: int = 100_000,
    ) -> None:
        self._sessionmaker = sessionmaker
        self.flush_interval_s = flush_interval_s
        self.batch_size = batch_size
        self.max_pending = max_pending
        self._pending: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._closed = False
        self.dropped = 0

    async def record(self, rec: CallRecord) -> None:
        if len(self._pending) >= self.max_pending:
            # The database has been unreachable for a long while; keep memory bounded.
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("accounting buffer full: %d call records dropped", self.dropped)
            return
        self._pending.append(call_row(rec))
        if self._closed:
            await self.flush()
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="llm-accounting-flush")
        if len(self._pending) >= self.batch_size:
            self._wake.set()

    async def _run(self) -> None:
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_interval_s)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write every buffered row now (tests and totals call this for exact numbers)."""
        async with self._write_lock:
            while self._pending:
                batch, self._pending = (
                    self._pending[: self.batch_size],
                    self._pending[self.batch_size :],
                )
                try:
                    async with self._sessionmaker() as db:
                        await db.execute(insert(LLMCall), batch)
                        await db.commit()
                except Exception:
                    log.exception("writing %d accounting rows failed; they are lost", len(batch))

    async def aclose(self) -> None:
        self._closed = True
        if self._task is not None:
            self._wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
