"""The figures' cache: loaded sessions and computed figures, keyed by the session's
completed count (nothing changes between two completions, and pages poll while a session
runs). CPU work runs in `asyncio.to_thread`, so the event loop never waits on a bootstrap.

A finished session cannot change: its cached figures are served without loading its
comparisons again (only two loaded sessions are kept, and a load is the slow part of a
cached tab at a million comparisons). A figure keeps a light copy of its session's data
(thread names, pillars; no comparisons) for the labels its callers read."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from llmjudge.analysis.loading import SessionData, load_session_data
from llmjudge.analysis.schemas import AnalysisSession

__all__ = ["FINISHED", "AnalysisCache", "cached_figure", "get_cache", "session_data"]

T = TypeVar("T")

# Set inside a prefetch: what it starts counts as computed ahead, not for a request.
_AHEAD: ContextVar[bool] = ContextVar("analysis_ahead", default=False)
# A session in one of these states gets no more completed comparisons.
FINISHED = frozenset({"completed", "failed", "cancelled"})


class AnalysisCache:
    """Small LRU caches of loaded sessions and computed figures, keyed by (what, version)
    where the version is the session's completed count. Entries are tasks, so concurrent
    requests share one computation, and while one version of a figure is being computed a
    request for a newer version shares it too (a result at most one computation behind):
    polls of a running session never pile up work."""

    def __init__(
        self, *, max_figures: int = 64, max_sessions: int = 2, max_computing: int = 2
    ) -> None:
        # At most this many figure computations run at once (threads share one GIL and the
        # cores with the workers); more requests for distinct figures wait their turn
        # instead of each starting a bootstrap (issue 14).
        self.computing = asyncio.Semaphore(max_computing)
        self._figures: OrderedDict[Hashable, asyncio.Task[Any]] = OrderedDict()
        self._sessions: OrderedDict[Hashable, asyncio.Task[Any]] = OrderedDict()
        # stored figures (analysis.stored) read or computed here, by source stamp
        self._stored: OrderedDict[Hashable, asyncio.Task[Any]] = OrderedDict()
        # id(session row) -> (that row, its source stamp read): one read per request
        self._stamps: OrderedDict[int, tuple[Any, asyncio.Task[Any]]] = OrderedDict()
        self._running: dict[Hashable, asyncio.Task[Any]] = {}
        self._max_figures, self._max_sessions = max_figures, max_sessions
        self.computed = 0  # figures and loads started for a request (tests read it)
        self.computed_ahead = 0  # those started by a prefetch instead
        # Background work (a finished session's other tabs) and what was already asked for.
        self.background: dict[asyncio.Task[Any], None] = {}
        self._prefetched: OrderedDict[Hashable, None] = OrderedDict()
        # id(figure) -> (figure, its response): held with the figure, so an id is never
        # reused while its entry lives
        self._converted: OrderedDict[tuple[int, Hashable], tuple[Any, Any]] = OrderedDict()

    def converted(self, figure: Any, variant: Hashable, make: Callable[[], T]) -> T:
        """The response model built from a cached `figure` (and `variant`, what else it
        depends on), built once: at 10,000 threads converting a leaderboard took most of
        a warm page (issue 27)."""
        key = (id(figure), variant)
        entry = self._converted.get(key)
        if entry is not None and entry[0] is figure:
            self._converted.move_to_end(key)
            result: T = entry[1]
            return result
        made = make()
        self._converted[key] = (figure, made)
        while len(self._converted) > self._max_figures:
            self._converted.popitem(last=False)
        return made

    async def _get(
        self,
        store: OrderedDict[Hashable, asyncio.Task[Any]],
        limit: int,
        key: Hashable,
        version: int,
        make: Callable[[], Awaitable[T]],
        counted: bool = True,
    ) -> T:
        entry, running = (key, version), (id(store), key)
        task = store.get(entry)
        if task is not None:
            store.move_to_end(entry)
        elif (busy := self._running.get(running)) is not None:
            task = busy
        else:
            if counted and _AHEAD.get():
                self.computed_ahead += 1
            elif counted:
                self.computed += 1
            task = asyncio.ensure_future(make())
            store[entry] = self._running[running] = task
            while len(store) > limit:
                store.popitem(last=False)

            def finished(done: asyncio.Task[Any]) -> None:
                if self._running.get(running) is done:
                    del self._running[running]
                # a failed computation is not cached: the next request tries again
                failed = done.cancelled() or done.exception() is not None
                if failed and store.get(entry) is done:
                    del store[entry]

            task.add_done_callback(finished)
        # A waiter that goes away (client disconnect) must not cancel the shared work.
        return await asyncio.shield(task)

    def prefetch(self, key: Hashable, work: Callable[[], Iterable[Awaitable[Any]]]) -> bool:
        """Start ``work`` in the background once per ``key`` (False: already started). Its
        failures are dropped: whoever asks for that figure later gets it computed again."""
        if key in self._prefetched:
            return False
        self._prefetched[key] = None
        while len(self._prefetched) > self._max_figures:
            self._prefetched.popitem(last=False)

        async def run() -> None:
            _AHEAD.set(True)  # this task's own context: the requests' stay as they are
            for step in work():
                try:
                    await step
                except Exception:  # noqa: BLE001  # refused or failed: the tab will say why
                    pass

        task = asyncio.ensure_future(run())
        self.background[task] = None  # held until done: the loop keeps only weak references
        task.add_done_callback(lambda done: self.background.pop(done, None))
        return True

    def finished_figure(self, key: Hashable, version: int) -> asyncio.Task[Any] | None:
        """The cached figure of exactly this version, or None; its task may still run."""
        task = self._figures.get((key, version))
        if task is not None:
            self._figures.move_to_end((key, version))
        return task

    async def figure(self, key: Hashable, version: int, make: Callable[[], Awaitable[T]]) -> T:
        return await self._get(self._figures, self._max_figures, key, version, make)

    async def stored(self, key: Hashable, make: Callable[[], Awaitable[T]]) -> T:
        """A stored figure, read from the database (or computed and stored) once per
        ``key``, which names its source stamp; not counted as computed: what it builds is."""
        return await self._get(self._stored, self._max_figures, key, 0, make, counted=False)

    async def stamp(self, session: Any, read: Callable[[], Awaitable[T]]) -> T:
        """``read()`` once per session row object (a request's figures share its row, read
        fresh per request), so a tab of several figures reads its source stamp once."""
        entry = self._stamps.get(id(session))
        if entry is None or entry[0] is not session:
            entry = (session, asyncio.ensure_future(read()))
            self._stamps[id(session)] = entry
            while len(self._stamps) > self._max_figures:
                self._stamps.popitem(last=False)
        try:
            result: T = await asyncio.shield(entry[1])
        except Exception:
            self._stamps.pop(id(session), None)  # a failed read is tried again
            raise
        return result

    async def session(self, key: Hashable, version: int, make: Callable[[], Awaitable[T]]) -> T:
        return await self._get(self._sessions, self._max_sessions, key, version, make)


async def session_data(
    cache: AnalysisCache, sessionmaker: async_sessionmaker[AsyncSession], session: AnalysisSession
) -> SessionData:
    async def load() -> SessionData:
        # its own database session: a shared load must outlive the request that began it
        async with sessionmaker() as db:
            return await load_session_data(db=db, session=session)

    return await cache.session(session.id, session.completed, load)


def _names_only(data: SessionData) -> SessionData:
    """The session's data without its comparisons, style features or metadata: what a
    cached figure's callers read (thread and pillar names), not what pins memory."""
    return replace(data, table=data.table.take(np.arange(0)), style_features={}, thread_meta={})


async def cached_figure(
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    key: tuple[Hashable, ...],
    compute: Callable[[SessionData], T],
) -> tuple[SessionData, T]:
    """(the session's names, the figure). The SessionData returned holds no comparisons."""
    figure_key = (*key, session.id)
    if session.status in FINISHED:
        hit = cache.finished_figure(figure_key, session.completed)
        if hit is not None:
            result: tuple[SessionData, T] = await asyncio.shield(hit)
            return result
    data = await session_data(cache, sessionmaker, session)

    async def run() -> tuple[SessionData, T]:
        async with cache.computing:
            return _names_only(data), await asyncio.to_thread(compute, data)

    # versioned by the data actually used, never by a newer count it may lag behind
    return await cache.figure(figure_key, data.version, run)


def get_cache(request: Request) -> AnalysisCache:
    """One cache per application (tests run several apps against different databases)."""
    cache = getattr(request.app.state, "analysis_cache", None)
    if cache is None:
        cache = request.app.state.analysis_cache = AnalysisCache()
    return cache
