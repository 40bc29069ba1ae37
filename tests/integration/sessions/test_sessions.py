"""Judge sessions through the API with the in-process worker pool and the simulator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from llmjudge.providers.models import LLMCall
from llmjudge.sessions.models import Comparison, JudgeSession

FAST_SIMULATOR = {"latency_ms_mean": 2.5, "latency_ms_jitter": 2.5, "stream_chunk_chars": 80}


async def seed_threads(
    client: httpx.AsyncClient, n: int, *, pillars: int = 3, prefix: str = "p"
) -> list[int]:
    """Import ``n`` threads round-robin into ``pillars`` pillars (latent quality in the
    metadata, as the demo data has it); returns the pillar ids in name order."""
    rows = [
        {
            "pillar": f"{prefix}{i % pillars}",
            "external_id": f"{prefix}-{i}",
            "title": f"{prefix} thread {i}",
            "content": f"Answer number {i}.",
            "metadata": {"quality": 3 * i / n - 1.5},
        }
        for i in range(n)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    listed = (await client.get("/api/pillars")).json()
    return [p["id"] for p in listed if p["name"].startswith(prefix)]


async def fast_simulator(client: httpx.AsyncClient, **extra: Any) -> None:
    providers = (await client.get("/api/providers")).json()
    sim = next(p for p in providers if p["name"] == "Simulator")
    r = await client.patch(f"/api/providers/{sim['id']}", json={"settings": FAST_SIMULATOR | extra})
    assert r.status_code == 200, r.text


async def wait_for(check: Callable[[], Awaitable[bool]], limit_s: float = 30) -> None:
    """Poll ``check`` (an API read) until it holds."""
    async with asyncio.timeout(limit_s):
        while not await check():  # noqa: ASYNC110 - polling the API is the point
            await asyncio.sleep(0.05)


async def get(client: httpx.AsyncClient, sid: int) -> dict[str, Any]:
    r = await client.get(f"/api/sessions/{sid}")
    assert r.status_code == 200, r.text
    return r.json()


async def wait_status(client: httpx.AsyncClient, sid: int, *statuses: str) -> dict[str, Any]:
    out: dict[str, Any] = {}

    async def check() -> bool:
        out.update(await get(client, sid))
        return out["status"] in statuses

    await wait_for(check)
    return out


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await client.post("/api/sessions", json={"session_name": "s"} | body)
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    await fast_simulator(client)
    return await seed_threads(client, 30)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"pillar_ids": [987654, 987655]}, "987654, 987655"),
        ({"baseline_pillar_id": 987654}, "not among pillar_ids"),
        ({"prompt_template": "{thread_a} {thread_b} {secret}"}, "unknown placeholder"),
        ({"prompt_template": "only {thread_a}"}, "thread_b"),
        ({"worker_count": 1025}, "1024"),
        ({"worker_count": 0}, "greater than or equal"),
        ({"session_name": "  "}, "blank"),
        ({"criteria": ["ok", "bad{x}"]}, "criteria"),
        ({"criteria": []}, "criterion"),
        ({"judge_model_id": 987654}, "judge model 987654"),
        ({"comparison_mode": "swiss"}, "pillar_sample"),
        ({"pillar_ids": []}, "pillar_ids"),
    ],
)
async def test_invalid_requests_are_named_422s(
    client: httpx.AsyncClient, pillars: list[int], change: dict[str, Any], fragment: str
) -> None:
    body = {"session_name": "bad", "pillar_ids": pillars, "comparison_mode": "round_robin"}
    before = len((await client.get("/api/sessions")).json())
    for path in ("/api/sessions", "/api/sessions/estimate"):
        r = await client.post(path, json=body | change)
        assert r.status_code == 422, r.text
        assert fragment in r.text
    assert len((await client.get("/api/sessions")).json()) == before


async def test_estimate_stores_nothing_and_matches_the_session(
    client: httpx.AsyncClient, pillars: list[int]
) -> None:
    body = {"session_name": "e", "pillar_ids": pillars, "comparison_mode": "free_for_all"}
    before = len((await client.get("/api/sessions")).json())
    r = await client.post("/api/sessions/estimate", json=body | {"worker_count": 256})
    assert r.status_code == 200, r.text
    est = r.json()
    assert (est["total_comparisons"], est["base_comparisons"], est["total_threads"]) == (
        870,
        435,
        30,
    )
    assert est["judge_model"]["simulated"] is True and est["worker_count"] == 256
    assert est["input_tokens"] > 870 * 100 and est["cost_usd"] == 0.0
    assert len((await client.get("/api/sessions")).json()) == before
    made = await create(client, **body)
    r = await client.get(f"/api/sessions/{made['id']}/estimate")
    assert r.json()["total_comparisons"] == 870 == made["total"]
    assert made["status"] == "draft" and made["counts"]["pending"] == 870


async def test_free_for_all_with_swap_completes_exactly_once(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    s = await create(
        client,
        pillar_ids=pillars,
        comparison_mode="free_for_all",
        worker_count=16,
        auto_start=True,
    )
    assert s["status"] == "running" and s["judge_model"]["name"] == "simulated-judge"
    out = await wait_status(client, s["id"], "completed", "failed")
    assert out["status"] == "completed"
    assert out["counts"] == {
        "total": 870,
        "pending": 0,
        "running": 0,
        "completed": 870,
        "failed": 0,
        "cancelled": 0,
    }
    assert (out["total"], out["completed"], out["failed"], out["progress"]) == (870, 870, 0, 1.0)
    assert out["finished_at"] and out["started_at"]

    await app.state.llm.flush()
    async with app.state.sessionmaker() as db:
        calls = (
            await db.execute(
                select(func.count(), func.count(func.distinct(LLMCall.comparison_id))).where(
                    LLMCall.session_id == s["id"], LLMCall.purpose == "judge"
                )
            )
        ).one()
        sums = (
            await db.execute(
                select(
                    func.sum(Comparison.input_tokens),
                    func.sum(Comparison.output_tokens),
                    func.count().filter(Comparison.winner.is_(None)),
                ).where(Comparison.session_id == s["id"])
            )
        ).one()
        session = await db.get(JudgeSession, s["id"])
        assert session is not None
    assert tuple(calls) == (870, 870)  # one model call per comparison, none judged twice
    assert (sums[0], sums[1]) == (session.input_tokens, session.output_tokens)
    assert sums[2] == 0

    page = (
        await client.get(f"/api/sessions/{s['id']}/comparisons?status=completed&limit=5&offset=2")
    ).json()
    assert page["total"] == 870 and len(page["items"]) == 5
    first = page["items"][0]
    assert first["queue_position"] == 2
    assert first["pillar_a_name"].startswith("p") and first["thread_a_title"].startswith("p ")
    assert first["winner"] in ("A", "B", "TIE") and first["scores_a"]
    detail = (await client.get(f"/api/sessions/{s['id']}/comparisons/{first['id']}")).json()
    assert json.loads(detail["raw_response"])["winner"] == first["winner"]
    assert (await client.get(f"/api/sessions/{s['id']}/comparisons?status=failed")).json()[
        "total"
    ] == 0
    listed = (await client.get("/api/sessions?status=completed")).json()
    assert any(x["id"] == s["id"] and x["progress"] == 1.0 for x in listed)


async def small_session(client: httpx.AsyncClient, pillars: list[int], **kw: Any) -> dict:
    """100 comparisons (10 x 10 round robin, with swap: 200) judged 2 at a time."""
    return await create(
        client,
        pillar_ids=pillars[:2],
        comparison_mode="round_robin",
        worker_count=2,
        auto_start=True,
        **kw,
    )


async def idle(client: httpx.AsyncClient, sid: int) -> dict[str, Any]:
    out: dict[str, Any] = {}

    async def check() -> bool:
        out.update(await get(client, sid))
        return out["counts"]["running"] == 0

    await wait_for(check)
    return out


async def test_pause_stops_claims_and_resume_continues(
    client: httpx.AsyncClient, pillars: list[int]
) -> None:
    s = await small_session(client, pillars)
    r = await client.post(f"/api/sessions/{s['id']}/pause")
    assert r.status_code == 200 and r.json()["status"] == "paused"
    paused = await idle(client, s["id"])
    await asyncio.sleep(0.5)
    later = await get(client, s["id"])
    assert later["counts"] == paused["counts"] and later["status"] == "paused"
    assert later["counts"]["pending"] > 0
    assert (await client.post(f"/api/sessions/{s['id']}/pause")).status_code == 409
    r = await client.post(f"/api/sessions/{s['id']}/resume")
    assert r.status_code == 200 and r.json()["status"] == "running"
    out = await wait_status(client, s["id"], "completed")
    assert out["counts"]["completed"] == 200 == out["completed"]


async def test_cancel_keeps_partial_results(client: httpx.AsyncClient, pillars: list[int]) -> None:
    s = await small_session(client, pillars)

    async def some_done() -> bool:
        return (await get(client, s["id"]))["completed"] >= 5

    await wait_for(some_done)
    r = await client.post(f"/api/sessions/{s['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    out = await idle(client, s["id"])
    counts = out["counts"]
    assert out["status"] == "cancelled"
    assert counts["completed"] >= 5 and counts["cancelled"] > 0 and counts["pending"] == 0
    assert counts["completed"] + counts["cancelled"] + counts["failed"] == 200
    assert out["completed"] == counts["completed"]  # in-flight results were counted
    kept = (await client.get(f"/api/sessions/{s['id']}/comparisons?status=completed")).json()
    assert all(c["winner"] for c in kept["items"])
    for action in ("resume", "start", "cancel"):
        assert (await client.post(f"/api/sessions/{s['id']}/{action}")).status_code == 409


async def test_unparseable_judge_fails_then_retry_failed_recovers(
    client: httpx.AsyncClient, pillars: list[int]
) -> None:
    r = await client.post(
        "/api/providers",
        json={
            "name": "broken-sim",
            "kind": "simulator",
            "settings": FAST_SIMULATOR | {"malformed_rate": 1.0},
        },
    )
    assert r.status_code == 201, r.text
    provider = r.json()["id"]
    r = await client.post(
        "/api/models",
        json={
            "provider_id": provider,
            "name": "broken-judge",
            "model": "judge",
            "input_price_per_million": 1.0,
            "output_price_per_million": 2.0,
        },
    )
    assert r.status_code == 201, r.text
    s = await create(
        client,
        pillar_ids=[pillars[0]],
        comparison_mode="free_for_all",
        max_threads_per_pillar=3,
        position_swap=False,
        judge_model_id=r.json()["id"],
        auto_start=True,
    )
    assert s["total"] == 3
    out = await wait_status(client, s["id"], "failed")
    assert out["counts"]["failed"] == 3 and out["failed"] == 3
    assert out["cost_usd"] > 0  # every failed attempt was paid for
    failed = (await client.get(f"/api/sessions/{s['id']}/comparisons?status=failed")).json()
    for c in failed["items"]:
        assert c["attempts"] == 3 and c["parse_error"] and c["winner"] is None
        detail = (await client.get(f"/api/sessions/{s['id']}/comparisons/{c['id']}")).json()
        assert detail["raw_response"]

    r = await client.patch(f"/api/providers/{provider}", json={"settings": FAST_SIMULATOR})
    assert r.status_code == 200
    r = await client.post(f"/api/sessions/{s['id']}/retry-failed")
    assert r.status_code == 200 and r.json()["requeued"] == 3
    out = await wait_status(client, s["id"], "completed")
    assert (out["completed"], out["failed"]) == (3, 0)


async def test_start_delete_and_missing_sessions(
    client: httpx.AsyncClient, pillars: list[int]
) -> None:
    s = await create(client, pillar_ids=pillars[:2], comparison_mode="round_robin")
    assert (await client.post(f"/api/sessions/{s['id']}/resume")).status_code == 409
    r = await client.post(f"/api/sessions/{s['id']}/start")
    assert r.status_code == 200 and r.json()["status"] == "running"
    assert (await client.post(f"/api/sessions/{s['id']}/start")).status_code == 409
    assert (await client.delete(f"/api/sessions/{s['id']}")).status_code == 204
    for path in ("", "/comparisons", "/estimate", "/comparisons/1"):
        assert (await client.get(f"/api/sessions/{s['id']}{path}")).status_code == 404
    assert (await client.post(f"/api/sessions/{s['id']}/pause")).status_code == 404
    assert (await client.delete(f"/api/sessions/{s['id']}")).status_code == 404
