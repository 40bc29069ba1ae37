"""Accounting rows survive a database outage (issue 28, item 3): a failed batch is kept and
retried, a full buffer makes ``record()`` wait instead of dropping, and a write whose commit
succeeded but whose reply was lost is not stored twice on retry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.app import create_app
from llmjudge.infra.config import Settings
from llmjudge.infra.db.embedded import EmbeddedPostgres
from llmjudge.providers.gateway import CallRecord
from llmjudge.providers.models import LLMCall
from llmjudge.providers.store import PgAccounting
from tests.conftest import ADMIN_TOKEN

pytestmark = pytest.mark.slow


def rec(session_id: int, i: int) -> CallRecord:
    return CallRecord(
        purpose="outage",
        provider_id=1,
        model="m",
        input_tokens=i,
        output_tokens=0,
        cost_usd=0.0,
        latency_s=0.0,
        attempts=1,
        cache_hit=False,
        status="ok",
        error=None,
        related={"session_id": session_id},
    )


async def stored(app: FastAPI, session_id: int) -> tuple[int, int]:
    """(rows, distinct input_tokens) of ``session_id``: equal when nothing is doubled."""
    async with app.state.sessionmaker() as db:
        row = (
            await db.execute(
                select(func.count(), func.count(func.distinct(LLMCall.input_tokens))).where(
                    LLMCall.session_id == session_id
                )
            )
        ).one()
    return row[0], row[1]


async def flush_until_written(acc: PgAccounting, limit_s: float = 30) -> None:
    # The pool's first connections after a restart may be dead ones: a retry is expected.
    deadline = asyncio.get_running_loop().time() + limit_s
    while not await acc.flush():
        assert asyncio.get_running_loop().time() < deadline, "rows never written"
        await asyncio.sleep(0.2)


async def test_rows_recorded_while_the_database_is_down_are_written_once(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "pgdata")
    server.start()
    try:
        await server.ensure_database()
        settings = Settings(
            database_url=server.url(), data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            acc = PgAccounting(
                app.state.sessionmaker,
                flush_interval_s=0.05,
                batch_size=4,
                max_pending=10,
                max_backoff_s=0.2,
            )
            for i in range(3):  # written before the outage
                await acc.record(rec(901, i))
            await flush_until_written(acc)
            await asyncio.to_thread(server.stop)
            for i in range(3, 13):  # fills the buffer while every write fails
                await acc.record(rec(901, i))
            assert not await acc.flush()
            assert acc.pending == 10 and acc.failed_writes >= 1
            # Full: the next call waits for room rather than dropping its row.
            waiting = asyncio.create_task(acc.record(rec(901, 13)))
            await asyncio.sleep(0.5)
            assert not waiting.done()
            await asyncio.to_thread(server.start)
            await asyncio.wait_for(waiting, 30)
            await flush_until_written(acc)
            await acc.aclose()
            assert await stored(app, 901) == (14, 14)
            assert acc.unwritten == 0
    finally:
        server.stop()


async def test_a_commit_whose_reply_was_lost_is_not_written_twice(app: FastAPI) -> None:
    real = app.state.sessionmaker
    lost = {"replies": 1}

    def maker() -> AsyncSession:
        session = real()
        commit = session.commit

        async def commit_then_lose_reply() -> None:
            await commit()
            if lost["replies"]:
                lost["replies"] -= 1
                raise ConnectionResetError("connection reset after COMMIT")

        session.commit = commit_then_lose_reply  # type: ignore[method-assign]
        return session

    acc = PgAccounting(maker, flush_interval_s=30, batch_size=50)  # type: ignore[arg-type]
    for i in range(20):
        await acc.record(rec(902, i))
    assert not await acc.flush()  # it looked failed: the rows are kept
    assert acc.pending == 20
    assert await acc.flush()  # the retry inserts the same ids: nothing new
    await acc.aclose()
    assert await stored(app, 902) == (20, 20)


async def test_aclose_gives_up_after_its_timeout_and_says_how_many(
    app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    class Down:
        def __call__(self) -> Any:
            raise ConnectionRefusedError("database unreachable")

    acc = PgAccounting(Down(), flush_interval_s=30, close_timeout_s=0.5)  # type: ignore[arg-type]
    for i in range(7):
        await acc.record(rec(903, i))
    started = asyncio.get_running_loop().time()
    await acc.aclose()
    assert asyncio.get_running_loop().time() - started < 5
    assert acc.unwritten == 7
    assert "7 rows could not be written" in caplog.text
