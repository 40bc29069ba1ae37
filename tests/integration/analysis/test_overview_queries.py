"""The Overview of a finished session reads the database in a fixed number of statements,
whatever its size: a query per thread or per comparison (an N+1) would make a large
session's first view take minutes (issue 27, item 9). Counted, not timed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import text

from llmjudge import analysis
from llmjudge.analysis.cache import AnalysisCache
from tests.integration.analysis.finished import finished_session, statements

IN_PROCESS_WORKERS = False  # the test writes the verdicts itself
HX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
async def sizes(app: Any, client: httpx.AsyncClient) -> dict[int, int]:
    """session id -> its completed comparisons, for a small and a larger session."""
    small = await finished_session(app, client, "oqsmall", 6)
    large = await finished_session(app, client, "oqlarge", 30)
    return {
        sid: (await client.get(f"/api/sessions/{sid}")).json()["completed"]
        for sid in (small, large)
    }


async def _cold_overview(app: Any, client: httpx.AsyncClient, sid: int) -> list[str]:
    """The first view: nothing cached in the process, nothing stored."""
    async with app.state.sessionmaker() as db:
        await db.execute(text("DELETE FROM stored_figures WHERE session_id = :s"), {"s": sid})
        await db.commit()
    cache = app.state.analysis_cache = AnalysisCache()
    cache.prefetch = lambda *args, **kwargs: False  # type: ignore[method-assign]  # this view only
    with statements(app) as seen:
        r = await client.get(f"/sessions/{sid}/partials/results/overview", headers=HX)
    assert r.status_code == 200 and 'id="tab-error"' not in r.text, r.text[:500]
    assert cache.computed > 0, "the view was not cold"
    return seen


async def test_a_cold_overview_reads_in_a_fixed_number_of_statements(
    app: Any, client: httpx.AsyncClient, sizes: dict[int, int]
) -> None:
    small, large = sizes
    assert sizes[large] > 10 * sizes[small]  # the larger session is an order bigger
    few, many = await _cold_overview(app, client, small), await _cold_overview(app, client, large)
    assert len(many) == len(few), "statements grew with the session:\n" + "\n".join(many)
    assert len(many) <= 12, "\n".join(many)
    # the comparisons come in one COPY, never as rows of an ORM select
    assert not any("FROM comparisons" in s and "count(" not in s for s in many), many


async def test_a_warm_overview_of_a_finished_session_reads_only_the_session(
    app: Any, client: httpx.AsyncClient, sizes: dict[int, int]
) -> None:
    """Once cached, a finished session's Overview reads neither the catalog's rows nor its
    comparisons again: the session, and one stamp of what its figures came from (the
    catalog's thread count and latest update; ``analysis.stored``)."""
    sid = max(sizes)
    await _cold_overview(app, client, sid)
    with statements(app) as warm:
        r = await client.get(f"/sessions/{sid}/partials/results/overview", headers=HX)
    assert r.status_code == 200
    # the session's status and counters, and its source stamp (aggregates only)
    assert all("FROM judge_sessions" in s for s in warm) and len(warm) <= 3, warm
    rows = [s for s in warm if "FROM threads" in s or "FROM pillars" in s]
    assert len(rows) == 1 and "count(*)" in rows[0] and "FROM comparisons" not in rows[0], warm


async def test_a_cached_figures_response_is_built_once(app: Any, sizes: dict[int, int]) -> None:
    """A leaderboard or thread performance of 10,000 rows took most of a warm view to
    convert: a cached figure's response is built once, with the session's fresh row put
    on at every request."""
    sid = max(sizes)
    cache = AnalysisCache()
    async with app.state.sessionmaker() as db:
        session = await analysis.get_analysis_session(db=db, session_id=sid)
    source = {"cache": cache, "sessionmaker": app.state.sessionmaker, "aggregation": "all"}
    renamed = session.model_copy(update={"name": "renamed"})
    board = await analysis.thread_leaderboard(**source, session=session, bootstrap_rounds=20)
    again = await analysis.thread_leaderboard(**source, session=renamed, bootstrap_rounds=20)
    assert again.entries is board.entries and len(board.entries) == 30
    assert (board.session.name, again.session.name) == (session.name, "renamed")
    perf = await analysis.thread_performance_out(**source, session=session)
    perf_again = await analysis.thread_performance_out(**source, session=renamed)
    assert perf_again.threads is perf.threads and perf_again.session.name == "renamed"
    # other options are another figure, converted on their own
    other = await analysis.thread_leaderboard(**source, session=session, bootstrap_rounds=0)
    assert other.entries is not board.entries and other.entries[0].bt_ci_low is None
