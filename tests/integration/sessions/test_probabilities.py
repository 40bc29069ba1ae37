"""Sessions whose judge answers with token probabilities (a ``logprobs`` verdict format)
against a fake OpenAI server returning ``top_logprobs``: the stored P(A is better) is the
softmax over the mapped tokens, the same judge read as hard verdicts gives the same
verdicts, and a judge that cannot give probabilities, or a map that matches nothing, is a
clear error with nothing stored or the reason kept on the comparison."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, text

from llmjudge.sessions.models import JudgeSession
from tests.fakes.servers import FakeOpenAI, FakeState
from tests.integration.test_scaleout import wait_ended

TEMPLATE = "Q: {prompt}\n(m): {answer_a}\n(M): {answer_b}\nAnswer m or M."
ALPACA = {"kind": "logprobs", "tokens": {"a": ["m"], "b": ["M"], "top_logprobs": 5}}
HARD = {
    "kind": "labels",
    "rules": [{"pattern": "^m$", "winner": "A"}, {"pattern": "^M$", "winner": "B"}],
}


def judge_tokens(body: dict[str, Any]) -> list[Any]:
    """One generated token with its alternatives, from a hash of the prompt: the judge's
    mind, made up but fixed. " m" and "m" both read m; "Output" is unmapped."""
    prompt = body["messages"][-1]["content"]
    digest = hashlib.sha256(prompt.encode()).digest()
    lps = [-(d / 40) for d in digest[:4]]  # m, M, " m", Output
    alternatives = sorted(zip(["m", "M", " m", "Output"], lps, strict=True), key=lambda t: -t[1])
    mapped = [t for t in alternatives if t[0].strip() in ("m", "M")]
    chosen = mapped[0]  # the most likely mapped token is the one generated
    return [(chosen[0], chosen[1], alternatives)]


def expected_prob_a(prompt: str) -> float:
    """The softmax over the mapped tokens, computed here from the same numbers."""
    digest = hashlib.sha256(prompt.encode()).digest()
    m, big_m, spaced_m, _ = (-(d / 40) for d in digest[:4])
    weights = np.exp([m, big_m, spaced_m])
    return float((weights[0] + weights[2]) / weights.sum())


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> dict[str, int]:
    rows = [
        {
            "pillar": p,
            "external_id": str(k),
            "prompt_key": f"k{k}",
            "prompt": f"Q{k}",
            "content": f"{p} answer {k}",
        }
        for p in ("pr-one", "pr-two", "pr-three")
        for k in range(4)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    return {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}


async def _model(client: httpx.AsyncClient, base_url: str, name: str, kind: str = "openai") -> int:
    provider = await client.post(
        "/api/providers", json={"name": name, "kind": kind, "base_url": base_url}
    )
    assert provider.status_code == 201, provider.text
    body = {"provider_id": provider.json()["id"], "name": name, "model": name}
    return int((await client.post("/api/models", json=body)).json()["id"])


def _session(pillars: dict[str, int], model_id: int, fmt: Any, **extra: Any) -> dict[str, Any]:
    return {
        "session_name": "probabilities",
        "pillar_ids": [pillars["pr-one"], pillars["pr-two"], pillars["pr-three"]],
        "comparison_mode": "round_robin",
        "match_by_prompt_key": True,
        "position_swap": True,
        "judge_model_id": model_id,
        "prompt_template": TEMPLATE,
        "verdict_format": fmt,
        "seed": 7,
        "auto_start": True,
        **extra,
    }


async def _rows(app: FastAPI, sid: int) -> list[Any]:
    async with app.state.engine.connect() as conn:
        return list(
            (
                await conn.execute(
                    text(
                        "SELECT c.thread_a_id, c.thread_b_id, c.winner, c.prob_a, c.parse_error,"
                        " c.status, v.prob_a FROM comparisons c LEFT JOIN comparison_votes v"
                        " ON v.comparison_id = c.id AND v.member = 0"
                        " WHERE c.session_id = :s ORDER BY c.thread_a_id, c.thread_b_id"
                    ),
                    {"s": sid},
                )
            ).all()
        )


async def test_stored_probabilities_are_the_softmax_and_hard_verdicts_are_unchanged(
    app: FastAPI, client: httpx.AsyncClient, pillars: dict[str, int]
) -> None:
    state = FakeState(api_key=None, tokens=judge_tokens)
    fake = FakeOpenAI(state)
    await fake.start()
    try:
        model_id = await _model(client, fake.base_url, "weighted-judge")
        r = await client.post("/api/sessions", json=_session(pillars, model_id, ALPACA))
        assert r.status_code == 201, r.text
        probs = await wait_ended(app, r.json()["id"], limit_s=60)
        h = await client.post("/api/sessions", json=_session(pillars, model_id, HARD))
        assert h.status_code == 201, h.text
        hard = await wait_ended(app, h.json()["id"], limit_s=60)
    finally:
        await fake.stop()
    assert (probs["status"], probs["failed"]) == ("completed", 0)
    assert (hard["status"], hard["failed"]) == ("completed", 0)
    judged = [q.body for q in state.requests if q.body.get("logprobs")]
    assert judged and all(b["top_logprobs"] == 5 and "response_format" not in b for b in judged)
    expected = {
        b["messages"][-1]["content"]: expected_prob_a(b["messages"][-1]["content"]) for b in judged
    }
    # Each stored probability is one of the softmaxes the judge's replies give, and the
    # verdict is its argmax.
    rows = await _rows(app, r.json()["id"])
    assert len(rows) == probs["total"] == 24
    stored = sorted(row[3] for row in rows)
    assert stored == pytest.approx(sorted(expected.values()), abs=1e-12)
    for _, _, winner, prob_a, error, status, vote_prob in rows:
        assert status == "completed" and error is None
        assert winner == ("A" if prob_a > 0.5 else "B")
        assert vote_prob == prob_a  # the member-0 vote keeps it too
    # The same replies read as hard verdicts: the same winners, no probabilities.
    hard_rows = await _rows(app, h.json()["id"])
    assert [(a, b, w) for a, b, w, *_ in hard_rows] == [(a, b, w) for a, b, w, *_ in rows]
    assert all(row[3] is None for row in hard_rows)
    # The API and the export show it.
    page = (await client.get(f"/api/sessions/{r.json()['id']}/comparisons?limit=500")).json()
    assert sorted(c["prob_a"] for c in page["items"]) == pytest.approx(stored)
    export = await client.get(f"/api/sessions/{r.json()['id']}/export?format=csv")
    lines = [line for line in export.text.splitlines() if not line.startswith("#")]
    table = list(csv.DictReader(io.StringIO("\n".join(lines))))
    assert sorted(float(t["prob_a"]) for t in table) == pytest.approx(stored, abs=1e-6)  # rounded
    await _scored_against_labels(client, r.json()["id"], rows)


async def _scored_against_labels(client: httpx.AsyncClient, sid: int, rows: list[Any]) -> None:
    """Gold labels for every pair (the lower thread id better): the agreement report's
    Brier score of the judge's probability is the one computed from the stored rows; the
    position tab's shift is the mean over swap pairs of prob_a + twin's prob_a - 1."""
    pairs = sorted({(min(a, b), max(a, b)) for a, b, *_ in rows})
    body = "thread_a,thread_b,label\n" + "".join(f"{a},{b},A\n" for a, b in pairs)
    r = await client.post("/api/references/import", files={"file": ("g.csv", body.encode())})
    assert r.status_code == 200, r.text
    report = (await client.get(f"/api/sessions/{sid}/agreement?reference=gold")).json()
    got = report["judge_probability"]
    p = np.array([q if a < b else 1 - q for a, b, _, q, *_ in rows])
    assert got["judgments"] == len(rows) and got["left_out"] == 0
    assert got["brier"]["value"] == pytest.approx(float(np.mean((p - 1) ** 2)))
    assert got["brier"]["low"] is not None and got["brier"]["n"] == len(rows)
    assert report["stated_confidence"]["judgments"] == 0  # this judge states no confidence
    by_pair: dict[tuple[int, int], float] = {}
    shifts = []
    for a, b, _, q, *_ in rows:
        if (b, a) in by_pair:
            shifts.append(by_pair[(b, a)] + q - 1)
        by_pair[(a, b)] = q
    position = (await client.get(f"/api/sessions/{sid}/position-swap-analysis")).json()
    shift = position["probability_shift"]
    assert shift["pairs"] == len(shifts) == 12
    assert shift["mean_shift"] == pytest.approx(float(np.mean(shifts)))
    assert shift["low"] <= shift["high"]


async def test_a_token_map_matching_nothing_fails_each_comparison_with_its_reason(
    app: FastAPI, client: httpx.AsyncClient, pillars: dict[str, int]
) -> None:
    state = FakeState(
        api_key=None, tokens=lambda body: [("Output", -0.1, [("Output", -0.1)]), (" (a)", -0.2, [])]
    )
    fake = FakeOpenAI(state)
    await fake.start()
    try:
        model_id = await _model(client, fake.base_url, "unmapped-judge")
        body = _session(
            pillars, model_id, ALPACA, pillar_ids=[pillars["pr-one"], pillars["pr-two"]]
        )
        r = await client.post("/api/sessions", json=body)
        assert r.status_code == 201, r.text
        out = await wait_ended(app, r.json()["id"], limit_s=60)
    finally:
        await fake.stop()
    assert (out["status"], out["completed"]) == ("failed", 0)
    rows = await _rows(app, r.json()["id"])
    assert rows and all(row[2] is None and row[3] is None for row in rows)
    assert all("no generated token matches the token map" in (row[4] or "") for row in rows)
    assert all("'Output (a)'" in row[4] for row in rows)  # what the judge wrote instead


@pytest.mark.parametrize("kind", ["anthropic", "gemini", "simulator"])
async def test_a_provider_without_log_probabilities_is_refused_at_create(
    client: httpx.AsyncClient, pillars: dict[str, int], db: Any, kind: str
) -> None:
    if kind == "simulator":
        models = (await client.get("/api/models")).json()
        model_id = next(m["id"] for m in models if m.get("simulated"))
    else:
        model_id = await _model(client, "http://127.0.0.1:9", f"no-logprobs-{kind}", kind)
    before = await db.scalar(select(func.count()).select_from(JudgeSession))
    r = await client.post("/api/sessions", json=_session(pillars, model_id, ALPACA))
    assert r.status_code == 422, r.text
    assert "cannot return" in r.text and f"({kind})" in r.text
    assert await db.scalar(select(func.count()).select_from(JudgeSession)) == before


@pytest.mark.parametrize(
    ("tokens", "needle"),
    [
        ({"a": [], "b": ["M"]}, "at least 1"),
        ({"a": ["m"], "b": [" m "]}, "mapped to both"),
        ({"a": [""], "b": ["M"]}, "empty once whitespace"),
    ],
)
async def test_an_empty_or_ambiguous_token_map_is_refused_at_create(
    client: httpx.AsyncClient, pillars: dict[str, int], db: Any, tokens: Any, needle: str
) -> None:
    before = await db.scalar(select(func.count()).select_from(JudgeSession))
    fmt = {"kind": "logprobs", "tokens": tokens}
    r = await client.post("/api/sessions", json=_session(pillars, 1, fmt, auto_start=False))
    assert r.status_code == 422, r.text
    assert needle in r.text
    assert await db.scalar(select(func.count()).select_from(JudgeSession)) == before
