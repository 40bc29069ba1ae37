"""Personas you can trust, end to end through the API:

- pairs that bring their own answers and human labels (``tests/data/llmbar_binary.csv``,
  real LLMBar data): no task-model call, no waiting for a person, metrics equal to
  scikit-learn's on the same labels, inter-annotator agreement equal to scikit-learn's;
- the gate fails closed on a 2 + 2 calibration and passes on a large, good one, with both
  estimators reported (PPI++ when the batch carries human labels);
- the embedding judge with the bundled local model: fit, metrics, gate, no provider call;
- the loop and the evaluate API over the real wire formats of the fake OpenAI-compatible
  and Anthropic servers on 127.0.0.1: structured output, tool use, a reply that echoes the
  prompt's example JSON, an unreadable reply and its retry past the response cache.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    f1_score,
    precision_score,
    recall_score,
)
from sqlalchemy import func, select

from llmjudge.providers.models import LLMCall
from tests.fakes.servers import FakeAnthropic, FakeOpenAI

DATA = Path(__file__).resolve().parents[2] / "data" / "llmbar_binary.csv"
JUDGE_PROMPT = (
    "Decide whether the answer is correct.\n"
    "Input: {input}\n"
    "Reference: {correct_output}\n"
    "Answer: {answer}\n"
    'Reply with JSON like {{"label": "correct", "reasoning": "...", "confidence": 0.5}}.'
)
METRICS = ("precision", "recall", "f1", "kappa", "accuracy")


async def _wait(
    client: httpx.AsyncClient, pid: int, ok: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while True:
            status = (await client.get(f"/api/personas/{pid}/training/status")).json()
            if ok(status):
                return status
            await asyncio.sleep(0.05)


async def _calls(app: FastAPI, pid: int, purpose: str | None = None) -> int:
    await app.state.llm.flush()
    stmt = select(func.count()).where(LLMCall.persona_id == pid)
    if purpose is not None:
        stmt = stmt.where(LLMCall.purpose == purpose)
    async with app.state.sessionmaker() as db:
        return int(await db.scalar(stmt) or 0)


def _sklearn(human: list[bool], judge: list[bool]) -> dict[str, float]:
    return {
        "precision": precision_score(human, judge, zero_division=0),
        "recall": recall_score(human, judge, zero_division=0),
        "f1": f1_score(human, judge, zero_division=0),
        "kappa": cohen_kappa_score(human, judge) if len(set(human) | set(judge)) > 1 else 0.0,
        "accuracy": accuracy_score(human, judge),
    }


@pytest.fixture(scope="module")
async def sim(client: httpx.AsyncClient) -> dict[str, int]:
    """Fast simulated calls; the simulated models' ids."""
    providers = (await client.get("/api/providers")).json()
    provider = next(p for p in providers if p["kind"] == "simulator")
    r = await client.patch(
        f"/api/providers/{provider['id']}",
        json={"settings": {"latency_ms_mean": 1, "latency_ms_jitter": 0}},
    )
    assert r.status_code == 200, r.text
    models = (await client.get("/api/models")).json()
    return {m["name"]: m["id"] for m in models}


async def _persona(client: httpx.AsyncClient, name: str, **fields: Any) -> dict[str, Any]:
    body = {"name": name, "task_prompt": "Answer: {input}", "judge_prompt": JUDGE_PROMPT}
    r = await client.post("/api/personas", json={**body, **fields})
    assert r.status_code == 201, r.text
    return r.json()


async def _upload(client: httpx.AsyncClient, pid: int, data: bytes) -> dict[str, Any]:
    r = await client.post(
        f"/api/personas/{pid}/training-pairs/upload", files={"file": ("pairs.csv", data)}
    )
    assert r.status_code == 200, r.text
    return r.json()


def _labelled_csv(rows: list[tuple[str, str, str, bool]]) -> bytes:
    """(input, correct_output, answer, human says correct) rows with one annotator."""
    buffer = io.StringIO()
    w = csv.writer(buffer)
    w.writerow(["input", "correct_output", "answer", "human_label", "annotator"])
    for q, ref, ans, ok in rows:
        w.writerow([q, ref, ans, "correct" if ok else "incorrect", "ann"])
    return buffer.getvalue().encode()


async def _decisions(client: httpx.AsyncClient, pid: int, number: int = 1) -> list[dict]:
    r = await client.get(f"/api/personas/{pid}/iterations/{number}/decisions")
    assert r.status_code == 200, r.text
    return r.json()


