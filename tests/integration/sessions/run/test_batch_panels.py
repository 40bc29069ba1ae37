"""Panel sessions in batch mode against fake OpenAI and Anthropic batch servers: each
member's calls go to its own provider's batch API (one job per member model), every
comparison ends once with every member's vote once while the batch worker is killed at
each stage, a member's broken line fails only that member's vote, an expired one is asked
again (a later job, or live), a panel of graders gets the mean of its grades, cancelling
cancels every member's job, and a member without a batch API is refused at create."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from llmjudge.providers.llm import LLMService
from llmjudge.sessions.run.batches import BatchRunner
from tests.fakes.batches import BatchState, FakeAnthropicBatches, FakeOpenAIBatches
from tests.integration.sessions.run.test_batches import (
    _MARK,
    PRICE_IN,
    PRICE_OUT,
    comparison_ids,
    judge,
    judge_model,
    pillar_ids,
    rows,
    run_until_settled,
)

__all__ = ["pillar_ids"]  # the module's fixture, shared

IN_PROCESS_WORKERS = False  # the tests run the batch worker themselves


async def second_model(client: httpx.AsyncClient, model_id: int, name: str) -> int:
    """Another model on the provider of ``model_id``."""
    provider = next(
        m["provider_id"] for m in (await client.get("/api/models")).json() if m["id"] == model_id
    )
    r = await client.post(
        "/api/models",
        json={
            "provider_id": provider,
            "name": name,
            "model": "judge-2",
            "input_price_per_million": PRICE_IN,
            "output_price_per_million": PRICE_OUT,
        },
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def panel_session(
    client: httpx.AsyncClient, pillar_ids: list[int], members: list[int], **body: Any
) -> int:
    r = await client.post(
        "/api/sessions",
        json={
            "session_name": "batch panel",
            "pillar_ids": pillar_ids,
            "comparison_mode": "free_for_all",
            "position_swap": False,
            "criteria": ["quality"],
            "panel": {"members": [{"model_id": m} for m in members], "rule": "majority"},
            "execution": "batch",
            "auto_start": True,
        }
        | body,
    )
    assert r.status_code == 201, r.text
    assert r.json()["execution"] == "batch"
    return r.json()["id"]


def member_of(custom_id: str) -> tuple[int, int]:
    """(comparison id, member) of a panel request's custom_id ``c<id>-a<n>-m<k>``."""
    c, _, m = custom_id.split("-")
    return int(c[1:]), int(m[1:])


