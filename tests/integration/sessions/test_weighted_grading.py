"""Probability-weighted grades (G-Eval) end to end, against a fake OpenAI server that
returns ``top_logprobs``: each stored grade is sum s * softmax over the scale's tokens
where the grade is written, the grade as written stays readable in the raw reply, the
Scores API says the grades are weighted; judges without log probabilities are refused at
create, and replies that cannot be weighted fail their item with the reason, no grade."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, text

from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.judging.scores import read_score
from llmjudge.sessions.models import JudgeSession
from tests.fakes.servers import FakeOpenAI, FakeState
from tests.integration.test_scaleout import wait_ended

WEIGHTED = {"kind": "score", "weighted": True}  # MT-Bench's 1-10 [[rating]]


def _user_text(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")


def _grader_mind(prompt: str) -> tuple[int, dict[str, float]]:
    """The grade the fake writes and its alternatives at the grade's position, from a
    hash of the prompt: made up but fixed. Three other values, and "]]" and " [" that are
    no value of the scale."""
    digest = hashlib.sha256(prompt.encode()).digest()
    written = 1 + digest[0] % 10
    alternatives = {str(written): -digest[1] / 200}
    for k in range(3):
        other = 1 + (written + k + digest[2 + k] % 3) % 10
        alternatives.setdefault(str(other), -0.4 - digest[5 + k] / 60)
    return written, alternatives | {"]]": -1.5, " [": -2.0}


def grader_tokens(body: dict[str, Any]) -> list[Any]:
    written, alternatives = _grader_mind(_user_text(body))
    ranked = sorted(alternatives.items(), key=lambda t: -t[1])
    return [
        ("Clear", -0.1, [("Clear", -0.1)]),
        (" answer.", -0.2, [(" answer.", -0.2)]),
        (" Rating: [[", -0.01, [(" Rating: [[", -0.01)]),
        (str(written), alternatives[str(written)], ranked),
        ("]]", -0.001, [("]]", -0.001)]),
    ]


def expected_grade(prompt: str) -> float:
    """sum s * softmax over the scale's tokens, from the same numbers, with numpy."""
    _, alternatives = _grader_mind(prompt)
    values = np.array([int(t) for t in alternatives if t.isdigit()], dtype=float)
    logits = np.array([lp for t, lp in alternatives.items() if t.isdigit()])
    p = np.exp(logits - logits.max())
    return float((values * p / p.sum()).sum())


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> dict[str, int]:
    rows = [
        {
            "pillar": p,
            "external_id": str(k),
            "prompt_key": f"g{k}",
            "prompt": f"Question {k}?",
            "content": f"{p} says answer {k}",
        }
        for p in ("wg-one", "wg-two")
        for k in range(5)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("wg.jsonl", body)})
    assert r.status_code == 200, r.text
    return {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}


async def _model(client: httpx.AsyncClient, base_url: str, name: str, kind: str = "openai") -> int:
    provider = await client.post(
        "/api/providers", json={"name": name, "kind": kind, "base_url": base_url}
    )
    assert provider.status_code == 201, provider.text
    body = {"provider_id": provider.json()["id"], "name": name, "model": name}
    return int((await client.post("/api/models", json=body)).json()["id"])


def _session(pillars: dict[str, int], model_id: int, **extra: Any) -> dict[str, Any]:
    return {
        "session_name": "weighted grades",
        "comparison_mode": "single",
        "pillar_ids": [pillars["wg-one"], pillars["wg-two"]],
        "judge_model_id": model_id,
        "verdict_format": WEIGHTED,
        "seed": 5,
        "auto_start": True,
        **extra,
    }


async def _rows(app: FastAPI, sid: int) -> list[Any]:
    async with app.state.engine.connect() as conn:
        return list(
            (
                await conn.execute(
                    text(
                        "SELECT t.content, c.status, c.score, c.parse_error, c.raw_response,"
                        " v.status, v.score FROM comparisons c"
                        " JOIN threads t ON t.id = c.thread_a_id"
                        " LEFT JOIN comparison_votes v ON v.comparison_id = c.id"
                        " AND v.member = 0 WHERE c.session_id = :s ORDER BY c.id"
                    ),
                    {"s": sid},
                )
            ).all()
        )


