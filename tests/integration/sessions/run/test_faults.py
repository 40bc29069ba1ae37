"""Faults mid-session: a worker process killed, PostgreSQL restarted, provider storms of
429 (with Retry-After) and of 500, streams cut half-way. Each ends with every comparison
ended, none lost, none counted twice, and the session's counters equal to its rows."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.infra.queue.pool import WorkerPool
from llmjudge.sessions.run.jobs import comparison_pool
from tests.integration.test_scaleout import (
    check_books,
    comparison_rows,
    counting_judge,
    create_session,
    held_by,
    poll,
    seed_marked_threads,
    session_on_server,
    start_worker,
    verdict,
    wait_ended,
)

pytestmark = pytest.mark.slow


# The tests play the workers or start their own pools: no pool inside the app.
IN_PROCESS_WORKERS = False


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    return await seed_marked_threads(client, "fa", per_pillar=4)  # round robin: 96


async def in_process_pool(app: FastAPI, **kw: float) -> WorkerPool:
    pool = comparison_pool(
        engine=app.state.engine, llm=app.state.llm, hub=app.state.events, poll_s=0.2, **kw
    )
    await pool.start()
    return pool


async def call_attempts(app: FastAPI, sid: int) -> list[tuple[str, int]]:
    """(status, attempts) of the session's judge calls in the accounting."""
    await app.state.llm.flush()
    async with app.state.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT status, attempts FROM llm_calls WHERE session_id = :sid"),
            {"sid": sid},
        )
        return [(status, attempts) for status, attempts in rows.all()]


async def test_the_only_worker_killed_then_replaced(
    app: FastAPI, client: httpx.AsyncClient, db_url: str, pillars: list[int], tmp_path: Path
) -> None:
    lease_s = 2.0
    async with counting_judge(client, "judge-sigkill", latency_s=0.1) as judge:
        victim = start_worker(db_url, tmp_path / "victim.log", lease_s=lease_s, concurrency=8)
        try:
            await victim.ready()
            sid = await create_session(
                client,
                pillar_ids=pillars,
                judge_model_id=judge.model_id,
            )

            async def mid_run() -> bool:
                rows = await comparison_rows(app, sid)
                return sum(r["status"] == "completed" for r in rows) >= 20

            await poll(mid_run, 60, "the worker to be mid-run")
        finally:
            await victim.kill()
        rows = await comparison_rows(app, sid)
        lost = {r["id"] for r in rows if r["status"] == "running"}
        assert lost and lost <= held_by(rows, victim.prefix)
        replacement = start_worker(db_url, tmp_path / "new.log", lease_s=lease_s, concurrency=8)
        try:
            await replacement.ready()
            out = await wait_ended(app, sid)
        finally:
            assert await replacement.stop() == 0
    assert victim.popen.returncode == -signal.SIGKILL
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 96, 0)
    rows = await check_books(app, sid)
    for r in rows:
        if r["id"] in lost:
            assert r["attempts"] == 2 and r["worker_id"].startswith(replacement.prefix + ":")
        else:
            assert r["attempts"] == 1
    pairs = {(r["a"], r["b"]) for r in rows}
    assert set(judge.calls) == pairs and max(judge.calls.values()) <= 2


async def test_postgres_restarted_mid_session(tmp_path: Path) -> None:
    """A dedicated server, stopped (fast: open transactions rolled back, clients cut off)
    and started again while a session runs at full speed in an app with its pool."""
    server = EmbeddedPostgres(tmp_path / "pgdata")
    server.start()
    try:
        async with session_on_server(server, tmp_path / "data", "prestart", worker_count=16) as (
            app,
            client,
            judge,
            sid,
        ):
            done_before: list[int] = []

            async def mid_run() -> bool:
                rows = await comparison_rows(app, sid)
                done_before.append(sum(r["status"] == "completed" for r in rows))
                return done_before[-1] >= 40

            await poll(mid_run, 60, "the session to be mid-run")
            assert done_before[-1] < 216 - 50  # plenty left to do after the restart
            await asyncio.to_thread(server.stop)
            down_at = time.monotonic()
            assert (await client.get("/healthz")).status_code == 503
            await asyncio.sleep(2.0)  # calls in flight finish; nothing can be written
            await asyncio.to_thread(server.start)
            assert (await client.get("/healthz")).status_code == 200
            out = await wait_ended(app, sid, limit_s=120)
            assert time.monotonic() - down_at > 2
            rows = await check_books(app, sid)
            r = await client.get(f"/api/sessions/{sid}")
            assert r.status_code == 200 and r.json()["counts"]["completed"] == 216
            await poll(lambda: _flushed(app), 30, "the accounting rows to be written")
            calls = await judge_calls_accounted(app, sid)
    finally:
        server.stop()
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 216, 0)
    assert {(r["a"], r["b"]) for r in rows} == set(judge.calls)
    # Issue 28: the rows of calls made around the outage are kept until written, once each.
    assert calls == sum(judge.calls.values())
    # A result held through the outage is written once; an item whose lease ran out while
    # it could not be renewed may have been judged twice, but is counted once.
    assert max(judge.calls.values()) <= 2


