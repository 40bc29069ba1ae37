"""A revoked token or a deactivated user ends its open SSE streams at once: auth announces
`credentials_changed` on the event bus and every stream re-checks then, not at its periodic
re-check (here 60 s, so only the announcement can end them within the test's 2 s)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from fastapi import FastAPI

from llmjudge.infra.config import Settings
from tests.conftest import make_client
from tests.integration.auth.test_auth import new_user
from tests.integration.infra.test_sse_credentials import _token
from tests.integration.sessions.test_sessions import create, fast_simulator, seed_threads

IN_PROCESS_WORKERS = False
ENDED_WITHIN_S = 2.0


@pytest.fixture(scope="module")
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"sse_recheck_s": 60.0})


async def test_revocation_ends_streams_at_once(app: FastAPI, client: httpx.AsyncClient) -> None:
    await fast_simulator(client)
    pillars = await seed_threads(client, 4, prefix="sse-now")
    sid = (await create(client, pillar_ids=pillars, comparison_mode="round_robin"))["id"]
    viewer = await new_user(client, "viewer-now", "reviewer")
    other = await new_user(client, "other-now", "reviewer")
    token_id, revoked = await _token(client, viewer["id"])
    _, deactivated = await _token(client, other["id"])
    _, kept = await _token(client, viewer["id"])

    async def stream(token: str) -> tuple[str, float]:
        async with make_client(app, token) as c:
            r = await c.get(f"/api/sessions/{sid}/events")  # ASGITransport: returns at the end
            assert r.status_code == 200
            return r.text, time.monotonic()

    tasks = {t: asyncio.create_task(stream(t)) for t in (revoked, deactivated, kept)}
    await asyncio.sleep(1.0)
    assert not any(t.done() for t in tasks.values())  # all three open while valid

    started = time.monotonic()
    assert (await client.delete(f"/api/tokens/{token_id}")).status_code == 200
    async with asyncio.timeout(ENDED_WITHIN_S):
        body, ended = await tasks[revoked]
    assert "event: ready" in body and "event: closed" in body
    assert "credentials_changed" not in body  # the announcement is not the client's business
    print(f"stream ended {ended - started:.3f} s after the revocation")

    started = time.monotonic()
    r = await client.patch(f"/api/users/{other['id']}", json={"is_active": False})
    assert r.status_code == 200, r.text
    async with asyncio.timeout(ENDED_WITHIN_S):
        body, ended = await tasks[deactivated]
    assert "event: closed" in body
    print(f"stream ended {ended - started:.3f} s after the deactivation")

    await asyncio.sleep(0.5)
    assert not tasks[kept].done()  # the re-check cut only what lost its credentials
    tasks[kept].cancel()
    await asyncio.gather(tasks[kept], return_exceptions=True)
