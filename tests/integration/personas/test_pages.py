"""Persona pages: every tab renders for draft, training and trained personas; uploads,
settings, prompt edits and review through the page routes; the review order and the
pure helpers behind the pages."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.personas.models import PersonaIteration
from llmjudge.personas.pages.progress import metric_cards
from llmjudge.personas.pages.prompts import diff_rows
from llmjudge.personas.pages.settings import settings_changes
from llmjudge.personas.prompt_versions import prompt_diff
from llmjudge.personas.review import review_order, review_state
from llmjudge.personas.schemas import DecisionOut, MetricsOut
from llmjudge.personas.service import get_persona
from llmjudge.personas.starters import get_template
from llmjudge.providers.simulated_personas import normalise

HX = {"HX-Request": "true"}


async def _wait(
    client: httpx.AsyncClient, pid: int, ok: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            status = (await client.get(f"/api/personas/{pid}/training/status")).json()
            if ok(status):
                return status
            await asyncio.sleep(0.05)


def _awaiting(s: dict[str, Any]) -> bool:
    it = s["iteration"]
    return it is not None and it["status"] == "awaiting_review"


def _oracle(d: dict[str, Any]) -> bool:
    truth = normalise(d["answer"]) == normalise(d["correct_output"])
    return (d["judge_label"] == "correct") == truth


async def _from_template(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    r = await client.post("/api/personas/from-template/factual-qa", json={"name": name})
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture(scope="module")
async def fast_simulator(client: httpx.AsyncClient) -> None:
    """Near-instant simulated calls, and an accurate judge so one iteration converges."""
    providers = (await client.get("/api/providers")).json()
    sim = next(p for p in providers if p["kind"] == "simulator")
    r = await client.patch(
        f"/api/providers/{sim['id']}",
        json={
            "settings": {"latency_ms_mean": 1, "latency_ms_jitter": 0, "judge_base_accuracy": 0.95}
        },
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
async def draft(client: httpx.AsyncClient) -> dict[str, Any]:
    return await _from_template(client, "Draft <persona> & co")


@pytest.fixture(scope="module")
async def training(client: httpx.AsyncClient, fast_simulator: None) -> dict[str, Any]:
    p = await _from_template(client, "In training")
    assert (await client.post(f"/api/personas/{p['id']}/training/start")).status_code == 200
    await _wait(client, p["id"], _awaiting)
    return p


@pytest.fixture(scope="module")
async def trained(client: httpx.AsyncClient, fast_simulator: None) -> dict[str, Any]:
    """Trained through the pages: one iteration reviewed by an oracle via the review form."""
    p = await _from_template(client, "Trained one")
    pid = p["id"]
    # Converging in one iteration on the user's explicit choice of a low bar (the point
    # F1, one pair per class), which the pages then say.
    r = await client.patch(
        f"/api/personas/{pid}",
        json={
            "max_iterations": 1,
            "target_f1": 0.7,
            "min_per_class": 1,
            "convergence_basis": "point",
        },
    )
    assert r.status_code == 200, r.text
    assert (await client.post(f"/personas/{pid}/actions/start")).status_code == 303
    await _wait(client, pid, _awaiting)
    decisions = (await client.get(f"/api/personas/{pid}/iterations/1/decisions")).json()
    by_id = {d["id"]: d for d in decisions}
    # The page shows the first undecided decision; each answer brings the next one.
    page = await client.get(f"/personas/{pid}/review/1", headers=HX)
    for step in range(len(decisions)):
        current = int(re.search(r'data-decision-id="(\d+)"', page.text).group(1))
        assert current == decisions[step]["id"]  # the service's review order
        page = await client.post(
            f"/personas/{pid}/review/1/decisions/{current}",
            data={"agrees": str(_oracle(by_id[current])).lower()},
            headers=HX,
        )
        assert page.status_code == 200, page.text
        assert f"Reviewed <strong>{step + 1}</strong> of <strong>{len(decisions)}</strong>" in (
            page.text
        )
    assert 'id="review-done"' in page.text
    status = await _wait(client, pid, lambda s: s["status"] != "training")
    assert status["status"] == "trained", status
    return p


async def test_list_filters_and_searches(
    client: httpx.AsyncClient, draft: dict[str, Any], trained: dict[str, Any]
) -> None:
    r = await client.get("/personas")
    assert r.status_code == 200
    assert "Draft &lt;persona&gt; &amp; co" in r.text  # escaped
    assert "Create new persona" in r.text and "Trained one" in r.text
    rows = await client.get("/personas?status=trained", headers=HX)
    assert "Trained one" in rows.text and "Draft &lt;persona" not in rows.text
    assert "<html" not in rows.text  # a fragment for htmx
    rows = await client.get("/personas?q=DRAFT", headers=HX)
    assert "Draft &lt;persona" in rows.text and "Trained one" not in rows.text
    rows = await client.get("/personas?q=nothing-like-this", headers=HX)
    assert "No persona matches this filter" in rows.text


async def test_list_api_twin_filters_like_the_page(
    client: httpx.AsyncClient, draft: dict[str, Any], trained: dict[str, Any]
) -> None:
    everyone = (await client.get("/api/personas/summaries")).json()
    names = [row["name"] for row in everyone]
    assert names == sorted(names) and {draft["name"], trained["name"]} <= set(names)
    only_trained = (await client.get("/api/personas/summaries?status=trained")).json()
    assert trained["id"] in {row["id"] for row in only_trained}
    assert all(row["status"] == "trained" for row in only_trained)
    assert only_trained[0]["selection"] is not None or only_trained[0]["optimisation"] is not None
    found = (await client.get("/api/personas/summaries?q=dRaFt")).json()
    assert [row["id"] for row in found] == [draft["id"]]
    # The page shows the rows its twin returns.
    rows = await client.get("/personas?q=dRaFt", headers=HX)
    assert "Draft &lt;persona" in rows.text and "Trained one" not in rows.text
    assert (await client.get("/api/personas/summaries?q=nothing-like-this")).json() == []
    assert (await client.get("/api/personas/summaries?status=bogus")).status_code == 422


async def test_new_page_lists_templates_with_example_csv(client: httpx.AsyncClient) -> None:
    r = await client.get("/personas/new")
    assert r.status_code == 200
    for key in ("customer-support", "factual-qa", "summaries"):
        assert f"/api/personas/templates/{key}/pairs.csv" in r.text
    assert f"{len(get_template('factual-qa').pairs)} example pairs" in r.text
    csv_ = await client.get("/api/personas/templates/factual-qa/pairs.csv")
    assert csv_.status_code == 200 and csv_.text.startswith("input,correct_output")
    assert (await client.get("/api/personas/templates/nope/pairs.csv")).status_code == 404


async def test_create_from_scratch_and_errors(client: httpx.AsyncClient) -> None:
    models = {m["name"]: m["id"] for m in (await client.get("/api/models")).json()}
    form = {
        "name": "From scratch",
        "description": "",
        "task_prompt": "Answer: {input}",
        "judge_prompt": "Judge {input} against {correct_output}: {answer}",
        "task_model_id": str(models["simulated-task"]),
        "judge_model_id": str(models["simulated-task"]),  # must differ
        "engineer_model_id": str(models["simulated-engineer"]),
        "target_f1": "0.8",
        "max_iterations": "5",
        "holdout_fraction": "0.25",
        "budget_usd": "",
        "iteration_timeout_s": "600",
    }
    r = await client.post("/personas/new", data=form)
    assert r.status_code == 422 and "must differ" in r.text
    assert 'value="From scratch"' in r.text  # the form keeps what was typed
    form["judge_model_id"] = str(models["simulated-judge"])
    r = await client.post("/personas/new", data=form)
    assert r.status_code == 303, r.text
    pid = int(r.headers["location"].split("/")[2])
    created = (await client.get(f"/api/personas/{pid}")).json()
    assert created["name"] == "From scratch" and created["budget_usd"] is None
    assert (await client.post("/personas/new", data=form)).status_code == 409  # same name
    # No task model: the form offers "none", for pairs that bring their own answers.
    page = (await client.get("/personas/new")).text
    task_select = page.split('name="task_model_id"')[1].split("</select>")[0]
    assert '<option value="">none: every pair brings its answer</option>' in task_select
    assert "required" not in page.split('name="task_model_id"')[1].split(">")[0]
    r = await client.post(
        "/personas/new", data=form | {"name": "Answers given", "task_model_id": ""}
    )
    assert r.status_code == 303, r.text
    pid = int(r.headers["location"].split("/")[2])
    assert (await client.get(f"/api/personas/{pid}")).json()["task_model_id"] is None
    settings = (await client.get(f"/personas/{pid}/settings")).text
    chosen = settings.split('name="task_model_id"')[1].split("</select>")[0]
    assert '<option value="" selected>none: every pair brings its answer</option>' in chosen


async def test_detail_tabs_render_in_every_state(
    client: httpx.AsyncClient,
    draft: dict[str, Any],
    training: dict[str, Any],
    trained: dict[str, Any],
) -> None:
    expected = {
        "": ["Models", "simulated-judge", "Export CSV"],
        "/data": ["Stored pairs", "drop-zone", "Add training pairs"],
        "/progress": ["Live log", 'id="progress-live"', "/api/personas/"],
        "/prompts": ["Version history", "Edit the judge prompt"],
        "/settings": ["Target F1", "Prompt-engineer model"],
    }
    per_state = {
        "draft": (draft, ["Start training", "Not started yet", "is not trained"]),
        "training": (training, ["Pause", "awaits your review", "Review now"]),
        "trained": (trained, ["reached the target F1", "Confusion matrix", "Selection pairs"]),
    }
    for state, (p, extra) in per_state.items():
        pages = {path: await client.get(f"/personas/{p['id']}{path}") for path in expected}
        for path, texts in expected.items():
            assert pages[path].status_code == 200, (state, path, pages[path].text[:500])
            for text in texts:
                assert text in pages[path].text, (state, path, text)
        everything = "".join(r.text for r in pages.values())
        for text in extra:
            if state == "draft" and text == "is not trained":
                continue  # the session form needs pillars, which this module has none of
            assert text in everything, (state, text)
    trained_progress = (await client.get(f"/personas/{trained['id']}/progress")).text
    # 5 metrics x 2 splits
    # five cards for each of the three splits, each with its count and interval
    assert len(re.findall(r'class="metric-card[ "]', trained_progress)) == 15
    assert len(re.findall(r'class="ci small muted"', trained_progress)) >= 15
    assert "not</strong> that prompt optimisation works" in trained_progress
    assert "<svg" in trained_progress and 'class="point"' in trained_progress
    assert "Trained: the judge reached" in trained_progress
    live = await client.get(f"/personas/{trained['id']}/progress/live")
    assert live.status_code == 200 and live.text.startswith('<div id="progress-live"')
    overview = (await client.get(f"/personas/{trained['id']}")).text
    assert 'id="calib-tpr"' in overview and "CI recipe" in overview
    assert (await client.get("/personas/999999")).status_code == 404


async def test_review_page_with_and_without_decisions(
    client: httpx.AsyncClient, app: FastAPI, draft: dict[str, Any], training: dict[str, Any]
) -> None:
    pid = training["id"]
    r = await client.get(f"/personas/{pid}/review/1")
    assert r.status_code == 200
    assert "Reviewed <strong>0</strong> of" in r.text
    assert "Keyboard:" in r.text and "<kbd>a</kbd> agree" in r.text
    for needle in (
        'id="agree"',
        'id="disagree"',
        'id="next-link"',
        'id="agree-all"',
        "Review later",
    ):
        assert needle in r.text, needle
    assert 'id="prev-link"' not in r.text  # the first decision has none before it
    # An iteration with no decisions yet (answers still being generated).
    async with app.state.sessionmaker() as db:
        persona = await get_persona(db=db, persona_id=draft["id"])
        db.add(
            PersonaIteration(
                persona_id=draft["id"],
                number=1,
                status="generating",
                prompt_version=persona.current_version,
                timings={},
            )
        )
        await db.commit()
    empty = await client.get(f"/personas/{draft['id']}/review/1")
    assert empty.status_code == 200
    assert "No decisions to review yet" in empty.text and "Keyboard:" in empty.text
    assert (await client.get(f"/personas/{draft['id']}/review/7")).status_code == 404


async def test_review_navigation_and_later_and_agree_all(
    client: httpx.AsyncClient, reviewer_client: httpx.AsyncClient, fast_simulator: None
) -> None:
    p = await _from_template(client, "Navigated")
    pid = p["id"]
    await client.post(f"/api/personas/{pid}/training/start")
    await _wait(client, pid, _awaiting)
    order = [
        d["id"] for d in (await client.get(f"/api/personas/{pid}/iterations/1/decisions")).json()
    ]

    def current(html: str) -> int:
        return int(re.search(r'data-decision-id="(\d+)"', html).group(1))

    # A reviewer (read and review only) moves with next / previous and decides.
    second = await reviewer_client.get(f"/personas/{pid}/review/1?decision={order[1]}", headers=HX)
    assert current(second.text) == order[1]
    assert f"?decision={order[0]}" in second.text and f"?decision={order[2]}" in second.text
    r = await reviewer_client.post(
        f"/personas/{pid}/review/1/decisions/{order[1]}",
        data={"agrees": "true", "notes": "  looks right  "},
        headers=HX,
    )
    assert r.status_code == 200 and current(r.text) == order[2]  # the next undecided one
    decided = (await client.get(f"/api/personas/{pid}/iterations/1/decisions")).json()
    by_id = {d["id"]: d for d in decided}
    assert by_id[order[1]]["human_agrees"] is True
    assert by_id[order[1]]["human_notes"] == "looks right"
    # Going back shows the decision where it was, with the review, although reviewed
    # decisions move to the end of the service's order.
    back = await reviewer_client.get(f"/personas/{pid}/review/1?decision={order[1]}", headers=HX)
    assert "You agreed" in back.text and "looks right" in back.text
    # "Review later" from the first one skips the reviewed second one.
    first = await reviewer_client.get(f"/personas/{pid}/review/1?decision={order[0]}", headers=HX)
    later = re.search(r'id="later-link" href="[^"]*\?decision=(\d+)"', first.text)
    assert later is not None and int(later.group(1)) == order[2]
    # Reviewers may not run the persona.
    assert (await reviewer_client.post(f"/personas/{pid}/actions/pause")).status_code == 403
    assert (await reviewer_client.post(f"/api/personas/{pid}/evaluate", json={})).status_code == 403
    # Agree with all: every undecided one, keeping the answers already given.
    done = await reviewer_client.post(f"/personas/{pid}/review/1/agree-all", headers=HX)
    assert done.status_code == 200 and 'id="review-done"' in done.text
    after = {
        d["id"]: d for d in (await client.get(f"/api/personas/{pid}/iterations/1/decisions")).json()
    }
    assert all(d["human_agrees"] is not None for d in after.values())
    assert after[order[1]]["human_notes"] == "looks right"
    await client.post(f"/api/personas/{pid}/training/pause")


async def test_review_api_twin_matches_the_page(
    client: httpx.AsyncClient, fast_simulator: None
) -> None:
    p = await _from_template(client, "Twin review")
    pid = p["id"]
    await client.post(f"/api/personas/{pid}/training/start")
    await _wait(client, pid, _awaiting)
    base = f"/api/personas/{pid}/iterations/1"
    before = [d["id"] for d in (await client.get(f"{base}/decisions?order=stable")).json()]
    assert len(before) > 3
    picked = before[1]
    r = await client.post(f"/api/personas/{pid}/decisions/{picked}/feedback", json={"agrees": True})
    assert r.status_code == 200, r.text
    # The stable order does not move a reviewed decision; the work queue puts it last.
    stable = [d["id"] for d in (await client.get(f"{base}/decisions?order=stable")).json()]
    queue = [d["id"] for d in (await client.get(f"{base}/decisions")).json()]
    assert stable == before
    assert queue[-1] == picked and sorted(queue) == sorted(before)
    review = (await client.get(f"{base}/review")).json()
    assert [d["id"] for d in review["decisions"]] == stable
    assert (review["total"], review["reviewed"], review["agreed"]) == (len(before), 1, 1)
    assert review["current_id"] == before[0]  # the first undecided
    assert review["next_pending_id"] == before[2]  # skips the reviewed one
    page = await client.get(f"/personas/{pid}/review/1", headers=HX)
    shown = int(re.search(r'data-decision-id="(\d+)"', page.text).group(1))
    assert shown == review["current_id"]
    # Asked by name: the reviewed one, with its neighbours, on the page and in the twin.
    at = (await client.get(f"{base}/review?decision={picked}")).json()
    assert (at["previous_id"], at["current_id"], at["next_id"]) == tuple(before[:3])
    page = await client.get(f"/personas/{pid}/review/1?decision={picked}", headers=HX)
    assert f"?decision={at['previous_id']}" in page.text
    assert f"?decision={at['next_id']}" in page.text
    assert (await client.get(f"/api/personas/{pid}/iterations/7/review")).status_code == 404
    assert (await client.get(f"{base}/decisions?order=bogus")).status_code == 422
    await client.post(f"/api/personas/{pid}/training/pause")


async def test_upload_through_the_page_is_all_or_nothing(
    client: httpx.AsyncClient, draft: dict[str, Any]
) -> None:
    pid = draft["id"]
    url = f"/personas/{pid}/data/upload"
    before = (await client.get(f"/api/personas/{pid}")).json()["pair_count"]
    bad = b"input,correct_output\nWhat is 2+2?,4\nWhat is 3+3?,\n"
    r = await client.post(url, files={"file": ("bad.csv", bad, "text/csv")}, headers=HX)
    assert r.status_code == 422
    assert 'id="upload-errors"' in r.text and "correct_output is empty" in r.text
    assert '<td class="num">3</td>' in r.text
    assert (await client.get(f"/api/personas/{pid}")).json()["pair_count"] == before
    good = b"input,correct_output\nWhat is 2+2?,4\nWhat is 3+3?,6\n"
    r = await client.post(url, files={"file": ("good.csv", good, "text/csv")}, headers=HX)
    assert r.status_code == 200, r.text
    assert "Added 2 pair(s)" in r.text and 'hx-swap-oob="true"' in r.text
    assert (await client.get(f"/api/personas/{pid}")).json()["pair_count"] == before + 2


async def test_settings_and_prompt_edits(client: httpx.AsyncClient) -> None:
    p = await _from_template(client, "Editable")
    pid = p["id"]
    page = (await client.get(f"/personas/{pid}/settings")).text
    form = {
        name: re.search(rf'name="{name}"[^>]*value="([^"]*)"', page).group(1)
        for name in ("name", "target_f1", "max_iterations", "holdout_fraction")
    }
    assert form["name"] == "Editable"
    r = await client.post(
        f"/personas/{pid}/settings",
        data={**form, "name": "Edited", "target_f1": "0.9", "budget_usd": ""},
    )
    assert r.status_code == 303
    got = (await client.get(f"/api/personas/{pid}")).json()
    assert (got["name"], got["target_f1"], got["budget_usd"]) == ("Edited", 0.9, None)
    r = await client.post(f"/personas/{pid}/settings", data={**form, "target_f1": "0.99"})
    assert r.status_code == 422 and "Nothing was saved" in r.text

    r = await client.post(f"/personas/{pid}/prompts", data={"text": "Judge {answer} only"})
    assert r.status_code == 422 and "{correct_output}" in r.text
    text = got["judge_prompt"] + "\n- Rule: never trust <script>alert(1)</script>"
    r = await client.post(f"/personas/{pid}/prompts", data={"text": text, "rationale": "stricter"})
    assert r.status_code == 303
    diff = await client.get(f"/personas/{pid}/prompts/diff?a=1&b=2", headers=HX)
    assert diff.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in diff.text and "<script>alert" not in diff.text
    assert 'class="txt ins"' in diff.text
    r = await client.post(f"/personas/{pid}/prompts/1/rollback")
    assert r.status_code == 303
    versions = (await client.get(f"/api/personas/{pid}/prompts")).json()
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert versions[-1]["text"] == versions[0]["text"]


async def test_actions_clone_delete_and_conflicts(client: httpx.AsyncClient) -> None:
    p = await _from_template(client, "Acted on")
    pid = p["id"]
    r = await client.post(f"/personas/{pid}/actions/pause")
    assert r.status_code == 409 and "needs status training" in r.text
    r = await client.post(f"/personas/{pid}/actions/clone")
    assert r.status_code == 303
    copy_id = int(r.headers["location"].rsplit("/", 1)[1])
    assert (await client.get(f"/api/personas/{copy_id}")).json()["name"] == "Acted on (copy)"
    assert (await client.post(f"/personas/{copy_id}/actions/delete")).status_code == 303
    assert (await client.get(f"/api/personas/{copy_id}")).status_code == 404


async def test_compare_page_and_api(
    client: httpx.AsyncClient, draft: dict[str, Any], trained: dict[str, Any]
) -> None:
    ids = f"{trained['id']},{draft['id']}"
    page = await client.get(f"/personas/compare?ids={ids}")
    assert page.status_code == 200
    table = page.text[page.text.index('id="compare-table"') :]
    assert table.index("Trained one") < table.index("Draft &lt;persona")  # the order asked
    assert 'data-metric="selection-f1"' in page.text and "Training cost" in page.text
    api = (await client.get(f"/api/personas/compare?ids={ids}")).json()
    assert [row["id"] for row in api] == [trained["id"], draft["id"]]
    assert api[0]["selection"]["f1"] > 0 and api[1]["selection"] is None
    assert api[0]["iterations"] == 1 and api[0]["scored_iteration"] == 1
    assert api[1]["scored_iteration"] is None
    assert (await client.get("/api/personas/compare?ids=1,x")).status_code == 422
    assert (await client.get("/api/personas/compare?ids=999999")).status_code == 404
    assert (await client.get("/personas/compare?ids=")).status_code == 422


@pytest.mark.parametrize("bad", ["\u00b2", "\u0663", "7" * 5000])
async def test_compare_and_judge_form_refuse_ids_isdigit_lets_through(
    client: httpx.AsyncClient, draft: dict[str, Any], bad: str
) -> None:
    # isdigit() passes them all: int() raised on "²" and 5,000 digits (a 500) and read the
    # Arabic-Indic "٣" as 3 (another persona, another pillar).
    for url in ("/api/personas/compare", "/personas/compare"):
        r = await client.get(url, params={"ids": f"{draft['id']},{bad}"})
        assert r.status_code == 422 and "from 1 to 2147483647" in r.text, r.text
    form = {"session_name": "bad pillar id", "pillar_ids": [bad]}
    r = await client.post(f"/personas/{draft['id']}/sessions", data=form)
    assert r.status_code == 422 and "each of pillar_ids must be a whole number" in r.text, r.text


# -- pure helpers ----------------------------------------------------------------------------


def _decision(i: int, **kw: Any) -> DecisionOut:
    base = {
        "id": i,
        "iteration": 1,
        "pair_id": 100 + i,
        "split": "optimisation",
        "input": "q",
        "input_b": None,
        "correct_output": "a",
        "answer": "a",
        "judge_label": "correct",
        "judge_reasoning": "",
        "judge_confidence": None,
        "parse_error": False,
        "prompt_version": 1,
        "human_agrees": None,
        "human_notes": None,
        "reviewed_at": None,
        "carried_forward": False,
    }
    return DecisionOut(**{**base, **kw})


def test_review_order_puts_uncertain_first_and_carried_last() -> None:
    ds = [
        _decision(1, judge_confidence=0.9),
        _decision(2, carried_forward=True, human_agrees=True, judge_confidence=0.1),
        _decision(3, judge_confidence=0.2, split="selection"),
        _decision(4),
        _decision(5, judge_confidence=0.2),
    ]
    assert [d.id for d in review_order(ds)] == [5, 3, 1, 4, 2]


def test_pending_first_order_puts_unreviewed_first_then_the_same_rule() -> None:
    ds = [
        _decision(1, judge_confidence=0.9),
        _decision(2, carried_forward=True, human_agrees=True, judge_confidence=0.1),
        _decision(3, judge_confidence=0.2, split="selection"),
        _decision(4, human_agrees=False, judge_confidence=0.05),
        _decision(5, judge_confidence=0.2),
    ]
    assert [d.id for d in review_order(ds, "pending_first")] == [5, 3, 1, 4, 2]
    assert [d.id for d in review_order(ds, "stable")] == [4, 5, 3, 1, 2]


_decisions = st.lists(
    st.tuples(
        st.sampled_from([None, True, False]),
        st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
        st.sampled_from(["optimisation", "selection"]),
        st.booleans(),
    ),
    min_size=1,
    max_size=25,
)


@given(_decisions, st.data())
def test_stable_order_never_moves_a_decision_when_it_is_reviewed(
    rows: list[tuple[bool | None, float | None, str, bool]], data: st.DataObject
) -> None:
    ds = [
        _decision(
            i,
            human_agrees=True if carried else agrees,
            judge_confidence=confidence,
            split=split,
            carried_forward=carried,
        )
        for i, (agrees, confidence, split, carried) in enumerate(rows, start=1)
    ]
    stable = [d.id for d in review_order(ds, "stable")]
    queue = review_order(ds, "pending_first")
    reviewed = [d.human_agrees is not None for d in queue]
    assert reviewed == sorted(reviewed)  # every unreviewed one before every reviewed one
    # Within the unreviewed ones (never carried forward) both orders agree.
    assert [d.id for d in queue if d.human_agrees is None] == [
        i for i in stable if ds[i - 1].human_agrees is None
    ]
    i = data.draw(st.integers(min_value=0, max_value=len(ds) - 1))
    ds[i] = ds[i].model_copy(update={"human_agrees": data.draw(st.booleans())})
    assert [d.id for d in review_order(ds, "stable")] == stable


@given(
    st.lists(st.sampled_from([None, True, False]), min_size=1, max_size=30),
    st.integers(min_value=0, max_value=40),
)
def test_next_pending_is_undecided_and_none_only_when_all_are_reviewed(
    reviews: list[bool | None], pick: int
) -> None:
    ds = [_decision(i, human_agrees=a) for i, a in enumerate(reviews, start=1)]
    state = review_state(ds, pick)
    pending = [d.id for d in ds if d.human_agrees is None]
    assert state.reviewed == len(ds) - len(pending)
    assert state.current is not None
    if pick not in {d.id for d in ds} and pending:
        assert state.current.id == pending[0]  # no choice: the first undecided
    following = state.next_pending
    if following is None:
        assert pending in ([], [state.current.id])
    else:
        assert following.human_agrees is None and following.id in pending
        assert following.id != state.current.id or pending == [state.current.id]


def test_diff_rows_pair_replaced_lines_and_number_both_sides() -> None:
    diff = prompt_diff(1, "a\nb\nc\nd", 2, "a\nB\nB2\nc")
    rows = [(r.kind, r.a_no, r.a_text, r.b_no, r.b_text) for r in diff_rows(diff)]
    assert rows == [
        ("equal", 1, "a", 1, "a"),
        ("replace", 2, "b", 2, "B"),
        ("replace", None, "", 3, "B2"),
        ("equal", 3, "c", 4, "c"),
        ("delete", 4, "d", None, ""),
    ]


def test_diff_rows_fold_long_unchanged_runs() -> None:
    a = "\n".join(f"line {i}" for i in range(20))
    rows = diff_rows(prompt_diff(1, a, 2, a.replace("line 10", "LINE 10")))
    assert [r.kind for r in rows] == ["fold", *["equal"] * 3, "replace", *["equal"] * 3, "fold"]
    assert (rows[0].a_text, rows[-1].a_text) == ("7 unchanged lines", "6 unchanged lines")
    assert (rows[1].a_no, rows[1].b_no, rows[4].b_text) == (8, 8, "LINE 10")
    assert len(diff_rows(prompt_diff(1, a, 2, a))) == 20  # identical: nothing to fold around


def test_metric_cards_trends() -> None:
    def m(f1: float, precision: float) -> MetricsOut:
        return MetricsOut(
            precision=precision, recall=0.5, f1=f1, kappa=0.1, accuracy=0.6, n=10, confusion={}
        )

    cards = {c.key: c for c in metric_cards(m(0.8, 0.7), m(0.7, 0.9))}
    assert cards["f1"].trend == "up" and cards["precision"].trend == "down"
    assert cards["recall"].trend == "flat"
    assert {c.trend for c in metric_cards(m(0.8, 0.7), None)} == {"none"}
    assert metric_cards(None, None) == []


def test_settings_changes_keeps_only_what_changed() -> None:
    now = datetime.now(UTC)
    current = type("P", (), {})()
    for k, v in {
        "name": "x",
        "target_f1": 0.8,
        "max_iterations": 20,
        "budget_usd": None,
        "holdout_fraction": 0.25,
        "created_at": now,
    }.items():
        setattr(current, k, v)
    submitted = {"name": "x", "target_f1": "0.85", "max_iterations": "20", "budget_usd": None}
    assert settings_changes(current, submitted) == {"target_f1": 0.85}  # type: ignore[arg-type]
