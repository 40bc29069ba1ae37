"""A session judged by an OpenAI-kind judge whose server caches the prompt's shared prefix:
the cached tokens are stored per call, priced at the model's cache price, and the session
shows them with the saving."""

from __future__ import annotations

import json

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from tests.fakes.servers import FakeOpenAI, FakeState
from tests.integration.test_scaleout import wait_ended

VERDICT = json.dumps({"winner": "A", "confidence": 0.8, "reasoning": "A is clearer."})
CRITERIA = [f"criterion {i} with a long name" for i in range(20)]  # a long, shared rubric
STEP = 16


async def test_cached_tokens_are_accounted_priced_and_shown(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    rows = [
        {"pillar": pillar, "external_id": f"{pillar}-{i}", "content": f"answer {i} of {pillar}"}
        for pillar in ("left", "right")
        for i in range(3)
    ]
    data = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", data)})
    assert r.status_code == 200, r.text
    pillars = [p["id"] for p in (await client.get("/api/pillars")).json()]

    state = FakeState(
        api_key=None,
        responder=lambda body: VERDICT,
        cache_min_tokens=128,
        cache_step_tokens=STEP,
    )
    async with FakeOpenAI(state) as fake:
        body = {"name": "caching judge", "kind": "openai", "base_url": fake.base_url}
        provider = (await client.post("/api/providers", json=body)).json()
        body = {
            "provider_id": provider["id"],
            "name": "cached judge",
            "model": "judge",
            "input_price_per_million": 2.0,
            "output_price_per_million": 8.0,
        }
        model = (await client.post("/api/models", json=body)).json()
        # no cache price set: OpenAI's default, half the input price
        assert model["cached_input_price_per_million"] is None
        assert model["cached_input_price_in_use"] == 1.0
        r = await client.post(
            "/api/sessions",
            json={
                "session_name": "cached",
                "pillar_ids": pillars,
                "comparison_mode": "free_for_all",
                "position_swap": False,
                "worker_count": 1,  # one call after another: every call after the first hits
                "judge_model_id": model["id"],
                "criteria": CRITERIA,
                "auto_start": True,
            },
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        out = await wait_ended(app, sid, limit_s=60)
    assert out["status"] == "completed"
    await app.state.llm.flush()

    async with app.state.sessionmaker() as db:
        calls = (
            await db.execute(
                text(
                    "SELECT input_tokens, output_tokens, cached_input_tokens, "
                    "cache_write_tokens, cost_usd, cache_saving_usd, comparison_id "
                    "FROM llm_calls WHERE session_id = :sid ORDER BY id"
                ),
                {"sid": sid},
            )
        ).all()
        compared = dict(
            (
                await db.execute(
                    text("SELECT id, cost_usd FROM comparisons WHERE session_id = :sid"),
                    {"sid": sid},
                )
            ).all()
        )
    assert len(calls) == len(compared) == 15
    first, *later = calls
    assert first.cached_input_tokens == 0
    for call in later:
        assert call.cached_input_tokens >= 128 and call.cached_input_tokens % STEP == 0
    for call in calls:
        price = (
            (call.input_tokens - call.cached_input_tokens) * 2.0
            + call.cached_input_tokens * 1.0
            + call.output_tokens * 8.0
        ) / 1e6
        assert call.cost_usd == pytest.approx(price)
        assert call.cache_saving_usd == pytest.approx(call.cached_input_tokens * 1.0 / 1e6)
        # the comparison's stored cost is the same cached price
        assert compared[call.comparison_id] == pytest.approx(price)

    session = (await client.get(f"/api/sessions/{sid}")).json()
    cached = sum(c.cached_input_tokens for c in calls)
    assert session["prompt_cache"] == {
        "calls": 14,
        "cached_input_tokens": cached,
        "cache_write_tokens": 0,
        "saving_usd": pytest.approx(cached / 1e6),
        "input_tokens": sum(c.input_tokens for c in calls),
        "cached_share": pytest.approx(cached / sum(c.input_tokens for c in calls)),
    }
    assert session["cost_usd"] == pytest.approx(sum(c.cost_usd for c in calls))
    page = (await client.get(f"/sessions/{sid}")).text
    assert f"{cached:,} of" in page and "read from cache" in page

    # a model's own cache price replaces the default; clearing it brings the default back
    r = await client.patch(
        f"/api/models/{model['id']}", json={"cached_input_price_per_million": 0.2}
    )
    assert r.status_code == 200 and r.json()["cached_input_price_in_use"] == 0.2
    r = await client.patch(
        f"/api/models/{model['id']}", json={"cached_input_price_per_million": None}
    )
    assert r.status_code == 200 and r.json()["cached_input_price_in_use"] == 1.0
    r = await client.patch(f"/api/models/{model['id']}", json={"cache_write_price_per_million": -1})
    assert r.status_code == 422
