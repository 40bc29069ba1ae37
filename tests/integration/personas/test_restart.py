"""The loop survives restarts: pause mid-iteration, stop the app, resume in a new app on the
same database; two apps never run one persona; a restarted app resumes training by itself.
No model call is repeated for a result already stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import func, select

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from llmjudge.personas.models import PersonaDecision, TaskOutput
from llmjudge.providers.models import LLMCall
from tests.conftest import ADMIN_TOKEN, make_client

# Few calls in flight so that a pause lands mid-step whatever the machine's speed.
SLOW = 2


@asynccontextmanager
async def running(
    settings: Settings, concurrency: int = 16
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """A whole app (lifespan: runner, hub, model service) and a client of it."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        app.state.persona_runner.concurrency = concurrency
        async with make_client(app, ADMIN_TOKEN) as c:
            yield c, app


async def _count(app: FastAPI, stmt: Any) -> int:
    async with app.state.sessionmaker() as db:
        return int(await db.scalar(stmt) or 0)


def _outputs(pid: int) -> Any:
    return select(func.count()).where(TaskOutput.persona_id == pid)


def _decisions(pid: int) -> Any:
    return select(func.count()).where(PersonaDecision.persona_id == pid)


def _calls(pid: int, purpose: str) -> Any:
    return select(func.count()).where(LLMCall.persona_id == pid, LLMCall.purpose == purpose)


async def _until(check: Callable[[], Any]) -> None:
    """Poll ``check`` until it is true (at most 90 s: an iteration of a template's 360
    pairs is 720 simulated calls of about 250 ms)."""
    async with asyncio.timeout(90):
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)


async def _status(c: httpx.AsyncClient, pid: int) -> dict[str, Any]:
    return (await c.get(f"/api/personas/{pid}/training/status")).json()


async def test_pause_restart_resume_without_repeating_calls(settings: Settings) -> None:
    async with running(settings, concurrency=SLOW) as (c, app):
        r = await c.post("/api/personas/from-template/customer-support")
        pid, total = r.json()["id"], r.json()["pair_count"]
        assert (await c.post(f"/api/personas/{pid}/training/start")).status_code == 200

        async def some_outputs() -> bool:
            return await _count(app, _outputs(pid)) >= 3

        await _until(some_outputs)
        r = await c.post(f"/api/personas/{pid}/training/pause")
        assert r.json()["status"] == "paused"
    # The app is shut down: calls in flight at the pause were finished and stored.
    async with running(settings) as (c, app):
        stored = await _count(app, _outputs(pid))
        assert 3 <= stored < total, "the pause should land mid-iteration"
        assert await _count(app, _calls(pid, "persona_task")) == stored
        status = await _status(c, pid)
        assert status["status"] == "paused" and status["iteration"]["status"] == "generating"
        assert not status["running_here"]
        assert (await c.post(f"/api/personas/{pid}/training/resume")).status_code == 200

        async def reviewable() -> bool:
            it = (await _status(c, pid))["iteration"]
            return it["status"] == "awaiting_review"

        await _until(reviewable)
        await app.state.llm.flush()
        # Only the missing answers were asked for.
        assert await _count(app, _outputs(pid)) == total
        assert await _count(app, _calls(pid, "persona_task")) == total
        assert await _count(app, _calls(pid, "persona_judge")) == total
        assert await _count(app, _decisions(pid)) == total


async def test_two_apps_share_a_persona_and_a_restart_resumes_it(settings: Settings) -> None:
    async with (
        running(settings, concurrency=SLOW) as (a, app_a),
        running(settings, concurrency=SLOW) as (_, app_b),
    ):
        r = await a.post("/api/personas/from-template/summaries")
        pid, total = r.json()["id"], r.json()["pair_count"]
        await a.post(f"/api/personas/{pid}/training/start")
        app_b.state.persona_runner.wake()

        # Answering is enough to tell who runs it (judging would wait for all the
        # template's answers, minutes at two calls in flight).
        async def answering() -> bool:
            return await _count(app_a, _outputs(pid)) >= 3

        await _until(answering)
        runners = [x.state.persona_runner for x in (app_a, app_b)]
        assert [r.is_running(pid) for r in runners].count(True) == 1
    # Both apps stopped while the persona was still training (no pause).
    async with running(settings) as (c, app):
        assert (await _status(c, pid))["status"] == "training"

        async def reviewable() -> bool:
            it = (await _status(c, pid))["iteration"]
            return it["status"] == "awaiting_review"

        await _until(reviewable)  # resumed by the new app's runner on its own
        await app.state.llm.flush()
        # Each answer and each label was asked for exactly once across the three apps.
        assert await _count(app, _calls(pid, "persona_task")) == total
        assert await _count(app, _calls(pid, "persona_judge")) == total
        assert await _count(app, _decisions(pid)) == total


async def test_a_worker_process_trains_personas(settings: Settings) -> None:
    """`llmjudge worker` runs persona training too: with no runner in the web app, a worker
    process alone takes the persona through an iteration to human review."""
    from llmjudge.worker import run_worker_process

    web_only = settings.model_copy(update={"workers_enabled": False})
    async with running_web_only(web_only) as (c, app):
        r = await c.post("/api/personas/from-template/factual-qa")
        pid, total = r.json()["id"], r.json()["pair_count"]
        await c.post(f"/api/personas/{pid}/training/start")
        await asyncio.sleep(0.5)
        assert await _count(app, _outputs(pid)) == 0  # nobody is training it yet
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker_process(web_only, concurrency=8, stop=stop))
        try:

            async def reviewable() -> bool:
                it = (await _status(c, pid))["iteration"]
                return it is not None and it["status"] == "awaiting_review"

            await _until(reviewable)
        finally:
            stop.set()
            await worker
        assert await _count(app, _decisions(pid)) == total


@asynccontextmanager
async def running_web_only(
    settings: Settings,
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        assert app.state.persona_runner is None
        async with make_client(app, ADMIN_TOKEN) as c:
            yield c, app
