"""Open SSE streams re-check their credentials (issue 14): a stream whose token is revoked,
or whose user is deactivated, ends within the re-check interval; a valid one keeps going."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from llmjudge.infra.config import Settings
from tests.conftest import make_client
from tests.integration.auth.test_auth import new_user
from tests.integration.sessions.test_sessions import create, fast_simulator, seed_threads

IN_PROCESS_WORKERS = False
RECHECK_S = 0.3


@pytest.fixture(scope="module")
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"sse_recheck_s": RECHECK_S})


async def _token(client: httpx.AsyncClient, user_id: int) -> tuple[int, str]:
    r = await client.post(
        "/api/tokens", json={"name": "tv", "role": "reviewer", "user_id": user_id}
    )
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["token"]


async def test_streams_end_when_their_credentials_go(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await fast_simulator(client)
    pillars = await seed_threads(client, 6, prefix="sse")
    sid = (await create(client, pillar_ids=pillars, comparison_mode="round_robin"))["id"]
    viewer = await new_user(client, "viewer", "reviewer")
    other = await new_user(client, "other", "reviewer")
    token_id, revoked = await _token(client, viewer["id"])
    _, deactivated = await _token(client, other["id"])
    _, kept = await _token(client, viewer["id"])

    async def stream(token: str) -> str:
        async with make_client(app, token) as c:
            r = await c.get(f"/api/sessions/{sid}/events")  # ASGITransport: returns at the end
            assert r.status_code == 200
            return r.text

    tasks = {t: asyncio.create_task(stream(t)) for t in (revoked, deactivated, kept)}
    await asyncio.sleep(2 * RECHECK_S)
    assert not any(t.done() for t in tasks.values())  # all three alive while valid
    assert (await client.delete(f"/api/tokens/{token_id}")).status_code == 200
    r = await client.patch(f"/api/users/{other['id']}", json={"is_active": False})
    assert r.status_code == 200, r.text
    async with asyncio.timeout(10 * RECHECK_S):
        bodies = await asyncio.gather(tasks[revoked], tasks[deactivated])
    for body in bodies:
        assert "event: ready" in body and "event: closed" in body
    await asyncio.sleep(2 * RECHECK_S)
    assert not tasks[kept].done()  # a valid stream is never cut
    tasks[kept].cancel()
    await asyncio.gather(tasks[kept], return_exceptions=True)
