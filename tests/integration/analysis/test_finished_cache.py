"""A finished session's results tabs come from the cache: a second load computes nothing and
loads none of its comparisons again, even after other sessions' loads pushed its data out;
the tabs show a loading indicator only once a load has taken 300 ms (issue 27, item 9)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from llmjudge.analysis.cache import AnalysisCache
from llmjudge.sessions.models import JudgeSession
from tests.integration.analysis.finished import finished_session

HX = {"HX-Request": "true"}
IN_PROCESS_WORKERS = False  # the test writes the verdicts itself
SESSIONS = 3  # one more than the loaded sessions the cache keeps
TABS = ("overview", "leaderboard", "performance", "position", "findings", "style", "categories")


@pytest.fixture(scope="module")
async def finished(app: Any, client: httpx.AsyncClient) -> list[int]:
    return [await finished_session(app, client, f"cache{n}x", 12) for n in range(SESSIONS)]


def cache_of(app: Any) -> AnalysisCache:
    cache = app.state.analysis_cache
    assert isinstance(cache, AnalysisCache)
    return cache


async def test_a_finished_sessions_other_tabs_are_computed_ahead(
    app: Any, client: httpx.AsyncClient, finished: list[int]
) -> None:
    sid = finished[-1]
    r = await client.get(f"/sessions/{sid}/partials/results/overview", headers=HX)
    assert r.status_code == 200
    cache = cache_of(app)
    assert cache.background, "nothing was started for the other tabs"
    ahead = cache.computed_ahead
    await asyncio.wait_for(asyncio.gather(*cache.background), 300)
    assert cache.computed_ahead > ahead
    started = cache.computed
    for tab in ("style", "categories", "matrix", "performance"):
        r = await client.get(f"/sessions/{sid}/partials/results/{tab}", headers=HX)
        assert r.status_code == 200 and 'id="tab-error"' not in r.text, tab
        assert cache.computed == started, f"{tab} was not computed ahead"
    # once per session and options: showing another tab starts nothing new
    await client.get(f"/sessions/{sid}/partials/results/style", headers=HX)
    assert not cache.background


async def test_a_finished_sessions_tabs_load_once(
    app: Any, client: httpx.AsyncClient, finished: list[int]
) -> None:
    first = {}
    for sid in finished:  # each session's data is loaded, then pushed out by the next ones
        for tab in TABS:
            r = await client.get(f"/sessions/{sid}/partials/results/{tab}", headers=HX)
            assert r.status_code == 200 and 'id="tab-error"' not in r.text, (sid, tab)
            first[sid, tab] = r.text
    cache = cache_of(app)
    started = cache.computed  # figures computed and sessions loaded so far
    for sid in finished:
        for tab in TABS:
            r = await client.get(f"/sessions/{sid}/partials/results/{tab}", headers=HX)
            assert r.text == first[sid, tab], (sid, tab)  # the same figures, names and all
            assert cache.computed == started, f"session {sid}, tab {tab} was computed again"
    # The names come along with a cached figure: titles, not bare ids.
    assert "cache0x thread" in first[finished[0], "overview"]


async def test_a_running_session_still_follows_its_completions(
    app: Any, client: httpx.AsyncClient, finished: list[int]
) -> None:
    """The shortcut is for finished sessions only: a count that moves is a new version."""
    sid = finished[0]
    url = f"/sessions/{sid}/partials/results/leaderboard"
    before = await client.get(url, headers=HX)
    async with app.state.sessionmaker() as db:
        s = await db.get(JudgeSession, sid)
        assert s is not None
        s.status, s.completed = "running", s.completed - 1
        await db.commit()
    started = cache_of(app).computed
    after = await client.get(url, headers=HX)
    assert cache_of(app).computed > started and after.status_code == 200
    assert re.search(r"data-refresh-on=", after.text) and not re.search(
        r"data-refresh-on=", before.text
    )


async def test_tab_loads_show_the_indicator(client: httpx.AsyncClient, finished: list[int]):
    page = await client.get(f"/sessions/{finished[0]}/results")
    # every tab link and tab form sits inside the element naming the indicator
    results = page.text.split('id="results"', 1)[1]
    assert results.lstrip().startswith('hx-indicator="#tab-loading"')
    assert 'id="tab-loading" role="status"' in results and 'id="result-tabs"' in results
    css = (await client.get("/static/app.css")).text
    shown = re.search(r"\.tab-loading\.htmx-request \{([^}]*)\}", css)
    assert shown and "300ms" in shown[1] and "visibility:visible" in shown[1]