# -- bring your own outputs and labels -----------------------------------------------------


async def test_own_answers_and_labels_match_sklearn_without_a_task_model(
    app: FastAPI, client: httpx.AsyncClient, sim: dict[str, int]
) -> None:
    persona = await _persona(
        client,
        "LLMBar labels",
        judge_model_id=sim["simulated-judge"],
        engineer_model_id=sim["simulated-engineer"],
        max_iterations=2,
        holdout_fraction=0.5,
        metrics_annotator="llmbar-gold",
    )
    pid = persona["id"]
    assert persona["task_model_id"] is None  # allowed: every pair brings its answer
    upload = await _upload(client, pid, DATA.read_bytes())
    assert upload["created"] == 60
    pairs = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    assert all(p["answer"] and set(p["labels"]) == {"llmbar-gold", "gpt4-vanilla"} for p in pairs)
    gold = {p["id"]: p["labels"]["llmbar-gold"] == "correct" for p in pairs}
    assert sum(gold.values()) == 30
    # stratified by the label: each split has both classes in proportion
    for split, share in (("optimisation", 0.5), ("selection", 0.25), ("calibration", 0.25)):
        ids = [p["id"] for p in pairs if p["split"] == split]
        assert abs(sum(gold[i] for i in ids) - share * 30) <= 1, split

    r = await client.post(f"/api/personas/{pid}/training/start")
    assert r.status_code == 200, r.text
    # Pre-filled reviews: the loop runs both iterations without waiting for a person.
    status = await _wait(client, pid, lambda s: s["status"] not in ("training",))
    assert status["status"] == "incomplete", status
    assert await _calls(app, pid, "persona_task") == 0  # no task model, none called
    assert await _calls(app, pid, "persona_judge") == 2 * 60
    assert await _calls(app, pid, "persona_engineer") == 1

    iterations = (await client.get(f"/api/personas/{pid}/iterations")).json()
    assert [it["outcome"] for it in iterations] == ["continue", "incomplete"]
    for it in iterations:
        decisions = await _decisions(client, pid, it["number"])
        assert all(d["prefilled"] and d["human_agrees"] is not None for d in decisions)
        assert all(d["reviewed_by"] == "llmbar-gold" for d in decisions)
        for split in ("optimisation", "selection", "calibration"):
            rows = [d for d in decisions if d["split"] == split]
            human = [gold[d["pair_id"]] for d in rows]
            judge = [d["judge_label"] == "correct" for d in rows]
            got = it[f"metrics_{split}"]
            expected = _sklearn(human, judge)
            assert got["n"] == len(rows) > 0
            for key in METRICS:
                assert got[key] == pytest.approx(expected[key], abs=1e-12), (split, key)
                ci = got["intervals"][key]
                assert ci["low"] <= got[key] <= ci["high"]
        # disagreements and unsure decisions still reach the review queue, first
        to_check = [d for d in decisions if d["to_check"]]
        assert to_check and all(
            d["human_agrees"] is False or d["judge_confidence"] < 0.6 for d in to_check
        )
        assert decisions[: len(to_check)] == to_check
    export = (await client.get(f"/api/personas/{pid}/export?format=json")).json()
    assert all(set(p["labels"]) == {"llmbar-gold", "gpt4-vanilla"} for p in export["pairs"])
    assert all(d["prefilled"] and not d["bulk"] for d in export["decisions"])
    rows = (await client.get(f"/api/personas/{pid}/metrics")).json()
    assert [r["calibration"]["n"] for r in rows] == [it["metrics_calibration"]["n"]] * 2
    # Selection holds 15 pairs (7 or 8 of each class): too few to converge on.
    conv = iterations[-1]["convergence"]
    assert conv["status"] == "needs_more_labelled_pairs"
    assert "Needs more labelled pairs" in iterations[-1]["note"]

    # Two annotators per pair: their agreement, as scikit-learn computes it.
    agreement = (await client.get(f"/api/personas/{pid}/agreement")).json()
    other = {p["id"]: p["labels"]["gpt4-vanilla"] == "correct" for p in pairs}
    ids = sorted(gold)
    expected_kappa = cohen_kappa_score([gold[i] for i in ids], [other[i] for i in ids])
    assert agreement["annotators"] == ["gpt4-vanilla", "llmbar-gold"]
    assert agreement["multiply_labelled"] == 60
    kappa = agreement["pairwise"][0]["kappa"]
    assert kappa["value"] == pytest.approx(expected_kappa) and kappa["n"] == 60
    assert kappa["low"] < kappa["value"] < kappa["high"]
    # Fleiss' kappa of two raters differs from Cohen's only in the expected agreement,
    # computed from the pooled shares.
    pooled = (sum(gold.values()) + sum(other.values())) / 120
    p_o = sum(gold[i] == other[i] for i in ids) / 60
    p_e = pooled**2 + (1 - pooled) ** 2
    assert agreement["fleiss_kappa"]["value"] == pytest.approx((p_o - p_e) / (1 - p_e))
    assert agreement["judge_kappa"]["n"] == iterations[-1]["metrics_selection"]["n"]
    page = await client.get(f"/personas/{pid}")
    assert 'id="fleiss-kappa"' in page.text and "the metrics use llmbar-gold" in page.text
    prompts_page = await client.get(f"/personas/{pid}/prompts")
    assert "addresses " in prompts_page.text
    for tab in ("/progress", "/data", "/review/2"):
        assert (await client.get(f"/personas/{pid}{tab}")).status_code == 200, tab

    # The engineer's rewrite says which optimisation cases (and notes) it addressed.
    prompts = (await client.get(f"/api/personas/{pid}/prompts")).json()
    assert prompts[-1]["created_by"] == "ai" and prompts[-1]["addressed"]
    opt_ids = {p["id"] for p in pairs if p["split"] == "optimisation"}
    assert {a["pair_id"] for a in prompts[-1]["addressed"]} <= opt_ids


