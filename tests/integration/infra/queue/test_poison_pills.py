"""Poison pills (issue 14): a judge answering NUL bytes must not stop the completer, and a
result the database refuses fails only its own item (bisected out of the batch), with the
reason, while the rest of the batch is written."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.infra.queue.pool import WorkerPool
from llmjudge.infra.queue.work import Written
from llmjudge.sessions.models import Comparison
from llmjudge.sessions.run.jobs import comparison_pool
from tests.integration.infra.queue.test_generic import Done, Job, Toy, rows
from tests.integration.infra.queue.test_generic import engine as engine  # noqa: F401 (fixture)
from tests.integration.sessions.test_sessions import (
    create,
    fast_simulator,
    seed_threads,
    wait_for,
    wait_status,
)

IN_PROCESS_WORKERS = False


class NulJudge:
    """The app's model service, but every answer carries NUL bytes (a hostile judge)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def model_info(self, model_id: int) -> Any:
        return await self.inner.model_info(model_id)

    async def chat(self, **kw: Any) -> Any:
        result = await self.inner.chat(**kw)
        return dataclasses.replace(result, text="\x00" + result.text + "\x00tail\x00")


async def test_a_judge_answering_nul_bytes_does_not_stop_the_session(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await fast_simulator(client)
    pillars = await seed_threads(client, 4, prefix="nul")
    pool = comparison_pool(
        engine=app.state.engine, llm=NulJudge(app.state.llm), hub=app.state.events, poll_s=0.2
    )
    await pool.start()
    try:
        s = await create(
            client,
            pillar_ids=pillars,
            comparison_mode="round_robin",
            position_swap=False,
            worker_count=4,
            auto_start=True,
        )
        out = await wait_status(client, s["id"], "completed", "failed")
    finally:
        await pool.stop(drain_timeout_s=2)
    assert out["completed"] + out["failed"] == out["total"] > 0
    async with app.state.sessionmaker() as db:
        raws = list(
            await db.scalars(
                select(Comparison.raw_response).where(Comparison.session_id == s["id"])
            )
        )
    assert raws and all(r is not None and "\x00" not in r and "tail" in r for r in raws)
    assert all("\ufffd" in r for r in raws)  # replaced, not silently dropped


class OneBadValue(Toy):
    """Squares, as Toy; a square beyond bigint is refused by the database. ``poisoned``
    fails the item with the reason (kept here: the toy table has no error column)."""

    def __init__(self) -> None:
        super().__init__(concurrency=8, latency_s=0.0)
        self.reasons: dict[int, str] = {}
        self.batch_sizes: list[int] = []

    async def write(self, conn: Any, results: Sequence[Done]) -> Written:
        self.batch_sizes.append(len(results))
        return await super().write(conn, results)

    def poisoned(self, result: Done, reason: str) -> Done:
        self.reasons[result.id] = reason
        return Done(result.id, result.worker_id, result.attempts, "failed", None)


@pytest.fixture
async def bad_group(engine: AsyncEngine) -> AsyncIterator[int]:  # noqa: F811
    grp = 9014
    async with engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO toy_jobs (grp, payload) SELECT :g, x FROM generate_series(1, 40) x"),
            {"g": grp},
        )
        await conn.execute(
            text("UPDATE toy_jobs SET payload = 4000000000 WHERE grp = :g AND payload = 17"),
            {"g": grp},
        )
    yield grp


async def test_a_refused_result_fails_alone_and_the_batch_is_written(
    engine: AsyncEngine,  # noqa: F811
    bad_group: int,
) -> None:
    kind = OneBadValue()
    pool: WorkerPool[Job, Done] = WorkerPool(
        engine=engine, kind=kind, concurrency=40, poll_s=0.1, listen=False
    )
    await pool.start()
    try:

        async def settled() -> bool:
            return all(r[1] in ("completed", "failed") for r in await rows(engine, bad_group))

        await wait_for(settled, 20)
    finally:
        await pool.stop(drain_timeout_s=2)
    got = await rows(engine, bad_group)
    bad = [r for r in got if r[5] == 4000000000]
    good = [r for r in got if r[5] != 4000000000]
    assert len(bad) == 1 and bad[0][1] == "failed" and bad[0][3] is None
    assert len(good) == 39 and all(r[1] == "completed" and r[3] == r[5] ** 2 for r in good)
    assert list(kind.reasons) == [bad[0][0]]
    assert "range" in kind.reasons[bad[0][0]].lower()
    assert pool._held == {}
