"""Worker pools sharing the queue: two pools on one session, a dead worker's lease, a
graceful stop. The app runs no pool of its own here; each test starts the pools it needs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from llmjudge.infra.queue.pool import WorkerPool
from llmjudge.providers.models import LLMCall
from llmjudge.sessions.models import Comparison, ComparisonVote
from llmjudge.sessions.run.claims import Finish, JudgeVote, claim, finish
from llmjudge.sessions.run.jobs import comparison_pool
from tests.integration.sessions.test_sessions import (
    FAST_SIMULATOR,
    create,
    fast_simulator,
    get,
    seed_threads,
    wait_for,
    wait_status,
)

# The tests play the workers or start their own pools: no pool inside the app.
IN_PROCESS_WORKERS = False


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    await fast_simulator(client)
    return await seed_threads(client, 30, prefix="w")


@pytest.fixture
def make_pool(app: FastAPI) -> Callable[..., AsyncIterator[WorkerPool]]:
    @asynccontextmanager
    async def running(**kw: object) -> AsyncIterator[WorkerPool]:
        pool = comparison_pool(
            engine=app.state.engine,
            llm=app.state.llm,
            hub=app.state.events,
            poll_s=0.2,
            **kw,  # type: ignore[arg-type]
        )
        await pool.start()
        try:
            yield pool
        finally:
            await pool.stop()

    return running


async def judge_calls(app: FastAPI, sid: int) -> tuple[int, int]:
    await app.state.llm.flush()
    async with app.state.sessionmaker() as db:
        row = (
            await db.execute(
                select(func.count(), func.count(func.distinct(LLMCall.comparison_id))).where(
                    LLMCall.session_id == sid, LLMCall.purpose == "judge"
                )
            )
        ).one()
    return row[0], row[1]


async def test_two_pools_share_a_session_and_judge_nothing_twice(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int], make_pool
) -> None:
    async with make_pool(concurrency=8) as a, make_pool(concurrency=8) as b:
        assert a.prefix != b.prefix
        s = await create(
            client,
            pillar_ids=pillars,
            comparison_mode="free_for_all",
            worker_count=4,
            auto_start=True,
        )
        out = await wait_status(client, s["id"], "completed")
    assert out["counts"]["completed"] == 870 == out["completed"]
    assert a.finished > 0 and b.finished > 0 and a.finished + b.finished == 870
    assert a.discarded == b.discarded == 0
    assert await judge_calls(app, s["id"]) == (870, 870)
    async with app.state.sessionmaker() as db:
        workers = set(
            await db.scalars(
                select(Comparison.worker_id).where(Comparison.session_id == s["id"]).distinct()
            )
        )
    assert {w.rsplit(":", 1)[0] for w in workers} == {a.prefix, b.prefix}
    assert len(workers) <= 8  # at most worker_count per pool
    # A single judge is member 0 of a panel of one: each answer is also its vote row, the
    # same answer as the comparison's; the comparison's detail still lists no votes.
    async with app.state.sessionmaker() as db:
        pairs = (
            await db.execute(
                select(Comparison.id, Comparison.winner, ComparisonVote.winner)
                .join(ComparisonVote, ComparisonVote.comparison_id == Comparison.id)
                .where(
                    Comparison.session_id == s["id"],
                    ComparisonVote.member == 0,
                    ComparisonVote.status == "voted",
                )
            )
        ).all()
        assert len(pairs) == 870 and all(mine == vote for _, mine, vote in pairs)
        assert (
            await db.scalar(select(func.count()).where(ComparisonVote.session_id == s["id"])) == 870
        )
    detail = (await client.get(f"/api/sessions/{s['id']}/comparisons/{pairs[0][0]}")).json()
    assert detail["votes"] == [] and detail["votes_asked"] is None


async def test_a_dead_workers_items_are_judged_again_and_its_late_result_discarded(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int], make_pool
) -> None:
    s = await create(
        client,
        pillar_ids=pillars[:2],
        comparison_mode="round_robin",
        position_swap=False,
        worker_count=4,
        auto_start=True,
    )
    async with app.state.engine.begin() as conn:
        dead = await claim(
            conn, session_id=s["id"], worker_ids=[f"dead:{i}" for i in range(5)], lease_s=0.3
        )
    assert len(dead) == 5
    async with make_pool(concurrency=4) as pool:
        out = await wait_status(client, s["id"], "completed")
    assert out["counts"]["completed"] == 100 == out["completed"]
    async with app.state.sessionmaker() as db:
        rows = (
            await db.scalars(select(Comparison).where(Comparison.id.in_([d.id for d in dead])))
        ).all()
    assert all(r.status == "completed" and r.attempts == 2 for r in rows)
    assert all(r.worker_id and r.worker_id.startswith(pool.prefix) for r in rows)
    before = {r.id: r.winner for r in rows}

    late = [
        Finish(
            id=d.id,
            worker_id=d.worker_id,
            attempts=1,
            status="completed",
            answer=JudgeVote(status="voted", winner="TIE"),
        )
        for d in dead
    ]
    async with app.state.engine.begin() as conn:
        assert await finish(conn, late) == []
    after = await get(client, s["id"])
    assert after["completed"] == 100 and after["counts"] == out["counts"]
    async with app.state.sessionmaker() as db:
        winners = dict(
            (
                await db.execute(
                    select(Comparison.id, Comparison.winner).where(
                        Comparison.id.in_([d.id for d in dead])
                    )
                )
            ).all()
        )
    assert winners == before
    assert await judge_calls(app, s["id"]) == (100, 100)


async def test_a_graceful_stop_gives_unfinished_items_back(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int], make_pool
) -> None:
    r = await client.post(
        "/api/providers",
        json={"name": "slow-sim", "kind": "simulator", "settings": {"latency_ms_mean": 5000}},
    )
    provider = r.json()["id"]
    r = await client.post(
        "/api/models", json={"provider_id": provider, "name": "slow-judge", "model": "judge"}
    )
    s = await create(
        client,
        pillar_ids=pillars[:2],
        comparison_mode="round_robin",
        worker_count=3,
        judge_model_id=r.json()["id"],
        auto_start=True,
    )
    async with make_pool(concurrency=8) as pool:

        async def busy() -> bool:  # claimed in the database and judging here
            return (await get(client, s["id"]))["counts"]["running"] == 6 and pool.in_flight == 3

        await wait_for(busy)
        await pool.stop(drain_timeout_s=0.1)
        assert pool.in_flight == 0
    out = await get(client, s["id"])
    assert out["counts"]["running"] == 0 and out["counts"]["pending"] == 200
    assert out["completed"] == 0 and out["status"] == "running"
    async with app.state.sessionmaker() as db:
        attempts = await db.scalar(
            select(func.max(Comparison.attempts)).where(Comparison.session_id == s["id"])
        )
    assert attempts == 0  # a release does not spend an attempt
    r = await client.patch(f"/api/providers/{provider}", json={"settings": FAST_SIMULATOR})
    async with make_pool(concurrency=8):
        out = await wait_status(client, s["id"], "completed")
    assert out["completed"] == 200
