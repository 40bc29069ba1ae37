"""Batch sessions against fake OpenAI and Anthropic batch servers on 127.0.0.1: a session of
2,016 comparisons completes with every comparison sent once and applied once while the
batch worker is killed at each stage (before upload, after create, while polling, while
applying) and the provider restarts; partial failures (expired, errored, malformed lines)
end only their own comparisons; cancelling a session cancels its jobs; a judge without a
batch API is refused at create (or runs live when the user chose that fallback)."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from llmjudge.providers.llm import LLMService
from llmjudge.sessions.run.batches import BatchRunner
from tests.fakes.batches import BatchState, FakeAnthropicBatches, FakeOpenAIBatches

IN_PROCESS_WORKERS = False  # the tests run the batch worker themselves
PRICE_IN, PRICE_OUT = 2.0, 8.0  # USD per million tokens, live
_MARK = re.compile(r"\[\[(bt-\d+)\]\]")


def judge(body: dict[str, Any]) -> str:
    """A verdict that depends on the pair: the thread with the larger number wins."""
    content = str(body["messages"][-1]["content"])
    marks = _MARK.findall(content)
    if len(marks) < 2:
        return "OK"
    a, b = (int(m.split("-")[1]) for m in marks[:2])
    return json.dumps(
        {
            "winner": "A" if a > b else "B",
            "confidence": 0.8,
            "scores": {"A": {"quality": 3}, "B": {"quality": 3}},
            "reasoning": "the larger number",
        }
    )


@pytest.fixture(scope="module")
async def pillar_ids(client: httpx.AsyncClient) -> list[int]:
    rows = [
        {"pillar": f"bt{i % 2}", "external_id": f"bt-{i}", "content": f"[[bt-{i}]] answer {i}"}
        for i in range(64)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    return [
        p["id"] for p in (await client.get("/api/pillars")).json() if p["name"] in ("bt0", "bt1")
    ]


async def judge_model(
    client: httpx.AsyncClient, name: str, kind: str, url: str, **settings: Any
) -> int:
    r = await client.post(
        "/api/providers",
        json={
            "name": name,
            "kind": kind,
            "base_url": url,
            "api_key": "test-key",
            "settings": {"backoff_base_s": 0.01, "backoff_max_s": 0.02} | settings,
        },
    )
    assert r.status_code == 201, r.text
    r = await client.post(
        "/api/models",
        json={
            "provider_id": r.json()["id"],
            "name": name,
            "model": "judge-1",
            "input_price_per_million": PRICE_IN,
            "output_price_per_million": PRICE_OUT,
        },
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def batch_session(
    client: httpx.AsyncClient, pillar_ids: list[int], model_id: int, **body: Any
) -> int:
    r = await client.post(
        "/api/sessions",
        json={
            "session_name": "batch",
            "pillar_ids": pillar_ids,
            "comparison_mode": "free_for_all",
            "position_swap": False,
            "criteria": ["quality"],
            "judge_model_id": model_id,
            "execution": "batch",
            "auto_start": True,
        }
        | body,
    )
    assert r.status_code == 201, r.text
    assert r.json()["execution"] == "batch"
    return r.json()["id"]


class Killed(Exception):
    """The batch worker dies here (a stage hook raising it)."""


async def run_until_settled(
    app: FastAPI, sid: int, kills: list[str], *, on_kill: Any = None, limit: int = 400
) -> list[str]:
    """Run fresh batch workers on session ``sid`` until it needs no more turns; each stage in
    ``kills`` kills the worker once when it is reached. Returns the stages killed at."""
    killed: list[str] = []
    left = list(kills)

    async def hook(stage: str, job_id: int) -> None:
        if stage in left:
            left.remove(stage)
            killed.append(stage)
            raise Killed(stage)

    for _ in range(limit):
        llm = LLMService(app.state.sessionmaker, app.state.settings)  # a fresh process
        runner = BatchRunner(
            engine=app.state.engine, llm=llm, poll_s=0.01, poll_max_s=0.02, hook=hook
        )
        try:
            await asyncio.wait_for(runner.run(sid, asyncio.Event()), 120)
            return killed
        except Killed:
            if on_kill is not None:
                await on_kill(killed[-1])
        finally:
            await llm.aclose()
    raise AssertionError("the batch session never settled")


async def rows(app: FastAPI, sql: str, **params: Any) -> list[Any]:
    async with app.state.engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def test_openai_session_survives_a_kill_at_every_stage(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int], tmp_path: Path
) -> None:
    fake = FakeOpenAIBatches(BatchState(path=tmp_path / "openai.json", responder=judge))
    await fake.start()
    try:
        model = await judge_model(
            client,
            "oa-batch",
            "openai",
            fake.base_url,
            batch_max_requests=500,
            batch_max_in_flight=2,
        )
        sid = await batch_session(client, pillar_ids, model)

        async def restart_provider(stage: str) -> None:
            if stage == "polling":
                await fake.restart()  # the provider restarts too; its jobs survive

        killed = await run_until_settled(
            app,
            sid,
            ["before_upload", "after_create", "polling", "applying"],
            on_kill=restart_provider,
        )
        assert killed == ["before_upload", "after_create", "polling", "applying"]
        (s,) = await rows(
            app,
            "SELECT status, total, completed, failed, cost_usd, input_tokens, output_tokens "
            "FROM judge_sessions WHERE id = :s",
            s=sid,
        )
        assert s[:4] == ("completed", 2016, 2016, 0)
        comparisons = await rows(
            app, "SELECT id, status, attempts, winner FROM comparisons WHERE session_id = :s", s=sid
        )
        assert Counter(c[1] for c in comparisons) == {"completed": 2016}
        assert {c[2] for c in comparisons} == {1}  # claimed once: never re-sent
        # Every comparison was sent in exactly one job, and applied exactly once.
        sent = Counter(int(cid.split("-")[0][1:]) for cid in fake.state.submitted())
        assert sent == Counter({c[0]: 1 for c in comparisons})
        votes = await rows(
            app,
            "SELECT comparison_id, count(*) FROM comparison_votes WHERE session_id = :s "
            "GROUP BY comparison_id",
            s=sid,
        )
        assert len(votes) == 2016 and {v[1] for v in votes} == {1}
        jobs = await rows(
            app,
            "SELECT state, requests, applied_at IS NOT NULL FROM provider_batches "
            "WHERE session_id = :s",
            s=sid,
        )
        assert len(jobs) == 5 and sum(j[1] for j in jobs) == 2016  # 500 requests per job
        assert all(j[0] == "completed" and j[2] for j in jobs)
        # Batch prices: half the live price of the same tokens.
        live = (s[5] * PRICE_IN + s[6] * PRICE_OUT) / 1_000_000
        assert s[5] > 0 and s[4] == pytest.approx(0.5 * live, rel=1e-9)
        # The verdicts are the judge's (the larger number wins), read by the session's reader.
        threads = dict(await rows(app, "SELECT id, external_id FROM threads"))
        pairs = await rows(
            app,
            "SELECT thread_a_id, thread_b_id, winner FROM comparisons WHERE session_id = :s",
            s=sid,
        )
        number = {tid: int(str(ext).split("-")[1]) for tid, ext in threads.items() if ext}
        assert all((w == "A") == (number[a] > number[b]) for a, b, w in pairs)
    finally:
        await fake.stop()