async def test_a_storm_of_429_with_retry_after(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    """The gateway waits what Retry-After says (not its 10 ms backoff) and retries; every
    comparison completes at its first attempt."""
    pool = await in_process_pool(app)
    try:
        async with counting_judge(client, "judge-429", latency_s=0.01) as judge:
            # 24 over 8 lanes: at most 3 in a row for one call, within its 4 retries
            judge.fake.state.fail_429 = 24
            judge.fake.state.retry_after = "0.3"
            sid = await create_session(
                client,
                pillar_ids=pillars,
                judge_model_id=judge.model_id,
            )
            out = await wait_ended(app, sid)
            await app.state.llm.flush()
            assert judge.fake.state.count == 96 + 24 and judge.fake.state.fail_429 == 0
    finally:
        await pool.stop()
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 96, 0)
    rows = await check_books(app, sid)
    assert all(r["attempts"] == 1 for r in rows)
    assert set(judge.calls.values()) == {1}  # one answer per comparison
    async with app.state.engine.connect() as conn:
        calls = (
            await conn.execute(
                text("SELECT attempts, latency_s FROM llm_calls WHERE session_id = :sid"),
                {"sid": sid},
            )
        ).all()
    assert len(calls) == 96 and sum(a - 1 for a, _ in calls) == 24
    # each retry waited the 0.3 s the server asked for
    assert all(latency >= 0.3 * (attempts - 1) for attempts, latency in calls)


async def test_a_storm_of_500_absorbed_then_one_that_outlasts_every_retry(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    pool = await in_process_pool(app)
    try:
        async with counting_judge(client, "judge-500", latency_s=0.01, max_retries=1) as judge:
            state = judge.fake.state
            # Absorbed: 20 failures over 8 lanes fail the first attempt of the first 8
            # comparisons (a call and its one retry), never all three attempts of one.
            state.fail_500 = 20
            first = await create_session(
                client,
                pillar_ids=pillars,
                judge_model_id=judge.model_id,
            )
            out = await wait_ended(app, first)
            assert (out["status"], out["completed"], out["failed"]) == ("completed", 96, 0)
            rows = await check_books(app, first)
            assert state.count == 96 + 20 and set(judge.calls.values()) == {1}
            # Each failed attempt is one call that spent its retry (two 500s); a 500 inside
            # a call that then succeeded is one more attempt of that call.
            calls = await call_attempts(app, first)
            errors = [a for status, a in calls if status == "error"]
            assert sum(r["attempts"] - 1 for r in rows) == len(errors) > 0
            assert sum(errors) + sum(a - 1 for status, a in calls if status == "ok") == 20

            # Outlasting: every call fails, so every comparison fails after 3 attempts x 2
            # calls; then the storm ends and retry-failed judges them all.
            judge.calls.clear()
            state.fail_500, state.count = 10**9, 0
            second = await create_session(
                client,
                pillar_ids=pillars[:2],
                position_swap=False,
                judge_model_id=judge.model_id,
            )
            out = await wait_ended(app, second)
            assert (out["status"], out["completed"], out["failed"]) == ("failed", 0, 16)
            rows = await check_books(app, second)
            assert state.count == 16 * 3 * 2 and not judge.calls
            assert all(r["attempts"] == 3 and r["winner"] is None for r in rows)
            page = (await client.get(f"/api/sessions/{second}/comparisons?status=failed")).json()
            assert page["total"] == 16 and "500" in page["items"][0]["error"]

            state.fail_500 = 0
            r = await client.post(f"/api/sessions/{second}/retry-failed")
            assert r.status_code == 200 and r.json()["requeued"] == 16
            out = await wait_ended(app, second)
    finally:
        await pool.stop()
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 16, 0)
    await check_books(app, second)
    assert set(judge.calls.values()) == {1} and len(judge.calls) == 16


async def test_streams_cut_half_way_are_judged_again(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    """With someone following every lane the pool streams every judge call; 20 streams
    dropped mid-way are retried by the gateway, and only whole answers are stored."""
    pool = await in_process_pool(app)
    try:
        async with (
            app.state.events.subscribe("*"),  # a live page following every lane
            counting_judge(client, "judge-cut", latency_s=0.01) as judge,
        ):
            judge.fake.state.cut_stream = 20
            judge.fake.state.keep_requests = True
            sid = await create_session(
                client,
                pillar_ids=pillars,
                judge_model_id=judge.model_id,
            )
            out = await wait_ended(app, sid)
            streamed = [r.body.get("stream") for r in judge.fake.state.requests]
    finally:
        await pool.stop()
    assert streamed == [True] * (96 + 20)
    assert judge.fake.state.cut_stream == 0 and sum(judge.calls.values()) == 96 + 20
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 96, 0)
    rows = await check_books(app, sid)
    for r in rows:
        winner = "A" if r["a"] < r["b"] else "B"
        assert r["raw_response"] == verdict(winner) and r["winner"] == winner
        assert r["attempts"] == 1


async def _flushed(app: FastAPI) -> bool:
    return await app.state.llm.accounting.flush()


async def judge_calls_accounted(app: FastAPI, sid: int) -> int:
    """Accounting rows of the judge calls that reached the provider (cache hits excluded)."""
    async with app.state.engine.connect() as conn:
        return (
            await conn.scalar(
                text(
                    "SELECT count(*) FROM llm_calls WHERE session_id = :sid "
                    "AND purpose = 'judge' AND NOT cache_hit"
                ),
                {"sid": sid},
            )
        ) or 0