async def test_a_mixed_provider_panel_survives_a_kill_at_every_stage(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int], tmp_path: Path
) -> None:
    openai = FakeOpenAIBatches(BatchState(path=tmp_path / "openai.json", responder=judge))
    anthropic = FakeAnthropicBatches(BatchState(path=tmp_path / "anthropic.json", responder=judge))
    await openai.start()
    await anthropic.start()
    try:
        oa = await judge_model(
            client,
            "pk-oa",
            "openai",
            openai.base_url,
            batch_max_requests=100,
            # two members' jobs per group against one in flight: a group at a time
            batch_max_in_flight=1,
        )
        oa2 = await second_model(client, oa, "pk-oa-2")
        an = await judge_model(client, "pk-an", "anthropic", anthropic.base_url)
        r = await client.patch(f"/api/models/{an}", json={"batch_discount": 0.4})
        assert r.status_code == 200, r.text
        sid = await panel_session(client, pillar_ids, [oa, oa2, an], max_threads_per_pillar=12)

        async def restart(stage: str) -> None:
            if stage == "polling":
                await openai.restart()
                await anthropic.restart()

        # after_create thrice: OpenAI jobs (found again by their metadata) and an Anthropic
        # one (by its size) created by a worker that died before recording them
        stages = ["before_upload", *["after_create"] * 3, "polling", "applying"]
        killed = await run_until_settled(app, sid, stages, on_kill=restart)
        assert Counter(killed) == Counter(stages)
        (s,) = await rows(
            app, "SELECT status, total, completed, failed FROM judge_sessions WHERE id = :s", s=sid
        )
        assert s == ("completed", 276, 276, 0)
        comparisons = await rows(
            app,
            "SELECT id, status, attempts, votes_cast, votes_asked FROM comparisons "
            "WHERE session_id = :s",
            s=sid,
        )
        assert {c[1:] for c in comparisons} == {("completed", 1, 3, 3)}
        # Every member's request sent once, to its own provider's batch API.
        sent_oa = Counter(member_of(cid) for cid in openai.state.submitted())
        sent_an = Counter(member_of(cid) for cid in anthropic.state.submitted())
        ids = [c[0] for c in comparisons]
        assert sent_oa == Counter({(c, k): 1 for c in ids for k in (0, 1)})
        assert sent_an == Counter({(c, 2): 1 for c in ids})
        # One job per member model: the OpenAI ones for 100 comparisons at most.
        jobs = await rows(
            app,
            "SELECT model_id, count(*), sum(requests) FROM provider_batches "
            "WHERE session_id = :s AND applied_at IS NOT NULL GROUP BY model_id",
            s=sid,
        )
        assert sorted(jobs) == sorted([(oa, 3, 276), (oa2, 3, 276), (an, 3, 276)])
        # One OpenAI job in flight allowed: each group waited for the one before it.
        spans = await rows(
            app,
            "SELECT min(created_at), max(applied_at) FROM provider_batches "
            "WHERE session_id = :s AND model_id = ANY(:m) GROUP BY created_at ORDER BY 1",
            s=sid,
            m=[oa, oa2],
        )
        assert len(spans) == 3
        assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
        # Every member's vote stored once, read by the session's reader.
        votes = await rows(
            app,
            "SELECT v.comparison_id, v.member, v.status, v.winner, v.cost_usd, "
            "v.input_tokens, v.output_tokens, c.winner FROM comparison_votes v "
            "JOIN comparisons c ON c.id = v.comparison_id WHERE v.session_id = :s",
            s=sid,
        )
        assert Counter((v[0], v[1]) for v in votes) == Counter(
            {(c, k): 1 for c in ids for k in (0, 1, 2)}
        )
        assert all(v[2] == "voted" and v[3] == v[7] for v in votes)
        # Each member at its own batch price: half of the OpenAI price, 60% of Anthropic's.
        keep = {0: 0.5, 1: 0.5, 2: 0.6}
        for v in votes:
            live = (v[5] * PRICE_IN + v[6] * PRICE_OUT) / 1_000_000
            assert v[5] > 0 and v[4] == pytest.approx(keep[v[1]] * live, rel=1e-9)
        # The provider calls accounted once each, per member.
        calls = await rows(
            app,
            "SELECT comparison_id, model_id, cost_usd FROM llm_calls WHERE session_id = :s",
            s=sid,
        )
        model = {0: oa, 1: oa2, 2: an}
        assert Counter((c[0], c[1]) for c in calls) == Counter(
            {(c, model[k]): 1 for c in ids for k in (0, 1, 2)}
        )
        (total,) = await rows(app, "SELECT cost_usd FROM judge_sessions WHERE id = :s", s=sid)
        assert total[0] == pytest.approx(sum(v[4] for v in votes), rel=1e-9)
        # The verdicts are the judge's: the larger number wins.
        threads = dict(await rows(app, "SELECT id, external_id FROM threads"))
        number = {tid: int(str(ext).split("-")[1]) for tid, ext in threads.items() if ext}
        pairs = await rows(
            app,
            "SELECT thread_a_id, thread_b_id, winner FROM comparisons WHERE session_id = :s",
            s=sid,
        )
        assert all((w == "A") == (number[a] > number[b]) for a, b, w in pairs)
    finally:
        await openai.stop()
        await anthropic.stop()


