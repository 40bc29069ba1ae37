"""The pass/fail gate: a persona whose judge has known TPR and TNR on its held-out data
judges a batch with a known true pass rate; the corrected rate's interval covers the truth,
the API gates on the threshold, and `llmjudge gate` exits 0 / 1 / 2 accordingly. Also the
persona as a tournament judge."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from llmjudge.core.personas.keys import input_hash, prompt_hash
from llmjudge.personas.evaluate import calibration_rates, pairwise_template
from llmjudge.personas.gate_cli import (
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_PASS,
    GateError,
    exit_code,
    gate_over_http,
    junit_xml,
    read_items,
)
from llmjudge.personas.models import (
    Persona,
    PersonaDecision,
    PersonaIteration,
    PersonaPair,
    TaskOutput,
)
from llmjudge.personas.starters import get_template
from tests.conftest import REPO

JUDGE_ACCURACY = 0.85  # the simulated judge's TPR and TNR alike
TRUE_PASS_RATE = 0.7
BATCH = 400


@pytest.fixture(scope="module")
async def simulator(client: httpx.AsyncClient) -> None:
    """Fast calls, and a judge that is right with probability JUDGE_ACCURACY on any item."""
    providers = (await client.get("/api/providers")).json()
    sim = next(p for p in providers if p["kind"] == "simulator")
    settings = {
        "latency_ms_mean": 1,
        "latency_ms_jitter": 0,
        "judge_base_accuracy": JUDGE_ACCURACY,
        "judge_gain_per_rule": 0,
    }
    r = await client.patch(f"/api/providers/{sim['id']}", json={"settings": settings})
    assert r.status_code == 200, r.text


async def _calibrated(
    app: FastAPI,
    client: httpx.AsyncClient,
    name: str,
    *,
    pos: tuple[int, int],
    neg: tuple[int, int],
    status: str = "trained",
) -> dict[str, Any]:
    """A persona whose latest reviewed iteration has held-out decisions with human labels:
    ``pos`` = (judge correct, judge incorrect) among answers the human calls correct,
    ``neg`` = (judge incorrect, judge correct) among those the human calls incorrect."""
    r = await client.post("/api/personas/from-template/factual-qa", json={"name": name})
    assert r.status_code == 201, r.text
    persona = r.json()
    pid = persona["id"]
    # (judge label, human agrees) per held-out decision
    rows = (
        [("correct", True)] * pos[0]
        + [("incorrect", False)] * pos[1]
        + [("incorrect", True)] * neg[0]
        + [("correct", False)] * neg[1]
    )
    async with app.state.sessionmaker() as db:
        it = PersonaIteration(
            persona_id=pid,
            number=1,
            status="done",
            outcome="converged",
            prompt_version=persona["current_version"],
            metrics_selection={"f1": 0.9},
            metrics_calibration={"f1": 0.9},
            timings={},
        )
        db.add(it)
        await db.flush()
        phash = prompt_hash(persona["task_model_id"], persona["task_prompt"])
        for k, (label, agrees) in enumerate(rows):
            question = f"held-out question {k}"
            pair = PersonaPair(
                persona_id=pid,
                position=1000 + k,
                input=question,
                correct_output=str(k),
                input_hash=input_hash(question, None),
                split="calibration",
            )
            db.add(pair)
            await db.flush()
            output = TaskOutput(
                persona_id=pid,
                pair_id=pair.id,
                prompt_hash=phash,
                input_hash=pair.input_hash,
                output=str(k),
            )
            db.add(output)
            await db.flush()
            db.add(
                PersonaDecision(
                    persona_id=pid,
                    iteration_id=it.id,
                    iteration=1,
                    pair_id=pair.id,
                    output_id=output.id,
                    split="calibration",
                    judge_label=label,
                    prompt_version=persona["current_version"],
                    human_agrees=agrees,
                )
            )
        await db.execute(update(Persona).where(Persona.id == pid).values(status=status))
        await db.commit()
    return persona


def _batch(n: int = BATCH, rate: float = TRUE_PASS_RATE) -> list[dict[str, str]]:
    """Factual answers of which exactly ``rate`` match their reference."""
    right = round(n * rate)
    items = []
    for k in range(n):
        reference = f"answer {k}"
        output = reference if k < right else f"something else {k}"
        items.append(
            {"input": f"batch question {k}?", "output": output, "correct_output": reference}
        )
    return items


@pytest.fixture(scope="module")
async def good(app: FastAPI, client: httpx.AsyncClient, simulator: None) -> dict[str, Any]:
    return await _calibrated(app, client, "Gatekeeper", pos=(85, 15), neg=(85, 15))


async def test_calibration_from_held_out_reviews(
    client: httpx.AsyncClient, good: dict[str, Any]
) -> None:
    r = await client.get(f"/api/personas/{good['id']}/calibration")
    assert r.status_code == 200
    body = r.json()
    tpr_ci, tnr_ci = body.pop("tpr_ci"), body.pop("tnr_ci")
    assert body == {
        "iteration": 1,
        "prompt_version": good["current_version"],
        "tpr": 0.85,
        "tnr": 0.85,
        "calib_pos": 100,
        "calib_neg": 100,
    }
    # 85 of 100: the Wilson interval, as wide as 100 pairs allow
    assert tpr_ci == tnr_ci == pytest.approx([0.7672, 0.9069], abs=1e-4)


async def test_corrected_interval_covers_the_true_pass_rate(
    client: httpx.AsyncClient, good: dict[str, Any]
) -> None:
    body = {"items": _batch(), "min_pass_rate": 0.5}
    r = await client.post(f"/api/personas/{good['id']}/evaluate", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["n"] == BATCH and len(out["verdicts"]) == BATCH
    assert [v["index"] for v in out["verdicts"]] == list(range(BATCH))
    assert all(v["reasoning"] for v in out["verdicts"])
    observed = sum(v["passed"] for v in out["verdicts"]) / BATCH
    assert out["observed_pass_rate"] == pytest.approx(observed)
    # The judge errs both ways: the observed rate is biased towards 0.5 ...
    expected_observed = TRUE_PASS_RATE * JUDGE_ACCURACY + (1 - TRUE_PASS_RATE) * (
        1 - JUDGE_ACCURACY
    )
    assert abs(observed - expected_observed) < 0.06
    # ... and the correction recovers the truth, inside its 95% interval.
    assert out["defined"] is True and out["reason"] is None
    assert out["ci_low"] <= TRUE_PASS_RATE <= out["ci_high"]
    assert out["ci_low"] <= out["corrected_pass_rate"] <= out["ci_high"]
    assert abs(out["corrected_pass_rate"] - TRUE_PASS_RATE) < abs(observed - TRUE_PASS_RATE)
    assert out["passed"] is True and "PASS" in out["summary"]
    assert out["calibration"]["tpr"] == 0.85 and out["warnings"] == []

    failing = {**body, "min_pass_rate": 0.9}
    r = await client.post(f"/api/personas/{good['id']}/evaluate", json=failing)
    assert r.status_code == 200 and r.json()["passed"] is False and "FAIL" in r.json()["summary"]
    # strict: the same body, but an HTTP failure for `curl --fail`: 412, never the 422 of a
    # malformed batch, so CI can tell a failing product from a broken gate.
    r = await client.post(f"/api/personas/{good['id']}/evaluate?strict=true", json=failing)
    assert r.status_code == 412 and r.json()["passed"] is False
    malformed = {"items": [{"input": "q"}], "min_pass_rate": 0.5}
    r = await client.post(f"/api/personas/{good['id']}/evaluate?strict=true", json=malformed)
    assert r.status_code == 422 and "passed" not in r.json()
    r = await client.post(f"/api/personas/{good['id']}/evaluate?strict=true", json=body)
    assert r.status_code == 200 and r.json()["passed"] is True
    # Without a threshold there is no verdict, only the estimate.
    r = await client.post(f"/api/personas/{good['id']}/evaluate", json={"items": _batch(20)})
    assert r.status_code == 200 and r.json()["passed"] is None


async def test_chance_level_judge_is_undefined_and_fails(
    app: FastAPI, client: httpx.AsyncClient, simulator: None
) -> None:
    coin = await _calibrated(app, client, "Coin flip", pos=(40, 60), neg=(50, 50))
    r = await client.post(
        f"/api/personas/{coin['id']}/evaluate", json={"items": _batch(40), "min_pass_rate": 0.1}
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["defined"] is False and out["corrected_pass_rate"] is None
    assert "TPR + TNR <= 1" in out["reason"] and out["passed"] is False
    assert (out["calibration"]["tpr"], out["calibration"]["tnr"]) == (0.4, 0.5)


async def test_untrained_and_invalid_requests(
    app: FastAPI, client: httpx.AsyncClient, simulator: None
) -> None:
    draft = (
        await client.post("/api/personas/from-template/factual-qa", json={"name": "Untrained"})
    ).json()
    url = f"/api/personas/{draft['id']}/evaluate"
    one = {"items": _batch(4), "min_pass_rate": 0.5}
    r = await client.post(url, json=one)
    assert r.status_code == 409 and "allow_untrained" in r.json()["detail"]
    r = await client.post(url + "?allow_untrained=true", json=one)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["defined"] is False and out["passed"] is False  # no calibration at all
    assert any("not trained" in w for w in out["warnings"])
    assert out["calibration"]["iteration"] is None

    for body in (
        {"items": []},
        {"items": [{"input": "q"}]},  # no output
        {"items": [{"input": " ", "output": "a"}]},
        {"items": [{"input": "q", "output": "a", "extra": 1}]},
        {"items": _batch(1001)},
        {"items": _batch(2), "min_pass_rate": 1.5},
    ):
        r = await client.post(url + "?allow_untrained=true", json=body)
        assert r.status_code == 422, body
    assert (await client.post("/api/personas/999999/evaluate", json=one)).status_code == 404


async def test_missing_reference_is_warned(client: httpx.AsyncClient, good: dict[str, Any]) -> None:
    items = [{"input": "q?", "output": "a"}, *_batch(3)]
    r = await client.post(f"/api/personas/{good['id']}/evaluate", json={"items": items})
    assert r.status_code == 200
    assert any("1 item(s) have no correct_output" in w for w in r.json()["warnings"])


# -- the persona as a tournament judge -------------------------------------------------------


def test_pairwise_template_embeds_guidance_safely() -> None:
    from llmjudge.core.judging.prompts import build_judge_messages

    prompt = get_template("factual-qa").judge_prompt + "\n- Rule: keep {braces} and {answer}"
    template = pairwise_template(prompt, ["quality", "accuracy"])
    messages = build_judge_messages(
        content_a="first", content_b="second", criteria=["quality", "accuracy"], template=template
    )
    user = messages[1]["content"]
    assert "You grade short answers to factual questions" in user
    assert "- Rule: keep {braces} and the answer" in user  # braces kept literally
    assert "<<<INPUT>>>" not in user  # the single-answer data blocks are gone
    assert "<thread_a>\nfirst\n</thread_a>" in user and "<thread_b>\nsecond\n</thread_b>" in user
    assert '"scores": {"A": {"quality": 1-5, "accuracy": 1-5}' in user
    assert "- quality (Overall quality)" in user


async def test_persona_judges_a_tournament(
    app: FastAPI, client: httpx.AsyncClient, good: dict[str, Any]
) -> None:
    assert (await client.post("/api/demo")).status_code in (200, 201)
    pillars = [p["id"] for p in (await client.get("/api/pillars")).json()][:3]
    url = f"/api/personas/{good['id']}/sessions"
    body = {"session_name": "judged by a persona", "pillar_ids": pillars, "samples_per_pillar": 2}
    r = await client.post(url, json={**body, "judge_model_id": good["task_model_id"]})
    assert r.status_code == 422 and "the persona supplies" in r.text
    r = await client.post(url, json={**body, "auto_start": True})
    assert r.status_code == 201, r.text
    session = r.json()
    assert session["judge_model"]["id"] == good["judge_model_id"]
    assert session["criteria"] == ["quality"]
    assert "You grade short answers to factual questions" in session["prompt_template"]
    async with asyncio.timeout(30):
        while session["status"] not in ("completed", "failed"):
            await asyncio.sleep(0.1)
            session = (await client.get(f"/api/sessions/{session['id']}")).json()
    assert session["status"] == "completed" and session["completed"] == session["total"] > 0

    # The overview page's form does the same.
    form = {"session_name": "from the page", "pillar_ids": [str(pid) for pid in pillars[:2]]}
    page = await client.post(f"/personas/{good['id']}/sessions", data=form)
    assert page.status_code == 200 and 'id="session-ok"' in page.text, page.text
    page = await client.post(f"/personas/{good['id']}/sessions", data={"session_name": "x"})
    assert page.status_code == 422 and 'id="session-error"' in page.text

    draft = (await client.post("/api/personas/from-template/factual-qa")).json()
    r = await client.post(f"/api/personas/{draft['id']}/sessions", json=body)
    assert r.status_code == 409
    r = await client.post(f"/api/personas/{draft['id']}/sessions?allow_untrained=true", json=body)
    assert r.status_code == 201


# -- the CLI ---------------------------------------------------------------------------------


def _jsonl(path: Path, items: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def test_read_items_reports_lines(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"input": "q", "output": "a"}\n\nnot json\n{"input": "q"}\n')
    with pytest.raises(GateError) as e:
        read_items(path)
    assert "bad.jsonl:3: not JSON" in str(e.value)
    assert "bad.jsonl:4: output: Field required" in str(e.value)
    with pytest.raises(GateError, match="cannot read"):
        read_items(tmp_path / "missing.jsonl")
    ok = _jsonl(tmp_path / "ok.jsonl", _batch(3))
    assert [item.output for item in read_items(ok)] == ["answer 0", "answer 1", "something else 2"]
    assert exit_code({"passed": True}) == EXIT_PASS
    assert exit_code({"passed": False}) == exit_code({"passed": None}) == EXIT_FAIL


async def test_gate_over_http_finds_the_persona_by_name(
    client: httpx.AsyncClient, good: dict[str, Any], tmp_path: Path
) -> None:
    items = read_items(_jsonl(tmp_path / "batch.jsonl", _batch()))
    out = await gate_over_http(client, persona="Gatekeeper", items=items, min_pass_rate=0.5)
    assert out["persona_id"] == good["id"] and exit_code(out) == EXIT_PASS
    out = await gate_over_http(client, persona=str(good["id"]), items=items, min_pass_rate=0.9)
    assert exit_code(out) == EXIT_FAIL
    with pytest.raises(GateError, match="no persona named 'Nobody'"):
        await gate_over_http(client, persona="Nobody", items=items, min_pass_rate=0.5)
    with pytest.raises(GateError, match="HTTP 409"):
        await gate_over_http(client, persona="Untrained", items=items, min_pass_rate=0.5)


async def _cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "llmjudge.cli", "gate", *args),
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_cli_exit_code_follows_the_threshold(
    settings: Any, good: dict[str, Any], tmp_path: Path
) -> None:
    """The real command in a subprocess, in-process mode against this module's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMJUDGE_")}
    env.update(
        LLMJUDGE_DATABASE_URL=settings.database_url, LLMJUDGE_DATA_DIR=str(tmp_path / "data")
    )
    batch = str(_jsonl(tmp_path / "batch.jsonl", _batch()))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "q", "output": "a"}\n{"input": 1}\n')
    common = ("--persona", "Gatekeeper", "--input")
    (ok, ok_out, _), (fail, fail_out, _) = await asyncio.gather(
        _cli(env, *common, batch, "--min-pass-rate", "0.5"),
        _cli(env, *common, batch, "--min-pass-rate", "0.9"),
    )
    assert ok == EXIT_PASS and "PASS" in ok_out and "Gatekeeper" in ok_out
    assert "rogan_gladen: 0." in ok_out and "(the gate used this one)" in ok_out
    assert fail == EXIT_FAIL and "FAIL (lower bound below threshold)" in fail_out
    (missing, _, missing_err), (invalid, _, invalid_err) = await asyncio.gather(
        _cli(env, "--persona", "Nobody", "--input", batch, "--min-pass-rate", "0.5"),
        _cli(env, *common, str(bad), "--min-pass-rate", "0.5"),
    )
    assert missing == EXIT_ERROR and "no persona named 'Nobody'" in missing_err
    assert invalid == EXIT_ERROR and "bad.jsonl:2: input" in invalid_err


