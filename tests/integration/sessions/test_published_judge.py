"""Sessions that run a published judge: their own system prompt, template and verdict
format, end to end against a fake OpenAI server; bad formats refused with nothing stored;
the new-session page shows what the judge is told by default."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, text

from llmjudge.core.judging.prompts import SYSTEM_PROMPT
from llmjudge.providers.llm import TEST_PROMPT
from llmjudge.sessions.models import JudgeSession
from tests.fakes.servers import FakeOpenAI, FakeState
from tests.integration.test_scaleout import wait_ended

TEMPLATE = "Q: {prompt}\n(a): {answer_a}\n(b): {answer_b}\nWhich is better?"


@pytest.fixture(scope="module")
async def pillars(client: httpx.AsyncClient) -> dict[str, int]:
    rows = [
        {
            "pillar": "pj-one",
            "external_id": "1",
            "prompt_key": "k1",
            "prompt": "Say hi",
            "content": "hi",
        },
        {
            "pillar": "pj-two",
            "external_id": "1",
            "prompt_key": "k1",
            "prompt": "Say hi",
            "content": "",
        },
        {
            "pillar": "pj-one",
            "external_id": "2",
            "prompt_key": "k2",
            "prompt": "Count",
            "content": [
                {"role": "user", "content": "Count"},
                {"role": "assistant", "content": "1 2 3"},
            ],
        },
        {
            "pillar": "pj-two",
            "external_id": "2",
            "prompt_key": "k2",
            "prompt": "Count",
            "content": "one",
        },
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    return {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}


async def _model(client: httpx.AsyncClient, base_url: str, name: str) -> int:
    provider = (
        await client.post(
            "/api/providers", json={"name": name, "kind": "openai", "base_url": base_url}
        )
    ).json()
    body = {"provider_id": provider["id"], "name": name, "model": name}
    return int((await client.post("/api/models", json=body)).json()["id"])


def _session(pillars: dict[str, int], model_id: int, **extra: Any) -> dict[str, Any]:
    return {
        "session_name": "published",
        "pillar_ids": [pillars["pj-one"], pillars["pj-two"]],
        "comparison_mode": "round_robin",
        "match_by_prompt_key": True,
        "position_swap": True,
        "judge_model_id": model_id,
        "auto_start": True,
        **extra,
    }


async def test_tags_judge_runs_as_published(
    app: FastAPI, client: httpx.AsyncClient, pillars: dict[str, int]
) -> None:
    def respond(body: dict[str, Any]) -> str:
        user = body["messages"][-1]["content"]
        # The first shown answer wins, strongly: position swap must map it back.
        return "Reasoning... [[A>>B]]" if "(a): hi" in user or "(a): 1 2 3" in user else "[[B>A]]"

    state = FakeState(api_key=None, responder=respond)
    fake = FakeOpenAI(state)
    await fake.start()
    try:
        model_id = await _model(client, fake.base_url, "tags-judge")
        r = await client.post(
            "/api/sessions",
            json=_session(
                pillars,
                model_id,
                system_prompt="",
                prompt_template=TEMPLATE,
                verdict_format="tags",
            ),
        )
        assert r.status_code == 201, r.text
        assert r.json()["verdict_format"]["kind"] == "tags" and r.json()["system_prompt"] == ""
        out = await wait_ended(app, r.json()["id"], limit_s=30)
    finally:
        await fake.stop()
    assert (out["status"], out["completed"], out["failed"]) == ("completed", 4, 0)
    bodies = [
        q.body
        for q in state.requests
        if q.path.endswith("/chat/completions")
        # The start's fail-fast test call to a provider that never answered is not judging.
        and q.body["messages"][-1]["content"] != TEST_PROMPT
    ]
    assert len(bodies) == 4
    for body in bodies:
        assert "response_format" not in body  # no JSON forced on a judge that answers in tags
        assert [m["role"] for m in body["messages"]] == ["user"]  # "" = no system message
    users = {b["messages"][0]["content"] for b in bodies}
    # The empty answer is shown empty; the conversation's answer without its prompt turn.
    assert "Q: Say hi\n(a): hi\n(b): \nWhich is better?" in users
    assert "Q: Say hi\n(a): \n(b): hi\nWhich is better?" in users
    assert "Q: Count\n(a): 1 2 3\n(b): one\nWhich is better?" in users
    async with app.state.engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT winner, parse_error, strength FROM comparisons WHERE session_id = :s"),
                {"s": r.json()["id"]},
            )
        ).all()
    # [[A>>B]] is the strong verdict (2), [[B>A]] the weak one (1).
    assert sorted((w, s) for w, _, s in rows) == [("A", 2), ("A", 2), ("B", 1), ("B", 1)]
    assert all(e is None for _, e, _ in rows)


@pytest.mark.parametrize(
    ("on_unparsed", "status", "completed"), [("tie", "completed", 4), ("fail", "failed", 0)]
)
async def test_unreadable_answer_is_a_tie_only_when_the_format_says_so(
    app: FastAPI,
    client: httpx.AsyncClient,
    pillars: dict[str, int],
    on_unparsed: str,
    status: str,
    completed: int,
) -> None:
    state = FakeState(api_key=None, responder=lambda body: "I cannot decide.")
    fake = FakeOpenAI(state)
    await fake.start()
    try:
        model_id = await _model(client, fake.base_url, f"unsure-{on_unparsed}")
        fmt = {
            "kind": "labels",
            "on_unparsed": on_unparsed,
            "rules": [
                {"pattern": r"Output \(a\)", "winner": "A"},
                {"pattern": r"Output \(b\)", "winner": "B"},
            ],
        }
        r = await client.post(
            "/api/sessions",
            json=_session(pillars, model_id, prompt_template=TEMPLATE, verdict_format=fmt),
        )
        assert r.status_code == 201, r.text
        out = await wait_ended(app, r.json()["id"], limit_s=60)
    finally:
        await fake.stop()
    assert (out["status"], out["completed"]) == (status, completed)
    bodies = [
        q.body
        for q in state.requests
        if q.path.endswith("/chat/completions")
        # The start's fail-fast test call to a provider that never answered is not judging.
        and q.body["messages"][-1]["content"] != TEST_PROMPT
    ]
    assert all(b["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT} for b in bodies)
    async with app.state.engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT winner, parse_error, attempts FROM comparisons WHERE session_id = :s"),
                {"s": r.json()["id"]},
            )
        ).all()
    # Never a silent guess: a tie says why it is one; "fail" retries then fails.
    assert all(e and "no rule" in e for _, e, _ in rows)
    if on_unparsed == "tie":
        assert {(w, a) for w, _, a in rows} == {("TIE", 1)}
    else:
        assert {(w, a) for w, _, a in rows} == {(None, 3)}


@pytest.mark.parametrize(
    ("fmt", "needle"),
    [
        (
            {"kind": "labels", "rules": [{"pattern": "Output (a", "winner": "A"}]},
            "not a valid regular expression",
        ),
        (
            {"kind": "labels", "rules": [{"pattern": "(a+)+$", "winner": "A"}]},
            "backtracks catastrophically",
        ),
        ({"kind": "labels", "rules": []}, "at least one rule"),
        ({"kind": "labels"}, "at least one rule"),
        ({"kind": "labels", "rules": [{"pattern": "x", "winner": "C"}]}, "winner"),
        ({"kind": "tags", "rules": [{"pattern": "x", "winner": "A"}]}, "labels format only"),
        ("yaml", "kind"),
    ],
)
async def test_bad_verdict_formats_are_422_with_nothing_stored(
    client: httpx.AsyncClient, pillars: dict[str, int], db: Any, fmt: Any, needle: str
) -> None:
    before = await db.scalar(select(func.count()).select_from(JudgeSession))
    body = _session(pillars, 1, verdict_format=fmt, auto_start=False)
    r = await client.post("/api/sessions", json=body)
    assert r.status_code == 422, r.text
    assert needle in json.dumps(r.json())
    assert await db.scalar(select(func.count()).select_from(JudgeSession)) == before


async def test_bad_template_placeholder_is_422(
    client: httpx.AsyncClient, pillars: dict[str, int]
) -> None:
    r = await client.post(
        "/api/sessions", json=_session(pillars, 1, prompt_template="{input} {output_1} {output_2}")
    )
    assert r.status_code == 422
    assert "unknown placeholder {input}" in r.text


async def test_new_session_page_shows_the_builtin_judge(client: httpx.AsyncClient) -> None:
    page = await client.get("/sessions/new")
    assert page.status_code == 200
    assert 'id="builtin-template"' in page.text and "readonly" in page.text
    assert "impartial expert judge" in page.text  # the built-in system prompt
    assert '"kind": "json"' in page.text.replace("&#34;", '"')
    assert page.text.count("Start from this") == 3
