"""How long each tab of a finished session's results page takes, cold and warm, by size.

An embedded PostgreSQL in a temporary directory and the app in this process, asked over
HTTP (httpx's ASGITransport: routing, templates and the cache as a browser gets them).
Sessions:

- ``demo``: the shipped demo (10 MT-Bench questions x 6 models) judged by the built-in
  simulated judge through the engine: free for all, matched by prompt, position swap,
  three repetitions (the form's defaults, more repetitions).
- ``1m``: a synthetic finished session inserted with SQL (no judge): 10,000 threads over
  10 pillars (style features and a category in their metadata), 1,000,000 comparisons in
  swap pairs with three criteria scores each, winners drawn from a latent quality.

Per tab: ``cold`` is the first view with the analysis cache empty and nothing stored (a
fresh cache, the session's stored figures deleted, so its comparisons are loaded and every
figure of the tab computed, then stored), ``warm`` the median of three views once it is
cached in the process, ``stored`` the median of three views each with a fresh cache (what
a restarted process, or any process once the background job ran, gets: the figures read
from PostgreSQL). Then ``job``: the background job computing and storing every tab of the
session from nothing. Background prefetch and the job's own loop are off while timing.
The baselines, measured in the same run: ``GET /healthz`` and one ``SELECT count(*)`` of
the session's comparisons.

    .venv/bin/python bench/pages.py [--size demo 1m] [--tabs overview style ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from harness import app_client, demo_pillars, embedded_postgres
from sqlalchemy import text

from llmjudge.analysis import FigureStore
from llmjudge.analysis.cache import AnalysisCache
from llmjudge.infra.db.engine import make_engine
from llmjudge.sessions.pages.results import TAB_NAMES, default_figures
from llmjudge.worker import FIGURES

TOKEN = "bench-pages-admin-token"
CRITERIA = ("helpfulness", "accuracy", "depth")
CATEGORIES = ("math", "coding", "writing", "roleplay", "reasoning", "stem", "humanities")

# The synthetic session: threads, pillars and comparisons made by PostgreSQL itself.
SYNTHETIC = """
INSERT INTO pillars (name) SELECT 'bench-p' || p FROM generate_series(0, {pillars} - 1) p;
INSERT INTO threads (pillar_id, external_id, title, content, content_hash, metadata,
                     style_features)
SELECT pl.id, 'b-' || g, 'Bench thread ' || g, to_jsonb('answer ' || g), md5('bench' || g),
       jsonb_build_object('category', (ARRAY{categories})[1 + g % {n_categories}],
                          'words', 50 + g % 400),
       ARRAY[200 + (g * 37) % 1800, g % 4, (g * 7) % 12, g % 3]::float8[]
FROM generate_series(0, {threads} - 1) g
JOIN pillars pl ON pl.name = 'bench-p' || (g % {pillars});
INSERT INTO judge_sessions (name, comparison_mode, pillar_ids, status, criteria, total,
                            completed, started_at, finished_at)
SELECT 'bench {comparisons}', 'free_for_all', array_agg(id ORDER BY id), 'completed',
       '{criteria}'::jsonb, {comparisons}, {comparisons}, now(), now()
FROM pillars WHERE name LIKE 'bench-p%';
"""

SYNTHETIC_COMPARISONS = """
WITH t AS MATERIALIZED (
    SELECT row_number() OVER (ORDER BY id) - 1 AS k, id, pillar_id,
           (pillar_id % 10) * 0.15 + ((id * 7919) % 1000) / 1000.0 AS q
    FROM threads WHERE external_id LIKE 'b-%'
), pairs AS MATERIALIZED (
    SELECT n, floor(random() * {threads})::int AS a, floor(random() * ({threads} - 1))::int AS d,
           random() AS u, random() AS c
    FROM generate_series(0, {pairs} - 1) n
), sided AS (
    SELECT p.n, p.u, p.c, ta.id AS ia, ta.pillar_id AS pa, ta.q AS qa,
           tb.id AS ib, tb.pillar_id AS pb, tb.q AS qb
    FROM pairs p JOIN t ta ON ta.k = p.a JOIN t tb ON tb.k = (p.a + 1 + p.d) % {threads}
)
INSERT INTO comparisons (session_id, queue_position, thread_a_id, thread_b_id, pillar_a_id,
                         pillar_b_id, swap_group, is_swap, status, attempts, winner,
                         confidence, scores_a, scores_b, completed_at)
