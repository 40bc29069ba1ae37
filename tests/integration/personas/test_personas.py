"""Personas through the API with the built-in simulator: pairs, the calibration loop with
human review (an oracle reviewer), metrics on both splits, prompt versions, carry-forward,
estimate, budget, report and export."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from llmjudge.auth.middleware import ADMIN_TOKEN_USER
from llmjudge.core.personas.metrics import compute_metrics, confusion_from_decisions
from llmjudge.personas.starters import get_template
from llmjudge.providers.models import LLMCall
from llmjudge.providers.simulated_personas import RULE_PREFIX, normalise
from tests.fakes.servers import FakeOpenAI

EXTRA_CSV = (
    "input,correct_output\n"
    '"What is 12 times 12?",144\n'
    '"=1+1 (what is it?)",2\n'
    '"How many legs does a spider have?",8\n'
    '"What is the boiling point of water at sea level in Celsius?",100\n'
)
NOTE = "Numbers must match exactly"
NEED = 100  # min_per_class above what a template's selection split holds


async def _wait(
    client: httpx.AsyncClient, pid: int, ok: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Poll the training status until ``ok`` (at most 30 s)."""
    async with asyncio.timeout(30):
        while True:
            status = (await client.get(f"/api/personas/{pid}/training/status")).json()
            if ok(status):
                return status
            await asyncio.sleep(0.1)


def _awaiting(n: int) -> Callable[[dict[str, Any]], bool]:
    def ok(s: dict[str, Any]) -> bool:
        it = s["iteration"]
        return it is not None and it["number"] == n and it["status"] == "awaiting_review"

    return ok


def _truth(d: dict[str, Any]) -> bool:
    """The simulator's ground truth: the answer is correct when it normalises to the reference."""
    return normalise(d["answer"]) == normalise(d["correct_output"])


def _oracle_agrees(d: dict[str, Any]) -> bool:
    return (d["judge_label"] == "correct") == _truth(d)


async def _calls(app: FastAPI, pid: int, purpose: str) -> int:
    await app.state.llm.flush()
    async with app.state.sessionmaker() as db:
        n = await db.scalar(
            select(func.count()).where(LLMCall.persona_id == pid, LLMCall.purpose == purpose)
        )
    return int(n or 0)


