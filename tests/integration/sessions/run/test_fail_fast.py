"""Fail fast on a broken provider: the test call before a session first uses a provider
(`sessions.control.check_connection`), and the circuit breaker that pauses a running
session after N identical setup errors (`sessions.jobs.Breaker`) with the reason on the
live page. The provider is an OpenAI-compatible server on a closed port (connection
refused: no network needed)."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from llmjudge.providers.models import LLMCall
from llmjudge.sessions.models import JudgeSession
from llmjudge.sessions.run.jobs import comparison_pool
from tests.integration.sessions.test_sessions import (
    create,
    fast_simulator,
    get,
    seed_threads,
    wait_status,
)

IN_PROCESS_WORKERS = False  # the breaker test starts its own pool
BREAKER_N = 3


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the with block ends


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    await fast_simulator(client)
    return await seed_threads(client, 6, prefix="ff")


@pytest.fixture(scope="module")
async def broken_model(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post(
        "/api/providers",
        json={
            "name": "refusing",
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{_closed_port()}/v1",
            "api_key": "sk-not-a-real-key",
            "max_retries": 0,
            "timeout_s": 5,
        },
    )
    assert r.status_code == 201, r.text
    m = await client.post(
        "/api/models", json={"provider_id": r.json()["id"], "name": "refusing-m", "model": "m"}
    )
    assert m.status_code == 201, m.text
    return m.json()


async def _session_count(app: FastAPI) -> int:
    async with app.state.sessionmaker() as db:
        return await db.scalar(select(func.count()).select_from(JudgeSession)) or 0


async def test_a_never_used_provider_is_tested_and_the_start_refused(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int], broken_model: dict[str, Any]
) -> None:
    before = await _session_count(app)
    r = await client.post(
        "/api/sessions",
        json={
            "session_name": "never starts",
            "pillar_ids": pillars,
            "judge_model_id": broken_model["id"],
            "auto_start": True,
        },
    )
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "test connection to provider refusing" in detail and "connection error" in detail
    assert await _session_count(app) == before  # nothing stored

    draft = await create(client, pillar_ids=pillars, judge_model_id=broken_model["id"])
    r = await client.post(f"/api/sessions/{draft['id']}/start")
    assert r.status_code == 422 and "connection error" in r.json()["detail"]
    assert (await get(client, draft["id"]))["status"] == "draft"
    # The live page's Start button shows the cause in the panel and does not start.
    page = await client.post(f"/sessions/{draft['id']}/start", headers={"HX-Request": "true"})
    assert page.status_code == 422
    assert 'id="action-notice"' in page.text and "connection error" in page.text
    assert (await get(client, draft["id"]))["status"] == "draft"

    # The simulator needs no test; a provider that has answered once is not tested again.
    ok = await create(client, pillar_ids=pillars, auto_start=True)
    assert ok["status"] == "running"
    await client.post(f"/api/sessions/{ok['id']}/cancel")


async def test_identical_setup_errors_pause_the_session_with_the_reason(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int], broken_model: dict[str, Any]
) -> None:
    s = await create(client, pillar_ids=pillars, judge_model_id=broken_model["id"], worker_count=1)
    total = s["total"]
    assert total > 4 * BREAKER_N
    # A session that started while its provider still worked: running, then the provider broke.
    async with app.state.sessionmaker() as db:
        await db.execute(
            update(JudgeSession).where(JudgeSession.id == s["id"]).values(status="running")
        )
        await db.commit()
    pool = comparison_pool(
        engine=app.state.engine,
        llm=app.state.llm,
        hub=app.state.events,
        poll_s=0.2,
        concurrency=1,
        breaker_errors=BREAKER_N,
    )
    await pool.start()
    try:
        out = await wait_status(client, s["id"], "paused", "completed", "failed")
    finally:
        await pool.stop()
    assert out["status"] == "paused"
    assert f"{BREAKER_N} identical provider errors" in out["error"]
    assert "connection error" in out["error"]
    # The queue was not burned: a handful of calls, most comparisons untouched.
    await app.state.llm.flush()
    async with app.state.sessionmaker() as db:
        calls = await db.scalar(
            select(func.count()).select_from(LLMCall).where(LLMCall.session_id == s["id"])
        )
    # (Results are written in batches, so a few more calls than N may finish before the
    # trip; each attempt is one call, the provider retrying nothing.)
    assert calls is not None and BREAKER_N <= calls <= BREAKER_N + 8 < total // 2
    assert out["counts"]["completed"] == 0
    assert out["counts"]["pending"] >= total - calls

    live = await client.get(f"/sessions/{s['id']}")
    assert 'id="session-paused-reason"' in live.text and "identical provider errors" in live.text
    resumed = await client.post(f"/api/sessions/{s['id']}/resume")
    assert resumed.status_code == 200 and resumed.json()["error"] is None
    await client.post(f"/api/sessions/{s['id']}/cancel")
