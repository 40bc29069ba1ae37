"""LLMBar run through the product exactly as published, against recorded judge answers.

The pairs become threads (one pillar per output slot, prompt key = instance, prompt text =
instruction), the gold labels go in through ``/api/references/import``, and each published
judge runs as a session with its own system prompt, its own template (the release's
``{input}``, ``{output_1}``, ``{output_2}`` written as ``{prompt}``, ``{answer_a}``,
``{answer_b}``) and its own verdict format (the release's parsing rules as ``labels``
rules, an unreadable answer counted as a tie). The judge is a fake OpenAI-compatible server
on 127.0.0.1 that knows the recorded completion for each (instance, order) only by the
exact messages the published prompt gives for it: a prompt filled differently, or a swap
filled the wrong way round, finds no answer. ``/api/sessions/{id}/agreement`` must then
give the accuracy and positional agreement published with the data, for every judge and set.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from llmjudge.providers.llm import TEST_PROMPT
from tests.fakes.servers import FakeOpenAI, FakeState
from tests.integration.test_scaleout import check_books, wait_ended

pytestmark = pytest.mark.slow

SETS = {"LLMBar/Natural": "LLMBar-Natural", "Processed/MT-Bench": "Processed-MT-Bench"}
SLOT = {"1": "A", "2": "B"}
NO_ANSWER = "(no recorded answer for these messages)"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def published_prompt(llmbar_dir: Path, strategy: str) -> tuple[str, str]:
    """(system, user template) of a release prompt in its chat-markup file."""
    text = (llmbar_dir / "prompts" / f"{strategy}.txt").read_text()
    system = text.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0].rstrip("\n")
    user = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0].rstrip("\n")
    return system, user


def as_product_template(user: str) -> str:
    for theirs, ours in (
        ("{input}", "{prompt}"),
        ("{output_1}", "{answer_a}"),
        ("{output_2}", "{answer_b}"),
    ):
        assert user.count(theirs) == 1
        user = user.replace(theirs, ours)
    return user


def verdict_format(llmbar_dir: Path, judge: str, strategy: str) -> dict[str, Any]:
    rules = json.loads((llmbar_dir / "prompts" / f"{judge}-{strategy}.parsing.json").read_text())
    return {
        "kind": "labels",
        "match": "rule_order",
        "on_unparsed": "tie",
        "rules": [{"pattern": rules[k], "winner": SLOT[k]} for k in ("1", "2")],
    }


class RecordedJudges:
    """Answers a call with the recorded completion whose published messages it equals."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str, str], str] = {}  # (model, system, user) -> text
        self.asked: Counter[tuple[str, str, str]] = Counter()
        self.recorded: Counter[tuple[str, str, str]] = Counter()
        self.unknown = 0

    def record(self, model: str, system: str, user: str, completion: str) -> None:
        # Five MT-Bench instances are another's two outputs the other way round, so one
        # instance's original call has the messages of the other's swapped call; the judges
        # answered both alike, and the product may serve the second from its cache.
        key = (model, system, user)
        assert self.answers.setdefault(key, completion) == completion
        self.recorded[key] += 1

    def respond(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        if messages == [{"role": "user", "content": TEST_PROMPT}]:
            return "OK"  # the start's fail-fast test call: not a judgment
        if [m["role"] for m in messages] != ["system", "user"]:
            self.unknown += 1
            return NO_ANSWER
        key = (body["model"], messages[0]["content"], messages[1]["content"])
        if key not in self.answers:
            self.unknown += 1
            return NO_ANSWER
        self.asked[key] += 1
        return self.answers[key]


def cases(llmbar_dir: Path) -> list[dict[str, Any]]:
    return json.loads((llmbar_dir / "published.json").read_text())


async def test_llmbar_replay_reproduces_published_figures(
    app: FastAPI, client: httpx.AsyncClient, llmbar_dir: Path
) -> None:
    pairs = {name: read_jsonl(llmbar_dir / f"pairs-{stem}.jsonl") for name, stem in SETS.items()}
    by_id = {p["id"]: p for rows in pairs.values() for p in rows}

    # Threads: one pillar per set and output slot, prompt key = instance.
    rows = [
        {
            "pillar": f"{stem} output_{slot}",
            "external_id": p["id"],
            "prompt_key": p["id"],
            "prompt": p["input"],
            "content": p[f"output_{slot}"],
            "metadata": {"set": name},
        }
        for name, stem in SETS.items()
        for p in pairs[name]
        for slot in (1, 2)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("llmbar.jsonl", body)})
    assert r.status_code == 200, r.text
    pillars = {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}

    # Gold labels, by (pillar, external id), through the references import.
    labels = "\n".join(
        json.dumps(
            {
                "pillar_a": f"{stem} output_1",
                "external_id_a": p["id"],
                "pillar_b": f"{stem} output_2",
                "external_id_b": p["id"],
                "label": SLOT[str(p["label"])],
                "source": "gold",
                "annotator": "LLMBar",
            }
        )
        for name, stem in SETS.items()
        for p in pairs[name]
    ).encode()
    r = await client.post("/api/references/import", files={"file": ("gold.jsonl", labels)})
    assert r.status_code == 200, r.text
    assert r.json()["created"] == sum(len(v) for v in pairs.values())

    # The recorded completions, keyed by the exact published messages of each call.
    judges = RecordedJudges()
    for case in cases(llmbar_dir):
        system, user = published_prompt(llmbar_dir, case["strategy"])
        stem = SETS[case["set"]]
        path = llmbar_dir / f"judgments-{stem}-{case['judge']}-{case['strategy']}.jsonl"
        for rec in read_jsonl(path):
            p = by_id[rec["id"]]
            first, second = (
                (p["output_1"], p["output_2"])
                if rec["order"] == "original"
                else (p["output_2"], p["output_1"])
            )
            filled = user.format(input=p["input"], output_1=first, output_2=second)
            judges.record(case["judge"], system, filled, rec["completion"])

    fake = FakeOpenAI(FakeState(api_key=None, keep_requests=False, responder=judges.respond))
    await fake.start()
    results = []
    started = time.perf_counter()
    try:
        provider = (
            await client.post(
                "/api/providers",
                json={"name": "llmbar", "kind": "openai", "base_url": fake.base_url},
            )
        ).json()
        models = {}
        for judge in sorted({c["judge"] for c in cases(llmbar_dir)}):
            body = {"provider_id": provider["id"], "name": f"{judge} (recorded)", "model": judge}
            r = await client.post("/api/models", json=body)
            assert r.status_code in (200, 201), r.text
            models[judge] = r.json()["id"]

        for case in cases(llmbar_dir):
            system, user = published_prompt(llmbar_dir, case["strategy"])
            stem = SETS[case["set"]]
            r = await client.post(
                "/api/sessions",
                json={
                    "session_name": f"{case['set']} {case['judge']} {case['strategy']}",
                    "pillar_ids": [pillars[f"{stem} output_1"], pillars[f"{stem} output_2"]],
                    "comparison_mode": "round_robin",
                    "match_by_prompt_key": True,
                    "position_swap": True,
                    "worker_count": 32,
                    "judge_model_id": models[case["judge"]],
                    "system_prompt": system,
                    "prompt_template": as_product_template(user),
                    "verdict_format": verdict_format(llmbar_dir, case["judge"], case["strategy"]),
                    "auto_start": True,
                },
            )
            assert r.status_code == 201, r.text
            created = r.json()
            assert created["total"] == 2 * case["n"]
            assert created["verdict_format"]["kind"] == "labels"
            results.append((case, created["id"]))
        for case, sid in results:
            out = await wait_ended(app, sid, limit_s=120)
            assert (out["status"], out["completed"], out["failed"]) == (
                "completed",
                2 * case["n"],
                0,
            ), case
            await check_books(app, sid)
    finally:
        await fake.stop()
    elapsed = time.perf_counter() - started

    # Every recorded call was asked with the published messages, at most as often as it
    # was recorded (no retry); nothing else was asked.
    assert judges.unknown == 0
    assert set(judges.asked) == set(judges.answers)
    assert all(judges.asked[k] <= judges.recorded[k] for k in judges.asked)

    for case, sid in results:
        r = await client.get(f"/api/sessions/{sid}/agreement", params={"reference": "gold"})
        assert r.status_code == 200, r.text
        report = r.json()
        judge = report["judge"]
        assert (report["unlabelled"], report["labelled_pairs"]) == (0, case["n"])
        assert judge["accuracy"]["n"] == 2 * case["n"]
        assert judge["consistency"]["n"] == case["n"]  # every instance judged both ways
        accuracy = 100 * judge["accuracy"]["value"]
        positional = 100 * judge["consistency"]["value"]
        assert accuracy == pytest.approx(case["accuracy"], abs=0.5), case
        assert positional == pytest.approx(case["positional_agreement"], abs=0.5), case
        for name in ("accuracy", "consistency", "kappa", "f1"):
            est = judge[name]
            assert est["low"] <= est["value"] <= est["high"], (case, name)
        print(
            f"{case['set']:<20} {case['judge']:<8} {case['strategy']:<16} "
            f"accuracy {accuracy:5.1f} (published {case['accuracy']:5.1f})  "
            f"positional {positional:5.1f} (published {case['positional_agreement']:5.1f})"
        )
    calls = sum(2 * c["n"] for c in cases(llmbar_dir))
    print(f"LLMBar replay: {len(results)} sessions, {calls} judge calls in {elapsed:.1f}s")


