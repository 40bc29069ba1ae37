"""Storing a finished session's figures in the background, once, when it finishes (and for
sessions finished before stored figures existed): a ``LockedJob`` on the advisory-locked
runner (``infra.queue.locks``), so one process computes each session while any number run.

What is computed is given by the composition root (the results page's tabs with their
default options: the figures a first visit asks for), so the keys match what pages read.
A session is done once its ``done`` marker row is stored for its completed count and
finish time; a figure whose catalog changed since is computed again on demand.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.analysis.cache import FINISHED, AnalysisCache
from llmjudge.analysis.loading import get_analysis_session
from llmjudge.analysis.schemas import AnalysisSession
from llmjudge.analysis.stored import StoredFigure
from llmjudge.infra.errors import NotFound

__all__ = ["DONE", "FigureStore", "SessionFigures"]

log = logging.getLogger(__name__)

# Computes (and so stores) the figures of a session through the given cache.
SessionFigures = Callable[
    [AnalysisCache, async_sessionmaker[AsyncSession], AnalysisSession], Awaitable[None]
]
DONE = "done"  # the marker row: this session's default figures were computed
LOCK_CLASS = 0x4C4A_4631  # "LJF1": advisory locks of this job

# Finished sessions without the marker for their present state, newest first; one at a
# time per process (a bootstrap at 1M comparisons takes a core for half a minute).
_WAITING = text(
    """
    SELECT s.id FROM judge_sessions s
    WHERE s.status = ANY(:finished) AND s.completed > 0
      AND NOT EXISTS (
        SELECT 1 FROM stored_figures f
        WHERE f.session_id = s.id AND f.name = :done AND f.completed = s.completed
          AND f.finished_at IS NOT DISTINCT FROM s.finished_at)
    ORDER BY s.finished_at DESC NULLS LAST, s.id DESC LIMIT 1
    """
)


class FigureStore:
    """The ``LockedJob`` storing finished sessions' figures."""

    name = "stored-figures"
    lock_class = LOCK_CLASS

    def __init__(
        self, *, sessionmaker: async_sessionmaker[AsyncSession], figures: SessionFigures
    ) -> None:
        self.sessionmaker = sessionmaker
        self.figures = figures
        self.stored = 0  # sessions done by this process (tests read it)

    async def runnable(self) -> Sequence[int]:
        async with self.sessionmaker() as db:
            found = await db.scalars(_WAITING, {"finished": sorted(FINISHED), "done": DONE})
            return list(found.all())

    async def run(self, key: int, stop: asyncio.Event) -> None:
        async with self.sessionmaker() as db:
            try:
                session = await get_analysis_session(db=db, session_id=key)
            except NotFound:
                return
            finished = await db.scalar(
                text("SELECT finished_at FROM judge_sessions WHERE id = :id"), {"id": key}
            )
        if session.status not in FINISHED:
            return
        cache = AnalysisCache(max_sessions=1)  # its own: the web's stays as it is
        await self.figures(cache, self.sessionmaker, session)
        async with self.sessionmaker() as db:
            row = await db.get(StoredFigure, (key, DONE, ""))
            if row is None:
                row = StoredFigure(session_id=key, name=DONE, options_hash="", body=b"")
                db.add(row)
            row.source, row.completed, row.finished_at = "", session.completed, finished
            row.compute_s = 0.0
            try:
                await db.commit()
            except IntegrityError:  # the session was deleted meanwhile
                return
        self.stored += 1
        log.info("stored the figures of session %d (%d comparisons)", key, session.completed)