async def test_cli_outputs_for_ci(settings: Any, good: dict[str, Any], tmp_path: Path) -> None:
    """--format json, --junit and the GitHub step summary, from the real command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMJUDGE_")}
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    env.update(
        LLMJUDGE_DATABASE_URL=settings.database_url,
        LLMJUDGE_DATA_DIR=str(tmp_path / "data"),
        GITHUB_STEP_SUMMARY=str(summary),
    )
    batch = _batch(40)
    path = str(_jsonl(tmp_path / "batch.jsonl", batch))
    junit = tmp_path / "gate.xml"
    code, out, err = await _cli(
        env, "--persona", "Gatekeeper", "--input", path, "--min-pass-rate", "0.9",
        "--format", "json", "--junit", str(junit),
    )  # fmt: skip
    assert code == EXIT_FAIL, err
    result = json.loads(out)
    assert result["passed"] is False and len(result["verdicts"]) == 40
    suite = ElementTree.parse(junit).getroot()
    cases = suite.findall("testcase")
    assert suite.get("tests") == "40" and len(cases) == 40
    failed = [v for v in result["verdicts"] if not v["passed"]]
    assert suite.get("failures") == str(len(failed)) and failed
    first = failed[0]
    case = cases[first["index"]]
    assert case.get("name").startswith(f"item {first['index'] + 1}: ")
    failure = case.find("failure")
    assert failure is not None and failure.text == first["reasoning"]
    passing = next(v for v in result["verdicts"] if v["passed"])
    assert cases[passing["index"]].find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["passed"] == "False" and props["min_pass_rate"] == "0.9"
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, as GitHub expects
    assert "### llmjudge gate: FAIL (Gatekeeper)" in text
    assert f"#### Failed items ({len(failed)})" in text

    # A database that is not there: an error (2), never a failed gate (1).
    env["LLMJUDGE_DATABASE_URL"] = "postgresql+asyncpg://nobody:x@127.0.0.1:1/none"
    code, out, err = await _cli(
        env, "--persona", "Gatekeeper", "--input", path, "--min-pass-rate", "0.5"
    )
    assert code == EXIT_ERROR and out == "" and "llmjudge gate: error:" in err


async def test_cli_names_its_own_flag(
    settings: Any, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """An untrained persona's refusal names the command's flag, not the API's parameter."""
    r = await client.post("/api/personas/from-template/factual-qa", json={"name": "Draft CLI"})
    assert r.status_code == 201, r.text
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMJUDGE_")}
    env.update(
        LLMJUDGE_DATABASE_URL=settings.database_url, LLMJUDGE_DATA_DIR=str(tmp_path / "data")
    )
    batch = str(_jsonl(tmp_path / "batch.jsonl", _batch(4)))
    code, _, err = await _cli(
        env, "--persona", "Draft CLI", "--input", batch, "--min-pass-rate", "0.5"
    )
    assert code == EXIT_ERROR and "--allow-untrained" in err, err
    assert "allow_untrained=true" not in err