@pytest.fixture(scope="module")
async def events(app: FastAPI) -> AsyncIterator[list[Any]]:
    """Every persona event this module's app receives over LISTEN/NOTIFY."""
    seen: list[Any] = []

    async def collect() -> None:
        async with app.state.events.subscribe("*") as sub:
            async for event in sub:
                if event.topic.startswith("persona:"):
                    seen.append(event)

    task = asyncio.create_task(collect())
    await asyncio.sleep(0.05)
    yield seen
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.fixture(scope="module")
async def persona(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post("/api/personas/from-template/factual-qa")
    assert r.status_code == 201, r.text
    return r.json()


async def test_from_template_uses_simulated_models_and_template_pairs(
    client: httpx.AsyncClient, persona: dict[str, Any]
) -> None:
    template = get_template("factual-qa")
    assert persona["status"] == "draft"
    assert persona["pair_count"] == len(template.pairs)
    assert persona["judge_prompt"] == template.judge_prompt
    assert persona["current_version"] == 1
    models = {m["id"]: m["name"] for m in (await client.get("/api/models")).json()}
    assert models[persona["task_model_id"]] == "simulated-task"
    assert models[persona["judge_model_id"]] == "simulated-judge"
    assert models[persona["engineer_model_id"]] == "simulated-engineer"
    # A second persona from the same template gets a free name.
    again = (await client.post("/api/personas/from-template/factual-qa")).json()
    assert again["name"] != persona["name"] and again["name"].startswith(persona["name"])
    assert (await client.post("/api/personas/from-template/nope")).status_code == 404


async def test_upload_validates_all_or_nothing(
    client: httpx.AsyncClient, persona: dict[str, Any]
) -> None:
    pid = persona["id"]
    url = f"/api/personas/{pid}/training-pairs/upload"
    bad = "input,correct_output\nWhat is 2+2?,4\nWhat is 3+3?,\nWhat is 5+5?,10\n"
    r = await client.post(url, files={"file": ("pairs.csv", bad.encode(), "text/csv")})
    assert r.status_code == 422
    errors = r.json()["detail"]["errors"]
    assert errors == [{"line": 3, "field": "correct_output", "message": "correct_output is empty"}]
    header = "question,answer\nx,y\n"
    r = await client.post(url, files={"file": ("p.csv", header.encode(), "text/csv")})
    assert r.status_code == 422 and r.json()["detail"]["errors"][0]["field"] == "header"
    r = await client.post(url, files={"file": ("p.csv", b"input,correct_output\n\xff\xfe,1\n")})
    assert r.status_code == 422 and "UTF-8" in r.json()["detail"]["errors"][0]["message"]
    assert (await client.get(f"/api/personas/{pid}")).json()["pair_count"] == persona["pair_count"]

    r = await client.post(
        url + "?preview=true", files={"file": ("pairs.csv", EXTRA_CSV.encode(), "text/csv")}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["preview"] is True and body["created"] == 0
    assert [row["correct_output"] for row in body["rows"]] == ["144", "2", "8", "100"]
    assert (await client.get(f"/api/personas/{pid}")).json()["pair_count"] == persona["pair_count"]

    # One row repeats a template pair verbatim: skipped, not duplicated.
    first = get_template("factual-qa").pairs[0]
    buffer = io.StringIO()
    csv.writer(buffer).writerow([first.input, first.correct_output])
    repeat = buffer.getvalue()
    before = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    r = await client.post(url, files={"file": ("pairs.csv", (EXTRA_CSV + repeat).encode())})
    assert r.status_code == 200, r.text
    assert r.json()["created"] == 4 and r.json()["skipped"] == 1
    assert r.json()["total_pairs"] == persona["pair_count"] + 4
    after = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    # Stored pairs keep their side of the split; new ones join by the seeded hash.
    assert {p["id"]: p["split"] for p in before} == {
        p["id"]: p["split"] for p in after if p["id"] in {q["id"] for q in before}
    }
    held = (await client.get(f"/api/personas/{pid}/training-pairs?split=selection")).json()
    assert 0 < len(held) < len(after) and all(p["split"] == "selection" for p in held)

    # The same input with another correct output would silently change the truth.
    buffer = io.StringIO()
    csv.writer(buffer).writerows([["input", "correct_output"], [first.input, "something else"]])
    clash = buffer.getvalue()
    r = await client.post(url, files={"file": ("pairs.csv", clash.encode())})
    assert r.status_code == 422
    assert r.json()["detail"]["errors"][0]["line"] == 2


async def test_validation_of_models_and_target(
    client: httpx.AsyncClient, persona: dict[str, Any]
) -> None:
    base = {
        "name": "validation",
        "task_prompt": "Answer: {input}",
        "judge_prompt": "Judge {input} against {correct_output}: {answer}",
        "task_model_id": persona["task_model_id"],
        "judge_model_id": persona["judge_model_id"],
        "engineer_model_id": persona["engineer_model_id"],
    }
    same = {**base, "judge_model_id": persona["task_model_id"]}
    r = await client.post("/api/personas", json=same)
    assert r.status_code == 422 and "differ" in r.text
    for target in (0.69, 0.96):
        r = await client.post("/api/personas", json={**base, "target_f1": target})
        assert r.status_code == 422, target
    r = await client.post("/api/personas", json={**base, "judge_prompt": "Judge {answer}"})
    assert r.status_code == 422 and "{correct_output}" in r.text
    r = await client.post("/api/personas", json={**base, "target_f1": 0.7})
    assert r.status_code == 201 and r.json()["target_f1"] == 0.7
    created = r.json()
    r = await client.post("/api/personas", json={**base, "target_f1": 0.7})
    assert r.status_code == 409  # unique name
    r = await client.patch(
        f"/api/personas/{created['id']}", json={"judge_model_id": persona["task_model_id"]}
    )
    assert r.status_code == 422
    # No pairs yet.
    assert (await client.post(f"/api/personas/{created['id']}/training/start")).status_code == 422
    r = await client.post(
        f"/api/personas/{created['id']}/training-pairs/upload",
        files={"file": ("p.csv", b"input,correct_output\na,1\nb,2\n")},
    )
    assert r.json()["created"] == 2 and "only 2 pair(s)" in r.json()["warnings"][0]
    assert (await client.delete(f"/api/personas/{created['id']}")).status_code == 204


async def test_estimate_counts_calls_and_prices(
    client: httpx.AsyncClient, persona: dict[str, Any]
) -> None:
    pid = persona["id"]
    n = (await client.get(f"/api/personas/{pid}")).json()["pair_count"]
    est = (await client.get(f"/api/personas/{pid}/estimate")).json()
    assert est["pairs"] == n
    assert est["one_iteration"]["calls"] == 2 * n + 1
    k = persona["max_iterations"]
    # Answers once, the judge every iteration, the engineer between iterations.
    assert est["max_iterations"]["calls"] == n + k * n + (k - 1)
    assert est["per_model"]["judge"]["input_tokens"] > est["per_model"]["task"]["input_tokens"] > 0
    assert est["one_iteration"]["cost_usd"] == 0.0  # simulated models are free


async def test_training_loop_with_review(
    app: FastAPI, client: httpx.AsyncClient, persona: dict[str, Any], events: list[Any]
) -> None:
    pid = persona["id"]
    pairs = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    r = await client.post(f"/api/personas/{pid}/training/start")
    assert r.status_code == 200 and r.json()["status"] == "training"
    assert (await client.post(f"/api/personas/{pid}/training/start")).status_code == 409
    status = await _wait(client, pid, _awaiting(1))
    assert status["iteration"]["decisions"] == len(pairs)
    assert status["iteration"]["pending_review"] == len(pairs)

    decisions = (await client.get(f"/api/personas/{pid}/iterations/1/decisions")).json()
    assert len(decisions) == len(pairs)
    assert {d["pair_id"] for d in decisions} == {p["id"] for p in pairs}
    assert all(d["human_agrees"] is None and not d["carried_forward"] for d in decisions)
    split_of = {p["id"]: p["split"] for p in pairs}
    assert all(d["split"] == split_of[d["pair_id"]] for d in decisions)

    # Review: each disagreement on its own with a note, then "Agree with all" for the rest.
    disagree = [d for d in decisions if not _oracle_agrees(d)]
    agree = [d for d in decisions if _oracle_agrees(d)]
    assert disagree and agree
    for d in disagree:
        r = await client.post(
            f"/api/personas/{pid}/decisions/{d['id']}/feedback",
            json={"agrees": False, "notes": NOTE},
        )
        assert r.status_code == 200, r.text
        assert r.json()["decision"]["human_agrees"] is False
        assert r.json()["decision"]["reviewed_by"] == ADMIN_TOKEN_USER  # who labelled it
    pending = (await client.get(f"/api/personas/{pid}/iterations/1/decisions?pending=true")).json()
    assert {d["id"] for d in pending} == {d["id"] for d in agree}
    r = await client.post(
        f"/api/personas/{pid}/iterations/1/feedback",
        json={"decision_ids": [d["id"] for d in agree], "agrees": True},
    )
    assert r.json() == {"updated": len(agree), "pending_review": 0}

    # Iteration 2 starts by itself: a new AI prompt, answers reused, only changes to review.
    status = await _wait(client, pid, _awaiting(2))
    iterations = (await client.get(f"/api/personas/{pid}/iterations")).json()
    first = iterations[0]
    assert first["status"] == "done" and first["outcome"] == "continue"
    # "Agree with all" labels are marked bulk; one-by-one reviews are not.
    reviewed = {
        d["id"]: d for d in (await client.get(f"/api/personas/{pid}/iterations/1/decisions")).json()
    }
    assert all(reviewed[d["id"]]["bulk"] for d in agree)
    assert not any(reviewed[d["id"]]["bulk"] for d in disagree)
    conv = first["convergence"]
    assert conv["bulk_all"] == len(agree) and conv["labels_all"] == len(decisions)
    selection_bulk = sum(1 for d in agree if d["split"] == "selection")
    assert conv["bulk"] == selection_bulk
    if len(agree) / len(decisions) > 0.5:  # measured mostly on bulk labels: it says so
        assert any("mostly on bulk labels" in w for w in conv["warnings"])
    for side in ("optimisation", "selection"):
        rows = [d for d in decisions if d["split"] == side]
        expected = compute_metrics(
            confusion_from_decisions(
                [d["judge_label"] == "correct" for d in rows], [_oracle_agrees(d) for d in rows]
            )
        )
        got = first[f"metrics_{side}"]
        assert got["n"] == len(rows) > 0
        assert got["f1"] == pytest.approx(expected.f1)
        assert got["kappa"] == pytest.approx(expected.kappa)
        assert got["confusion"] == {
            "tp": expected.confusion.tp,
            "tn": expected.confusion.tn,
            "fp": expected.confusion.fp,
            "fn": expected.confusion.fn,
        }
    assert set(first["timings"]) >= {"generate_s", "judge_s", "review_s", "optimise_s"}
    metrics = (await client.get(f"/api/personas/{pid}/metrics")).json()
    assert [m["iteration"] for m in metrics] == [1]
    assert metrics[0]["selection"]["n"] == sum(1 for p in pairs if p["split"] == "selection")

    prompts = (await client.get(f"/api/personas/{pid}/prompts")).json()
    assert [(v["version"], v["created_by"]) for v in prompts] == [(1, "human"), (2, "ai")]
    assert prompts[1]["rationale"]
    new_rules = [line for line in prompts[1]["text"].splitlines() if line.startswith(RULE_PREFIX)]
    assert len(new_rules) == 1
    # The engineer saw only optimisation failures, with the human's notes.
    assert NOTE in new_rules[0]
    held_inputs = {p["input"][:30] for p in pairs if p["split"] == "selection"}
    assert not any(text in new_rules[0] for text in held_inputs)
    persona_now = (await client.get(f"/api/personas/{pid}")).json()
    assert persona_now["current_version"] == 2 and persona_now["current_iteration"] == 2

    second = (await client.get(f"/api/personas/{pid}/iterations/2/decisions")).json()
    assert all(d["prompt_version"] == 2 for d in second)
    before = {d["pair_id"]: d for d in decisions}
    changed = {
        d["pair_id"]
        for d in second
        if (d["answer"], d["judge_label"])
        != (before[d["pair_id"]]["answer"], before[d["pair_id"]]["judge_label"])
    }
    pending_ids = {d["pair_id"] for d in second if d["human_agrees"] is None}
    assert pending_ids == changed and 0 < len(changed) < len(second)
    for d in second:
        if d["pair_id"] not in changed:
            assert d["carried_forward"] is True
            assert d["human_agrees"] == _oracle_agrees(before[d["pair_id"]])
    assert status["iteration"]["pending_review"] == len(changed)
    # Unchanged task prompt and inputs: every answer was generated once.
    assert await _calls(app, pid, "persona_task") == len(pairs)
    assert await _calls(app, pid, "persona_judge") == 2 * len(pairs)
    assert await _calls(app, pid, "persona_engineer") == 1

    # Iteration 1's metrics are final.
    r = await client.post(
        f"/api/personas/{pid}/decisions/{decisions[0]['id']}/feedback", json={"agrees": True}
    )
    assert r.status_code == 409

    await asyncio.sleep(0.3)  # NOTIFY round trip
    types = [e.type for e in events if e.topic == f"persona:{pid}"]
    for expected_type in (
        "iteration_started",
        "outputs_generated",
        "judged",
        "awaiting_review",
        "metrics",
        "prompt_version",
    ):
        assert expected_type in types, (expected_type, types)
    assert types.index("metrics") < types.index("prompt_version")

    r = await client.post(f"/api/personas/{pid}/training/pause")
    assert r.json()["status"] == "paused" and r.json()["status_reason"]
    assert (await client.post(f"/api/personas/{pid}/training/pause")).status_code == 409


async def test_prompt_versions_diff_and_rollback(
    client: httpx.AsyncClient, persona: dict[str, Any]
) -> None:
    pid = persona["id"]
    diff = (await client.get(f"/api/personas/{pid}/prompts/diff?a=1&b=2")).json()
    assert f"+{RULE_PREFIX}" in diff["unified"]
    inserts = [op for op in diff["opcodes"] if op["tag"] == "insert"]
    assert len(inserts) == 1 and inserts[0]["b_lines"][0].startswith(RULE_PREFIX)
    assert (await client.get(f"/api/personas/{pid}/prompts/diff?a=1&b=9")).status_code == 404

    r = await client.post(f"/api/personas/{pid}/prompts", json={"text": "Judge {answer}."})
    assert r.status_code == 422
    r = await client.post(f"/api/personas/{pid}/prompts/1/rollback")
    assert r.status_code == 201
    v3 = r.json()
    prompts = (await client.get(f"/api/personas/{pid}/prompts")).json()
    assert v3["version"] == 3 and v3["created_by"] == "human"
    assert v3["text"] == prompts[0]["text"]
    assert (await client.get(f"/api/personas/{pid}")).json()["current_version"] == 3


async def test_report_and_export(client: httpx.AsyncClient, persona: dict[str, Any]) -> None:
    pid = persona["id"]
    report = (await client.get(f"/api/personas/{pid}/report")).json()
    assert report["final"]["iteration"] == 1 and report["converged_at"] is None
    assert [v["version"] for v in report["prompt_evolution"]] == [1, 2, 3]
    assert report["prompt_evolution"][0]["iterations"] == [1]
    assert report["worst_decisions"] and all(
        not d["human_agrees"] for d in report["worst_decisions"]
    )
    assert report["best_decisions"] and all(d["human_agrees"] for d in report["best_decisions"])

    r = await client.get(f"/api/personas/{pid}/export?format=csv")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    # Provenance first, as `# key: <JSON>` lines (the same block as session exports).
    head = [ln for ln in r.text.splitlines() if ln.startswith("#")]
    provenance = {ln[2:].split(": ", 1)[0]: json.loads(ln[2:].split(": ", 1)[1]) for ln in head[1:]}
    assert provenance["product"] == "llmjudge" and provenance["persona"]["id"] == pid
    assert provenance["models"]["judge"]["simulated"] is True and provenance["simulated"]
    assert len(provenance["judge_prompt"]["sha256"]) == 64
    body = "\n".join(ln for ln in r.text.splitlines() if not ln.startswith("#"))
    rows = list(csv.DictReader(io.StringIO(body)))
    pairs = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    assert len(rows) == 2 * len(pairs)
    formula = [row for row in rows if "1+1" in row["input"]]
    assert formula and all(row["input"].startswith("'=1+1") for row in formula)
    reviewed = [row for row in rows if row["iteration"] == "1"]
    assert all(row["human_label"] in ("correct", "incorrect") for row in reviewed)

    data = (await client.get(f"/api/personas/{pid}/export?format=json")).json()
    assert next(iter(data)) == "provenance" and data["provenance"]["judge_kind"] == "llm"
    assert len(data["pairs"]) == len(pairs) and len(data["outputs"]) == len(pairs)
    assert len(data["decisions"]) == 2 * len(pairs)
    assert data["iterations"][0]["metrics_selection"]["n"] > 0
    assert data["pairs"][0]["input"] == pairs[0]["input"]  # JSON keeps the raw text


async def test_clone_copies_prompt_and_split(
    client: httpx.AsyncClient, persona: dict[str, Any]
) -> None:
    pid = persona["id"]
    r = await client.post(f"/api/personas/{pid}/clone", json={"name": "cloned"})
    assert r.status_code == 201
    clone = r.json()
    source = (await client.get(f"/api/personas/{pid}")).json()
    assert clone["status"] == "draft" and clone["current_version"] == 1
    assert clone["judge_prompt"] == source["judge_prompt"]
    a = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    b = (await client.get(f"/api/personas/{clone['id']}/training-pairs")).json()
    assert [(p["input"], p["split"]) for p in a] == [(p["input"], p["split"]) for p in b]
    assert (
        await client.post(f"/api/personas/{pid}/clone", json={"name": "cloned"})
    ).status_code == 409


async def test_budget_cap_pauses_training(
    client: httpx.AsyncClient, persona: dict[str, Any]
) -> None:
    provider = next(
        p for p in (await client.get("/api/providers")).json() if p["kind"] == "simulator"
    )
    r = await client.post(
        "/api/models",
        json={
            "provider_id": provider["id"],
            "name": "priced-task",
            "model": "task",
            "input_price_per_million": 1000.0,
            "output_price_per_million": 1000.0,
        },
    )
    assert r.status_code == 201, r.text
    r = await client.post(
        "/api/personas/from-template/summaries", json={"task_model_id": r.json()["id"]}
    )
    pid = r.json()["id"]
    assert (
        await client.patch(f"/api/personas/{pid}", json={"budget_usd": 0.01})
    ).status_code == 200
    est = (await client.get(f"/api/personas/{pid}/estimate")).json()
    assert est["one_iteration"]["cost_usd"] > 0.01
    await client.post(f"/api/personas/{pid}/training/start")
    status = await _wait(client, pid, lambda s: s["status"] == "paused")
    assert status["status_reason"].startswith("budget reached")
    # Calls reserve their estimated cost first: the cap is never overshot (it used to be,
    # by the calls in flight when the lagging accounting caught up).
    assert status["spent_usd"] <= 0.01


async def _review_with_oracle(client: httpx.AsyncClient, pid: int, number: int) -> None:
    pending = (
        await client.get(f"/api/personas/{pid}/iterations/{number}/decisions?pending=true")
    ).json()
    for agrees in (True, False):
        ids = [d["id"] for d in pending if _oracle_agrees(d) is agrees]
        if ids:
            r = await client.post(
                f"/api/personas/{pid}/iterations/{number}/feedback",
                json={"decision_ids": ids, "agrees": agrees},
            )
            assert r.status_code == 200, r.text


async def test_loop_ends_trained_or_incomplete_by_the_held_out_f1(
    client: httpx.AsyncClient, events: list[Any]
) -> None:
    pid = (await client.post("/api/personas/from-template/summaries")).json()["id"]
    # More pairs of each class than the template's selection split holds (a quarter of 360).
    settings = {"max_iterations": 3, "target_f1": 0.95, "min_per_class": NEED}
    await client.patch(f"/api/personas/{pid}", json=settings)
    await client.post(f"/api/personas/{pid}/training/start")
    for number in range(1, 4):
        status = await _wait(
            client, pid, lambda s, n=number: _awaiting(n)(s) or s["status"] != "training"
        )
        if status["status"] != "training":
            break
        await _review_with_oracle(client, pid, number)
    # The selection split holds fewer than NEED pairs of each class, so the persona can
    # never converge, whatever its F1.
    status = await _wait(client, pid, lambda s: s["status"] in ("trained", "incomplete"))
    assert status["status"] == "incomplete"
    iterations = (await client.get(f"/api/personas/{pid}/iterations")).json()
    last = iterations[-1]
    assert last["outcome"] == "incomplete" and len(iterations) == 3
    assert "Needs more labelled pairs" in last["note"] and status["status_reason"] == last["note"]
    conv = last["convergence"]
    assert conv["status"] == "needs_more_labelled_pairs" and not conv["converged"]
    sel = last["metrics_selection"]
    human_pos = sel["confusion"]["tp"] + sel["confusion"]["fn"]
    human_neg = sel["confusion"]["tn"] + sel["confusion"]["fp"]
    assert (conv["positives"], conv["negatives"]) == (human_pos, human_neg)
    assert human_pos < NEED and human_neg < NEED
    assert conv["more_positives"] == NEED - human_pos
    assert conv["more_negatives"] == NEED - human_neg
    assert f"{conv['more_negatives']} more pair" in last["note"]
    # Every figure carries its count and interval.
    for key in ("precision", "recall", "f1", "kappa", "accuracy"):
        ci = sel["intervals"][key]
        assert ci["low"] <= sel[key] <= ci["high"] and ci["n"] >= 0
    assert sel["intervals"]["recall"]["n"] == human_pos
    report = (await client.get(f"/api/personas/{pid}/report")).json()
    assert report["converged_at"] is None
    # Every earlier iteration fell short and handed over to the prompt engineer.
    assert all(it["outcome"] == "continue" for it in iterations[:-1])
    prompts = (await client.get(f"/api/personas/{pid}/prompts")).json()
    assert len(prompts) == len(iterations)  # one AI version between two iterations
    await asyncio.sleep(0.3)
    assert "incomplete" in [e.type for e in events if e.topic == f"persona:{pid}"]


async def _fake_model(client: httpx.AsyncClient, fake: FakeOpenAI, name: str) -> int:
    """A model on the fake OpenAI-compatible server (real wire format, no retries)."""
    r = await client.post(
        "/api/providers",
        json={
            "name": f"fake for {name}",
            "kind": "openai",
            "base_url": fake.base_url,
            "api_key": fake.state.api_key,
            "max_retries": 0,
        },
    )
    assert r.status_code == 201, r.text
    r = await client.post(
        "/api/models", json={"provider_id": r.json()["id"], "name": name, "model": name}
    )
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


async def test_rewrite_without_placeholders_is_retried_then_rejected(
    client: httpx.AsyncClient,
) -> None:
    async with FakeOpenAI() as fake:
        # The engineer's structured reply, over the wire, drops two placeholders.
        fake.state.responder = lambda body: json.dumps(
            {"prompt": "Is this right? {answer}", "rationale": "shorter", "addressed": []}
        )
        engineer = await _fake_model(client, fake, "careless-engineer")
        r = await client.post(
            "/api/personas/from-template/summaries", json={"engineer_model_id": engineer}
        )
        pid = r.json()["id"]
        await client.patch(f"/api/personas/{pid}", json={"max_iterations": 2})
        await client.post(f"/api/personas/{pid}/training/start")
        await _wait(client, pid, _awaiting(1))
        await _review_with_oracle(client, pid, 1)
        status = await _wait(client, pid, lambda s: s["status"] != "training")
        engineer_calls = [q.body for q in fake.state.requests]
    assert len(engineer_calls) == 2
    assert engineer_calls[0]["response_format"]["json_schema"]["name"] == "judge_prompt"
    retry = engineer_calls[1]["messages"][-1]["content"]
    assert "{input}" in retry and "{correct_output}" in retry
    iterations = (await client.get(f"/api/personas/{pid}/iterations")).json()
    assert "rejected twice" in iterations[0]["note"]
    assert iterations[1]["prompt_version"] == 1
    prompts = (await client.get(f"/api/personas/{pid}/prompts")).json()
    assert [v["version"] for v in prompts] == [1]
    # Same prompt, same answers: the simulated judge repeats its labels, so every
    # decision is carried forward and iteration 2 is scored without a human.
    second = (await client.get(f"/api/personas/{pid}/iterations/2/decisions")).json()
    assert second and all(d["carried_forward"] for d in second)
    assert iterations[1]["metrics_selection"] == iterations[0]["metrics_selection"]
    assert status["status"] == "incomplete"  # too few selection pairs to converge


async def test_iteration_timeout_pauses_with_a_reason(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    runner = app.state.persona_runner
    pid = (await client.post("/api/personas/from-template/summaries")).json()["id"]
    await client.patch(f"/api/personas/{pid}", json={"iteration_timeout_s": 1})
    runner.concurrency = 1  # 25 answers one by one take several seconds
    try:
        await client.post(f"/api/personas/{pid}/training/start")
        status = await _wait(client, pid, lambda s: s["status"] == "paused")
    finally:
        runner.concurrency = 16
    reason = status["status_reason"]
    assert reason.startswith("iteration 1 timed out after 1 s while generating answers")
    assert status["iteration"]["note"] == reason
    await client.patch(f"/api/personas/{pid}", json={"iteration_timeout_s": 120})
    assert (await client.post(f"/api/personas/{pid}/training/resume")).status_code == 200
    await _wait(client, pid, _awaiting(1))
    await client.post(f"/api/personas/{pid}/training/pause")


async def test_changing_the_holdout_fraction_resplits_before_training(
    client: httpx.AsyncClient, persona: dict[str, Any]
) -> None:
    draft = (await client.post(f"/api/personas/{persona['id']}/clone")).json()
    url = f"/api/personas/{draft['id']}"
    assert (await client.patch(url, json={"holdout_fraction": 0})).status_code == 200
    pairs = (await client.get(f"{url}/training-pairs")).json()
    assert {p["split"] for p in pairs} == {"optimisation"}
    await client.patch(url, json={"holdout_fraction": 0.5})
    selection = (await client.get(f"{url}/training-pairs?split=selection")).json()
    calibration = (await client.get(f"{url}/training-pairs?split=calibration")).json()
    # Held out: half the pairs, shared equally by selection and calibration (within one).
    assert abs(len(selection) + len(calibration) - 0.5 * len(pairs)) <= 1
    assert abs(len(selection) - 0.25 * len(pairs)) <= 1
    assert abs(len(calibration) - 0.25 * len(pairs)) <= 1
    # The trained persona's split is fixed: its metrics history depends on it.
    r = await client.patch(f"/api/personas/{persona['id']}", json={"holdout_fraction": 0.1})
    assert r.status_code == 409


async def test_a_failing_model_pauses_with_the_cause(client: httpx.AsyncClient) -> None:
    async with FakeOpenAI() as fake:
        fake.state.fail_500 = 10**6  # every judge call answers 500 over the wire
        fake.state.responder = lambda body: json.dumps(
            {"label": "correct", "reasoning": "fine", "confidence": 0.8}
        )
        judge = await _fake_model(client, fake, "failing-judge")
        r = await client.post(
            "/api/personas/from-template/summaries", json={"judge_model_id": judge}
        )
        pid = r.json()["id"]
        await client.post(f"/api/personas/{pid}/training/start")
        status = await _wait(client, pid, lambda s: s["status"] == "paused")
        assert status["status_reason"] == (
            "the judge model failed: server error (500): internal server error; resume to retry"
        )
        assert status["iteration"]["status"] == "judging"
        fake.state.fail_500 = 0
        await client.post(f"/api/personas/{pid}/training/resume")
        status = await _wait(client, pid, _awaiting(1))
        assert status["status_reason"] is None
        await client.post(f"/api/personas/{pid}/training/pause")
        decisions = (await client.get(f"/api/personas/{pid}/iterations/1/decisions")).json()
        assert decisions and all(d["judge_confidence"] == 0.8 for d in decisions)
