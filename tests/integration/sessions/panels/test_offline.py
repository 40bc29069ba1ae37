"""Offline panels: LLMBar's two recorded judges imported as one panel session.

Each LLMBar instance is two threads (output_1, output_2) with a gold label; each judge
answered it in both orders. The recorded answers are read with the release's own parsing
rules (as in ``tests/unit/core/agreement/test_llmbar_published.py``; an unreadable answer is a TIE, never the
gold label), imported with a ``judge`` column, and the panel report must give the published
accuracy and positional agreement per member, scikit-learn's kappa between them, and the
majority and calibrated aggregates as ``judging.panels`` defines them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from sklearn.metrics import cohen_kappa_score
from sqlalchemy import select

from llmjudge.core.judging.formats import VerdictFormat, parse_with_format
from llmjudge.core.judging.panels import SHRINK_LABELS
from llmjudge.references.models import ReferenceLabel
from llmjudge.sessions.models import Comparison, ComparisonVote
from llmjudge.sessions.panels.report import panel_report

SLOT = {"1": "A", "2": "B"}
FLIP = {"A": "B", "B": "A", "TIE": "TIE"}
JUDGES = ("GPT-4", "ChatGPT")
STRATEGY = "Vanilla"
STEM = "LLMBar-Natural"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _format(llmbar_dir: Path, judge: str) -> VerdictFormat:
    rules = json.loads((llmbar_dir / "prompts" / f"{judge}-{STRATEGY}.parsing.json").read_text())
    return VerdictFormat.model_validate(
        {
            "kind": "labels",
            "match": "rule_order",
            "on_unparsed": "tie",
            "rules": [{"pattern": rules[k], "winner": SLOT[k]} for k in ("1", "2")],
        }
    )


def _ref(pid: str, side: str) -> dict[str, str]:
    return {"pillar": f"llmbar-{side}", "external_id": pid}


def recorded(llmbar_dir: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, list[str]]]]:
    """Import lines (both judges) and each judge's shown-order verdicts per (id, order)."""
    lines = []
    verdicts: dict[str, dict[str, list[str]]] = {}
    for judge in JUDGES:
        fmt = _format(llmbar_dir, judge)
        shown: dict[str, list[str]] = {}
        for rec in _jsonl(llmbar_dir / f"judgments-{STEM}-{judge}-{STRATEGY}.jsonl"):
            winner = parse_with_format(str(rec["completion"]), fmt).winner
            pid = str(rec["id"])
            swapped = rec["order"] == "swapped"
            first, second = ("2", "1") if swapped else ("1", "2")
            lines.append(
                {
                    "thread_a": _ref(pid, first),
                    "thread_b": _ref(pid, second),
                    "verdict": winner,
                    "judge": judge,
                }
            )
            shown.setdefault(pid, []).append(winner)
        verdicts[judge] = shown
    return lines, verdicts


@pytest.fixture(scope="module")
async def llmbar(client: httpx.AsyncClient, app: Any, llmbar_dir: Path) -> dict[str, Any]:
    pairs = _jsonl(llmbar_dir / f"pairs-{STEM}.jsonl")
    threads = [
        {"pillar": f"llmbar-{side}", "external_id": str(p["id"]), "content": p[f"output_{side}"]}
        for p in pairs
        for side in ("1", "2")
    ]
    body = "\n".join(json.dumps(t) for t in threads).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    items = (await client.get("/api/threads", params={"q": "", "limit": 500})).json()["items"]
    ids = {
        (t["pillar_name"], t["external_id"]): t["id"]
        for t in items
        if t["pillar_name"].startswith("llmbar-")
    }
    assert len(ids) == 200
    # Gold labels, stored for the canonical pair (lower id first) as the table requires.
    async with app.state.sessionmaker() as db:
        for p in pairs:
            one, two = ids[("llmbar-1", str(p["id"]))], ids[("llmbar-2", str(p["id"]))]
            label = SLOT[str(p["label"])]  # relative to (output_1, output_2)
            a, b, lab = (one, two, label) if one < two else (two, one, FLIP[label])
            db.add(ReferenceLabel(thread_a_id=a, thread_b_id=b, label=lab, source="gold"))
        await db.commit()
    lines, verdicts = recorded(llmbar_dir)
    published = {
        p["judge"]: p
        for p in json.loads((llmbar_dir / "published.json").read_text())
        if (p["set"], p["strategy"]) == ("LLMBar/Natural", STRATEGY)
    }
    return {"pairs": pairs, "ids": ids, "lines": lines, "verdicts": verdicts, "pub": published}


async def _import(client: httpx.AsyncClient, lines: list[dict[str, Any]], **form: str) -> int:
    body = "\n".join(json.dumps(x) for x in lines).encode()
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", body)},
        data={"session_name": f"LLMBar panel {form}", **form},
    )
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["judges"] == list(JUDGES)
    assert (out["total"], out["swap_pairs"]) == (200, 100)
    return int(out["session_id"])


