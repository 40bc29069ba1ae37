"""PostgreSQL storage behind the gateway: the response cache and batched call accounting.

Accounting rows are buffered in memory and written in batches (every ``flush_interval_s``,
0.2 s by default, or as soon as ``batch_size`` rows wait), so a model call never waits for an
INSERT. A database outage loses nothing: failed batches stay buffered (at most ``max_pending``
rows, then model calls wait for room) and are retried; a write is idempotent. The price: a
crash of the process (kill -9, power loss) loses the rows still buffered, at most the last
window's in normal running. Only accounting rows are at risk this way; comparison results and
every other domain row are written by their own services in their own transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import text, update
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
    "cached_input_tokens",
    "cache_write_tokens",
    "cache_saving_usd",
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
    """``Accounting`` into ``llm_calls``, written in batches by a background task.

    Nothing is dropped: a batch that fails to write stays buffered and is retried with a
    capped backoff; when ``max_pending`` rows wait, ``record()`` waits for room (back-pressure
    on model calls) instead of discarding. Each row takes its id from the table's sequence
    before its first write and keeps it, and rows are inserted with ON CONFLICT DO NOTHING, so
    a retry after a write whose commit succeeded but whose reply was lost stores nothing twice.
    """

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        flush_interval_s: float = 0.2,
        batch_size: int = 200,
        max_pending: int = 20_000,
        max_backoff_s: float = 5.0,
        close_timeout_s: float = 10.0,
    ) -> None:
        self._sessionmaker = sessionmaker
        self.flush_interval_s = flush_interval_s
        self.batch_size = batch_size
        self.max_pending = max_pending
        self.max_backoff_s = max_backoff_s
        self.close_timeout_s = close_timeout_s
        self._pending: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._closed = False
        self.failed_writes = 0  # batches that failed and were kept for a retry
        self.unwritten = 0  # rows still buffered when aclose() gave up

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def record(self, rec: CallRecord) -> None:
        while len(self._pending) >= self.max_pending and not self._closed:
            # The database has been unreachable for a long while: slow model calls down
            # rather than lose their accounting or grow without bound.
            self._room.clear()
            self._ensure_task()
            self._wake.set()
            await self._room.wait()
        self._pending.append(call_row(rec))
        if self._closed:
            await self.flush()
            return
        self._ensure_task()
        if len(self._pending) >= self.batch_size:
            self._wake.set()

    def _ensure_task(self) -> None:
        if not self._closed and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._run(), name="llm-accounting-flush")

    async def _run(self) -> None:
        backoff = self.flush_interval_s
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), backoff)
            self._wake.clear()
            if await self.flush():
                backoff = self.flush_interval_s
            else:
                backoff = min(max(backoff, 0.1) * 2, self.max_backoff_s)

    async def flush(self) -> bool:
        """Write every buffered row now (tests and totals call this for exact numbers).
        Returns False, keeping the rows not yet written, when a write fails."""
        async with self._write_lock:
            while self._pending:
                batch = self._pending[: self.batch_size]
                try:
                    await self._write(batch)
                except Exception as e:
                    self.failed_writes += 1
                    log.warning(
                        "writing %d accounting rows failed (%s: %s); %d rows kept for a retry",
                        len(batch),
                        type(e).__name__,
                        e,
                        len(self._pending),
                    )
                    return False
                # Only flush() removes rows and record() only appends, so the batch is
                # still the head of the buffer.
                del self._pending[: len(batch)]
                if len(self._pending) < self.max_pending:
                    self._room.set()
            return True

    async def _write(self, batch: list[dict[str, Any]]) -> None:
        async with self._sessionmaker() as db:
            missing = [row for row in batch if "id" not in row]
            if missing:
                # Ids are taken once, outside the insert's fate (nextval is never rolled
                # back), so every retry of this row carries the same key.
                ids = (
                    await db.scalars(
                        text(
                            "SELECT nextval(pg_get_serial_sequence('llm_calls', 'id')) "
                            "FROM generate_series(1, :n)"
                        ),
                        {"n": len(missing)},
                    )
                ).all()
                for row, id_ in zip(missing, ids, strict=True):
                    row["id"] = id_
            # A Core insert of the table: the ORM's bulk path adds per-row work (it showed
            # in serve's profile at one row per judge call).
            await db.execute(
                pg_insert(LLMCall.__table__).on_conflict_do_nothing(index_elements=["id"]), batch
            )
            await db.commit()

    async def aclose(self) -> None:
        self._closed = True
        self._room.set()  # callers waiting for room write their own rows from now on
        if self._task is not None:
            self._wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        deadline = asyncio.get_running_loop().time() + self.close_timeout_s
        backoff = 0.1
        while not await self.flush():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                self.unwritten = len(self._pending)
                log.error(
                    "accounting: %d rows could not be written within %.0f s of shutdown; "
                    "they are lost",
                    self.unwritten,
                    self.close_timeout_s,
                )
                return
            await asyncio.sleep(min(backoff, left))
            backoff = min(backoff * 2, 2.0)
