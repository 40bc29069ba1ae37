"""Several answers per input (#27 item 6), through the API with the simulator: a
calibration set of 3 systems x 40 questions is stored as 120 pairs, judged and labelled;
each question's answers share one split; an exact duplicate is refused naming both lines;
a later system's answers join their questions' splits."""

from __future__ import annotations

import asyncio
import csv
import io
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sklearn.metrics import f1_score
from sqlalchemy import func, select

from llmjudge.providers.models import LLMCall
from llmjudge.providers.simulated_personas import normalise

QUESTIONS = 40
SYSTEMS = ("alpha", "beta", "gamma")
JUDGE_PROMPT = (
    "Decide whether the answer is correct.\n"
    "Input: {input}\nReference: {correct_output}\nAnswer: {answer}\n"
    'Reply with JSON like {{"label": "correct", "reasoning": "...", "confidence": 0.5}}.'
)


def _answer(system: str, q: int) -> str:
    """alpha is always right, beta on even questions, gamma never."""
    right = system == "alpha" or (system == "beta" and q % 2 == 0)
    return str(q * 7) if right else str(q * 7 + 1)


def _csv(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()


def _calibration_set(systems: tuple[str, ...] = SYSTEMS) -> bytes:
    rows = [["input", "correct_output", "answer", "system"]]
    rows += [
        [f"What is 7 times {q}?", str(q * 7), _answer(s, q), s]
        for q in range(QUESTIONS)
        for s in systems
    ]
    return _csv(rows)


async def _wait(
    client: httpx.AsyncClient, pid: int, ok: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while True:
            status = (await client.get(f"/api/personas/{pid}/training/status")).json()
            if ok(status):
                return status
            await asyncio.sleep(0.05)


async def _calls(app: FastAPI, pid: int, purpose: str) -> int:
    await app.state.llm.flush()
    async with app.state.sessionmaker() as db:
        n = await db.scalar(
            select(func.count()).where(LLMCall.persona_id == pid, LLMCall.purpose == purpose)
        )
    return int(n or 0)


@pytest.fixture(scope="module")
async def models(client: httpx.AsyncClient) -> dict[str, int]:
    providers = (await client.get("/api/providers")).json()
    provider = next(p for p in providers if p["kind"] == "simulator")
    r = await client.patch(
        f"/api/providers/{provider['id']}",
        json={"settings": {"latency_ms_mean": 1, "latency_ms_jitter": 0}},
    )
    assert r.status_code == 200, r.text
    return {m["name"]: m["id"] for m in (await client.get("/api/models")).json()}


async def test_three_systems_by_forty_questions_are_stored_judged_and_labelled(
    app: FastAPI, client: httpx.AsyncClient, models: dict[str, int]
) -> None:
    r = await client.post(
        "/api/personas",
        json={
            "name": "Three systems",
            "task_prompt": "Answer: {input}",
            "judge_prompt": JUDGE_PROMPT,
            "task_model_id": models["simulated-task"],
            "judge_model_id": models["simulated-judge"],
            "engineer_model_id": models["simulated-engineer"],
            "max_iterations": 1,
            "holdout_fraction": 0.5,
        },
    )
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    url = f"/api/personas/{pid}/training-pairs/upload"
    r = await client.post(url, files={"file": ("set.csv", _calibration_set())})
    assert r.status_code == 200, r.text
    assert r.json()["created"] == 120 and r.json()["total_pairs"] == 120
    pairs = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    assert len(pairs) == 120
    assert Counter(p["system"] for p in pairs) == dict.fromkeys(SYSTEMS, QUESTIONS)
    by_input: dict[str, set[str]] = {}
    for p in pairs:
        by_input.setdefault(p["input"], set()).add(p["split"])
    assert len(by_input) == QUESTIONS
    assert all(len(splits) == 1 for splits in by_input.values())  # no question leaks
    questions = Counter(next(iter(s)) for s in by_input.values())
    assert questions == {"optimisation": 20, "selection": 10, "calibration": 10}
    page = await client.get(f"/personas/{pid}/data")
    shown = pairs[:100]  # the data tab shows the first 100, each answer's system under it
    assert page.status_code == 200
    assert page.text.count("by beta") == sum(p["system"] == "beta" for p in shown) > 0

    # The same file again is skipped; an exact duplicate is refused, naming both lines.
    r = await client.post(url, files={"file": ("set.csv", _calibration_set())})
    assert r.status_code == 200 and (r.json()["created"], r.json()["skipped"]) == (0, 120)
    twice = _csv(
        [
            ["input", "correct_output", "answer", "system"],
            ["What is 7 times 1?", "7", "7", "delta"],
            ["What is 7 times 2?", "14", "15", "delta"],
            ["What is 7 times 1?", "7", "7", "delta"],
        ]
    )
    r = await client.post(url, files={"file": ("dup.csv", twice)})
    assert r.status_code == 422
    assert r.json()["detail"]["errors"] == [
        {
            "line": 4,
            "field": "input",
            "message": "duplicate of line 2: the same input, system and answer",
        }
    ]
    assert len((await client.get(f"/api/personas/{pid}/training-pairs")).json()) == 120

    # Judged: one judge call per answer, no task-model call (every pair brings its answer).
    assert (await client.post(f"/api/personas/{pid}/training/start")).status_code == 200
    await _wait(client, pid, lambda s: (s["iteration"] or {}).get("status") == "awaiting_review")
    assert await _calls(app, pid, "persona_task") == 0
    assert await _calls(app, pid, "persona_judge") == 120
    decisions = (await client.get(f"/api/personas/{pid}/iterations/1/decisions")).json()
    assert len(decisions) == 120
    pair_of = {p["id"]: p for p in pairs}
    # each decision judged its own pair's answer, in its pair's split
    assert all(d["answer"] == pair_of[d["pair_id"]]["answer"] for d in decisions)
    assert all(d["split"] == pair_of[d["pair_id"]]["split"] for d in decisions)
    assert all(d["system"] == pair_of[d["pair_id"]]["system"] for d in decisions)
    assert len({(d["input"], d["answer"], pair_of[d["pair_id"]]["system"]) for d in decisions}) == (
        120
    )

    # Labelled: a person reviews every decision through the API.
    def truth(d: dict[str, Any]) -> bool:
        return normalise(d["answer"]) == normalise(d["correct_output"])

    for agrees in (True, False):
        ids = [
            d["id"] for d in decisions if ((d["judge_label"] == "correct") == truth(d)) is agrees
        ]
        if ids:
            r = await client.post(
                f"/api/personas/{pid}/iterations/1/feedback",
                json={"decision_ids": ids, "agrees": agrees},
            )
            assert r.status_code == 200, r.text
    status = await _wait(client, pid, lambda s: s["status"] != "training")
    assert status["status"] in ("trained", "incomplete"), status
    iteration = (await client.get(f"/api/personas/{pid}/iterations")).json()[0]
    for split in ("optimisation", "selection", "calibration"):
        rows = [d for d in decisions if d["split"] == split]
        got = iteration[f"metrics_{split}"]
        assert got["n"] == len(rows) == 3 * questions[split]
        human = [truth(d) for d in rows]
        judge = [d["judge_label"] == "correct" for d in rows]
        assert got["f1"] == pytest.approx(f1_score(human, judge, zero_division=0), abs=1e-12)

    export = (await client.get(f"/api/personas/{pid}/export?format=csv")).text
    lines = [ln for ln in export.splitlines(keepends=True) if not ln.startswith("#")]
    exported = list(csv.DictReader(io.StringIO("".join(lines))))
    assert Counter(row["system"] for row in exported) == dict.fromkeys(SYSTEMS, QUESTIONS)

    # A fourth system's answers join their questions' splits.
    r = await client.post(url, files={"file": ("delta.csv", _calibration_set(("delta",)))})
    assert r.status_code == 200 and r.json()["created"] == QUESTIONS, r.text
    after = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    assert len(after) == 160
    assert {p["id"]: p["split"] for p in after if p["id"] in pair_of} == {
        i: p["split"] for i, p in pair_of.items()
    }
    split_of = {p["input"]: p["split"] for p in pairs}
    assert all(p["split"] == split_of[p["input"]] for p in after if p["system"] == "delta")


async def test_answers_of_one_input_share_its_correct_output(
    client: httpx.AsyncClient, models: dict[str, int]
) -> None:
    r = await client.post(
        "/api/personas",
        json={
            "name": "One truth",
            "task_prompt": "Answer: {input}",
            "judge_prompt": JUDGE_PROMPT,
            "judge_model_id": models["simulated-judge"],
            "engineer_model_id": models["simulated-engineer"],
        },
    )
    assert r.status_code == 201, r.text
    url = f"/api/personas/{r.json()['id']}/training-pairs/upload"
    header = ["input", "correct_output", "answer", "system"]

    async def upload(*rows: list[str]) -> httpx.Response:
        return await client.post(url, files={"file": ("p.csv", _csv([header, *rows]))})

    r = await upload(["q", "4", "4", ""], ["q", "4", "5", ""])
    assert r.status_code == 200 and r.json()["created"] == 2, r.text
    # another answer to a stored input, with another truth: refused, nothing stored
    r = await upload(["q", "5", "6", ""], ["p", "1", "1", "alpha"])
    assert r.status_code == 422
    assert [(e["line"], e["field"]) for e in r.json()["detail"]["errors"]] == [
        (2, "correct_output")
    ]
    r = await upload(["p", "1", "1", "alpha"])
    assert r.status_code == 200 and r.json()["total_pairs"] == 3, r.text
    # a named system's answer is one answer: another one for it is refused
    r = await upload(["p", "1", "2", "alpha"])
    assert r.status_code == 422
    assert r.json()["detail"]["errors"][0]["message"] == (
        "this input's answer from system 'alpha' is already stored with a different one"
    )
