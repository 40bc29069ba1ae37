"""MT-Bench replayed through the engine: the 31 models are pillars, their answers threads,
and an OpenAI-kind judge (a fake server) answers each judge call with the judgment that
gpt-3.5-turbo-1106 really gave for that question and that order of the two models.

The fake identifies the pair from the fenced threads of the request alone (the request
carries only messages), so a wrong or swapped thread in the prompt would show in the
figures. Eight answers repeat another model's answer to the same question word for word,
so each thread's title (its question and model) is fenced with it and part of the key. The
published consistency of this judge on this data is 69.59%.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from llmjudge.core.judging.prompts import build_judge_messages
from tests.fakes.servers import FakeOpenAI, FakeState
from tests.integration.test_scaleout import check_books, wait_ended

pytestmark = pytest.mark.slow

BASELINE = "vicuna-13b-v1.3"
_FENCED = {side: re.compile(rf"<thread_{side}>\n(.*?)\n</thread_{side}>", re.S) for side in "ab"}


def conversation(answer: dict[str, Any]) -> list[dict[str, str]]:
    content = []
    for question, reply in zip(answer["turns"], answer["answers"], strict=True):
        content += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
    return content


def digest(fenced: str) -> str:
    return hashlib.sha256(fenced.encode()).hexdigest()


def title(answer: dict[str, Any]) -> str:
    return f"MT-Bench {answer['question_id']}: {answer['model']}"


def fenced_digest(answer: dict[str, Any]) -> str:
    """The digest of a thread as the judge prompt fences it."""
    messages = build_judge_messages(
        content_a=conversation(answer), content_b="", title_a=title(answer)
    )
    user = messages[-1]["content"]
    match = _FENCED["a"].search(user)
    assert match is not None
    return digest(match.group(1))


class ReplayJudge:
    """Answers each call with the recorded judgment for (question, model A, model B)."""

    def __init__(self, answers: list[dict[str, Any]], judgments: list[dict[str, Any]]) -> None:
        self.thread = {fenced_digest(a): (a["question_id"], a["model"]) for a in answers}
        self.judgment = {(j["question_id"], j["model_a"], j["model_b"]): j for j in judgments}
        assert len(self.thread) == len(answers) and len(self.judgment) == len(judgments)
        self.asked: Counter[tuple[int, str, str]] = Counter()

    def respond(self, body: dict[str, Any]) -> str:
        user = body["messages"][-1]["content"]
        (qa, model_a), (qb, model_b) = (
            self.thread[digest(_FENCED[side].search(user).group(1))]  # type: ignore[union-attr]
            for side in "ab"
        )
        assert qa == qb, "threads of different questions were paired"
        self.asked[(qa, model_a, model_b)] += 1
        return self.judgment[(qa, model_a, model_b)]["judgment"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_mtbench_replay(app: FastAPI, client: httpx.AsyncClient, mtbench_dir: Path) -> None:
    answers = read_jsonl(mtbench_dir / "answers.jsonl")
    judgments = read_jsonl(mtbench_dir / "judgments-gpt-3.5-turbo-1106.jsonl")
    assert (len(answers), len(judgments)) == (2480, 4800)
    judge = ReplayJudge(answers, judgments)

    rows = [
        {
            "pillar": a["model"],
            "external_id": str(a["question_id"]),
            "prompt_key": str(a["question_id"]),
            "title": title(a),
            "content": conversation(a),
        }
        for a in answers
    ]
    data = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("mtbench.jsonl", data)})
    assert r.status_code == 200, r.text
    pillars = {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}
    assert len(pillars) == 31

    fake = FakeOpenAI(FakeState(api_key=None, keep_requests=False, responder=judge.respond))
    await fake.start()
    try:
        body = {"name": "replay", "kind": "openai", "base_url": fake.base_url}
        provider = (await client.post("/api/providers", json=body)).json()
        body = {"provider_id": provider["id"], "name": "gpt-3.5-turbo-1106 (replay)"}
        model = (await client.post("/api/models", json=body | {"model": "replay"})).json()
        started = time.perf_counter()
        r = await client.post(
            "/api/sessions",
            json={
                "session_name": "MT-Bench replay",
                "pillar_ids": list(pillars.values()),
                "comparison_mode": "round_robin",
                "baseline_pillar_id": pillars[BASELINE],
                "match_by_prompt_key": True,
                "position_swap": True,
                "worker_count": 64,
                "judge_model_id": model["id"],
                "auto_start": True,
            },
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert r.json()["total"] == 4800
        out = await wait_ended(app, sid, limit_s=100)
        elapsed = time.perf_counter() - started
    finally:
        await fake.stop()

    # Six recorded judgments name no winner: they fail after three attempts, never guessed.
    assert (out["status"], out["total"], out["completed"], out["failed"]) == (
        "completed",
        4800,
        4794,
        6,
    )
    await check_books(app, sid)
    assert set(judge.asked) == set(judge.judgment)  # every recorded call, in its order
    retried = {k for k, n in judge.asked.items() if n > 1}
    assert len(retried) == 6 and all(judge.asked[k] == 3 for k in retried)
    async with app.state.engine.connect() as conn:
        failed = (
            await conn.execute(
                text(
                    "SELECT attempts, parse_error FROM comparisons "
                    "WHERE session_id = :sid AND status = 'failed'"
                ),
                {"sid": sid},
            )
        ).all()
    assert [a for a, _ in failed] == [3] * 6 and all(e for _, e in failed)

    swap = (await client.get(f"/api/sessions/{sid}/position-swap-analysis")).json()
    summary = swap["summary"]
    assert abs(summary["consistency_rate"] - 0.6959) < 0.01
    consistent = summary["consistent_wins"] + summary["consistent_ties"]
    assert (summary["total_swap_pairs"], consistent) == (2397, 1669)
    board = (await client.get(f"/api/sessions/{sid}/thread-leaderboard")).json()
    assert board["pillar_aggregates"][0]["name"] == "gpt-4"
    assert board["pillar_aggregates"][0]["bt_rank"] == 1
    print(f"\nMT-Bench replay: 4,800 comparisons (+12 retries) in {elapsed:.1f}s")
