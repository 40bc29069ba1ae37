"""Items claimed ahead by judging slots: held under the slot's id, never judged beyond
``worker_count`` at once, given back (without spending an attempt) on a graceful stop and
on pause, and judged when their slot frees."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
from fastapi import FastAPI
from sqlalchemy import func, select

from llmjudge.infra.queue.pool import WorkerPool
from llmjudge.sessions.models import Comparison
from tests.integration.sessions.run.test_pools import (  # noqa: F401 - fixtures
    judge_calls,
    make_pool,
    pillars,
)
from tests.integration.sessions.test_sessions import (
    FAST_SIMULATOR,
    create,
    get,
    wait_for,
    wait_status,
)

# The tests start their own pools: no pool inside the app.
IN_PROCESS_WORKERS = False


async def slow_judge(client: httpx.AsyncClient, name: str, latency_ms: float) -> tuple[int, int]:
    r = await client.post(
        "/api/providers",
        json={
            "name": name,
            "kind": "simulator",
            "settings": {"latency_ms_mean": latency_ms, "latency_ms_jitter": 0},
        },
    )
    provider = r.json()["id"]
    r = await client.post(
        "/api/models", json={"provider_id": provider, "name": f"{name}-judge", "model": "judge"}
    )
    return provider, r.json()["id"]


async def held(app: FastAPI, sid: int) -> dict[str, int]:
    """Worker id -> running items it holds."""
    async with app.state.sessionmaker() as db:
        rows = await db.execute(
            select(Comparison.worker_id, func.count())
            .where(Comparison.session_id == sid, Comparison.status == "running")
            .group_by(Comparison.worker_id)
        )
        return {w: n for w, n in rows.all()}


async def test_each_judging_slot_holds_its_next_item_and_a_stop_gives_both_back(
    app: FastAPI,
    client: httpx.AsyncClient,
    pillars: list[int],  # noqa: F811
    make_pool: Callable[..., AsyncIterator[WorkerPool]],  # noqa: F811
) -> None:
    provider, model = await slow_judge(client, "slow-prefetch", 5000)
    s = await create(
        client,
        pillar_ids=pillars[:2],
        comparison_mode="round_robin",
        worker_count=3,
        judge_model_id=model,
        auto_start=True,
    )
    async with make_pool(concurrency=8) as pool:

        async def ahead() -> bool:
            return (await get(client, s["id"]))["counts"]["running"] == 6

        await wait_for(ahead)
        assert pool.in_flight == 3  # worker_count bounds judging, not holding
        judging = {w.id for w in pool.slots if w.item_id is not None}
        assert await held(app, s["id"]) == dict.fromkeys(judging, 2)
        await pool.stop(drain_timeout_s=0.1)
        assert pool.in_flight == 0
    out = await get(client, s["id"])
    assert out["counts"]["running"] == 0 and out["counts"]["pending"] == 200
    async with app.state.sessionmaker() as db:
        attempts = await db.scalar(
            select(func.max(Comparison.attempts)).where(Comparison.session_id == s["id"])
        )
    assert attempts == 0  # neither the judging nor the prefetched items spent an attempt
    await client.patch(f"/api/providers/{provider}", json={"settings": FAST_SIMULATOR})
    async with make_pool(concurrency=8):
        out = await wait_status(client, s["id"], "completed")
    assert out["completed"] == 200


async def test_a_pause_gives_prefetched_items_back_unjudged(
    app: FastAPI,
    client: httpx.AsyncClient,
    pillars: list[int],  # noqa: F811
    make_pool: Callable[..., AsyncIterator[WorkerPool]],  # noqa: F811
) -> None:
    _, model = await slow_judge(client, "paced-prefetch", 400)
    s = await create(
        client,
        pillar_ids=pillars[:2],
        comparison_mode="round_robin",
        worker_count=2,
        judge_model_id=model,
        auto_start=True,
    )
    async with make_pool(concurrency=8) as pool:

        async def ahead() -> bool:
            # The claim marks rows running before the pool hands them to its slots.
            held = sum(w.next is not None for w in pool.slots)
            return held == 2 and (await get(client, s["id"]))["counts"]["running"] == 4

        await wait_for(ahead)
        judging = {w.item_id for w in pool.slots if w.item_id is not None}
        prefetched = {w.next.id for w in pool.slots if w.next is not None}
        assert len(judging) == len(prefetched) == 2
        r = await client.post(f"/api/sessions/{s['id']}/pause")
        assert r.status_code == 200, r.text

        async def settled() -> bool:
            return (await get(client, s["id"]))["counts"]["running"] == 0 and pool.in_flight == 0

        await wait_for(settled)
        out = await get(client, s["id"])
        assert out["status"] == "paused"
        assert out["completed"] + out["failed"] == 2
        async with app.state.sessionmaker() as db:
            rows = await db.execute(
                select(Comparison.id, Comparison.status, Comparison.attempts).where(
                    Comparison.session_id == s["id"], Comparison.id.in_(judging | prefetched)
                )
            )
            states = {i: (st, n) for i, st, n in rows.all()}
        assert all(states[i][0] in ("completed", "failed") for i in judging)
        assert all(states[i] == ("pending", 0) for i in prefetched)  # given back, unjudged
        assert (await judge_calls(app, s["id"]))[1] == 2
