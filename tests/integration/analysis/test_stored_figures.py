"""A finished session's figures are computed once and stored in PostgreSQL: a new app on
the same database (a restart) serves every results tab from storage, computing nothing
and loading no comparison, in a bounded number of statements; a change to what a figure
came from (a new comparison, a reopened session, a renamed thread) is never served from
the stored copy; the background job stores a finished session's tabs by itself; and
migration 0020 goes up and down (issue 27, item 9)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from llmjudge.analysis import FigureStore
from llmjudge.analysis.cache import AnalysisCache
from llmjudge.analysis.schemas import AnalysisSession
from llmjudge.analysis.stored import StoredFigure
from llmjudge.app import create_app
from llmjudge.catalog.models import Thread
from llmjudge.infra.config import Settings
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.references.models import ReferenceLabel
from llmjudge.sessions.models import Comparison, JudgeSession
from llmjudge.sessions.pages.results import PREFETCHED, default_figures
from tests.conftest import ADMIN_TOKEN, make_client
from tests.integration.analysis.finished import finished_session, statements
from tests.integration.migrations import database_at, downgrade, migrate

IN_PROCESS_WORKERS = False  # the tests run the background job themselves
HX = {"HX-Request": "true"}
TABS = PREFETCHED  # every tab drawn from the figures


@asynccontextmanager
async def restarted(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """Another app on the same database: what a restarted web process is."""
    app = create_app(settings)
    async with app.router.lifespan_context(app), make_client(app, ADMIN_TOKEN) as client:
        yield app, client


async def tabs(app: FastAPI, client: httpx.AsyncClient, sid: int) -> dict[str, str]:
    """Each tab's HTML, every figure of it computed now (no prefetch in the background)."""
    cache = app.state.analysis_cache = AnalysisCache()
    cache.prefetch = lambda *args, **kwargs: False  # type: ignore[method-assign]
    shown = {}
    for tab in TABS:
        r = await client.get(f"/sessions/{sid}/partials/results/{tab}", headers=HX)
        assert r.status_code == 200 and 'id="tab-error"' not in r.text, (tab, r.text[:300])
        shown[tab] = r.text
    return shown


def computed(app: FastAPI) -> int:
    cache = app.state.analysis_cache
    assert isinstance(cache, AnalysisCache)
    return cache.computed


async def stored_rows(app: FastAPI, sid: int) -> int:
    async with app.state.sessionmaker() as db:
        q = select(func.count()).select_from(StoredFigure).where(StoredFigure.session_id == sid)
        return int(await db.scalar(q) or 0)


@pytest.fixture(scope="module")
async def sid(app: FastAPI, client: httpx.AsyncClient) -> int:
    return await finished_session(app, client, "sf", 18)


async def test_figures_are_served_from_storage_after_a_restart(
    app: FastAPI, client: httpx.AsyncClient, settings: Settings, sid: int
) -> None:
    first = await tabs(app, client, sid)
    assert computed(app) > 0 and await stored_rows(app, sid) >= len(TABS)
    async with restarted(settings) as (again, again_client):
        with statements(again) as seen:
            shown = await tabs(again, again_client, sid)
        assert computed(again) == 0, "a figure was computed again after the restart"
        assert shown == first  # the same figures, names and all
        # no comparison read (loads are counted in `computed`; the header's counts aside)
        assert not any("FROM comparisons" in s and "count(" not in s for s in seen), seen
        # per tab: the session (twice), its source stamp, and each figure's stored row
        assert len(seen) <= 5 * len(TABS), "\n".join(seen)
        assert sum("FROM stored_figures" in s for s in seen) <= len(TABS) + 2


async def test_a_new_comparison_is_never_served_from_the_stored_figure(
    app: FastAPI, client: httpx.AsyncClient, settings: Settings, sid: int
) -> None:
    url = f"/api/sessions/{sid}/pillar-matrix"
    before = (await client.get(url)).json()
    async with app.state.sessionmaker() as db:  # a late verdict of a finished session
        one = await db.scalar(
            select(Comparison.id).where(Comparison.session_id == sid).order_by(Comparison.id)
        )
        await db.execute(update(Comparison).where(Comparison.id == one).values(status="failed"))
        await db.execute(
            update(JudgeSession)
            .where(JudgeSession.id == sid)
            .values(completed=JudgeSession.completed - 1)
        )
        await db.commit()
    async with restarted(settings) as (again, again_client):
        after = (await again_client.get(url)).json()
        assert computed(again) > 0
    assert played(after) < played(before)
    assert after["session"]["completed"] == before["session"]["completed"] - 1


def played(matrix: dict[str, Any]) -> int:
    return sum(c["n"] for row in matrix["cells"] for c in row if c)


