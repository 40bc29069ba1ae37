"""Stored figures: a finished session's figures, computed once and kept in PostgreSQL, so
a results tab at a million comparisons is a read (issue 27, item 9), after a restart too.

Analysis only reads the product's data; this table is a cache of what analysis computed
(nothing else reads it, dropping it loses nothing), so writing it here keeps that rule.

A stored figure is served only while what it was computed from is unchanged: its
``source`` stamp hashes the session's status, completed count, finish time and options,
the catalog of its pillars (thread count, largest id, latest update: titles, metadata and
style features; pillar names) and this code's figure format. A session reopened, given
new comparisons or whose threads changed gets a new stamp, so the old row is never
served; it is replaced when the figure is next computed. Reference labels are not in any
stored figure (the Agreement tab reads them live, 0.3 s at 1M comparisons).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import zlib
from collections.abc import Awaitable, Callable, Hashable
from datetime import datetime
from typing import TypeVar

from pydantic import BaseModel
from sqlalchemy import DateTime, Float, Integer, LargeBinary, String, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Mapped, mapped_column

import llmjudge
from llmjudge.analysis.cache import FINISHED, AnalysisCache
from llmjudge.analysis.schemas import AnalysisSession
from llmjudge.infra.db.base import Base, created_at_column, owned_by

__all__ = ["FORMAT", "StoredFigure", "source_stamp", "stored_figure"]

M = TypeVar("M", bound=BaseModel)

# Bumped when a stored figure's meaning changes without a release (its JSON, its maths).
FORMAT = 1

# One statement: what every figure of a finished session is computed from.
_SOURCE = text(
    """
    SELECT s.status, s.completed, s.finished_at, md5(s.options::text),
           (SELECT count(*) || ':' || coalesce(max(t.id), 0) || ':'
                   || coalesce(max(t.updated_at)::text, '')
            FROM threads t WHERE t.pillar_id = ANY(s.pillar_ids)),
           (SELECT md5(coalesce(string_agg(p.id || '=' || p.name, ',' ORDER BY p.id), ''))
            FROM pillars p WHERE p.id = ANY(s.pillar_ids))
    FROM judge_sessions s WHERE s.id = :id
    """
)


class StoredFigure(Base):
    """One figure's response (zlib-compressed JSON) and the source it was computed from."""

    __tablename__ = "stored_figures"

    session_id: Mapped[int] = owned_by("judge_sessions", primary_key=True)
    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    options_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    source: Mapped[str] = mapped_column(String(64))  # source_stamp() when computed
    # the session's state it was computed for (the background job's scan reads these)
    completed: Mapped[int] = mapped_column(Integer)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    compute_s: Mapped[float] = mapped_column(Float)  # how long the figure took to compute
    created_at: Mapped[datetime] = created_at_column()


async def source_stamp(
    db: AsyncSession, session_id: int
) -> tuple[str, str, int, datetime | None] | None:
    """(stamp, status, completed, finished_at) of the session as stored now; None if gone."""
    row = (await db.execute(_SOURCE, {"id": session_id})).first()
    if row is None:
        return None
    stamp = "|".join(map(str, (FORMAT, llmjudge.__version__, *row)))
    return hashlib.sha256(stamp.encode()).hexdigest(), row[0], row[1], row[2]


def options_hash(params: Hashable) -> str:
    """The figure's parameters (aggregation, rating options, ...) as a key: their repr."""
    return hashlib.sha256(repr(params).encode()).hexdigest()


async def stored_figure(
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    name: str,
    params: Hashable,
    model: type[M],
    build: Callable[[], Awaitable[M]],
) -> M:
    """``build()``'s response for a running session; for a finished one, the stored
    response when its source is unchanged, else ``build()``'s, stored. The session's
    fresh row goes on each time."""
    if session.status not in FINISHED:
        return await build()
    found = await cache.stamp(session, lambda: _stamp(sessionmaker, session.id))
    if found is None or found[1] not in FINISHED:  # reopened since it was read
        return await build()
    stamp, _, completed, finished_at = found
    key = options_hash(params)

    async def read_or_build() -> M:
        async with sessionmaker() as db:
            body = await db.scalar(
                text(
                    "SELECT body FROM stored_figures WHERE session_id = :s AND name = :n"
                    " AND options_hash = :h AND source = :src"
                ),
                {"s": session.id, "n": name, "h": key, "src": stamp},
            )
        if body is not None:
            return await asyncio.to_thread(_decode, model, body)
        started = time.perf_counter()
        out = await build()
        took = time.perf_counter() - started
        packed = await asyncio.to_thread(_encode, out)
        async with sessionmaker() as db:
            values = {
                "session_id": session.id,
                "name": name,
                "options_hash": key,
                "source": stamp,
                "completed": completed,
                "finished_at": finished_at,
                "body": packed,
                "compute_s": took,
            }
            stmt = insert(StoredFigure).values(values)
            excluded = {k: stmt.excluded[k] for k in ("source", "completed", "finished_at")}
            excluded |= {k: stmt.excluded[k] for k in ("body", "compute_s")}
            try:
                await db.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["session_id", "name", "options_hash"], set_=excluded
                    )
                )
                await db.commit()
            except IntegrityError:  # the session was deleted meanwhile: nothing to keep
                await db.rollback()
        return out

    out = await cache.stored((name, key, session.id, stamp), read_or_build)
    return out.model_copy(update={"session": session})


async def _stamp(
    sessionmaker: async_sessionmaker[AsyncSession], session_id: int
) -> tuple[str, str, int, datetime | None] | None:
    async with sessionmaker() as db:
        return await source_stamp(db, session_id)


def _encode(out: BaseModel) -> bytes:
    return zlib.compress(out.model_dump_json().encode(), 6)


def _decode(model: type[M], body: bytes) -> M:
    return model.model_validate_json(zlib.decompress(body))