async def test_labels_need_an_answer_and_ties_wait_for_a_person(
    client: httpx.AsyncClient, sim: dict[str, int]
) -> None:
    persona = await _persona(
        client,
        "Tie labels",
        task_model_id=sim["simulated-task"],
        judge_model_id=sim["simulated-judge"],
        engineer_model_id=sim["simulated-engineer"],
    )
    pid = persona["id"]
    r = await client.post(
        f"/api/personas/{pid}/training-pairs/upload",
        files={"file": ("p.csv", b"input,correct_output,human_label\nq,1,correct\n")},
    )
    assert r.status_code == 422 and r.json()["detail"]["errors"][0]["field"] == "answer"
    rows = "input,correct_output,answer,human_label,annotator\n"
    rows += "".join(f"q{i},{i},{i},correct,a\nq{i},{i},{i},incorrect,b\n" for i in range(4))
    rows += "p,7,8,incorrect,a\n"
    await _upload(client, pid, rows.encode())
    pairs = (await client.get(f"/api/personas/{pid}/training-pairs")).json()
    assert [len(p["labels"]) for p in pairs] == [2, 2, 2, 2, 1]
    # Without a task model: a tie between two annotators waits for a person.
    r = await client.patch(f"/api/personas/{pid}", json={"task_model_id": None})
    assert r.status_code == 200, r.text
    assert (await client.post(f"/api/personas/{pid}/training/start")).status_code == 200
    await _wait(client, pid, lambda s: (s["iteration"] or {}).get("status") == "awaiting_review")
    decisions = await _decisions(client, pid)
    pending = {d["input"] for d in decisions if d["human_agrees"] is None}
    assert pending == {f"q{i}" for i in range(4)}
    assert [d["prefilled"] for d in decisions if d["input"] == "p"] == [True]
    assert (await client.post(f"/api/personas/{pid}/training/pause")).status_code == 200
    # ... and it cannot start while a pair lacks its answer.
    clone = (await client.post(f"/api/personas/{pid}/clone")).json()
    assert clone["task_model_id"] is None
    await _upload(client, clone["id"], b"input,correct_output\nno answer,1\n")
    r = await client.post(f"/api/personas/{clone['id']}/training/start")
    assert r.status_code == 422 and "task model" in r.text


# -- the gate at API level ----------------------------------------------------------------