async def test_each_stored_grade_is_the_probability_weighted_mean_of_the_scale(
    app: FastAPI, client: httpx.AsyncClient, pillars: dict[str, int]
) -> None:
    state = FakeState(api_key=None, tokens=grader_tokens)
    async with FakeOpenAI(state) as fake:
        model_id = await _model(client, fake.base_url, "weighted-grader")
        r = await client.post("/api/sessions", json=_session(pillars, model_id))
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        out = await wait_ended(app, sid, limit_s=60)
        # The same judge read as plain grades, for the comparison below.
        body = _session(pillars, model_id, verdict_format={"kind": "score"}, seed=6)
        h = await client.post("/api/sessions", json=body)
        assert h.status_code == 201, h.text
        plain = await wait_ended(app, h.json()["id"], limit_s=60)
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 10, 0)
    assert (plain["status"], plain["completed"]) == ("completed", 10)
    # (the connection check, "Reply with the single word OK.", asks for none)
    asked = [q.body for q in state.requests if q.body.get("logprobs")]
    assert len(asked) == 10 and all(b["top_logprobs"] == 20 for b in asked)
    plain_asked = [
        q.body
        for q in state.requests
        if "top_logprobs" not in q.body and "single word OK" not in _user_text(q.body)
    ]
    assert len(plain_asked) == 10  # the plain session asks for no log probabilities
    expected = {_user_text(b): expected_grade(_user_text(b)) for b in asked}

    rows = await _rows(app, sid)
    assert len(rows) == 10
    hard_format = VerdictFormat(kind="score")
    for content, status, score, error, raw, vote_status, vote_score in rows:
        prompt = next(p for p in expected if content in p)
        assert (status, error, vote_status) == ("completed", None, "voted")
        assert score == pytest.approx(expected[prompt], abs=1e-12)
        assert vote_score == score  # the member-0 vote keeps it too
        # The grade as written stays readable: the raw reply, read as a plain grade.
        written, _ = _grader_mind(prompt)
        assert read_score(raw, hard_format).value == written
        assert raw == f"Clear answer. Rating: [[{written}]]"
    assert any(not float(row[2]).is_integer() for row in rows)  # weighted, not written
    # Read without weighted, the same replies give the grades as written.
    for content, status, score, *_ in await _rows(app, h.json()["id"]):
        prompt = next(p for p in expected if content in p)
        assert (status, score) == ("completed", _grader_mind(prompt)[0])

    report = (await client.get(f"/api/sessions/{sid}/scores")).json()
    assert report["weighted"] is True and report["grades"] == 10
    means = {p["pillar_name"]: p["mean"] for p in report["pillars"]}
    for name in ("wg-one", "wg-two"):
        mine = [expected[p] for p in expected if f"{name} says" in p]
        assert means[name] == pytest.approx(float(np.mean(mine)))
    page = await client.get(f"/sessions/{sid}/results?tab=scores")
    assert page.status_code == 200
    assert 'id="scores-weighted"' in page.text and "Probability-weighted grades" in page.text


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        # The text has a grade, but the server sends no log probabilities with it.
        (FakeState(api_key=None, responder=lambda b: "Rating: [[7]]"), "no token log prob"),
        # The tokens hold no value of the scale anywhere.
        (
            FakeState(api_key=None, tokens=lambda b: [("I will not grade.", -0.1, [])]),
            "no score in the answer",
        ),
        # A decimal grade: not a whole value of the scale.
        (
            FakeState(
                api_key=None,
                tokens=lambda b: [
                    ("[[", 0.0, []),
                    ("7", -0.1, []),
                    (".5", -0.2, []),
                    ("]]", 0, []),
                ],
            ),
            "whole numbers; the judge wrote '7.5'",
        ),
    ],
)
async def test_a_reply_that_cannot_be_weighted_fails_its_item_with_the_reason(
    app: FastAPI, client: httpx.AsyncClient, pillars: dict[str, int], state: FakeState, reason: str
) -> None:
    async with FakeOpenAI(state) as fake:
        model_id = await _model(client, fake.base_url, f"unweighted-{abs(hash(reason))}")
        body = _session(pillars, model_id, pillar_ids=[pillars["wg-one"]])
        r = await client.post("/api/sessions", json=body)
        assert r.status_code == 201, r.text
        out = await wait_ended(app, r.json()["id"], limit_s=60)
    assert (out["status"], out["completed"]) == ("failed", 0)
    rows = await _rows(app, r.json()["id"])
    assert len(rows) == 5
    for _, status, score, error, _, vote_status, vote_score in rows:
        assert (status, score, vote_status, vote_score) == ("failed", None, "missing", None)
        assert reason in (error or "")


@pytest.mark.parametrize("kind", ["anthropic", "gemini", "simulator"])
async def test_a_judge_without_log_probabilities_is_refused_at_create(
    client: httpx.AsyncClient, pillars: dict[str, int], db: Any, kind: str
) -> None:
    if kind == "simulator":
        models = (await client.get("/api/models")).json()
        model_id = next(m["id"] for m in models if m.get("simulated"))
    else:
        model_id = await _model(client, "http://127.0.0.1:9", f"no-weights-{kind}", kind)
    before = await db.scalar(select(func.count()).select_from(JudgeSession))
    r = await client.post("/api/sessions", json=_session(pillars, model_id))
    assert r.status_code == 422, r.text
    assert "a probability-weighted grade reads token log probabilities" in r.text
    assert f"({kind})" in r.text and "weighted false" in r.text
    assert await db.scalar(select(func.count()).select_from(JudgeSession)) == before


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (
            {
                "comparison_mode": "round_robin",
                "verdict_format": {"kind": "tags", "weighted": True},
            },
            "applies to the score and likert formats",
        ),
        ({"verdict_format": {"kind": "score", "scale": [-3, 3], "weighted": True}}, "from 0 up"),
    ],
)
async def test_a_weighted_option_that_cannot_apply_is_refused_at_create(
    client: httpx.AsyncClient, pillars: dict[str, int], db: Any, extra: dict[str, Any], says: str
) -> None:
    before = await db.scalar(select(func.count()).select_from(JudgeSession))
    r = await client.post("/api/sessions", json=_session(pillars, 1, auto_start=False) | extra)
    assert r.status_code == 422, r.text
    assert says in r.text
    assert await db.scalar(select(func.count()).select_from(JudgeSession)) == before