def _nan_as_null(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _nan_as_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_as_null(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


async def test_majority_panel_report_reproduces_the_published_figures(
    client: httpx.AsyncClient, app: Any, llmbar: dict[str, Any]
) -> None:
    sid = await _import(client, llmbar["lines"], aggregation="majority")
    r = await client.get(f"/api/sessions/{sid}/panel")
    assert r.status_code == 200, r.text
    rep = r.json()
    assert rep["rule"] == "majority" and rep["comparisons"] == 200 and rep["labelled"] == 200
    # The typed response schema answers every figure of the report as it was computed
    # (an undefined mean latency, NaN, is null in JSON as it was before the schema).
    async with app.state.sessionmaker() as db:
        assert rep == _nan_as_null(await panel_report(db, sid))
    for k, judge in enumerate(JUDGES):
        member = rep["members"][k]
        pub = llmbar["pub"][judge]
        assert member["label"] == judge and member["voted"] == 200
        assert member["accuracy"]["n"] == 200
        assert member["accuracy"]["value"] == pytest.approx(pub["accuracy"] / 100)
        assert member["consistency"]["n"] == 100
        assert member["consistency"]["value"] == pytest.approx(pub["positional_agreement"] / 100)
        low, high = member["accuracy"]["low"], member["accuracy"]["high"]
        assert low < member["accuracy"]["value"] < high

    # Kappa between the members equals scikit-learn's on the same shown-order verdicts.
    v = llmbar["verdicts"]
    order = list(v[JUDGES[0]])
    gpt4 = [w for pid in order for w in v["GPT-4"][pid]]
    chat = [w for pid in order for w in v["ChatGPT"][pid]]
    assert rep["kappa"][0][1] == pytest.approx(cohen_kappa_score(gpt4, chat))
    assert rep["kappa"][1][0] == rep["kappa"][0][1]
    assert rep["kappa"][0][0] == pytest.approx(1.0)

    # Majority of two: their verdict when they agree, TIE when they do not.
    async with app.state.sessionmaker() as db:
        stored = (
            await db.execute(
                select(Comparison.id, Comparison.winner, Comparison.votes_cast)
                .where(Comparison.session_id == sid)
                .order_by(Comparison.queue_position)
            )
        ).all()
        votes = (
            await db.execute(
                select(
                    ComparisonVote.comparison_id, ComparisonVote.member, ComparisonVote.winner
                ).where(ComparisonVote.session_id == sid)
            )
        ).all()
    assert len(votes) == 400  # one per judge per comparison, none doubled
    by = {(c, m): w for c, m, w in votes}
    for cid, winner, cast in stored:
        a, b = by[(cid, 0)], by[(cid, 1)]
        assert winner == (a if a == b else "TIE") and cast == 2
    agree = sum(by[(c, 0)] == by[(c, 1)] for c, _, _ in stored)
    assert rep["members"][0]["agreement_with_panel"]["value"] == pytest.approx(agree / 200)
    # Two judges of which one is much better: the majority (ties on every disagreement)
    # cannot beat GPT-4 alone, and the report says so.
    assert rep["vs_best"]["label"] == "GPT-4" and rep["vs_best"]["beats"] is False
    assert "does not beat its best member" in rep["verdict"]
    neff = rep["n_eff"]
    assert neff["n"] == 200 and 1.0 <= neff["value"] <= 2.0 and neff["explanation"]

    # LLMBar's answers carry no confidence: no cascade can be calibrated on them.
    cal = rep["cascade_calibration"]
    assert cal["available"] is False and cal["n"] == 0 and "confidence" in cal["reason"]

    # The Results tab "Panel" says the same, with the kappa heatmap.
    page = await client.get(f"/sessions/{sid}/results?tab=panel")
    assert page.status_code == 200
    assert "does not beat its best member" in page.text
    assert 'id="tab-panel"' in page.text and "Cohen&#39;s kappa between members" in page.text
    assert f"{rep['kappa'][0][1]:.2f}" in page.text
    partial = await client.get(f"/sessions/{sid}/partials/results/panel")
    assert partial.status_code == 200 and 'id="panel-members"' in partial.text


async def test_calibrated_panel_weights_follow_the_log_odds(
    client: httpx.AsyncClient, llmbar: dict[str, Any]
) -> None:
    sid = await _import(client, llmbar["lines"], aggregation="calibrated")
    session = (await client.get(f"/api/sessions/{sid}")).json()
    rep = (await client.get(f"/api/sessions/{sid}/panel")).json()
    acc = [llmbar["pub"][j]["accuracy"] / 100 for j in JUDGES]
    pooled = sum(acc) / 2
    expected = []
    for a in acc:
        p = (a * 200 + SHRINK_LABELS * pooled) / (200 + SHRINK_LABELS)
        expected.append(math.log(p / (1 - p)))
    weights = [m["weight"] for m in rep["members"]]
    assert weights == pytest.approx(expected)
    assert weights[0] > weights[1]
    assert session["id"] == sid
    # GPT-4 outweighs ChatGPT, so the calibrated panel gives GPT-4's verdicts: its accuracy.
    assert rep["panel"]["accuracy"]["value"] == pytest.approx(
        llmbar["pub"]["GPT-4"]["accuracy"] / 100
    )
    assert rep["members"][0]["agreement_with_panel"]["value"] == 1.0


async def test_panel_import_errors(client: httpx.AsyncClient, llmbar: dict[str, Any]) -> None:
    lines = [dict(x) for x in llmbar["lines"][:4]]
    lines[1].pop("judge")
    body = "\n".join(json.dumps(x) for x in lines).encode()
    r = await client.post(
        "/api/sessions/import", files={"file": ("j.jsonl", body)}, data={"session_name": "x"}
    )
    assert r.status_code == 422 and "judge" in r.text
    body = "\n".join(json.dumps(x) for x in llmbar["lines"]).encode()
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", body)},
        data={"session_name": "x", "aggregation": "weighted", "weights": "1"},
    )
    assert r.status_code in (400, 422) and "weight" in r.text


async def test_one_judge_is_not_a_panel(client: httpx.AsyncClient, llmbar: dict[str, Any]) -> None:
    lines = [x for x in llmbar["lines"] if x["judge"] == "GPT-4"]
    body = "\n".join(json.dumps(x) for x in lines).encode()
    r = await client.post(
        "/api/sessions/import", files={"file": ("j.jsonl", body)}, data={"session_name": "one"}
    )
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["judges"] == [] and out["total"] == 200
    sid = out["session_id"]
    assert (await client.get(f"/api/sessions/{sid}")).json()["options"]["judge_label"] == "GPT-4"
    r = await client.get(f"/api/sessions/{sid}/panel")
    assert r.status_code in (400, 422) and "not a panel" in r.text
    page = await client.get(f"/sessions/{sid}/results")
    assert page.status_code == 200 and 'id="tab-panel"' not in page.text


async def test_panel_import_keeps_row_labels_and_reads_raw_judgments(
    client: httpx.AsyncClient, app: Any, llmbar: dict[str, Any]
) -> None:
    """Main's judgment-import features hold for a panel file: raw `judgment` texts read with
    the given verdict format, and the reference labels its rows carry stored once per pair."""
    gold = {str(p["id"]): SLOT[str(p["label"])] for p in llmbar["pairs"]}
    pids = sorted(gold)[:10]
    lines = []
    for x in llmbar["lines"]:
        pid = x["thread_a"]["external_id"]
        if pid not in pids:
            continue
        shown_first = x["thread_a"]["pillar"] == "llmbar-1"
        label = gold[pid] if shown_first else FLIP[gold[pid]]
        tag = {"A": "[[A]]", "B": "[[B]]", "TIE": "[[C]]"}[x["verdict"]]
        lines.append(
            {k: v for k, v in x.items() if k != "verdict"}
            | {"judgment": f"Thinking. {tag}", "label": label, "source": "human"}
            | {"annotator": "panel-file"}
        )
    body = "\n".join(json.dumps(x) for x in lines).encode()
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", body)},
        data={"session_name": "panel labels", "verdict_format": "tags"},
    )
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["judges"] == list(JUDGES) and out["total"] == 20 and out["failed"] == 0
    # Both judges' rows (original and swap) name the same label: one per pair.
    assert out["labels"] == 10
    sid = out["session_id"]
    async with app.state.sessionmaker() as db:
        stored = (
            (
                await db.execute(
                    select(ReferenceLabel).where(ReferenceLabel.annotator == "panel-file")
                )
            )
            .scalars()
            .all()
        )
        votes = (
            (await db.execute(select(ComparisonVote).where(ComparisonVote.session_id == sid)))
            .scalars()
            .all()
        )
    assert len(stored) == 10 and {s.source for s in stored} == {"human"}
    for s in stored:  # canonical order, the gold label mapped onto it
        assert s.thread_a_id < s.thread_b_id
    want = {
        (x["judge"], x["thread_a"]["external_id"], x["thread_a"]["pillar"]): x["verdict"]
        for x in llmbar["lines"]
        if x["thread_a"]["external_id"] in pids
    }
    assert sorted(v.winner for v in votes) == sorted(want.values())
    assert all(v.status == "voted" and "[[" in (v.raw_response or "") for v in votes)

    # A pair whose rows disagree on its label: a row error, nothing stored.
    other = {"A": "B", "B": "A", "TIE": "A"}
    lines[1] = lines[1] | {"label": other[lines[1]["label"]]}
    body = "\n".join(json.dumps(x) for x in lines).encode()
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", body)},
        data={"session_name": "panel labels bad", "verdict_format": "tags"},
    )
    assert r.status_code == 422 and "label" in r.text, r.text
    names = [s["name"] for s in (await client.get("/api/sessions")).json()]
    assert "panel labels bad" not in names