async def test_a_reopened_session_is_never_served_from_the_stored_figure(
    app: FastAPI, client: httpx.AsyncClient, sid: int
) -> None:
    """Reopened (retried), its failed comparison completes: the figure follows, though a
    stored copy of the finished session's exists."""
    url = f"/api/sessions/{sid}/pillar-matrix"
    app.state.analysis_cache = AnalysisCache()
    before = (await client.get(url)).json()
    async with app.state.sessionmaker() as db:
        s = await db.get(JudgeSession, sid)
        assert s is not None
        s.status, s.finished_at, s.completed = "running", None, s.completed + 1
        await db.execute(
            update(Comparison)
            .where(Comparison.session_id == sid, Comparison.status == "failed")
            .values(status="completed")
        )
        await db.commit()
    app.state.analysis_cache = AnalysisCache()
    after = (await client.get(url)).json()
    assert after["session"]["status"] == "running"
    assert played(after) > played(before) and computed(app) > 0
    async with app.state.sessionmaker() as db:
        s = await db.get(JudgeSession, sid)
        assert s is not None
        s.status, s.finished_at = "completed", func.now()
        await db.commit()
    again = (await client.get(url)).json()  # finished again: stored anew, the same figure
    assert again["session"]["status"] == "completed" and played(again) == played(after)


async def test_a_renamed_thread_is_never_served_from_the_stored_figure(
    app: FastAPI, client: httpx.AsyncClient, settings: Settings, sid: int
) -> None:
    url = f"/api/sessions/{sid}/thread-leaderboard"
    before = (await client.get(url)).json()
    top = before["entries"][0]["thread_id"]
    async with app.state.sessionmaker() as db:
        thread = await db.get(Thread, top)
        assert thread is not None
        thread.title = "renamed after the session finished"
        await db.commit()
    async with restarted(settings) as (_, again_client):
        after = (await again_client.get(url)).json()
    titles = {e["thread_id"]: e["thread_title"] for e in after["entries"]}
    assert titles[top] == "renamed after the session finished"


async def test_reference_labels_are_read_live_beside_stored_figures(
    app: FastAPI, client: httpx.AsyncClient, sid: int
) -> None:
    """No stored figure holds reference labels: the Agreement tab reads them each time."""
    url = f"/api/sessions/{sid}/agreement"
    before = (await client.get(url, params={"reference": "gold"})).json()
    async with app.state.sessionmaker() as db:
        a, b = (
            await db.execute(
                select(Comparison.thread_a_id, Comparison.thread_b_id).where(
                    Comparison.session_id == sid, Comparison.status == "completed"
                )
            )
        ).first()  # type: ignore[misc]
        db.add(
            ReferenceLabel(thread_a_id=min(a, b), thread_b_id=max(a, b), label="TIE", source="gold")
        )
        await db.commit()
    after = (await client.get(url, params={"reference": "gold"})).json()
    assert after["labelled_pairs"] == before["labelled_pairs"] + 1


async def test_the_background_job_stores_a_finished_sessions_tabs(
    app: FastAPI, client: httpx.AsyncClient, settings: Settings
) -> None:
    other = await finished_session(app, client, "sfjob", 12)
    job = FigureStore(sessionmaker=app.state.sessionmaker, figures=default_figures)
    assert other in await job.runnable()
    await job.run(other, asyncio.Event())
    assert job.stored == 1 and other not in await job.runnable()
    assert await stored_rows(app, other) > len(TABS)  # the figures and the marker
    async with restarted(settings) as (again, again_client):
        await tabs(again, again_client, other)
        assert computed(again) == 0, "the first visit computed a figure the job stored"


async def test_the_migration_goes_up_and_down(pg: EmbeddedPostgres) -> None:
    name = "analysis_migration_0020"
    async with database_at(pg, name, "0015") as url:
        exists = "SELECT to_regclass('stored_figures') IS NOT NULL"
        await migrate(url, "0020_stored_figures")
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            assert await conn.fetchval(exists)
            await conn.execute(
                "INSERT INTO judge_sessions (name, comparison_mode, pillar_ids)"
                " VALUES ('m', 'round_robin', '{}')"
            )
            await conn.execute(
                "INSERT INTO stored_figures (session_id, name, options_hash, source, completed,"
                " body, compute_s) SELECT id, 'matrix', 'h', 's', 0, 'x', 0 FROM judge_sessions"
            )
            await conn.execute("DELETE FROM judge_sessions")  # its figures go with it
            assert await conn.fetchval("SELECT count(*) FROM stored_figures") == 0
        finally:
            await conn.close()
        await downgrade(url, "0015")
        conn = await asyncpg.connect(pg.dsn(name))
        try:
            assert not await conn.fetchval(exists)
        finally:
            await conn.close()


async def test_the_indicator_says_what_it_computes(client: httpx.AsyncClient, sid: int) -> None:
    """Shown after 300 ms (test_finished_cache): what is being computed, and that a finished
    session's figures are computed once."""
    page = await client.get(f"/sessions/{sid}/results")
    n = (await client.get(f"/api/sessions/{sid}")).json()["completed"]
    assert f"Computing the figures of {n:,} comparisons (once: a finished" in page.text


async def test_a_session_deleted_while_its_figures_are_computed_stores_nothing(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    gone = await finished_session(app, client, "sfgone", 6)

    async def figures_then_delete(
        cache: AnalysisCache, sessionmaker: Any, session: AnalysisSession
    ) -> None:
        await default_figures(cache, sessionmaker, session)
        assert (await client.delete(f"/api/sessions/{session.id}")).status_code == 204

    job = FigureStore(sessionmaker=app.state.sessionmaker, figures=figures_then_delete)
    await job.run(gone, asyncio.Event())  # the marker's write finds no session: no error
    assert job.stored == 0 and await stored_rows(app, gone) == 0
    await job.run(gone, asyncio.Event())  # and a deleted session is skipped
