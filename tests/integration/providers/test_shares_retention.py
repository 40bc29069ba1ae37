"""Provider rate limits split across processes (heartbeats in ``llm_processes``), and the
retention of ``llm_calls`` / ``llm_cache``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from llmjudge.infra.db.engine import make_engine
from llmjudge.providers.base import ChatRequest, ProviderConfig
from llmjudge.providers.gateway import Gateway
from llmjudge.providers.models import LLMCacheEntry, LLMCall
from llmjudge.providers.retention import cleanup
from llmjudge.providers.shares import RateShares
from tests.fakes.servers import FakeOpenAI, FakeState

RPM = 600  # 10 requests per second for everyone together, bursts of 10


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(db_url, pool_size=4)
    async with eng.begin() as conn:
        await conn.execute(text("DELETE FROM llm_processes"))
    yield eng
    await eng.dispose()


async def _hammer(gateways: list[Gateway], seconds: float, fake: FakeOpenAI) -> int:
    """20 callers per gateway as fast as it lets them; the requests the fake server received
    in ``seconds``."""

    async def caller(gateway: Gateway) -> None:
        while True:
            await gateway.chat(1, ChatRequest("m", [{"role": "user", "content": "hi"}]))

    tasks = [asyncio.create_task(caller(g)) for g in gateways for _ in range(20)]
    start = fake.state.count
    await asyncio.sleep(seconds)
    received = fake.state.count - start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return received


async def test_two_processes_together_keep_the_configured_rate(engine: AsyncEngine) -> None:
    async with FakeOpenAI(FakeState(api_key=None, keep_requests=False)) as fake:
        cfg = ProviderConfig(1, "fake", "openai", base_url=fake.base_url, api_key="k", rpm=RPM)
        gateways = [Gateway(), Gateway()]
        shares = [RateShares(engine, g.set_rate_share, interval_s=0.2) for g in gateways]
        for g in gateways:
            g.register(cfg)
        for s in shares:
            await s.start()
        await asyncio.sleep(0.5)  # both heartbeats seen by both
        assert [s.live for s in shares] == [2, 2]
        assert [g.rate_share for g in gateways] == [0.5, 0.5]

        seconds = 3.0
        received = await _hammer(gateways, seconds, fake)
        # One rate for both: 10/s over 3 s plus one second's burst (split: 5 + 5). Limits
        # per process would let through twice as many (80).
        assert 20 <= received <= RPM / 60 * (seconds + 1) + 3

        # One process leaves: the other gets the whole rate back at its next heartbeat.
        await shares[0].stop()
        await asyncio.sleep(0.5)
        assert shares[1].live == 1 and gateways[1].rate_share == 1.0
        await shares[1].stop()
        for g in gateways:
            await g.aclose()
    async with engine.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM llm_processes")) == 0


async def test_a_dead_process_stops_counting_after_its_ttl(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO llm_processes (id, heartbeat_at) "
                "VALUES ('dead', now() - interval '1 hour'), ('alive', now())"
            )
        )
    share = RateShares(engine, lambda _s: None, ttl_s=15)
    assert await share.beat() == 2  # itself and "alive"; "dead" is forgotten
    async with engine.connect() as conn:
        ids = set((await conn.execute(text("SELECT id FROM llm_processes"))).scalars())
    assert "dead" not in ids
    await share.stop()


async def test_retention_deletes_old_rows_but_keeps_a_live_personas_calls(
    engine: AsyncEngine,
) -> None:
    now = datetime.now(UTC)
    old, recent = now - timedelta(days=100), now - timedelta(days=10)
    async with engine.begin() as conn:
        persona = await conn.scalar(
            text("INSERT INTO personas (name, task_prompt) VALUES ('kept', 'judge') RETURNING id")
        )
        call = "INSERT INTO llm_calls (created_at, provider_id, model, status, persona_id) "
        for _ in range(7):  # old, no persona: deleted (in batches of 2)
            await conn.execute(text(call + "VALUES (:t, 1, 'm', 'ok', NULL)"), {"t": old})
        await conn.execute(text(call + "VALUES (:t, 1, 'm', 'ok', :p)"), {"t": old, "p": persona})
        await conn.execute(text(call + "VALUES (:t, 1, 'm', 'ok', 999999)"), {"t": old})
        await conn.execute(text(call + "VALUES (:t, 1, 'm', 'ok', NULL)"), {"t": recent})
        for i, t in enumerate((old, old, old, recent)):
            await conn.execute(
                text("INSERT INTO llm_cache (key, result, created_at) VALUES (:k, '{}', :t)"),
                {"k": f"k{i}", "t": t},
            )
    done = await cleanup(engine, days=90, batch=2)
    assert (done.calls, done.cache) == (8, 3)  # 7 + the deleted persona's; 3 old entries
    async with engine.connect() as conn:
        left = (await conn.execute(select(LLMCall.persona_id, LLMCall.created_at))).all()
        assert len(left) == 2 and {p for p, _ in left} == {persona, None}
        assert await conn.scalar(select(func.count()).select_from(LLMCacheEntry)) == 1
    assert (await cleanup(engine, days=0)).calls == 0  # 0 keeps everything