async def _gate_persona(
    client: httpx.AsyncClient, sim: dict[str, int], name: str, per_class: int
) -> dict[str, Any]:
    """A persona trained (one iteration, pre-filled labels) on ``per_class`` correct and
    as many incorrect answers, half of them held out (so a quarter in calibration)."""
    persona = await _persona(
        client,
        name,
        judge_model_id=sim["simulated-judge"],
        engineer_model_id=sim["simulated-engineer"],
        max_iterations=1,
        holdout_fraction=0.5,
    )
    rows = [(f"{name} q{k}", str(k), str(k), True) for k in range(per_class)]
    rows += [(f"{name} r{k}", str(k), str(k + 1), False) for k in range(per_class)]
    await _upload(client, persona["id"], _labelled_csv(rows))
    assert (await client.post(f"/api/personas/{persona['id']}/training/start")).status_code == 200
    await _wait(client, persona["id"], lambda s: s["status"] != "training")
    return persona


def _batch(n: int, passing: int, labelled: int = 0) -> list[dict[str, Any]]:
    items = []
    for k in range(n):
        ok = k < passing
        item: dict[str, Any] = {
            "input": f"batch q{k}",
            "output": str(k) if ok else str(k + 3),
            "correct_output": str(k),
        }
        if (
            k % max(1, n // max(labelled, 1)) == 0
            and len([i for i in items if "human_label" in i]) < labelled
        ):
            item["human_label"] = "correct" if ok else "incorrect"
        items.append(item)
    return items


async def test_gate_fails_closed_on_two_plus_two_and_passes_on_a_large_good_one(
    client: httpx.AsyncClient, sim: dict[str, int]
) -> None:
    providers = (await client.get("/api/providers")).json()
    provider = next(p for p in providers if p["kind"] == "simulator")
    r = await client.patch(
        f"/api/providers/{provider['id']}",
        json={
            "settings": {
                "latency_ms_mean": 1,
                "latency_ms_jitter": 0,
                "judge_base_accuracy": 0.95,
                "judge_gain_per_rule": 0,
            }
        },
    )
    assert r.status_code == 200
    small = await _gate_persona(client, sim, "gate small", 8)  # calibration 2 + 2
    cal = (await client.get(f"/api/personas/{small['id']}/calibration")).json()
    assert (cal["calib_pos"], cal["calib_neg"]) == (2, 2)
    body = {"items": _batch(40, 36), "min_pass_rate": 0.5}
    url = f"/api/personas/{small['id']}/evaluate?allow_untrained=true"
    out = (await client.post(url, json=body)).json()
    assert out["defined"] is False and out["passed"] is False
    assert out["estimator"] == "rogan_gladen"
    assert "at least 10 of each" in out["reason"]
    strict = await client.post(url + "&strict=true", json=body)
    assert strict.status_code == 412  # the gate failed (a malformed batch is 422)

    large = await _gate_persona(client, sim, "gate large", 200)  # calibration 50 + 50
    cal = (await client.get(f"/api/personas/{large['id']}/calibration")).json()
    assert (cal["calib_pos"], cal["calib_neg"]) == (50, 50) and cal["tpr"] > 0.8
    url = f"/api/personas/{large['id']}/evaluate?allow_untrained=true"
    out = (await client.post(url, json={"items": _batch(300, 240), "min_pass_rate": 0.5})).json()
    assert out["defined"] is True and out["passed"] is True, out["summary"]
    assert out["estimator"] == "rogan_gladen" and out["ci_low"] <= 0.8 <= out["ci_high"]
    assert [e["estimator"] for e in out["estimates"]] == ["rogan_gladen"]
    # With human labels on 60 items the gate uses PPI++ and reports both.
    out = (
        await client.post(url, json={"items": _batch(300, 240, labelled=60), "min_pass_rate": 0.5})
    ).json()
    assert out["n_human"] == 60 and out["estimator"] == "ppi" and out["passed"] is True
    assert [e["estimator"] for e in out["estimates"]] == ["rogan_gladen", "ppi"]
    ppi = out["estimates"][1]
    assert ppi["defined"] and ppi["low"] <= 0.8 <= ppi["high"] and ppi["lam"] > 0
    # A new prompt version is not what was calibrated: fail closed.
    r = await client.post(
        f"/api/personas/{large['id']}/prompts", json={"text": JUDGE_PROMPT + "\nBe strict."}
    )
    assert r.status_code == 201, r.text
    out = (await client.post(url, json={"items": _batch(40, 36), "min_pass_rate": 0.5})).json()
    assert out["defined"] is False and "calibrate the current prompt" in out["reason"]


# -- the embedding judge, local model, no provider -----------------------------------------


async def test_embedding_judge_end_to_end_with_the_local_model(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    persona = await _persona(
        client,
        "Embedding judge",
        judge_kind="embedding",
        holdout_fraction=0.5,
        metrics_annotator="llmbar-gold",
    )
    pid = persona["id"]
    assert persona["judge_model_id"] is None and persona["engineer_model_id"] is None
    await _upload(client, pid, DATA.read_bytes())
    assert (await client.post(f"/api/personas/{pid}/training/start")).status_code == 200
    status = await _wait(client, pid, lambda s: s["status"] != "training")
    # Seeded and deterministic: 15 selection pairs are too few to converge on.
    assert status["status"] == "incomplete"
    assert status["status_reason"].startswith("1 iteration(s) done; Needs more labelled pairs")
    assert await _calls(app, pid) == 0  # no model of any provider was called
    persona = (await client.get(f"/api/personas/{pid}")).json()
    threshold = persona["similarity_threshold"]
    assert threshold is not None and -1.0 <= threshold <= 1.0
    it = (await client.get(f"/api/personas/{pid}/iterations")).json()
    assert len(it) == 1 and it[0]["outcome"] in ("converged", "incomplete")
    decisions = await _decisions(client, pid)
    pairs = {p["id"]: p for p in (await client.get(f"/api/personas/{pid}/training-pairs")).json()}
    gold = {i: p["labels"]["llmbar-gold"] == "correct" for i, p in pairs.items()}
    for d in decisions:
        assert d["similarity"] is not None
        assert (d["judge_label"] == "correct") == (d["similarity"] >= threshold)
    # The threshold maximises F1 on the optimisation split.
    opt = [d for d in decisions if d["split"] == "optimisation"]
    best = max(
        f1_score([gold[d["pair_id"]] for d in opt], [d["similarity"] >= t for d in opt])
        for t in {d["similarity"] for d in opt}
    )
    assert it[0]["metrics_optimisation"]["f1"] == pytest.approx(best)
    for split in ("selection", "calibration"):
        rows = [d for d in decisions if d["split"] == split]
        expected = _sklearn(
            [gold[d["pair_id"]] for d in rows], [d["judge_label"] == "correct" for d in rows]
        )
        for key in METRICS:
            assert it[0][f"metrics_{split}"][key] == pytest.approx(expected[key], abs=1e-12)
    conv = it[0]["convergence"]
    assert conv["status"] == "needs_more_labelled_pairs"
    assert (conv["more_positives"], conv["more_negatives"]) == (3, 2)
    # The gate with the same local model: 15 calibration pairs fail closed under
    # Rogan-Gladen; 60 human-labelled items let PPI++ decide.
    rows = list(csv.DictReader(io.StringIO(DATA.read_text())))
    items = [
        {
            "input": r["input"],
            "output": r["answer"],
            "correct_output": r["correct_output"],
            "human_label": r["human_label"],
        }
        for r in rows
        if r["annotator"] == "llmbar-gold"
    ]
    url = f"/api/personas/{pid}/evaluate?allow_untrained=true"
    out = (await client.post(url, json={"items": items, "min_pass_rate": 0.2})).json()
    assert out["n"] == 60 and out["n_human"] == 60 and out["estimator"] == "ppi"
    rg = out["estimates"][0]
    assert rg["estimator"] == "rogan_gladen" and rg["defined"] is False
    assert out["defined"] and out["ci_low"] <= 0.5 <= out["ci_high"]
    by_input = {pairs[d["pair_id"]]["input"]: d for d in decisions}
    for v, item in zip(out["verdicts"], items, strict=True):
        assert v["label"] == by_input[item["input"]]["judge_label"]  # same judge as training
    assert await _calls(app, pid) == 0
    for tab in ("", "/progress", "/data", "/prompts", "/settings", "/review/1"):
        page = await client.get(f"/personas/{pid}{tab}")
        assert page.status_code == 200, (tab, page.text[:500])
    progress = (await client.get(f"/personas/{pid}/progress")).text
    assert 'data-status="needs_more_labelled_pairs"' in progress
    assert "simulated models" not in progress  # no simulated model is involved
    overview = (await client.get(f"/personas/{pid}")).text
    assert "embedding similarity (local WordLlama)" in overview
    assert 'id="gate-fails-closed"' in overview


# -- over the wire: fake OpenAI-compatible and Anthropic servers ---------------------------

_LINE = re.compile(r"^(Reference|Answer): (.*)$", re.MULTILINE)
_CURRENT = re.compile(r"<<<JUDGE PROMPT>>>\n(.*?)\n<<<END JUDGE PROMPT>>>", re.DOTALL)


def _prompt_of(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def _make_responder(echo: bool, unreadable: set[str], seen: dict[str, int]) -> Callable:
    """Judge: correct when the answer repeats the reference; engineer: one more rule.
    ``echo``: the reply first repeats the prompt's example JSON (with the wrong label);
    answers in ``unreadable`` get an unreadable first reply."""

    def respond(body: dict[str, Any]) -> str:
        text = _prompt_of(body)
        if "<<<JUDGE PROMPT>>>" in text:
            current = _CURRENT.search(text)
            assert current is not None
            prompt = current.group(1) + "\n- Rule: compare exactly"
            return json.dumps({"prompt": prompt, "rationale": "stricter", "addressed": [1]})
        fields = dict(_LINE.findall(text))
        answer = fields["Answer"]
        seen[answer] = seen.get(answer, 0) + 1
        if answer in unreadable and seen[answer] == 1:
            # tool use must carry JSON: an object without a label is just as unreadable
            return "I am not sure what to say." if echo else json.dumps({"label": "maybe"})
        ok = fields["Answer"].strip() == fields["Reference"].strip()
        verdict = {
            "label": "correct" if ok else "incorrect",
            "reasoning": "same" if ok else "differs",
            "confidence": 0.9,
        }
        if echo:
            example = '{"label": "correct", "reasoning": "...", "confidence": 0.5}'
            return f"The format is {example}. My verdict: {json.dumps(verdict)}"
        return json.dumps(verdict)

    return respond


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_loop_and_evaluate_over_the_wire(
    app: FastAPI, client: httpx.AsyncClient, kind: str
) -> None:
    fake_cls = FakeOpenAI if kind == "openai" else FakeAnthropic
    seen: dict[str, int] = {}
    unreadable = {"41", "wrong 3"}
    async with fake_cls() as fake:
        # OpenAI: free text that echoes the example first; Anthropic: tool use (JSON only).
        fake.state.responder = _make_responder(kind == "openai", unreadable, seen)
        r = await client.post(
            "/api/providers",
            json={
                "name": f"fake {kind}",
                "kind": kind,
                "base_url": fake.base_url,
                "api_key": fake.state.api_key,
                "max_retries": 0,
            },
        )
        assert r.status_code == 201, r.text
        provider = r.json()["id"]
        ids = {}
        for role in ("judge", "engineer"):
            # temperature 0: calls are cached, so a retry must bypass the cache
            r = await client.post(
                "/api/models",
                json={
                    "provider_id": provider,
                    "name": f"{kind} {role}",
                    "model": f"fake-{role}",
                    "default_temperature": 0,
                },
            )
            assert r.status_code == 201, r.text
            ids[role] = r.json()["id"]
        persona = await _persona(
            client,
            f"Wire {kind}",
            judge_model_id=ids["judge"],
            engineer_model_id=ids["engineer"],
            max_iterations=2,
        )
        pid = persona["id"]
        rows = [(f"w{k}", str(40 + k), str(40 + k), True) for k in range(6)]
        rows += [(f"x{k}", str(k), f"wrong {k}", False) for k in range(6)]
        await _upload(client, pid, _labelled_csv(rows))
        assert (await client.post(f"/api/personas/{pid}/training/start")).status_code == 200
        status = await _wait(client, pid, lambda s: s["status"] != "training")
        assert status["status"] == "incomplete", status
        first = await _decisions(client, pid, 1)
        # every reply read right: the retry of an unreadable reply reached the server
        assert not any(d["parse_error"] for d in first)
        assert all(d["human_agrees"] for d in first), [d["raw"] for d in first]
        assert all(d["judge_confidence"] == 0.9 for d in first)
        assert all(seen[a] >= 2 for a in unreadable)
        prompts = (await client.get(f"/api/personas/{pid}/prompts")).json()
        assert [p["created_by"] for p in prompts] == ["human", "ai"]
        assert prompts[1]["text"].endswith("- Rule: compare exactly")
        requests = [q.body for q in fake.state.requests]
        if kind == "openai":
            judge_calls = [b for b in requests if b["model"] == "fake-judge"]
            assert judge_calls[0]["response_format"]["json_schema"]["name"] == "judge_label"
        else:
            judge_calls = [b for b in requests if b["model"] == "fake-judge"]
            assert judge_calls[0]["tools"][0]["name"] == "judge_label"
        assert await _calls(app, pid, "persona_task") == 0

        # evaluate over the same wire: an unreadable answer is retried, not cached
        before = fake.state.count
        items = [
            {"input": "e1", "output": "5", "correct_output": "5"},
            {"input": "e2", "output": "6", "correct_output": "7"},
            {"input": "e3", "output": "wrong 3", "correct_output": "3"},
        ]
        seen.pop("wrong 3", None)  # unreadable on its first evaluation again
        r = await client.post(
            f"/api/personas/{pid}/evaluate?allow_untrained=true", json={"items": items}
        )
        assert r.status_code == 200, r.text
        out = r.json()
        assert [v["label"] for v in out["verdicts"]] == ["correct", "incorrect", "incorrect"]
        assert not any(v["parse_error"] for v in out["verdicts"])
        assert fake.state.count - before == 4  # three items, one retried past the cache
        assert out["defined"] is False  # 2 + 2 calibration pairs at most: fails closed

        # escalation: an identical answer is decided by the local embedding similarity,
        # the others go to the judge model over the wire
        before = fake.state.count
        body = {
            "items": [
                {"input": "s1", "output": "exactly this", "correct_output": "exactly this"},
                {"input": "s2", "output": "8", "correct_output": "9"},
                {"input": "s3", "output": "10", "correct_output": "11"},
            ],
            "escalation": {"accept_at": 0.999, "reject_below": -1.0},
        }
        r = await client.post(f"/api/personas/{pid}/evaluate?allow_untrained=true", json=body)
        assert r.status_code == 200, r.text
        verdicts = r.json()["verdicts"]
        assert [v["decided_by"] for v in verdicts] == ["similarity", "judge", "judge"]
        assert verdicts[0]["label"] == "correct" and verdicts[0]["similarity"] > 0.999
        assert [v["label"] for v in verdicts[1:]] == ["incorrect", "incorrect"]
        assert fake.state.count - before == 2
        assert any("embedding similarity" in w for w in r.json()["warnings"])
        bad = {**body, "escalation": {"accept_at": 0.1, "reject_below": 0.5}}
        r = await client.post(f"/api/personas/{pid}/evaluate?allow_untrained=true", json=bad)
        assert r.status_code == 422


async def test_embedding_judge_through_a_provider_endpoint(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    async with FakeOpenAI() as fake:
        r = await client.post(
            "/api/providers",
            json={
                "name": "fake embeddings",
                "kind": "openai",
                "base_url": fake.base_url,
                "api_key": fake.state.api_key,
            },
        )
        assert r.status_code == 201, r.text
        r = await client.post(
            "/api/models",
            json={
                "provider_id": r.json()["id"],
                "name": "fake embedder",
                "model": "emb-1",
                "input_price_per_million": 1.0,
            },
        )
        model = r.json()["id"]
        persona = await _persona(
            client, "Provider embeddings", judge_kind="embedding", embedding_model_id=model
        )
        pid = persona["id"]
        # letter-count vectors: "aaaa" is close to "aaab", far from "hhhh"
        rows = [(f"e{k}", "aaaa", "aaab" if k % 2 else "aaaa", True) for k in range(12)]
        rows += [(f"f{k}", "aaaa", "hhhh" if k % 2 else "hhhg", False) for k in range(12)]
        await _upload(client, pid, _labelled_csv(rows))
        assert (await client.post(f"/api/personas/{pid}/training/start")).status_code == 200
        status = await _wait(client, pid, lambda s: s["status"] != "training")
        assert status["status"] == "incomplete"  # 3 selection pairs per class at most
        paths = [q.path for q in fake.state.requests]
        assert paths == ["/v1/embeddings"]  # one batched call for answers and references
        assert len(fake.state.requests[0].body["input"]) == 2 * 24
        assert await _calls(app, pid, "persona_embed") == 1
        it = (await client.get(f"/api/personas/{pid}/iterations")).json()[0]
        assert it["metrics_optimisation"]["f1"] == 1.0  # the classes separate cleanly
        async with app.state.sessionmaker() as db:
            cost = await db.scalar(
                select(func.sum(LLMCall.cost_usd)).where(LLMCall.persona_id == pid)
            )
        assert cost and cost > 0  # accounted at the model's price