SELECT {session}, 2 * n + k,
       CASE k WHEN 0 THEN ia ELSE ib END, CASE k WHEN 0 THEN ib ELSE ia END,
       CASE k WHEN 0 THEN pa ELSE pb END, CASE k WHEN 0 THEN pb ELSE pa END,
       n, k = 1, 'completed', 1,
       CASE WHEN u < 0.08 THEN 'TIE'
            WHEN (u < 1 / (1 + exp(qb - qa))) = (k = 0) THEN 'A' ELSE 'B' END,
       0.5 + c / 2,
       jsonb_build_object({scores_a}), jsonb_build_object({scores_b}),
       now() + (2 * n + k) * interval '1 ms'
FROM sided, generate_series(0, 1) k;
"""


def _scores(side: str) -> str:
    """jsonb_build_object arguments: each criterion 1..10, near the side's quality."""
    parts = []
    for i, c in enumerate(CRITERIA):
        q = f"(CASE k WHEN 0 THEN q{side} ELSE q{'b' if side == 'a' else 'a'} END)"
        parts.append(f"'{c}', least(10, greatest(1, round(3 + 4 * {q} + ((n + {i}) % 3))))")
    return ", ".join(parts)


async def seed_synthetic(url: str, threads: int, pillars: int, comparisons: int) -> int:
    engine = make_engine(url, pool_size=1)
    cats = "[" + ", ".join(f"'{c}'" for c in CATEGORIES) + "]"
    crit = "[" + ", ".join(f'"{c}"' for c in CRITERIA) + "]"
    setup = SYNTHETIC.format(
        pillars=pillars,
        threads=threads,
        comparisons=comparisons,
        categories=cats,
        n_categories=len(CATEGORIES),
        criteria=crit,
    )
    async with engine.begin() as conn:
        for statement in setup.split(";\n"):
            if statement.strip():
                await conn.execute(text(statement))
        sid = (await conn.execute(text("SELECT max(id) FROM judge_sessions"))).scalar_one()
        await conn.execute(text("SELECT setseed(0.27)"))
        await conn.execute(
            text(
                SYNTHETIC_COMPARISONS.format(
                    threads=threads,
                    pairs=comparisons // 2,
                    session=sid,
                    scores_a=_scores("a"),
                    scores_b=_scores("b"),
                )
            )
        )
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE comparisons"))
    await engine.dispose()
    return int(sid)


