"""The Overview of a finished session reads the database in a fixed number of statements,
whatever its size: a query per thread or per comparison (an N+1) would make a large
session's first view take minutes (issue 27, item 9). Counted, not timed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import case, event, update

from llmjudge import analysis
from llmjudge.analysis.cache import AnalysisCache
from llmjudge.sessions.models import Comparison, JudgeSession

IN_PROCESS_WORKERS = False  # the test writes the verdicts itself
HX = {"HX-Request": "true"}
# Set around a request: what it runs (and the tasks it starts) is counted, the app's
# background loops are not.
_COUNTING: ContextVar[list[str] | None] = ContextVar("counting", default=None)


async def _finished_session(app: Any, client: httpx.AsyncClient, tag: str, threads: int) -> int:
    rows = [
        {
            "pillar": f"{tag}{i % 3}",
            "external_id": f"{tag}-{i}",
            "title": f"{tag} thread {i}",
            "content": f"Answer {i}." * (1 + i % 3),
            "metadata": {"category": "math" if i % 2 else "prose"},
        }
        for i in range(threads)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.is_success, r.text
    pillars = [p["id"] for p in (await client.get("/api/pillars")).json() if tag in p["name"]]
    r = await client.post(
        "/api/sessions",
        json={"session_name": tag, "pillar_ids": pillars, "comparison_mode": "round_robin"},
    )
    assert r.status_code == 201, r.text
    sid = int(r.json()["id"])
    async with app.state.sessionmaker() as db:
        done = await db.execute(
            update(Comparison)
            .where(Comparison.session_id == sid)
            .values(
                status="completed",
                winner=case(
                    ((Comparison.id % 4) == 0, "B"),
                    (Comparison.thread_a_id < Comparison.thread_b_id, "A"),
                    else_="B",
                ),
                confidence=0.7,
                completed_at=datetime.now(UTC),
                attempts=1,
            )
            .returning(Comparison.id)
        )
        s = await db.get(JudgeSession, sid)
        assert s is not None
        s.status, s.completed = "completed", len(done.all())
        s.finished_at = datetime.now(UTC)
        await db.commit()
    return sid


@pytest.fixture(scope="module")
async def sizes(app: Any, client: httpx.AsyncClient) -> dict[int, int]:
    """session id -> its completed comparisons, for a small and a larger session."""
    small = await _finished_session(app, client, "oqsmall", 6)
    large = await _finished_session(app, client, "oqlarge", 30)
    return {
        sid: (await client.get(f"/api/sessions/{sid}")).json()["completed"]
        for sid in (small, large)
    }


@contextmanager
def statements(app: Any) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        found = _COUNTING.get()
        if found is not None:
            found.append(statement)

    engine = app.state.engine.sync_engine
    event.listen(engine, "before_cursor_execute", count)
    token = _COUNTING.set(seen)
    try:
        yield seen
    finally:
        _COUNTING.reset(token)
        event.remove(engine, "before_cursor_execute", count)


async def _cold_overview(app: Any, client: httpx.AsyncClient, sid: int) -> list[str]:
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
    """Once cached, a finished session's Overview reads neither the catalog nor its
    comparisons again."""
    sid = max(sizes)
    await _cold_overview(app, client, sid)
    with statements(app) as warm:
        r = await client.get(f"/sessions/{sid}/partials/results/overview", headers=HX)
    assert r.status_code == 200
    assert not any("FROM threads" in s or "FROM pillars" in s for s in warm), warm
    # the session's status and counters only (an aggregate of its comparisons at most)
    assert all("FROM judge_sessions" in s for s in warm) and len(warm) <= 2, warm


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
