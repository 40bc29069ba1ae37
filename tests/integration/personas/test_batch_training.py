"""A persona trained in batch mode against the fake OpenAI batch server on 127.0.0.1: its
judge's labels of an iteration go through one batch job, each pair sent once and its
decision stored once while the training worker is killed at each stage (before upload,
after create, while polling, while applying), each call accounted once at the batch price;
a judge without a batch API (the simulator) is refused at start, or trains live when the
user chose that fallback."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from llmjudge.personas.loop import PersonaLoop
from llmjudge.personas.training import TrainingRunner
from llmjudge.providers.llm import LLMService
from tests.fakes.batches import BatchState, FakeAnthropicBatches, FakeOpenAIBatches

IN_PROCESS_WORKERS = False  # the tests run the training loop themselves
PRICE_IN, PRICE_OUT = 2.0, 8.0  # USD per million tokens, live


def label(body: dict[str, Any]) -> str:
    """The judge's label depends on the prompt (its length's parity), so a label applied
    to the wrong pair would show."""
    content = str(body["messages"][-1]["content"])
    verdict = "correct" if len(content) % 2 == 0 else "incorrect"
    return json.dumps({"label": verdict, "reasoning": f"{len(content)} chars", "confidence": 0.8})


async def batch_judge(
    client: httpx.AsyncClient, url: str, kind: str = "openai", **settings: Any
) -> int:
    r = await client.post(
        "/api/providers",
        json={
            "name": f"persona-batch {url}",
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
            "name": f"persona-batch judge {url}",
            "model": "judge-1",
            "input_price_per_million": PRICE_IN,
            "output_price_per_million": PRICE_OUT,
        },
    )
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


class Killed(Exception):
    """The training worker dies here (a stage hook raising it)."""


async def train_until_review(
    app: FastAPI, pid: int, kills: list[str], *, once: bool = False
) -> list[str]:
    """Run fresh training loops of persona ``pid`` until it waits for reviews (``once``:
    until the first kill); each stage in ``kills`` kills the worker once when reached.
    Returns the stages killed at."""
    killed: list[str] = []
    left = list(kills)

    async def hook(stage: str, job_id: int) -> None:
        if stage in left:
            left.remove(stage)
            killed.append(stage)
            raise Killed(stage)

    for _ in range(50):
        llm = LLMService(app.state.sessionmaker, app.state.settings)  # a fresh process
        runner = TrainingRunner(
            engine=app.state.engine,
            sessionmaker=app.state.sessionmaker,
            llm=llm,
            batch_poll_s=0.01,
            batch_poll_max_s=0.02,
            batch_hook=hook,
        )
        try:
            await asyncio.wait_for(PersonaLoop(runner, pid, asyncio.Event()).run(), 120)
            return killed
        except Killed:
            if once:
                return killed
        finally:
            await llm.flush()
            await llm.aclose()
    raise AssertionError("the persona never reached its review")


async def rows(app: FastAPI, sql: str, **params: Any) -> list[Any]:
    async with app.state.engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def test_judge_labels_in_batch_survive_a_kill_at_every_stage(
    app: FastAPI, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    fake = FakeOpenAIBatches(BatchState(path=tmp_path / "openai.json", responder=label))
    await fake.start()
    try:
        # 200 requests per job at most: the iteration's labels take two jobs, one after
        # the other.
        judge = await batch_judge(client, fake.base_url, batch_max_requests=200)
        r = await client.post(
            "/api/personas/from-template/summaries", json={"judge_model_id": judge}
        )
        assert r.status_code == 201, r.text
        pid, total = r.json()["id"], r.json()["pair_count"]
        # The estimate shows both prices: the judge's labels at half price in batch.
        est = (await client.get(f"/api/personas/{pid}/estimate")).json()
        judge_usd = est["per_model"]["judge"]["cost_usd"] * r.json()["max_iterations"]
        assert judge_usd > 0 and est["batch_unavailable"] is None
        assert est["batch_cost_usd"] == pytest.approx(
            est["max_iterations"]["cost_usd"] - 0.5 * judge_usd
        )
        r = await client.post(f"/api/personas/{pid}/training/start", json={"execution": "batch"})
        assert r.status_code == 200, r.text
        assert r.json()["execution"] == "batch"
        stages = ["before_upload", "after_create", "polling", "applying"]
        assert await train_until_review(app, pid, stages) == stages

        (it,) = await rows(
            app, "SELECT id, status FROM persona_iterations WHERE persona_id = :p", p=pid
        )
        assert it[1] == "awaiting_review"
        # Every pair was sent in exactly one job and decided exactly once, by its own line.
        sent = Counter(fake.state.submitted())
        assert len(sent) == total and set(sent.values()) == {1}
        decisions = await rows(
            app,
            "SELECT d.pair_id, d.judge_label, d.judge_reasoning, d.judge_confidence "
            "FROM persona_decisions d WHERE d.iteration_id = :i",
            i=it[0],
        )
        assert set(sent) == {f"p{d[0]}-a1" for d in decisions} and len(decisions) == total
        assert {d[3] for d in decisions} == {0.8}
        for _, verdict, reasoning, _ in decisions:  # the label of that pair's own prompt
            chars = int(reasoning.split()[0])
            assert verdict == ("correct" if chars % 2 == 0 else "incorrect")
        assert len({d[1] for d in decisions}) == 2
        # Each label accounted once, at half the live price of its tokens.
        calls = await rows(
            app,
            "SELECT related->>'pair_id', input_tokens, output_tokens, cost_usd, purpose "
            "FROM llm_calls WHERE persona_id = :p AND model_id = :m",
            p=pid,
            m=judge,
        )
        assert Counter(c[0] for c in calls) == Counter({str(d[0]): 1 for d in decisions})
        assert {c[4] for c in calls} == {"persona_judge"}
        tokens_in, tokens_out = sum(c[1] for c in calls), sum(c[2] for c in calls)
        live = (tokens_in * PRICE_IN + tokens_out * PRICE_OUT) / 1_000_000
        assert tokens_in > 0 and sum(c[3] for c in calls) == pytest.approx(0.5 * live, rel=1e-9)
        # The job and its state, through the API.
        listed = (await client.get(f"/api/personas/{pid}/batches")).json()
        assert [(b["state"], b["requests"]) for b in listed] == [
            ("completed", 200),
            ("completed", total - 200),
        ]
        assert all(b["applied_at"] and b["provider_batch_id"].startswith("batch_") for b in listed)
        page = await client.get(f"/personas/{pid}/progress")
        assert page.status_code == 200 and 'id="batches-panel"' in page.text
        assert listed[0]["provider_batch_id"] in page.text
    finally:
        await fake.stop()


async def test_anthropic_partial_failures_end_only_their_own_pairs(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """An expired and a server-error request are asked again in a second job; a malformed
    line is its pair's unreadable label with the reason; the rest apply from the first,
    once, though the worker died while applying it."""
    fake = FakeAnthropicBatches(BatchState(responder=label))
    await fake.start()
    try:
        judge = await batch_judge(client, fake.base_url, "anthropic")
        r = await client.post(
            "/api/personas/from-template/factual-qa", json={"judge_model_id": judge}
        )
        pid, total = r.json()["id"], r.json()["pair_count"]
        r = await client.post(
            f"/api/personas/{pid}/training/start",
            json={"execution": "batch", "batch_fallback": "none"},
        )
        assert r.status_code == 200 and r.json()["execution"] == "batch", r.text
        pairs = [p["id"] for p in (await client.get(f"/api/personas/{pid}/training-pairs")).json()]
        expired, errored, broken = pairs[:3]
        fake.state.expire_ids = {f"p{expired}-a1"}
        fake.state.error_ids = {f"p{errored}-a1"}
        fake.state.malformed_ids = {f"p{broken}-a1"}
        # Killed while applying the first job: applied again, it still goes on.
        assert await train_until_review(app, pid, ["applying"]) == ["applying"]

        jobs = await rows(
            app,
            "SELECT id, state, requests, applied_at IS NOT NULL FROM provider_batches "
            "WHERE persona_id = :p ORDER BY id",
            p=pid,
        )
        assert [(j[1], j[2], j[3]) for j in jobs] == [
            ("completed", total, True),
            ("completed", 2, True),
        ]
        again = await rows(
            app, "SELECT custom_id FROM provider_batch_requests WHERE batch_id = :b", b=jobs[1][0]
        )
        assert {a[0] for a in again} == {f"p{expired}-a2", f"p{errored}-a2"}
        decisions = {
            d[0]: d[1:]
            for d in await rows(
                app,
                "SELECT pair_id, parse_error, judge_reasoning FROM persona_decisions "
                "WHERE persona_id = :p",
                p=pid,
            )
        }
        assert len(decisions) == total
        assert decisions[broken][0] and "malformed" in decisions[broken][1]
        assert not decisions[expired][0] and not decisions[errored][0]
        assert sum(1 for d in decisions.values() if d[0]) == 1
        # Accounted once per answered label (the broken line had no reply to account).
        calls = await rows(
            app,
            "SELECT related->>'pair_id', cost_usd, input_tokens, output_tokens FROM llm_calls "
            "WHERE persona_id = :p AND model_id = :m",
            p=pid,
            m=judge,
        )
        assert Counter(c[0] for c in calls) == Counter(
            {str(pair): 1 for pair in decisions if pair != broken}
        )
        live = sum(c[2] * PRICE_IN + c[3] * PRICE_OUT for c in calls) / 1_000_000
        assert sum(c[1] for c in calls) == pytest.approx(0.5 * live, rel=1e-9)
    finally:
        await fake.stop()


async def test_unanswered_labels_go_live_with_the_fallback_or_pause_without(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """batch_fallback live: an expired request is labelled live at once (at the live
    price). Without it, a job that labels nothing pauses the persona with the reason, and
    a resume sends the answers again in a new job."""
    fake = FakeOpenAIBatches(BatchState(responder=label))
    await fake.start()
    try:
        judge = await batch_judge(client, fake.base_url)
        made = []
        for template, fallback in (("summaries", "live"), ("factual-qa", "none")):
            r = await client.post(
                f"/api/personas/from-template/{template}", json={"judge_model_id": judge}
            )
            pid = r.json()["id"]
            r = await client.post(
                f"/api/personas/{pid}/training/start",
                json={"execution": "batch", "batch_fallback": fallback},
            )
            assert r.status_code == 200, r.text
            ids = [
                p[0]
                for p in await rows(
                    app, "SELECT id FROM persona_pairs WHERE persona_id = :p", p=pid
                )
            ]
            made.append((pid, ids))
        (live_pid, live_ids), (stuck_pid, stuck_ids) = made
        fake.state.expire_ids = {f"p{live_ids[0]}-a1"}
        fake.state.error_ids = {f"p{i}-a1" for i in stuck_ids}

        await train_until_review(app, live_pid, [])
        calls = await rows(
            app,
            "SELECT related->>'pair_id', related ? 'batch', cost_usd, input_tokens, "
            "output_tokens FROM llm_calls WHERE persona_id = :p AND model_id = :m",
            p=live_pid,
            m=judge,
        )
        assert Counter(c[0] for c in calls) == Counter({str(i): 1 for i in live_ids})
        (expired,) = [c for c in calls if c[0] == str(live_ids[0])]
        assert not expired[1]  # labelled live, at the live price
        assert expired[2] == pytest.approx((expired[3] * PRICE_IN + expired[4] * PRICE_OUT) / 1e6)
        assert all(c[1] for c in calls if c is not expired)
        assert (
            len(
                await rows(app, "SELECT id FROM provider_batches WHERE persona_id = :p", p=live_pid)
            )
            == 1
        )

        await train_until_review(app, stuck_pid, [])
        status = (await client.get(f"/api/personas/{stuck_pid}/training/status")).json()
        assert status["status"] == "paused"
        assert "labelled nothing" in status["status_reason"] and "resume" in status["status_reason"]
        fake.state.error_ids = set()
        r = await client.post(f"/api/personas/{stuck_pid}/training/resume")
        assert r.status_code == 200 and r.json()["execution"] == "batch", r.text
        await train_until_review(app, stuck_pid, [])
        jobs = await rows(
            app,
            "SELECT requests, errored FROM provider_batches WHERE persona_id = :p ORDER BY id",
            p=stuck_pid,
        )
        assert jobs == [(len(stuck_ids), len(stuck_ids)), (len(stuck_ids), 0)]
        decided = await rows(
            app, "SELECT count(*) FROM persona_decisions WHERE persona_id = :p", p=stuck_pid
        )
        assert decided == [(len(stuck_ids),)]
    finally:
        await fake.stop()


async def test_resuming_live_cancels_the_job_in_flight_and_labels_live(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Paused with a job at the provider and resumed live: the job is cancelled there and
    closed unapplied, and every answer is labelled live, once."""
    fake = FakeOpenAIBatches(BatchState(responder=label, polls_per_step=10**6))
    await fake.start()
    try:
        judge = await batch_judge(client, fake.base_url)
        r = await client.post(
            "/api/personas/from-template/customer-support", json={"judge_model_id": judge}
        )
        pid, total = r.json()["id"], r.json()["pair_count"]
        await client.post(f"/api/personas/{pid}/training/start", json={"execution": "batch"})
        # The worker dies while the job waits at the provider (it never ends by itself).
        assert await train_until_review(app, pid, ["polling"], once=True) == ["polling"]
        r = await client.post(f"/api/personas/{pid}/training/pause")
        assert r.json()["status"] == "paused"
        r = await client.post(f"/api/personas/{pid}/training/resume", json={"execution": "live"})
        assert r.status_code == 200 and r.json()["execution"] == "live", r.text
        await train_until_review(app, pid, [])
        (job,) = (await client.get(f"/api/personas/{pid}/batches")).json()
        assert job["applied_at"] and "switched to live" in job["error"]
        (remote,) = fake.state.jobs.values()
        assert remote["status"] in ("cancelling", "cancelled")
        calls = await rows(
            app,
            "SELECT related->>'pair_id', related ? 'batch' FROM llm_calls "
            "WHERE persona_id = :p AND model_id = :m",
            p=pid,
            m=judge,
        )
        assert len(calls) == total and not any(c[1] for c in calls)
        assert len({c[0] for c in calls}) == total
    finally:
        await fake.stop()