async def test_a_members_broken_line_fails_only_its_vote(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    """A malformed line is that member's missing vote with the reason (the other member
    decides); an expired one sends the comparison to a later job; the rest apply."""
    openai = FakeOpenAIBatches(BatchState(responder=judge))
    anthropic = FakeAnthropicBatches(BatchState(responder=judge))
    await openai.start()
    await anthropic.start()
    try:
        oa = await judge_model(client, "pp-oa", "openai", openai.base_url)
        an = await judge_model(client, "pp-an", "anthropic", anthropic.base_url)
        sid = await panel_session(client, pillar_ids, [oa, an], max_threads_per_pillar=3)
        broken, expired = (await comparison_ids(app, sid))[:2]
        openai.state.malformed_ids = {f"c{broken}-a1-m0"}
        anthropic.state.expire_ids = {f"c{expired}-a1-m1"}
        await run_until_settled(app, sid, [])
        got = {
            r[0]: r[1:]
            for r in await rows(
                app,
                "SELECT id, status, attempts, votes_cast FROM comparisons WHERE session_id = :s",
                s=sid,
            )
        }
        assert got[broken] == ("completed", 1, 1)
        assert got[expired] == ("completed", 2, 2)  # asked again, all members, in a new job
        others = [v for k, v in got.items() if k not in (broken, expired)]
        assert len(others) == 13 and set(others) == {("completed", 1, 2)}
        (vote,) = await rows(
            app,
            "SELECT status, error FROM comparison_votes WHERE comparison_id = :c AND member = 0",
            c=broken,
        )
        assert vote[0] == "missing" and "malformed batch result" in vote[1]
        sent = Counter(member_of(c) for c in openai.state.submitted())
        sent += Counter(member_of(c) for c in anthropic.state.submitted())
        assert sent[(expired, 0)] == 2 and sent[(expired, 1)] == 2
        assert sum(sent.values()) == 2 * 15 + 2
        (s,) = await rows(
            app, "SELECT status, completed, failed FROM judge_sessions WHERE id = :s", s=sid
        )
        assert s == ("completed", 15, 0)
    finally:
        await openai.stop()
        await anthropic.stop()


async def test_live_fallback_asks_an_expired_member_live(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    openai = FakeOpenAIBatches(BatchState(responder=judge))
    anthropic = FakeAnthropicBatches(BatchState(responder=judge))
    await openai.start()
    await anthropic.start()
    try:
        oa = await judge_model(client, "pf-oa", "openai", openai.base_url)
        an = await judge_model(client, "pf-an", "anthropic", anthropic.base_url)
        sid = await panel_session(
            client, pillar_ids, [oa, an], max_threads_per_pillar=3, batch_fallback="live"
        )
        first = (await comparison_ids(app, sid))[0]
        anthropic.state.expire_ids = {f"c{first}-a1-m1"}
        anthropic.state.calls.clear()
        await run_until_settled(app, sid, [])
        rows_ = await rows(
            app,
            "SELECT id, status, attempts, votes_cast FROM comparisons WHERE session_id = :s",
            s=sid,
        )
        assert {r[1:] for r in rows_} == {("completed", 1, 2)}
        assert anthropic.state.calls.count("POST /v1/messages/batches") == 1  # no second job
        assert anthropic.state.calls.count("POST /v1/messages") == 1  # the expired one, live
        (vote,) = await rows(
            app,
            "SELECT status, latency_s IS NOT NULL FROM comparison_votes "
            "WHERE comparison_id = :c AND member = 1",
            c=first,
        )
        assert vote == ("voted", True)
    finally:
        await openai.stop()
        await anthropic.stop()


def grade(body: dict[str, Any]) -> str:
    """A grader's reply: model judge-1 grades thread n (n mod 10) + 1, judge-2 10 - (n mod 10)."""
    content = str(body["messages"][-1]["content"])
    mark = _MARK.search(content)
    if mark is None:
        return "OK"
    n = int(mark.group(1).split("-")[1]) % 10
    return f"Rating: [[{n + 1 if body['model'] == 'judge-1' else 10 - n}]]"


async def test_a_panel_of_graders_runs_in_batch(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    openai = FakeOpenAIBatches(BatchState(responder=grade))
    anthropic = FakeAnthropicBatches(BatchState(responder=grade))
    await openai.start()
    await anthropic.start()
    try:
        oa = await judge_model(client, "pg-oa", "openai", openai.base_url)
        oa2 = await second_model(client, oa, "pg-oa-2")
        an = await judge_model(client, "pg-an", "anthropic", anthropic.base_url)
        sid = await panel_session(
            client,
            pillar_ids,
            [oa, oa2, an],
            comparison_mode="single",
            max_threads_per_pillar=4,
            panel={"members": [{"model_id": m} for m in (oa, oa2, an)], "rule": "mean"},
        )
        await run_until_settled(app, sid, [])
        got = await rows(
            app,
            "SELECT c.status, c.score, c.votes_cast, t.external_id, "
            "array_agg(v.score ORDER BY v.member) FROM comparisons c "
            "JOIN threads t ON t.id = c.thread_a_id "
            "JOIN comparison_votes v ON v.comparison_id = c.id "
            "WHERE c.session_id = :s GROUP BY c.id, t.external_id",
            s=sid,
        )
        assert len(got) == 8
        for status, score, cast, external, members in got:
            n = int(external.split("-")[1]) % 10
            assert (status, cast) == ("completed", 3)
            assert members == [n + 1, 10 - n, n + 1]
            assert score == pytest.approx((2 * (n + 1) + 10 - n) / 3)
    finally:
        await openai.stop()
        await anthropic.stop()


async def test_cancelling_a_panel_session_cancels_every_members_job(
    app: FastAPI, client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    openai = FakeOpenAIBatches(BatchState(responder=judge, polls_per_step=1000))
    anthropic = FakeAnthropicBatches(BatchState(responder=judge, polls_per_step=1000))
    await openai.start()
    await anthropic.start()
    try:
        oa = await judge_model(client, "pc-oa", "openai", openai.base_url)
        an = await judge_model(client, "pc-an", "anthropic", anthropic.base_url)
        sid = await panel_session(client, pillar_ids, [oa, an], max_threads_per_pillar=5)
        llm = LLMService(app.state.sessionmaker, app.state.settings)
        runner = BatchRunner(engine=app.state.engine, llm=llm, poll_s=0.01)
        for _ in range(4):  # create both jobs, poll them: still in progress
            await runner.step(sid)
        await llm.aclose()
        assert openai.state.calls.count("POST /v1/batches") == 1
        assert anthropic.state.calls.count("POST /v1/messages/batches") == 1
        r = await client.post(f"/api/sessions/{sid}/cancel")
        assert r.status_code == 200, r.text
        openai.state.polls_per_step = anthropic.state.polls_per_step = 1
        await run_until_settled(app, sid, [])
        assert any(c.endswith("/cancel") for c in openai.state.calls)
        assert any(c.endswith("/cancel") for c in anthropic.state.calls)
        # Both fakes answered their first half before the cancel took effect: those
        # comparisons are kept with both votes, the others end cancelled without any.
        got = await rows(
            app,
            "SELECT c.status, count(v.member) FILTER (WHERE v.status = 'voted') "
            "FROM comparisons c LEFT JOIN comparison_votes v ON v.comparison_id = c.id "
            "WHERE c.session_id = :s GROUP BY c.id",
            s=sid,
        )
        assert Counter(got) == {("completed", 2): 22, ("cancelled", 0): 23}
        jobs = await rows(
            app,
            "SELECT state, applied_at IS NOT NULL FROM provider_batches WHERE session_id = :s",
            s=sid,
        )
        assert jobs == [("cancelled", True), ("cancelled", True)]
    finally:
        await openai.stop()
        await anthropic.stop()


async def test_a_member_without_a_batch_api_is_refused_at_create(
    client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    models = {m["name"]: m["id"] for m in (await client.get("/api/models")).json()}
    simulator = next(
        m["id"]
        for m in (await client.get("/api/models")).json()
        if m["provider_kind"] == "simulator"
    )
    body = {
        "session_name": "panel-sim-batch",
        "pillar_ids": pillar_ids,
        "comparison_mode": "free_for_all",
        "max_threads_per_pillar": 3,
        "panel": {"members": [{"model_id": models["pp-oa"]}, {"model_id": simulator}]},
        "execution": "batch",
    }
    before = len((await client.get("/api/sessions")).json())
    r = await client.post("/api/sessions", json=body)
    assert r.status_code == 422, r.text
    assert "panel member 2" in r.text and "simulator has no batch API" in r.text
    assert "batch_fallback" in r.text
    cascade = body | {
        "panel": {"members": [{"model_id": models["pp-oa"]}, {"model_id": models["pp-an"]}]}
        | {"rule": "cascade"}
    }
    r = await client.post("/api/sessions", json=cascade)
    assert r.status_code == 422 and "cascade" in r.text, r.text
    assert len((await client.get("/api/sessions")).json()) == before  # nothing stored
    r = await client.post("/api/sessions", json=body | {"batch_fallback": "live"})
    assert r.status_code == 201, r.text
    assert r.json()["execution"] == "live"
    # The estimate prices both members at their batch prices.
    both = body | {
        "panel": {"members": [{"model_id": models["pp-oa"]}, {"model_id": models["pp-an"]}]}
    }
    r = await client.post("/api/sessions/estimate", json=both)
    assert r.status_code == 200, r.text
    assert r.json()["batch_cost_usd"] == pytest.approx(0.5 * r.json()["cost_usd"])
    r = await client.post("/api/sessions/estimate", json=body)
    assert "panel member 2" in r.json()["batch_unavailable"]
