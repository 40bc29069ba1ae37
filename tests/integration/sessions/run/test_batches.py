"""Batch sessions against fake OpenAI and Anthropic batch servers on 127.0.0.1: a session of
2,016 comparisons completes with every comparison sent once and applied once while the
batch worker is killed at each stage (before upload, after create, while polling, while
applying) and the provider restarts; partial failures (expired, errored, malformed lines)
end only their own comparisons; cancelling a session cancels its jobs; a judge without a
batch API is refused at create (or runs live when the user chose that fallback); an adaptive
session sends each round as one job."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
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
        # The provider calls are accounted once each, at the batch price.
        calls = await rows(
            app, "SELECT comparison_id, cost_usd FROM llm_calls WHERE session_id = :s", s=sid
        )
        assert Counter(c[0] for c in calls) == Counter({c[0]: 1 for c in comparisons})
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
        # The jobs and their states, through the API and on the live page.
        listed = (await client.get(f"/api/sessions/{sid}/batches")).json()
        assert [b["state"] for b in listed] == ["completed"] * 5
        assert all(b["applied_at"] and b["provider_batch_id"].startswith("batch_") for b in listed)
        page = await client.get(f"/sessions/{sid}")
        assert page.status_code == 200 and 'id="batches-panel"' in page.text
        panel = await client.get(f"/sessions/{sid}/partials/batches")
        assert panel.status_code == 200 and listed[0]["provider_batch_id"] in panel.text
    finally:
        await fake.stop()


async def comparison_ids(app: FastAPI, sid: int) -> list[int]:
    return [
        r[0]
        for r in await rows(
            app, "SELECT id FROM comparisons WHERE session_id = :s ORDER BY id", s=sid
        )
    ]


async def test_partial_failures_end_only_their_own_comparison(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int], tmp_path: Path
) -> None:
    """An expired and a 500 request are asked again in a new job; a malformed line fails
    its comparison with the reason; the other 42 apply from the first job."""
    fake = FakeOpenAIBatches(BatchState(responder=judge))
    await fake.start()
    try:
        model = await judge_model(client, "oa-partial", "openai", fake.base_url)
        sid = await batch_session(client, pillar_ids, model, max_threads_per_pillar=5)
        expired, errored, broken = (await comparison_ids(app, sid))[:3]
        fake.state.expire_ids = {f"c{expired}-a1"}
        fake.state.error_ids = {f"c{errored}-a1"}
        fake.state.malformed_ids = {f"c{broken}-a1"}
        await run_until_settled(app, sid, [])
        got = {
            r[0]: r[1:]
            for r in await rows(
                app,
                "SELECT id, status, attempts, error FROM comparisons WHERE session_id = :s",
                s=sid,
            )
        }
        assert got[broken][:2] == ("failed", 1) and "malformed batch result" in got[broken][2]
        assert got[expired][:2] == ("completed", 2) and got[errored][:2] == ("completed", 2)
        others = [v for k, v in got.items() if k not in (expired, errored, broken)]
        assert len(others) == 42 and {v[:2] for v in others} == {("completed", 1)}
        (s,) = await rows(
            app, "SELECT status, completed, failed FROM judge_sessions WHERE id = :s", s=sid
        )
        assert s == ("completed", 44, 1)
        jobs = await rows(
            app,
            "SELECT requests, succeeded, errored FROM provider_batches WHERE session_id = :s ORDER BY id",
            s=sid,
        )
        assert jobs == [(45, 43, 2), (2, 2, 0)]  # the retries went in a second job
    finally:
        await fake.stop()


async def test_live_fallback_judges_expired_requests_live(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    fake = FakeOpenAIBatches(BatchState(responder=judge))
    await fake.start()
    try:
        model = await judge_model(client, "oa-fallback", "openai", fake.base_url)
        sid = await batch_session(
            client, pillar_ids, model, max_threads_per_pillar=3, batch_fallback="live"
        )
        first = (await comparison_ids(app, sid))[0]
        fake.state.expire_ids = {f"c{first}-a1"}
        fake.state.calls.clear()
        await run_until_settled(app, sid, [])
        (s,) = await rows(
            app, "SELECT status, completed, failed FROM judge_sessions WHERE id = :s", s=sid
        )
        assert s == ("completed", 15, 0)
        assert fake.state.calls.count("POST /v1/batches") == 1  # no second job
        assert fake.state.calls.count("POST /v1/chat/completions") == 1  # the expired one, live
    finally:
        await fake.stop()


async def test_anthropic_session_retries_expired_and_errored(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int], tmp_path: Path
) -> None:
    fake = FakeAnthropicBatches(BatchState(path=tmp_path / "anthropic.json", responder=judge))
    await fake.start()
    try:
        model = await judge_model(client, "an-batch", "anthropic", fake.base_url)
        sid = await batch_session(client, pillar_ids, model, max_threads_per_pillar=5)
        expired, errored = (await comparison_ids(app, sid))[:2]
        fake.state.expire_ids = {f"c{expired}-a1"}
        fake.state.error_ids = {f"c{errored}-a1"}

        async def restart(stage: str) -> None:
            await fake.restart()

        killed = await run_until_settled(app, sid, ["after_create", "polling"], on_kill=restart)
        assert killed == ["after_create", "polling"]
        (s,) = await rows(
            app,
            "SELECT status, completed, failed, cost_usd, input_tokens, output_tokens "
            "FROM judge_sessions WHERE id = :s",
            s=sid,
        )
        assert s[:3] == ("completed", 45, 0)
        assert s[3] == pytest.approx(0.5 * (s[4] * PRICE_IN + s[5] * PRICE_OUT) / 1_000_000)
        sent = Counter(cid.split("-")[0] for cid in fake.state.submitted())
        assert sent[f"c{expired}"] == 2 and sent[f"c{errored}"] == 2  # asked again, once
        assert len(sent) == 45 and sum(sent.values()) == 47  # the others exactly once
    finally:
        await fake.stop()


async def test_cancelling_a_session_cancels_its_jobs(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    fake = FakeAnthropicBatches(BatchState(responder=judge, polls_per_step=1000))
    await fake.start()
    try:
        model = await judge_model(client, "an-cancel", "anthropic", fake.base_url)
        sid = await batch_session(client, pillar_ids, model, max_threads_per_pillar=5)
        llm = LLMService(app.state.sessionmaker, app.state.settings)
        runner = BatchRunner(engine=app.state.engine, llm=llm, poll_s=0.01)
        for _ in range(3):  # create the job, poll it: still in progress
            await runner.step(sid)
        await llm.aclose()
        assert fake.state.calls.count("POST /v1/messages/batches") == 1
        r = await client.post(f"/api/sessions/{sid}/cancel")
        assert r.status_code == 200, r.text
        fake.state.polls_per_step = 1
        await run_until_settled(app, sid, [])
        assert any(c.endswith("/cancel") for c in fake.state.calls)
        statuses = Counter(
            r[0]
            for r in await rows(app, "SELECT status FROM comparisons WHERE session_id = :s", s=sid)
        )
        # The fake answered the first half before the cancel took effect: those are kept.
        assert statuses == {"completed": 22, "cancelled": 23}
        (s,) = await rows(app, "SELECT status, completed FROM judge_sessions WHERE id = :s", s=sid)
        assert s == ("cancelled", 22)
        (job,) = await rows(
            app,
            "SELECT state, applied_at IS NOT NULL FROM provider_batches WHERE session_id = :s",
            s=sid,
        )
        assert job == ("cancelled", True)
    finally:
        await fake.stop()


async def test_a_judge_without_a_batch_api_is_refused_at_create(
    client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    body = {
        "session_name": "sim-batch",
        "pillar_ids": pillar_ids,
        "comparison_mode": "free_for_all",
        "max_threads_per_pillar": 3,
        "execution": "batch",
    }
    before = len((await client.get("/api/sessions")).json())
    r = await client.post("/api/sessions", json=body)  # the built-in simulated judge
    assert r.status_code == 422, r.text
    assert "simulator has no batch API" in r.text and "batch_fallback" in r.text
    assert len((await client.get("/api/sessions")).json()) == before  # nothing stored
    r = await client.post("/api/sessions", json=body | {"batch_fallback": "live"})
    assert r.status_code == 201, r.text
    assert r.json()["execution"] == "live"


async def test_the_estimate_shows_live_and_batch_prices(
    client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    models = {m["name"]: m["id"] for m in (await client.get("/api/models")).json()}
    body = {"session_name": "e", "pillar_ids": pillar_ids, "comparison_mode": "free_for_all"}
    r = await client.post(
        "/api/sessions/estimate", json=body | {"judge_model_id": models["oa-batch"]}
    )
    assert r.status_code == 200, r.text
    est = r.json()
    assert est["cost_usd"] > 0 and est["batch_cost_usd"] == pytest.approx(0.5 * est["cost_usd"])
    r = await client.post("/api/sessions/estimate", json=body)  # the simulator
    assert r.json()["batch_cost_usd"] is None
    assert "no batch API" in r.json()["batch_unavailable"]


async def test_an_adaptive_session_sends_each_round_as_one_job(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int], tmp_path: Path
) -> None:
    """Issue 25 item 3: an adaptive session in batch plans a round, the round goes to the
    provider as one job, and the next round is planned from its applied results."""
    from llmjudge.sessions.adaptive.rounds import advance

    fake = FakeOpenAIBatches(BatchState(path=tmp_path / "adaptive.json", responder=judge))
    await fake.start()
    llm = LLMService(app.state.sessionmaker, app.state.settings)
    try:
        model = await judge_model(client, "oa-adaptive", "openai", fake.base_url)
        sid = await batch_session(
            client,
            pillar_ids,
            model,
            session_name="adaptive batch",
            comparison_mode="adaptive",
            position_swap=True,  # the schema's default, as before: adaptive.position decides
            seed=7,
            adaptive={"rule": "budget", "budget_comparisons": 200, "batch_size": 50},
        )
        runner = BatchRunner(engine=app.state.engine, llm=llm, poll_s=0.01, poll_max_s=0.02)
        for _ in range(400):  # the planner and the batch worker take turns
            if not await advance(app.state.sessionmaker, sid):
                break
            await runner.step(sid)
        else:
            raise AssertionError("the adaptive batch session never stopped")
        while (await runner.step(sid))[1]:  # the last round's job, if one is still open
            pass
        rounds = await rows(
            app,
            "SELECT first_position, size FROM adaptive_rounds WHERE session_id = :s "
            "AND size > 0 ORDER BY round",
            s=sid,
        )
        jobs = await rows(
            app,
            "SELECT j.state, min(c.queue_position), count(*) FROM provider_batches j "
            "JOIN provider_batch_requests q ON q.batch_id = j.id "
            "JOIN comparisons c ON c.id = q.comparison_id "
            "WHERE j.session_id = :s GROUP BY j.id ORDER BY j.id",
            s=sid,
        )
        assert len(rounds) >= 2  # more than one round, each planned from the last's results
        assert [(j[1], j[2]) for j in jobs] == [tuple(r) for r in rounds]  # a round = a job
        assert all(j[0] == "completed" for j in jobs)
        (s,) = await rows(
            app,
            "SELECT status, total, completed, stop_reason FROM judge_sessions WHERE id = :s",
            s=sid,
        )
        assert s[0] == "completed" and s[1] == s[2] == sum(r[1] for r in rounds)
        assert s[3] is not None
    finally:
        await llm.aclose()
        await fake.stop()