def test_cli_over_http_prints_no_request_log(tmp_path: Path) -> None:
    """`--url` mode: httpx's INFO line per request is not mixed into the gate's output."""

    class Personas(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            body = b"[]"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Personas)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        batch = str(_jsonl(tmp_path / "batch.jsonl", _batch(2)))
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "llmjudge.cli", "gate", "--url", url, "--token", "t",
             "--persona", "Nobody", "--input", batch, "--min-pass-rate", "0.5"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == EXIT_ERROR and "no persona named 'Nobody'" in done.stderr
    assert "HTTP Request" not in done.stderr, done.stderr


def test_junit_leaves_undefined_figures_out() -> None:
    result = {
        "persona_id": 3, "persona_name": "Gatekeeper", "prompt_version": None,
        "observed_pass_rate": 0.5, "corrected_pass_rate": None, "ci_low": None,
        "ci_high": None, "min_pass_rate": 0.5, "passed": False, "summary": "undefined",
        "verdicts": [],
    }  # fmt: skip
    props = {
        p.get("name"): p.get("value")
        for p in ElementTree.fromstring(junit_xml(result, [])).iter("property")
    }
    assert props == {
        "persona_id": "3", "observed_pass_rate": "0.5", "min_pass_rate": "0.5",
        "passed": "False", "summary": "undefined",
    }  # fmt: skip


def test_calibration_rates_counts_by_human_label() -> None:
    c = calibration_rates(
        [("correct", True)] * 3 + [("incorrect", False)] + [("incorrect", True)] * 2
    )
    assert (c.calib_pos, c.calib_neg) == (4, 2)
    assert (c.tpr, c.tnr) == (0.75, 1.0)
    empty = calibration_rates([])
    assert (empty.tpr, empty.tnr, empty.calib_pos, empty.calib_neg) == (0.0, 0.0, 0, 0)


async def test_openapi_documents_the_gate(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    evaluate = schema["paths"]["/api/personas/{persona_id}/evaluate"]["post"]
    assert {p["name"] for p in evaluate["parameters"]} >= {"allow_untrained", "strict"}
    assert "corrected" in evaluate["description"]
    body = schema["components"]["schemas"]["PersonaSessionIn"]["properties"]
    assert "pillar_ids" in body and "judge_model_id" not in body and "prompt_template" not in body
    assert "/api/personas/compare" in schema["paths"]