async def test_llmbar_offline_import_scores_recorded_answers(
    client: httpx.AsyncClient, llmbar_dir: Path
) -> None:
    """No model at all: the recorded answers imported as judgments, read with the judge's
    own verdict format, each row carrying the gold label; the same report follows."""
    flip = {"A": "B", "B": "A"}
    for case in cases(llmbar_dir):
        stem = SETS[case["set"]]
        pairs = {p["id"]: p for p in read_jsonl(llmbar_dir / f"pairs-{stem}.jsonl")}
        threads = "\n".join(
            json.dumps(
                {
                    "pillar": f"{stem} output_{slot}",
                    "external_id": p["id"],
                    "prompt_key": p["id"],
                    "prompt": p["input"],
                    "content": p[f"output_{slot}"],
                }
            )
            for p in pairs.values()
            for slot in (1, 2)
        ).encode()
        r = await client.post("/api/threads/import", files={"file": ("t.jsonl", threads)})
        assert r.status_code == 200, r.text
        path = llmbar_dir / f"judgments-{stem}-{case['judge']}-{case['strategy']}.jsonl"
        rows = []
        for rec in read_jsonl(path):
            p = pairs[rec["id"]]
            first, second = ("1", "2") if rec["order"] == "original" else ("2", "1")
            gold = SLOT[str(p["label"])]
            rows.append(
                {
                    "thread_a": {"pillar": f"{stem} output_{first}", "external_id": p["id"]},
                    "thread_b": {"pillar": f"{stem} output_{second}", "external_id": p["id"]},
                    "judgment": rec["completion"],
                    # The label is relative to the row's own order of the two threads.
                    "label": gold if first == "1" else flip[gold],
                    "annotator": "LLMBar",
                }
            )
        fmt = verdict_format(llmbar_dir, case["judge"], case["strategy"])
        r = await client.post(
            "/api/sessions/import",
            files={"file": ("j.jsonl", "\n".join(json.dumps(x) for x in rows).encode())},
            data={"session_name": f"offline {case['judge']}", "verdict_format": json.dumps(fmt)},
        )
        assert r.status_code == 201, r.text
        imported = r.json()
        assert (imported["completed"], imported["labels"]) == (2 * case["n"], case["n"])
        assert imported["swap_pairs"] == case["n"]
        report = (await client.get(f"/api/sessions/{imported['session_id']}/agreement")).json()
        judge = report["judge"]
        assert 100 * judge["accuracy"]["value"] == pytest.approx(case["accuracy"], abs=0.5)
        positional = 100 * judge["consistency"]["value"]
        assert positional == pytest.approx(case["positional_agreement"], abs=0.5)
    bad = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", b'{"thread_a": 1, "thread_b": 2, "verdict": "A"}')},
        data={"session_name": "bad", "verdict_format": '{"kind": "labels", "rules": []}'},
    )
    assert bad.status_code == 422 and "at least one rule" in bad.text
