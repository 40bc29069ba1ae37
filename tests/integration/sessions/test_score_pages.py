"""Issue 27, scores: the pages print intervals as "a to b", say what 100 Elo points mean,
show the adaptive table in Elo points, and say what the simulated judge's verdicts rest on
where its results show, and only there (a judge behind a fake OpenAI server gets no note)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.fakes.servers import FakeOpenAI, FakeState
from tests.integration.test_scaleout import wait_ended

HX = {"HX-Request": "true"}
NOTE = 'id="simulator-note"'
# an interval of two numbers with a dash between them: "-513--272", "1480–1520"
DASHED = re.compile(r"-?\d+\s*[–-]{1,2}\s*-?\d+")


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> list[int]:
    rows = [
        {
            "pillar": f"sc-{p}",
            "external_id": str(k),
            "prompt_key": f"q{k}",
            "prompt": f"Question {k}",
            "content": f"answer {p} {k}",
            "metadata": {"quality": q},
        }
        for p, q in (("strong", 2.0), ("middle", 0.0), ("weak", -2.0))
        for k in range(4)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("scores.jsonl", body)})
    assert r.status_code == 200, r.text
    return [p["id"] for p in (await client.get("/api/pillars")).json() if p["name"][:3] == "sc-"]


def _session(pillars: list[int], name: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_name": name,
        "pillar_ids": pillars,
        "comparison_mode": "round_robin",
        "match_by_prompt_key": True,
        "position_swap": True,
        "auto_start": True,
        "seed": 3,
        **extra,
    }


async def _pages(client: httpx.AsyncClient, sid: int) -> dict[str, str]:
    out = {
        "live": await client.get(f"/sessions/{sid}"),
        "results": await client.get(f"/sessions/{sid}/results"),
        "leaderboard": await client.get(
            f"/sessions/{sid}/partials/results/leaderboard", headers=HX
        ),
    }
    for name, r in out.items():
        assert r.status_code == 200, (name, r.text[:500])
    return {k: r.text for k, r in out.items()}


async def test_a_simulated_session_says_what_its_judge_does_and_one_scale(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    r = await client.post("/api/sessions", json=_session(pillars, "scores sim"))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert (await wait_ended(app, sid, limit_s=60))["status"] == "completed"
    pages = await _pages(client, sid)
    for name in ("live", "results"):
        assert pages[name].count(NOTE) == 1, name
        assert "does not read the threads" in pages[name]
        assert "hash of the thread" in pages[name]
    # the overview (the results page's first tab) and the leaderboard: one scale, said once
    for name in ("results", "leaderboard"):
        html = pages[name]
        assert "100 points = 64% expected win rate" in html, name
        assert "drawn games against an average one" in html, name
        assert re.search(r"-?\d+ to -?\d+", html), name
    board = (await client.get(f"/api/sessions/{sid}/thread-leaderboard")).json()
    # every thread's interval is on the page as "low to high", none with a dash
    for e in board["entries"]:
        text = f"({e['bt_ci_low']:.0f} to {e['bt_ci_high']:.0f})"
        assert text in pages["leaderboard"], text
    table = pages["leaderboard"].split('id="leaderboard"', 1)[1]
    assert not DASHED.search(re.sub(r"<[^>]+>", " ", table)), "a dashed interval"


async def test_a_real_judge_gets_no_simulator_note(
    app: FastAPI, client: httpx.AsyncClient, pillars: list[int]
) -> None:
    state = FakeState(api_key=None, responder=lambda body: "[[A]]")
    fake = FakeOpenAI(state)
    await fake.start()
    try:
        provider = (
            await client.post(
                "/api/providers",
                json={"name": "scores-real", "kind": "openai", "base_url": fake.base_url},
            )
        ).json()
        model = (
            await client.post(
                "/api/models",
                json={"provider_id": provider["id"], "name": "scores-real", "model": "m"},
            )
        ).json()
        r = await client.post(
            "/api/sessions",
            json=_session(
                pillars,
                "scores real",
                judge_model_id=model["id"],
                verdict_format="tags",
                prompt_template="Q: {prompt}\n(a): {answer_a}\n(b): {answer_b}\nWhich?",
                system_prompt="",
            ),
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert (await wait_ended(app, sid, limit_s=60))["status"] == "completed"
    finally:
        await fake.stop()
    pages = await _pages(client, sid)
    for name, html in pages.items():
        assert NOTE not in html and "does not read the threads" not in html, name
    assert "100 points = 64% expected win rate" in pages["leaderboard"]
