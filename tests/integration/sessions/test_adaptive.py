"""Adaptive sessions end to end with the simulator: rounds appended from the stored
results, the stopping rule, the budget, crash safety, the estimate and the API's 422s.

The app runs no workers here: each test starts its own (``build_workers``: the judge pool
and the rounds runner), so a test can stop them between rounds and start fresh ones."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from scipy.stats import kendalltau
from sqlalchemy import func, select

from llmjudge.core.ratings.bradley_terry import PairIndex, fit_bradley_terry
from llmjudge.infra.queue.registry import Workers
from llmjudge.sessions.adaptive import field as fields
from llmjudge.sessions.adaptive import rounds
from llmjudge.sessions.models import AdaptiveRound, Comparison, JudgeSession
from llmjudge.worker import build_workers
from tests.integration.sessions.test_sessions import fast_simulator, get, seed_threads

IN_PROCESS_WORKERS = False
N_THREADS = 40


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    await fast_simulator(client)
    return await seed_threads(client, N_THREADS, pillars=2, prefix="ad")


@asynccontextmanager
async def workers(app: FastAPI, concurrency: int = 8, **kw: Any) -> AsyncIterator[Workers]:
    w = build_workers(
        engine=app.state.engine,
        sessionmaker=app.state.sessionmaker,
        llm=app.state.llm,
        hub=app.state.events,
        settings=app.state.settings,
        concurrency=concurrency,
        **kw,
    )
    await w.start()
    try:
        yield w
    finally:
        await w.stop()


def body(pillars: list[int], **adaptive: Any) -> dict[str, Any]:
    return {
        "session_name": "adaptive",
        "pillar_ids": pillars,
        "comparison_mode": "adaptive",
        "worker_count": 8,
        "seed": 7,
        "adaptive": adaptive,
    }


async def create(client: httpx.AsyncClient, data: dict[str, Any]) -> int:
    r = await client.post("/api/sessions", json=data | {"auto_start": True})
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["comparison_mode"] == "adaptive" and out["status"] == "running"
    return out["id"]


async def wait_status(client: httpx.AsyncClient, sid: int, limit_s: float = 120) -> dict:
    async with asyncio.timeout(limit_s):
        while (s := await get(client, sid))["status"] == "running":  # noqa: ASYNC110
            await asyncio.sleep(0.1)
    return s


async def stored(app: FastAPI, sid: int) -> tuple[JudgeSession, list[AdaptiveRound], dict]:
    async with app.state.sessionmaker() as db:
        s = await db.get(JudgeSession, sid)
        assert s is not None
        rows = list(
            await db.scalars(
                select(AdaptiveRound)
                .where(AdaptiveRound.session_id == sid)
                .order_by(AdaptiveRound.round)
            )
        )
        statuses = dict(
            (
                await db.execute(
                    select(Comparison.status, func.count())
                    .where(Comparison.session_id == sid)
                    .group_by(Comparison.status)
                )
            ).all()
        )
        positions = list(
            await db.scalars(
                select(Comparison.queue_position)
                .where(Comparison.session_id == sid)
                .order_by(Comparison.queue_position)
            )
        )
    return s, rows, {"statuses": statuses, "positions": positions}


def check_rounds(s: JudgeSession, rows: list[AdaptiveRound], info: dict) -> None:
    """Rounds 0..R, each appending the queue positions after the last, summing to total;
    every position once; every comparison terminal; the last round is the stop."""
    assert [r.round for r in rows] == list(range(len(rows)))
    assert info["positions"] == list(range(s.total))
    start = 0
    for r in rows:
        assert r.first_position == start == r.spent
        start += r.size
    assert start == s.total
    assert rows[-1].stop and rows[-1].size == 0 and rows[-1].reason == s.stop_reason
    assert not any(r.stop for r in rows[:-1])
    assert set(info["statuses"]) <= {"completed", "failed"}
    assert sum(info["statuses"].values()) == s.total == s.completed + s.failed


async def tau_of(client: httpx.AsyncClient, sid: int) -> tuple[float, dict]:
    r = await client.get(f"/api/sessions/{sid}/adaptive")
    assert r.status_code == 200, r.text
    state = r.json()
    threads = {t["id"]: t for t in (await client.get("/api/threads?limit=500")).json()["items"]}
    theta = [p["theta"] for p in state["ranking"]]
    # the hidden quality seed_threads gave thread i ("ad-i")
    index = [int(threads[p["id"]]["external_id"].split("-")[1]) for p in state["ranking"]]
    quality = [3 * i / N_THREADS - 1.5 for i in index]
    return float(kendalltau(theta, quality)[0]), state


async def test_adaptive_stops_by_rule_within_budget_and_beats_random(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    budget = 1500
    async with workers(app):
        sid = await create(
            client,
            body(pillars, rule="ranking", tolerance=0.015, budget_comparisons=budget),
        )
        s = await wait_status(client, sid)
    assert s["status"] == "completed"
    row, rows, info = await stored(app, sid)
    check_rounds(row, rows, info)
    # The rule reads refits of prefixes of the results in queue order, not of whatever had
    # come back when a round was planned, so worker timing does not move it: simulated
    # runs of this field stop by the rule at 290-650 comparisons, far inside the budget.
    assert row.stop_reason == "rule", [r.progress for r in rows]
    assert row.total < budget
    assert "stable for 2 of 2 checks" in rows[-1].progress or "39 of 39" in rows[-1].progress
    assert len(rows) >= 3  # it did adapt: several rounds
    tau, state = await tau_of(client, sid)
    assert state["stop_reason"] == row.stop_reason and state["spent"] == row.total
    assert state["free_for_all"] == N_THREADS * (N_THREADS - 1) // 2
    assert state["results"] == row.completed
    assert len(state["ranking"]) == N_THREADS
    for p in state["ranking"]:
        assert p["rank_best"] <= p["rank"] <= p["rank_worst"]
        assert p["theta_low"] <= p["theta"] <= p["theta_high"]
    # Half price: most pairs judged once, a share as swapped twins.
    async with app.state.sessionmaker() as db:
        swaps = await db.scalar(
            select(func.count()).where(Comparison.session_id == sid, Comparison.is_swap)
        )
        done_positions = set(
            await db.scalars(
                select(Comparison.queue_position).where(
                    Comparison.session_id == sid,
                    Comparison.status == "completed",
                    Comparison.winner.is_not(None),
                )
            )
        )
    assert 0 < swaps < 0.25 * row.total
    # Every round records how each of its comparisons was chosen, and the field-wide rates
    # rest on exactly the uniform share's verdicts.
    uniform = set()
    for r in rows:
        if r.size:
            assert r.sources is not None and len(r.sources) == r.size
            assert set(r.sources) <= {0, 1, 2, 3, 4}
            if 1 in r.sources:
                assert r.random_propensity is not None and 0 < r.random_propensity <= 1
            uniform |= {r.first_position + i for i, x in enumerate(r.sources) if x == 1}
    rates = {x["what"].split(" ")[0]: x for x in state["field_rates"]}
    assert rates["score"]["field"]["n"] == len(uniform & done_positions) > 0
    assert rates["ties"]["judged"]["n"] == state["results"]
    for x in state["field_rates"]:
        f = x["field"]
        assert f["low"] <= f["value"] <= f["high"] and 0 < f["n_eff"] <= f["n"]

    # A random-pair session of the same size and seed.
    async with workers(app):
        rid = await create(
            client, body(pillars, rule="budget", strategy="random", budget_comparisons=row.total)
        )
        r = await wait_status(client, rid)
    assert r["status"] == "completed"
    rrow, rrows, rinfo = await stored(app, rid)
    check_rounds(rrow, rrows, rinfo)
    assert rrow.stop_reason == "budget" and rrow.total == row.total
    random_tau, _ = await tau_of(client, rid)
    assert tau >= random_tau, (tau, random_tau)
    assert tau > 0.8


async def test_a_seeded_session_chooses_the_same_pairs_whatever_the_worker_timing(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    """The same request run by 8 fast workers and by 3 slow, jittery ones: the same pairs in
    the same queue positions, the same rounds, the same stop and the same ranking. The
    simulator draws fresh noise for each session (its call key names the session), so the
    judge here is noiseless: the same pair in the same order gets the same verdict, as from a
    real judge at temperature 0."""
    runs = []
    for concurrency, latency_ms in ((8, 0.0), (3, 15.0)):
        await fast_simulator(
            client, noise=0.0, latency_ms_mean=latency_ms, latency_ms_jitter=latency_ms
        )
        async with workers(app, concurrency=concurrency):
            sid = await create(
                client,
                body(pillars, rule="ranking", tolerance=0.015, budget_comparisons=700),
            )
            assert (await wait_status(client, sid))["status"] == "completed"
        row, rounds_, _ = await stored(app, sid)
        async with app.state.sessionmaker() as db:
            queue = (
                await db.execute(
                    select(
                        Comparison.queue_position,
                        Comparison.thread_a_id,
                        Comparison.thread_b_id,
                        Comparison.is_swap,
                        Comparison.winner,
                    )
                    .where(Comparison.session_id == sid)
                    .order_by(Comparison.queue_position)
                )
            ).all()
        state = (await client.get(f"/api/sessions/{sid}/adaptive")).json()
        runs.append(
            {
                "queue": [tuple(q) for q in queue],
                "rounds": [(r.round, r.size, r.results, r.stop, r.reason) for r in rounds_],
                "stop": row.stop_reason,
                "ranking": [p["id"] for p in state["ranking"]],
            }
        )
    await fast_simulator(client)
    assert len(runs[0]["rounds"]) >= 3  # several rounds, each planned from results
    for key in ("rounds", "stop", "queue", "ranking"):
        assert runs[0][key] == runs[1][key], key


async def test_top_k_rule_and_budget_are_exact(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    # A budget far below what top_k needs: it stops at exactly the budget.
    async with workers(app):
        sid = await create(client, body(pillars, rule="top_k", k=3, budget_comparisons=101))
        s = await wait_status(client, sid)
    row, rows, info = await stored(app, sid)
    check_rounds(row, rows, info)
    assert s["status"] == "completed" and row.stop_reason == "budget" and row.total == 101
    state = (await client.get(f"/api/sessions/{sid}/adaptive")).json()
    assert state["progress"].startswith("top 3 separated at 95%: ")
    assert state["spent_text"] == "spent 101 of 101 comparisons"
    # The ranking shown is the ratings' fit of the stored verdicts (their prior: two drawn
    # games), on the leaderboard's scale; the design's near-flat fit spreads wider.
    async with app.state.sessionmaker() as db:
        field = await fields.load_field(db, "threads", pillars)
        out = await fields.load_outcomes(db, sid, field)
    pairs = PairIndex.build(out.a, out.b, out.score_a, field.n)
    wins, games = pairs.totals()
    ratings = fit_bradley_terry(pairs, wins, games)
    shown = {p["id"]: p["theta"] for p in state["ranking"]}
    np.testing.assert_allclose([shown[int(i)] for i in field.ids], ratings, atol=1e-4)
    design = fit_bradley_terry(pairs, wins, games, prior=0.01)
    assert np.ptp(ratings) < np.ptp(design)


async def test_crash_between_rounds_resumes_from_the_database(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    data = body(pillars, rule="budget", budget_comparisons=400, strategy="swiss")
    async with workers(app, drain_timeout_s=0.0):
        sid = await create(client, data)
        async with asyncio.timeout(60):
            while True:
                _, rows, _ = await stored(app, sid)
                if len(rows) >= 2:
                    break
                await asyncio.sleep(0.02)
        # leaving the block stops every worker at once: in-flight calls are cancelled and
        # given back; nothing is planned in memory
    row, rows, info = await stored(app, sid)
    assert row.status == "running" and row.stop_reason is None
    before = len(rows)
    assert info["positions"] == list(range(row.total))
    # Two planners at once (no advisory lock here): one round is appended, never two.
    sm = app.state.sessionmaker
    async with sm() as db:
        await db.execute(
            Comparison.__table__.update()
            .where(Comparison.session_id == sid, Comparison.status.in_(("pending", "running")))
            .values(status="failed", worker_id=None, lease_expires_at=None)
        )
        s = await db.get(JudgeSession, sid)
        assert s is not None
        s.failed = s.total - s.completed
        await db.commit()
    await asyncio.gather(rounds.advance(sm, sid), rounds.advance(sm, sid))
    _, rows, _ = await stored(app, sid)
    assert len(rows) == before + 1
    # Fresh workers resume from the stored results and finish the session.
    async with workers(app):
        s2 = await wait_status(client, sid)
    assert s2["status"] == "completed"
    row, rows, info = await stored(app, sid)
    check_rounds(row, rows, info)
    assert row.stop_reason == "budget" and row.total == 400


async def test_pillar_unit_ranks_pillars_on_shared_prompt_keys(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    # Three pillars answering the same 6 prompts; pillar quality by prefix.
    import json

    rows = [
        {
            "pillar": f"pk{p}",
            "external_id": f"pk{p}-{k}",
            "prompt_key": f"prompt-{k}",
            "content": f"answer {p} {k}",
            "metadata": {"quality": float(p)},
        }
        for p in range(3)
        for k in range(6)
    ]
    payload = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", payload)})
    assert r.status_code == 200, r.text
    ids = [p["id"] for p in (await client.get("/api/pillars")).json() if p["name"][:2] == "pk"]
    data = body(ids, unit="pillars", rule="budget", budget_comparisons=60)
    async with workers(app):
        sid = await create(client, data)
        s = await wait_status(client, sid)
    assert s["status"] == "completed"
    row, rows_, info = await stored(app, sid)
    check_rounds(row, rows_, info)
    async with app.state.sessionmaker() as db:
        pairs = (
            await db.execute(
                select(Comparison.thread_a_id, Comparison.thread_b_id).where(
                    Comparison.session_id == sid
                )
            )
        ).all()
    threads = {t["id"]: t for t in (await client.get("/api/threads?limit=500")).json()["items"]}
    for a, b in pairs:  # both answers to one prompt, from two pillars
        assert threads[a]["prompt_key"] == threads[b]["prompt_key"]
        assert threads[a]["pillar_id"] != threads[b]["pillar_id"]
    state = (await client.get(f"/api/sessions/{sid}/adaptive")).json()
    assert state["unit"] == "pillars" and state["free_for_all"] == 3
    names = [p["name"] for p in state["ranking"]]
    assert names == ["pk2", "pk1", "pk0"]


async def test_estimate_labels_itself_and_shows_the_half_price_saving(
    client: httpx.AsyncClient, pillars: list[int]
) -> None:
    r = await client.post("/api/sessions/estimate/adaptive", json=body(pillars, rule="ranking"))
    assert r.status_code == 200, r.text
    est = r.json()
    assert est["label"].startswith("estimate: median of 5 simulated runs")
    assert est["players"] == N_THREADS and est["free_for_all"] == 780
    assert est["low"] <= est["median"] <= est["high"] <= 780
    assert est["half_price_saving"] > 0
    assert est["both_orders_equivalent"] - est["median"] == est["half_price_saving"]
    both = await client.post(
        "/api/sessions/estimate/adaptive", json=body(pillars, rule="ranking", position="both")
    )
    assert both.json()["half_price_saving"] == 0
    plain = await client.post("/api/sessions/estimate", json=body(pillars, rule="ranking"))
    assert plain.status_code == 200, plain.text
    assert plain.json()["total_comparisons"] == est["median"]
    assert any("estimate" in w for w in plain.json()["warnings"])


@pytest.mark.parametrize(
    ("adaptive", "extra", "needle"),
    [
        ({"rule": "budget"}, {}, "the budget rule needs"),
        ({"rule": "top_k", "k": 0}, {}, "k"),
        ({"confidence": 1.5}, {}, "confidence"),
        ({"strategy": "greedy"}, {}, "strategy"),
        ({"unit": "models"}, {}, "unit"),
        ({"epsilon": 2}, {}, "epsilon"),
        ({"budget_comparisons": 0}, {}, "budget_comparisons"),
        ({"bogus": 1}, {}, "bogus"),
        ({}, {"comparison_mode": "free_for_all"}, "adaptive options need"),
        ({"unit": "pillars"}, {"pillar_ids": [1]}, "at least two pillars"),
        ({}, {"match_by_prompt_key": True}, "does not match by prompt key"),
    ],
)
async def test_api_validation(
    client: httpx.AsyncClient,
    pillars: list[int],
    adaptive: dict[str, Any],
    extra: dict[str, Any],
    needle: str,
) -> None:
    r = await client.post("/api/sessions", json=body(pillars, **adaptive) | extra)
    assert r.status_code == 422, r.text
    assert needle in r.text


async def test_field_validation_422s(client: httpx.AsyncClient, pillars: list[int]) -> None:
    r = await client.post("/api/sessions", json=body(pillars, rule="top_k", k=N_THREADS))
    assert r.status_code == 422 and "top_k needs k below" in r.text
    # the built-in simulated judge is free: no price turns USD into calls
    r = await client.post("/api/sessions", json=body(pillars, budget_usd=1.0))
    assert r.status_code == 422 and "USD budget" in r.text
    r = await client.post("/api/sessions", json=body(pillars, budget_comparisons=1))
    assert r.status_code == 422 and "at least 2 are needed" in r.text
    r = await client.post("/api/sessions", json=body([999_999], rule="ranking"))
    assert r.status_code == 422 and "unknown pillar" in r.text
    r = await client.get("/api/sessions/999999/adaptive")
    assert r.status_code == 404


async def test_not_adaptive_state_is_409(client: httpx.AsyncClient, pillars: list[int]) -> None:
    r = await client.post(
        "/api/sessions",
        json={"session_name": "ffa", "pillar_ids": pillars, "comparison_mode": "free_for_all"},
    )
    assert r.status_code == 201
    r = await client.get(f"/api/sessions/{r.json()['id']}/adaptive")
    assert r.status_code == 409


def test_plan_arrays_repeat_pairs_get_fresh_repetitions() -> None:
    from llmjudge.core.tournaments.adaptive import fit_state
    from llmjudge.sessions.schemas import AdaptiveIn

    field = fields.Field("threads", np.array([10, 20, 30]), np.array([1, 1, 2]))
    cfg = AdaptiveIn(position="both")
    rule = fields.stop_rule(cfg, 0.0)
    empty = np.empty(0, dtype=np.int64)
    state = fit_state(3, empty, empty, np.empty(0))
    first, batch = rounds.plan_arrays(
        field, state, cfg, rule, size=6, seed=1, round_no=0, first_group=0
    )
    assert len(batch) == len(first)
    assert len(first) == 6 and set(first.repetition) == {0}
    prior = rounds.pair_keys(first.thread_a, first.thread_b)
    again, _ = rounds.plan_arrays(
        field, state, cfg, rule, size=6, seed=2, round_no=1, first_group=6, prior=prior
    )
    assert set(again.repetition) == {1}  # every ordered pair was judged once already
    assert set(again.swap_group) <= set(range(6, 12))
    assert set(first.pillar_a) | set(first.pillar_b) <= {1, 2}


HX = {"HX-Request": "true"}


def form_body(pillars: list[int], **fields: str) -> dict[str, Any]:
    return {
        "session_name": "adaptive form",
        "pillar_ids": [str(p) for p in pillars],
        "comparison_mode": "adaptive",
        "worker_count": "8",
        "seed": "3",
        "criteria": "quality",
        **{f"adaptive_{k}": v for k, v in fields.items()},
    }


async def test_new_session_page_estimates_and_creates_an_adaptive_session(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    page = await client.get("/sessions/new")
    assert page.status_code == 200
    assert 'value="adaptive"' in page.text and 'name="adaptive_rule"' in page.text
    r = await client.post(
        "/sessions/new/estimate",
        data=form_body(pillars, rule="top_k", k="3", budget_comparisons="300"),
        headers=HX,
    )
    assert r.status_code == 200, r.text
    assert 'id="adaptive-estimate"' in r.text and "simulated runs" in r.text
    assert "Half price" in r.text and "780 comparisons" in r.text  # the free-for-all
    assert re.search(r'id="mode-count-adaptive" hx-swap-oob="true">\d+ comparisons<', r.text)
    bad = await client.post(
        "/sessions/new/estimate", data=form_body(pillars, confidence="2"), headers=HX
    )
    assert bad.status_code == 422
    async with workers(app):
        r = await client.post(
            "/sessions/new", data=form_body(pillars, rule="budget", budget_comparisons="60")
        )
        assert r.status_code == 303, r.text
        sid = int(r.headers["location"].rsplit("/", 1)[1])
        s = await wait_status(client, sid)
    assert s["status"] == "completed" and s["total"] == 60
    assert s["options"]["adaptive"]["rule"] == "budget"
    live = await client.get(f"/sessions/{sid}")
    assert live.status_code == 200
    assert 'id="adaptive-panel"' in live.text and "adaptive_round" in live.text
    assert "spent 60 of 60 comparisons" in live.text
    assert "would need 780 comparisons" in live.text
    partial = await client.get(f"/sessions/{sid}/partials/adaptive")
    assert partial.status_code == 200
    ranking = partial.text.split('id="adaptive-ranking"')[1].split("</table>")[0]
    assert ranking.count("<tr>") == N_THREADS + 1  # header + every thread
    rates = partial.text.split('id="adaptive-field-rates"')[1].split("</table>")[0]
    assert "uniform share" in partial.text and rates.count("<tr>") == 3
    assert "the budget is spent" in partial.text
    # the results page and the analysis read an adaptive session like any other
    results = await client.get(f"/sessions/{sid}/results")
    assert results.status_code == 200, results.text
    for view in ("thread-leaderboard", "position-swap-analysis"):
        r = await client.get(f"/api/sessions/{sid}/{view}")
        assert r.status_code == 200, (view, r.text)
    listing = await client.get("/sessions")
    assert listing.status_code == 200 and "adaptive form" in listing.text
    est = await client.get(f"/api/sessions/{sid}/estimate")
    assert est.status_code == 200, est.text
    assert any("estimate" in w for w in est.json()["warnings"])


async def test_without_a_budget_a_free_for_all_is_the_cap(
    client: httpx.AsyncClient, pillars: list[int]
) -> None:
    r = await client.post("/api/sessions", json=body(pillars, rule="ranking"))
    assert r.status_code == 201, r.text
    assert r.json()["options"]["adaptive"]["budget_comparisons"] == 780
    both = await client.post("/api/sessions", json=body(pillars, position="both"))
    assert both.json()["options"]["adaptive"]["budget_comparisons"] == 1560
    est = await client.post("/api/sessions/estimate/adaptive", json=body(pillars))
    assert est.json()["budget_limit"] == 780