async def test_deleting_a_persona_cancels_its_job_at_the_provider(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    fake = FakeOpenAIBatches(BatchState(responder=label, polls_per_step=10**6))
    await fake.start()
    try:
        judge = await batch_judge(client, fake.base_url)
        r = await client.post(
            "/api/personas/from-template/summaries", json={"judge_model_id": judge}
        )
        pid = r.json()["id"]
        await client.post(f"/api/personas/{pid}/training/start", json={"execution": "batch"})
        assert await train_until_review(app, pid, ["polling"], once=True) == ["polling"]

        def state() -> str:
            (remote,) = fake.state.jobs.values()
            return str(remote["status"])

        assert state() not in ("cancelling", "cancelled")
        r = await client.delete(f"/api/personas/{pid}")
        assert r.status_code == 409  # still training: nothing changes
        assert state() not in ("cancelling", "cancelled")
        await client.post(f"/api/personas/{pid}/training/pause")
        assert (await client.delete(f"/api/personas/{pid}")).status_code == 204
        assert state() in ("cancelling", "cancelled")
        assert await rows(app, "SELECT id FROM provider_batches WHERE persona_id = :p", p=pid) == []
    finally:
        await fake.stop()


async def test_a_job_that_would_pass_the_budget_is_not_sent(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    fake = FakeOpenAIBatches(BatchState(responder=label))
    await fake.start()
    try:
        judge = await batch_judge(client, fake.base_url)
        r = await client.post(
            "/api/personas/from-template/summaries", json={"judge_model_id": judge}
        )
        pid = r.json()["id"]
        r = await client.patch(f"/api/personas/{pid}", json={"budget_usd": 0.0001})
        assert r.status_code == 200, r.text
        await client.post(f"/api/personas/{pid}/training/start", json={"execution": "batch"})
        await train_until_review(app, pid, [])
        status = (await client.get(f"/api/personas/{pid}/training/status")).json()
        assert status["status"] == "paused"
        assert status["status_reason"].startswith("budget reached: budget of $0.0001")
        assert "would be passed" in status["status_reason"]
        assert fake.state.jobs == {}  # nothing sent, nothing stored
        assert await rows(app, "SELECT id FROM provider_batches WHERE persona_id = :p", p=pid) == []
    finally:
        await fake.stop()


async def test_a_judge_without_a_batch_api_is_refused_or_trains_live(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    r = await client.post("/api/personas/from-template/factual-qa")
    pid = r.json()["id"]
    est = (await client.get(f"/api/personas/{pid}/estimate")).json()
    assert est["batch_cost_usd"] is None and "simulator" in est["batch_unavailable"]
    r = await client.post(f"/api/personas/{pid}/training/start", json={"execution": "batch"})
    assert r.status_code == 422
    assert "simulator has no batch API" in r.text and "batch_fallback live" in r.text
    assert (await client.get(f"/api/personas/{pid}")).json()["status"] == "draft"
    page = await client.get(f"/personas/{pid}")
    assert 'id="estimate-batch"' in page.text and 'id="start-execution"' in page.text
    r = await client.post(f"/personas/{pid}/actions/start", data={"execution": "batch"})
    assert r.status_code == 422 and "simulator has no batch API" in r.text
    r = await client.post(
        f"/api/personas/{pid}/training/start",
        json={"execution": "batch", "batch_fallback": "live"},
    )
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["execution"]) == ("training", "live")
    assert (await client.get(f"/api/personas/{pid}/batches")).json() == []
