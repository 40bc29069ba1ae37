"""A live panel session: three members on fake OpenAI-compatible and Anthropic servers on
127.0.0.1 with different latencies, one of which always fails. Every member's answer and
cost is stored, the failing one is recorded as missing after its retries, the aggregate says
how many voted, and nothing is counted twice (provider calls, votes, costs). Then a
cascade: the second member is asked only where the first is not confident."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from llmjudge.sessions.models import Comparison, ComparisonVote, JudgeSession
from tests.fakes.servers import FakeAnthropic, FakeOpenAI, FakeProvider, FakeState

_MARK = re.compile(r"\[\[pl-(\d+)\]\]")
PRICES = {"fast": (1.0, 2.0), "slow": (3.0, 15.0), "broken": (5.0, 5.0)}


def _verdict(winner: str, confidence: float) -> str:
    return json.dumps(
        {
            "winner": winner,
            "confidence": confidence,
            "scores": {"A": {"quality": 4}, "B": {"quality": 3}},
            "reasoning": "because",
        }
    )


def _marks(body: dict[str, Any]) -> tuple[int, int]:
    text = str(body["messages"][-1]["content"])
    marks = _MARK.findall(text)[:2]
    if not marks:  # the start's test call ("Reply with the single word OK.")
        return 0, 0
    a, b = (int(x) for x in marks)
    return a, b


def fast(body: dict[str, Any]) -> str:
    a, b = _marks(body)
    # Sure of itself when the first shown thread has an even number.
    return _verdict("A", 0.95 if a % 2 == 0 else 0.5)


def slow(body: dict[str, Any]) -> str:
    a, b = _marks(body)
    return _verdict("A" if (a + b) % 2 == 0 else "B", 0.9)


@contextlib.asynccontextmanager
async def member(
    client: httpx.AsyncClient, app: Any, name: str, fake: FakeProvider, **provider: Any
) -> AsyncIterator[tuple[int, FakeProvider]]:
    await fake.start()
    try:
        r = await client.post(
            "/api/providers",
            json={
                "name": name,
                "kind": fake.kind,
                "base_url": fake.base_url,
                "max_concurrency": 16,
                "settings": {"backoff_base_s": 0.01, "backoff_max_s": 0.02},
            }
            | provider,
        )
        assert r.status_code == 201, r.text
        provider_id = r.json()["id"]
        p_in, p_out = PRICES[name.split("-")[0]]
        r = await client.post(
            "/api/models",
            json={
                "provider_id": provider_id,
                "name": name,
                "model": "m",
                "input_price_per_million": p_in,
                "output_price_per_million": p_out,
            },
        )
        assert r.status_code == 201, r.text
        model_id = r.json()["id"]
        # A provider that has answered once skips the start's fail-fast test call: answer
        # it here, before a failing fake starts failing; the counts start after it.
        failing, fake.state.fail_500 = fake.state.fail_500, 0
        r = await client.post(f"/api/providers/{provider_id}/test")
        assert r.status_code == 200 and r.json()["ok"], r.text
        await app.state.llm.flush()  # the answered call is on record before a start looks
        fake.state.fail_500 = failing
        fake.state.count = 0
        fake.state.requests.clear()
        yield model_id, fake
    finally:
        await fake.stop()


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    rows = [
        {"pillar": f"pl{i % 2}", "external_id": f"pl-{i}", "content": f"[[pl-{i}]] answer {i}"}
        for i in range(6)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    return [
        p["id"] for p in (await client.get("/api/pillars")).json() if p["name"] in ("pl0", "pl1")
    ]


async def stored_votes(app: FastAPI, sid: int) -> tuple[list[Comparison], list[ComparisonVote]]:
    """The session's comparisons and its members' votes, as stored."""
    async with app.state.sessionmaker() as db:
        comps = (await db.scalars(select(Comparison).where(Comparison.session_id == sid))).all()
        votes = (
            await db.scalars(select(ComparisonVote).where(ComparisonVote.session_id == sid))
        ).all()
    return list(comps), list(votes)


async def wait_ended(client: httpx.AsyncClient, sid: int, limit_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while True:
        s = (await client.get(f"/api/sessions/{sid}")).json()
        if s["status"] in ("completed", "failed", "cancelled"):
            return s
        assert time.monotonic() < deadline, s
        await asyncio.sleep(0.1)


async def test_three_member_panel_with_a_failing_member(
    client: httpx.AsyncClient, app: Any, pillars: list[int]
) -> None:
    fast_fake = FakeOpenAI(FakeState(api_key=None, latency_s=0.01, responder=fast))
    slow_fake = FakeAnthropic(FakeState(api_key=None, latency_s=0.08, responder=slow))
    broken_fake = FakeOpenAI(FakeState(api_key=None, latency_s=0.0, fail_500=10**9))
    async with (
        member(client, app, "fast-1", fast_fake) as (fast_id, _),
        member(client, app, "slow-1", slow_fake) as (slow_id, _),
        member(client, app, "broken-1", broken_fake, max_retries=1) as (broken_id, _),
    ):
        body = {
            "session_name": "panel live",
            "pillar_ids": pillars,
            "comparison_mode": "round_robin",
            "criteria": ["quality"],
            "worker_count": 4,
            "panel": {
                "members": [{"model_id": fast_id}, {"model_id": slow_id}, {"model_id": broken_id}],
                "rule": "majority",
            },
        }
        est = (await client.post("/api/sessions/estimate", json=body)).json()
        single = (
            await client.post(
                "/api/sessions/estimate",
                json={k: v for k, v in body.items() if k != "panel"} | {"judge_model_id": fast_id},
            )
        ).json()
        assert est["panel_members"] == 3
        # The configuration form: ticked members make the panel; the estimate says so.
        page = await client.post(
            "/sessions/new/estimate",
            data={
                "session_name": "form",
                "pillar_ids": [str(p) for p in pillars],
                "comparison_mode": "round_robin",
                "criteria": "quality",
                "panel_model_ids": [str(fast_id), str(slow_id), str(broken_id)],
                "panel_rule": "majority",
            },
            headers={"HX-Request": "true"},
        )
        assert page.status_code == 200 and 'id="sum-panel"' in page.text
        assert "a panel of 3" in page.text
        assert est["input_tokens"] == 3 * single["input_tokens"]
        assert est["cost_usd"] > single["cost_usd"] * 2
        r = await client.post("/api/sessions", json=body | {"auto_start": True})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        out = await wait_ended(client, sid)
        n = out["total"]
        assert n == 18 and (out["status"], out["completed"], out["failed"]) == ("completed", n, 0)
        # At the providers: each working member once per comparison; the broken one tried
        # 1 + max_retries times per comparison, then recorded missing.
        assert fast_fake.state.count == n and slow_fake.state.count == n
        assert broken_fake.state.count == 2 * n

    comps, votes = await stored_votes(app, sid)
    async with app.state.sessionmaker() as db:
        session = await db.get(JudgeSession, sid)
    assert session is not None
    assert len(votes) == 3 * n
    assert Counter((v.comparison_id, v.member) for v in votes).most_common(1)[0][1] == 1
    by = {(v.comparison_id, v.member): v for v in votes}
    for c in comps:
        f, s, b = by[(c.id, 0)], by[(c.id, 1)], by[(c.id, 2)]
        assert (f.status, s.status, b.status) == ("voted", "voted", "missing")
        assert b.error and b.cost_usd == 0 and b.winner is None
        assert f.cost_usd > 0 and s.cost_usd > f.cost_usd  # each member at its own prices
        assert f.judge == "fast-1" and s.judge == "slow-1" and f.raw_response
        assert c.winner == (f.winner if f.winner == s.winner else "TIE")
        assert (c.votes_cast, c.votes_asked) == (2, 3)
        assert c.cost_usd == pytest.approx(f.cost_usd + s.cost_usd)
        assert c.input_tokens == f.input_tokens + s.input_tokens
        assert c.latency_s is not None and c.latency_s >= s.latency_s - 1e-3
    assert session.cost_usd == pytest.approx(sum(v.cost_usd for v in votes))
    assert session.input_tokens == sum(v.input_tokens for v in votes)

    detail = (await client.get(f"/api/sessions/{sid}/comparisons/{comps[0].id}")).json()
    assert (detail["votes_cast"], detail["votes_asked"]) == (2, 3)
    assert [v["status"] for v in detail["votes"]] == ["voted", "voted", "missing"]
    assert [v["judge"] for v in detail["votes"]] == ["fast-1", "slow-1", "broken-1"]

    rep = (await client.get(f"/api/sessions/{sid}/panel")).json()
    assert [m["voted"] for m in rep["members"]] == [n, n, 0]
    assert [m["missing"] for m in rep["members"]] == [0, 0, n]
    assert rep["panel"]["voted"] == {"2": n}
    assert rep["members"][1]["mean_latency_s"] > rep["members"][0]["mean_latency_s"]

    # A calibrated panel learns its weights from this run; with no reference labels for
    # these pairs it falls back to equal weights (fails closed to the plain vote).
    members = [{"model_id": m} for m in (fast_id, slow_id, broken_id)]
    base = {k: v for k, v in body.items() if k != "panel"}
    r = await client.post(
        "/api/sessions",
        json=base
        | {"panel": {"members": members, "rule": "calibrated", "calibration_session_id": sid}},
    )
    assert r.status_code == 201, r.text
    stored = r.json()["panel"]
    assert [m["weight"] for m in stored["members"]] == [1.0, 1.0, 1.0]
    assert stored["weights_from_labels"] == 0
    r = await client.post(
        "/api/sessions",
        json=base
        | {
            "panel": {
                "members": members[::-1],
                "rule": "calibrated",
                "calibration_session_id": sid,
            }
        },
    )
    assert r.status_code in (400, 422) and "same panel" in r.text


async def test_cascade_asks_the_next_member_only_when_unsure(
    client: httpx.AsyncClient, app: Any, pillars: list[int]
) -> None:
    fast_fake = FakeOpenAI(FakeState(api_key=None, latency_s=0.01, responder=fast))
    slow_fake = FakeAnthropic(FakeState(api_key=None, latency_s=0.03, responder=slow))
    async with (
        member(client, app, "fast-2", fast_fake) as (fast_id, _),
        member(client, app, "slow-2", slow_fake) as (slow_id, _),
    ):
        body = {
            "session_name": "cascade live",
            "pillar_ids": pillars,
            "comparison_mode": "round_robin",
            "criteria": ["quality"],
            "panel": {
                "members": [{"model_id": fast_id}, {"model_id": slow_id}],
                "rule": "cascade",
                "cascade": {
                    "rule": "confidence",
                    "threshold": 0.8,
                    "expected_stop_share": [0.5, 0.5],
                },
            },
        }
        est = (await client.post("/api/sessions/estimate", json=body)).json()
        assert est["worst_case_cost_usd"] > est["cost_usd"] > 0
        r = await client.post("/api/sessions", json=body | {"auto_start": True})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        out = await wait_ended(client, sid)
        n = out["total"]
        assert out["completed"] == n
        comps, votes = await stored_votes(app, sid)
        by = {(v.comparison_id, v.member): v for v in votes}
        escalated = 0
        for c in comps:
            first, second = by[(c.id, 0)], by[(c.id, 1)]
            if first.confidence is not None and first.confidence >= 0.8:
                assert second.status == "skipped" and c.votes_asked == 1
                assert c.winner == first.winner
            else:
                escalated += 1
                assert second.status == "voted" and c.votes_asked == 2
                assert c.winner == second.winner
        assert fast_fake.state.count == n and slow_fake.state.count == escalated
        assert 0 < escalated < n
        rep = (await client.get(f"/api/sessions/{sid}/panel")).json()
        cas = rep["cascade"]
        assert cas["stop_share"] == pytest.approx([1 - escalated / n, escalated / n])
        assert cas["escalated"]["value"] == pytest.approx(escalated / n)
        assert cas["saving_usd"] > 0 and cas["everyone_usd"] > cas["spent_usd"]


async def test_panel_reads_votes_with_the_session_verdict_format(
    client: httpx.AsyncClient, app: Any, pillars: list[int]
) -> None:
    """A published judge's format and system prompt reach every member: tags, no forced
    JSON, strengths kept per vote and on the panel's verdict; an answer the format counts
    as a tie is a vote with its reason."""

    def strong(body: dict[str, Any]) -> str:
        a, _ = _marks(body)
        return "[[A>>B]]" if a % 2 == 0 else "[[B>A]]"

    def weak_or_lost(body: dict[str, Any]) -> str:
        a, _ = _marks(body)
        return "[[A>B]]" if a % 2 == 0 else "no verdict here"

    one = FakeOpenAI(FakeState(api_key=None, latency_s=0.0, responder=strong))
    two = FakeOpenAI(FakeState(api_key=None, latency_s=0.0, responder=strong))
    three = FakeOpenAI(FakeState(api_key=None, latency_s=0.0, responder=weak_or_lost))
    async with (
        member(client, app, "fast-3", one) as (a_id, _),
        member(client, app, "fast-4", two) as (b_id, _),
        member(client, app, "fast-5", three) as (c_id, _),
    ):
        body = {
            "session_name": "panel tags",
            "pillar_ids": pillars,
            "comparison_mode": "round_robin",
            "criteria": ["quality"],
            "system_prompt": "You are a careful judge.",
            "verdict_format": {"kind": "tags", "on_unparsed": "tie"},
            "panel": {
                "members": [{"model_id": a_id}, {"model_id": b_id}, {"model_id": c_id}],
                "rule": "majority",
            },
        }
        r = await client.post("/api/sessions", json=body | {"auto_start": True})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        out = await wait_ended(client, sid)
        n = out["total"]
        assert (out["status"], out["completed"], out["failed"]) == ("completed", n, 0)
        for fake in (one, two, three):
            bodies = [q.body for q in fake.state.requests if q.path.endswith("/chat/completions")]
            assert len(bodies) == n
            for b in bodies:
                assert "response_format" not in b
                assert b["messages"][0] == {"role": "system", "content": "You are a careful judge."}
    comps, votes = await stored_votes(app, sid)
    by = {(v.comparison_id, v.member): v for v in votes}
    evens = 0
    for c in comps:
        v1, v2, v3 = (by[(c.id, k)] for k in range(3))
        assert (v1.status, v2.status, v3.status) == ("voted", "voted", "voted")
        if v1.winner == "A":  # the first shown thread's mark is even
            evens += 1
            assert (v1.strength, v3.winner, v3.strength) == (2, "A", 1)
            assert v3.error is None
            # Two of the three voters for A said "much better".
            assert (c.winner, c.strength) == ("A", 2)
        else:
            assert (v1.winner, v1.strength) == ("B", 1)
            assert v3.winner == "TIE" and v3.strength is None
            assert v3.error and v3.error.startswith("unparsed, a tie")
            assert (c.winner, c.strength) == ("B", 1)
    assert 0 < evens < n


async def test_a_panel_cannot_run_an_adaptive_session(
    client: httpx.AsyncClient, pillars: list[int]
) -> None:
    body = {
        "session_name": "adaptive panel",
        "pillar_ids": pillars,
        "comparison_mode": "adaptive",
        "adaptive": {"rule": "ranking"},
        "panel": {"members": [{"model_id": 1}, {"model_id": 2}], "rule": "majority"},
    }
    for url in ("/api/sessions", "/api/sessions/estimate"):
        r = await client.post(url, json=body)
        assert r.status_code == 422, (url, r.text)
        assert "panel" in r.text, r.text