async def seed_demo(client: httpx.AsyncClient) -> int:
    """The demo judged by the simulated judge (2 ms a call), waited for until finished."""
    pillars = await demo_pillars(client, 2, 1)
    r = await client.post(
        "/api/sessions",
        json={
            "session_name": "demo",
            "pillar_ids": pillars,
            "comparison_mode": "free_for_all",
            "match_by_prompt_key": True,
            "repetitions_per_pair": 3,
            "worker_count": 32,
            "seed": 7,
            "auto_start": True,
        },
    )
    r.raise_for_status()
    sid = r.json()["id"]
    for _ in range(3000):  # ten minutes at most
        s = (await client.get(f"/api/sessions/{sid}")).json()
        if s["status"] in ("completed", "failed", "cancelled"):
            break
        await asyncio.sleep(0.2)
    assert s["status"] == "completed", s
    return int(sid)


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def timed_cpu(fn: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(wall s, this process's CPU s): on a shared machine the CPU time is the steadier."""
    cpu = time.process_time()
    wall = await timed(fn)
    return wall, time.process_time() - cpu


def fresh_cache(app: Any) -> None:
    """An empty analysis cache that starts no background work: each view times itself."""
    cache = app.state.analysis_cache = AnalysisCache()
    cache.prefetch = lambda *args, **kwargs: False  # type: ignore[method-assign]


async def measure(
    app: Any, client: httpx.AsyncClient, url: str, sid: int, label: str, tabs: list[str]
) -> None:
    engine = make_engine(url, pool_size=1)

    async def count() -> None:
        async with engine.connect() as conn:
            q = "SELECT count(*) FROM comparisons WHERE session_id = :s"
            await conn.execute(text(q), {"s": sid})

    async def health() -> None:
        (await client.get("/healthz")).raise_for_status()

    n = (await client.get(f"/api/sessions/{sid}")).json()["completed"]

    async def unstore() -> None:
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM stored_figures WHERE session_id = :s"), {"s": sid})

    await count()
    base_count = statistics.median([await timed(count) for _ in range(5)])
    base_health = statistics.median([await timed(health) for _ in range(5)])
    print(f"\n{label}: session {sid}, {n:,} comparisons")
    print(
        f"baselines: GET /healthz {base_health * 1000:.1f} ms, count(*) {base_count * 1000:.1f} ms"
    )
    print(
        f"{'tab':<14} {'cold s':>8} {'cold cpu':>9} {'warm s':>8} {'stored s':>9}"
        f" {'cold/count':>11} {'stored/count':>13}"
    )

    async def view(tab: str) -> None:
        r = await client.get(f"/sessions/{sid}/results", params={"tab": tab})
        r.raise_for_status()
        assert 'id="tab-error"' not in r.text, (tab, r.text[:2000])

    async def restarted(tab: str) -> float:
        fresh_cache(app)  # what a new process has: nothing in memory
        return await timed(lambda: view(tab))

    for tab in tabs:
        await unstore()
        fresh_cache(app)  # nothing cached, nothing stored: the first view
        cold, cpu = await timed_cpu(lambda t=tab: view(t))
        warm = statistics.median([await timed(lambda t=tab: view(t)) for _ in range(3)])
        stored = statistics.median([await restarted(tab) for _ in range(3)])
        print(
            f"{tab:<14} {cold:>8.2f} {cpu:>9.2f} {warm:>8.3f} {stored:>9.3f}"
            f" {cold / base_count:>11.0f} {stored / base_count:>13.1f}",
            flush=True,
        )
    await unstore()
    job = FigureStore(sessionmaker=app.state.sessionmaker, figures=default_figures)
    took, cpu = await timed_cpu(lambda: job.run(sid, asyncio.Event()))
    print(f"background job, every tab computed and stored: {took:.1f} s ({cpu:.1f} s CPU)")
    await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", nargs="+", choices=["demo", "1m"], default=["demo", "1m"])
    parser.add_argument("--tabs", nargs="+", choices=TAB_NAMES, default=list(TAB_NAMES))
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--pillars", type=int, default=10)
    parser.add_argument("--comparisons", type=int, default=1_000_000)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-pages-") as name,
        embedded_postgres(Path(name)) as pg,
    ):

        async def run() -> None:
            async with app_client(pg, Path(name), TOKEN) as (app, client):
                await app.state.workers.get(FIGURES).stop()  # timed by hand below
                if "demo" in args.size:
                    t = time.perf_counter()
                    sid = await seed_demo(client)
                    print(f"demo judged in {time.perf_counter() - t:.1f} s")
                    await measure(app, client, pg.url(), sid, "demo", args.tabs)
                if "1m" in args.size:
                    t = time.perf_counter()
                    sid = await seed_synthetic(
                        pg.url(), args.threads, args.pillars, args.comparisons
                    )
                    print(f"\nsynthetic session seeded in {time.perf_counter() - t:.1f} s")
                    await measure(app, client, pg.url(), sid, "synthetic", args.tabs)

        asyncio.run(run())


if __name__ == "__main__":
    main()
