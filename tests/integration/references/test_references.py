"""Reference labels through the API (import, upsert, list, export, delete, bad input) and the
agreement report of a session whose recorded judgments were imported with their labels."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from llmjudge.references.models import ReferenceLabel
from llmjudge.sessions.models import JudgeSession


def jsonl(*rows: dict[str, Any]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


async def import_labels(client: httpx.AsyncClient, body: bytes, name: str = "l.jsonl") -> Any:
    return await client.post("/api/references/import", files={"file": (name, body)})


@pytest.fixture(scope="module")
async def threads(client: httpx.AsyncClient) -> dict[str, int]:
    """Six threads in two pillars, answers to three prompts; id by '<pillar>/<external id>'."""
    rows = [
        {
            "pillar": pillar,
            "external_id": f"q{i}",
            "prompt_key": f"q{i}",
            "prompt": f"Question {i}?",
            "content": "" if (pillar, i) == ("left", 2) else f"{pillar} answer {i}",
            "metadata": {"category": "math" if i < 2 else "prose"},
        }
        for pillar in ("left", "right")
        for i in range(3)
    ]
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", jsonl(*rows))})
    assert r.status_code == 200, r.text
    listed = (await client.get("/api/threads", params={"limit": 500})).json()["items"]
    return {f"{t['pillar_name']}/{t['external_id']}": t["id"] for t in listed}


async def count_labels(db: Any) -> int:
    return int(await db.scalar(select(func.count()).select_from(ReferenceLabel)))


async def test_empty_answer_imports_and_prompt_is_kept(
    client: httpx.AsyncClient, threads: dict[str, int]
) -> None:
    empty = (await client.get(f"/api/threads/{threads['left/q2']}")).json()
    assert empty["content"] == "" and empty["prompt"] == "Question 2?"
    page = await client.get(f"/threads/{threads['left/q2']}")
    assert "(empty answer)" in page.text
    # No content at all still does not import; nor do two prompt texts for one key.
    r = await client.post(
        "/api/threads/import",
        files={
            "file": (
                "t.jsonl",
                jsonl(
                    {"pillar": "x", "external_id": "1", "content": []},
                    {
                        "pillar": "x",
                        "external_id": "2",
                        "prompt_key": "k",
                        "prompt": "one",
                        "content": "a",
                    },
                    {
                        "pillar": "x",
                        "external_id": "3",
                        "prompt_key": "k",
                        "prompt": "two",
                        "content": "b",
                    },
                    {
                        "pillar": "x",
                        "external_id": "4",
                        "prompt_key": "q0",
                        "prompt": "other",
                        "content": "c",
                    },
                ),
            )
        },
    )
    assert r.status_code == 422
    errors = {(e["line"], e["field"]) for e in r.json()["detail"]["errors"]}
    assert errors == {(1, "content"), (3, "prompt"), (4, "prompt")}


async def test_import_upsert_list_export_delete(
    client: httpx.AsyncClient, threads: dict[str, int], db: Any
) -> None:
    left0, right0 = threads["left/q0"], threads["right/q0"]
    left1, right1 = threads["left/q1"], threads["right/q1"]
    body = jsonl(
        # by id, written with the higher id first: stored canonical, label flipped
        {
            "thread_a": right0,
            "thread_b": left0,
            "label": "a",
            "annotator": "ann",
            "source": "human",
        },
        {
            "pillar_a": "left",
            "external_id_a": "q1",
            "pillar_b": "right",
            "external_id_b": "q1",
            "label": "TIE",
            "note": "both fine",
        },
    )
    r = await import_labels(client, body)
    assert r.status_code == 200, r.text
    assert r.json() == {"created": 2, "updated": 0, "total": 2}
    listed = (await client.get("/api/references", params={"thread_id": left0})).json()
    assert listed["total"] == 1
    [item] = listed["items"]
    assert (item["thread_a_id"], item["thread_b_id"]) == (min(left0, right0), max(left0, right0))
    assert item["label"] == ("B" if right0 > left0 else "A")
    assert (item["source"], item["annotator"]) == ("human", "ann")

    # Same pair, source and annotator again (other order): updated, not doubled.
    again = jsonl(
        {"thread_a": left0, "thread_b": right0, "label": "B", "annotator": "ann", "source": "human"}
    )
    r = await import_labels(client, again)
    assert r.json() == {"created": 0, "updated": 1, "total": 1}
    [item] = (await client.get("/api/references", params={"annotator": "ann"})).json()["items"]
    assert item["label"] == ("B" if left0 < right0 else "A")

    gold = (await client.get("/api/references", params={"source": "gold"})).json()
    assert gold["total"] == 1 and gold["items"][0]["note"] == "both fine"

    # CSV in, exports out and back in (threads named by pillar and external id).
    csv_body = (
        f"thread_a,thread_b,label,annotator,source\n{left1},{right1},A,bob,human\n"
    ).encode()
    r = await import_labels(client, csv_body, "l.csv")
    assert r.status_code == 200, r.text
    exported = await client.get("/api/references/export", params={"format": "jsonl"})
    assert exported.status_code == 200
    lines = [json.loads(x) for x in exported.text.splitlines()]
    assert len(lines) == 3 and all("pillar_a" in x and "label" in x for x in lines)
    r = await import_labels(client, exported.content)
    assert r.json() == {"created": 0, "updated": 3, "total": 3}
    csv_out = await client.get("/api/references/export", params={"format": "csv"})
    assert csv_out.text.splitlines()[0].startswith("pillar_a,external_id_a")
    r = await import_labels(client, csv_out.content, "e.csv")
    assert r.json()["updated"] == 3

    # Delete one, then by filter (a bare delete is refused).
    assert (await client.delete("/api/references")).status_code == 422
    r = await client.delete(f"/api/references/{item['id']}")
    assert r.status_code == 204
    assert (await client.delete(f"/api/references/{item['id']}")).status_code == 404
    r = await client.delete("/api/references", params={"annotator": "bob"})
    assert r.json() == {"deleted": 1}
    assert await count_labels(db) == 1
    await client.delete("/api/references", params={"source": "gold"})
    assert await count_labels(db) == 0


@pytest.mark.parametrize(
    ("row", "field", "needle"),
    [
        ({"thread_a": 999_999, "thread_b": "LEFT0", "label": "A"}, "thread_a", "no thread with id"),
        (
            {"pillar_a": "left", "external_id_a": "nope", "thread_b": "LEFT0", "label": "A"},
            "external_id_a",
            "no thread with external_id 'nope'",
        ),
        ({"thread_a": "LEFT0", "thread_b": "LEFT0", "label": "A"}, "thread_b", "with itself"),
        ({"thread_a": "LEFT0", "thread_b": "RIGHT0", "label": "C"}, "label", "unknown label 'C'"),
        (
            {"thread_a": "LEFT0", "thread_b": "RIGHT0", "label": "A", "source": "oracle"},
            "source",
            "",
        ),
        ({"thread_a": "LEFT0", "label": "A"}, "row", "thread b needs"),
    ],
)
async def test_bad_labels_are_422_with_nothing_stored(
    client: httpx.AsyncClient,
    threads: dict[str, int],
    db: Any,
    row: dict[str, Any],
    field: str,
    needle: str,
) -> None:
    ids = {"LEFT0": threads["left/q0"], "RIGHT0": threads["right/q0"]}
    row = {k: ids.get(v, v) if isinstance(v, str) else v for k, v in row.items()}
    good = {"thread_a": ids["LEFT0"], "thread_b": ids["RIGHT0"], "label": "A"}
    r = await import_labels(client, jsonl(good, row))
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]["errors"]
    assert [e["line"] for e in errors] == [2]
    assert errors[0]["field"] == field
    assert needle in errors[0]["message"]
    assert await count_labels(db) == 0  # the good line was not stored either


async def test_agreement_of_imported_judgments(
    client: httpx.AsyncClient, threads: dict[str, int], db: Any
) -> None:
    """Recorded judgments imported with gold labels and two human annotators: the report
    recomputes from the rows by hand."""
    pairs = [(threads[f"left/q{i}"], threads[f"right/q{i}"]) for i in range(3)]
    # Gold: left wins q0, q1; right wins q2. The judge gets q0 right both ways, q1 right
    # once (inconsistent), q2 wrong both ways.
    gold = ["A", "A", "B"]
    verdicts = [("A", "B"), ("A", "A"), ("A", "B")]  # as shown: original, then swapped
    rows = []
    for (left, right), label, (first, second) in zip(pairs, gold, verdicts, strict=True):
        rows.append({"thread_a": left, "thread_b": right, "verdict": first, "label": label})
        swapped = {"A": "B", "B": "A"}[label]
        rows.append({"thread_a": right, "thread_b": left, "verdict": second, "label": swapped})
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", jsonl(*rows))},
        data={"session_name": "recorded"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["labels"] == 3  # one per pair: the swapped rows repeat it
    sid = r.json()["session_id"]
    humans = jsonl(
        *(
            {"thread_a": a, "thread_b": b, "label": lab, "annotator": who, "source": "human"}
            for who, labels in (("ann", "AAB"), ("bob", "ABB"))
            for (a, b), lab in zip(pairs, labels, strict=True)
        )
    )
    assert (await import_labels(client, humans)).status_code == 200

    report = (await client.get(f"/api/sessions/{sid}/agreement")).json()
    judge = report["judge"]
    assert (report["completed"], report["unlabelled"], report["labelled_pairs"]) == (6, 0, 3)
    # Correct: q0 x2, q1 x1 -> 3 of 6.
    assert judge["accuracy"]["value"] == pytest.approx(0.5) and judge["accuracy"]["n"] == 6
    assert judge["accuracy"]["low"] < 0.5 < judge["accuracy"]["high"]
    assert judge["both_orders_correct"]["value"] == pytest.approx(1 / 3)
    assert judge["consistency"]["value"] == pytest.approx(2 / 3)
    assert judge["net_vote"]["value"] == pytest.approx(1 / 3)
    assert sum(map(sum, judge["confusion"])) == 6
    assert report["disagreements_total"] == 3
    d = report["disagreements"][0]
    assert d["thread_a_url"] == f"/threads/{d['thread_a_id']}"
    assert d["pair_url"] == f"/sessions/{sid}/review?pair={d['thread_a_id']}-{d['thread_b_id']}"
    assert (await client.get(d["pair_url"])).status_code == 200
    groups = {g["group"]: g for g in report["by_pillar_pair"]}
    assert list(groups) == ["left vs right"]
    # Human-human: ann and bob agree on 2 of 3 pairs.
    human = report["human"]
    assert human["items"] == 3 and human["annotators"] == ["ann", "bob"]
    assert human["percent_agreement"]["value"] == pytest.approx(2 / 3)
    assert human["pairwise"][0]["agreement"]["value"] == pytest.approx(2 / 3)

    by_meta = (
        await client.get(f"/api/sessions/{sid}/agreement", params={"group_by": "category"})
    ).json()["by_metadata"]
    assert {g["group"]: g["judgments"] for g in by_meta} == {"math": 4, "prose": 2}

    # In the pair's order the judge said q0 A,A; q1 A,B; q2 A,A. Bob's labels A, B, B:
    # right on q0 twice, q1 once, q2 never.
    bob = (
        await client.get(f"/api/sessions/{sid}/agreement", params={"reference": "annotator:bob"})
    ).json()["judge"]
    assert bob["accuracy"]["n"] == 6 and bob["accuracy"]["value"] == pytest.approx(0.5)
    assert bob["confusion"] == [[2, 0, 0], [3, 1, 0], [0, 0, 0]]
    majority = (
        await client.get(f"/api/sessions/{sid}/agreement", params={"reference": "majority"})
    ).json()
    # ann and bob disagree on q1 only: the majority is a tie there, so q1 has no reference.
    assert majority["labelled_pairs"] == 2 and majority["unlabelled"] == 2
    bad = await client.get(f"/api/sessions/{sid}/agreement", params={"reference": "oracle"})
    assert bad.status_code == 422
    assert (await client.get("/api/sessions/999999/agreement")).status_code == 404
    await client.delete("/api/references", params={"session_id": sid})
    assert await count_labels(db) == 0


async def test_agreement_tab(client: httpx.AsyncClient, threads: dict[str, int]) -> None:
    pairs = [(threads[f"left/q{i}"], threads[f"right/q{i}"]) for i in range(2)]
    rows = [
        {
            "thread_a": a,
            "thread_b": b,
            "verdict": v,
            "label": "A",
            "annotator": who,
            "source": "human",
        }
        for (a, b), v in zip(pairs, "AB", strict=True)
        for who in ("ann", "bob")
    ]
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", jsonl(*rows))},
        data={"session_name": "tab"},
    )
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    page = await client.get(f"/sessions/{sid}/results", params={"tab": "agreement"})
    assert page.status_code == 200 and 'id="tab-agreement"' in page.text
    # Only people's labels: the tab opens on them, not on the gold labels nobody imported.
    assert 'id="no-references"' not in page.text and 'id="agreement-figures"' in page.text
    assert '<option value="human" selected>' in page.text
    # A disagreement names its threads by title and links the comparison's page, not /api.
    rows = page.text.split('id="agreement-disagreements"')[1].split("</table>")[0]
    wrong = pairs[1]
    # (these threads have no title: their external id, with the pillar beside it)
    assert f'href="/threads/{wrong[0]}">q1</a> <span class="pillar">left</span>' in rows
    assert f'href="/threads/{wrong[1]}">q1</a> <span class="pillar">right</span>' in rows
    assert f">#{wrong[0]}<" not in rows
    comparison, *_ = re.findall(r'href="(/[^"]*comparisons/\d+)"', rows)
    assert comparison.startswith(f"/sessions/{sid}/comparisons/") and "/api/" not in rows
    assert (await client.get(comparison)).status_code == 200
    # "view pair" opens that very pair in the review, not the queue's next one.
    pair_url, *_ = re.findall(r'href="([^"]*review[^"]*)"', rows)
    review = await client.get(pair_url.replace("&amp;", "&"))
    assert f'data-pair="{wrong[0]}-{wrong[1]}"' in review.text
    assert 'id="review-viewing"' in review.text
    part = await client.get(
        f"/sessions/{sid}/partials/results/agreement",
        params={"reference": "annotator:bob", "group_by": "category"},
    )
    assert part.status_code == 200
    assert 'id="agreement-figures"' in part.text and "50.0%" in part.text  # 1 of 2 right
    assert 'value="annotator:ann"' in part.text and 'id="human-pairwise"' in part.text
    assert 'id="agreement-by-metadata"' in part.text and "math" in part.text
    assert 'id="agreement-disagreements"' in part.text
    # Gold asked for by name: none, and the tab points at the people's labels it has.
    gold = await client.get(
        f"/sessions/{sid}/partials/results/agreement", params={"reference": "gold"}
    )
    assert 'id="no-references"' in gold.text and "People have labelled pairs" in gold.text
    bad = await client.get(
        f"/sessions/{sid}/partials/results/agreement", params={"reference": "nobody"}
    )
    assert 'id="tab-error"' in bad.text
    await client.delete("/api/references", params={"session_id": sid})


async def test_csv_empty_cell_is_an_empty_answer_only_with_its_prompt(
    client: httpx.AsyncClient,
) -> None:
    bad = b"pillar,external_id,prompt,content\ncsv-e,1,,\n"
    r = await client.post("/api/threads/import", files={"file": ("t.csv", bad)})
    assert r.status_code == 422
    assert [(e["line"], e["field"]) for e in r.json()["detail"]["errors"]] == [(2, "content")]
    good = b"pillar,external_id,prompt_key,prompt,content\ncsv-e,1,k-csv,Say hi,\n"
    r = await client.post("/api/threads/import", files={"file": ("t.csv", good)})
    assert r.status_code == 200, r.text
    listed = (await client.get("/api/threads", params={"q": "k-csv"})).json()["items"]
    one = (await client.get(f"/api/threads/{listed[0]['id']}")).json()
    assert (one["content"], one["prompt"]) == ("", "Say hi")


async def test_judgment_import_label_errors_store_nothing(
    client: httpx.AsyncClient, threads: dict[str, int], db: Any
) -> None:
    a, b = threads["left/q0"], threads["right/q0"]
    sessions_before = await db.scalar(select(func.count()).select_from(JudgeSession))
    cases = [
        # the swapped row repeats the label the other way round: fine; a third disagrees
        (
            [
                {"thread_a": a, "thread_b": b, "verdict": "A", "label": "A"},
                {"thread_a": b, "thread_b": a, "verdict": "B", "label": "B"},
                {"thread_a": a, "thread_b": b, "verdict": "A", "label": "B", "repetition": 1},
            ],
            (3, "label", "differs from line 1"),
        ),
        (
            [{"thread_a": a, "thread_b": b, "verdict": "A", "label": "left"}],
            (1, "label", "unknown label 'left'"),
        ),
        (
            [{"thread_a": a, "thread_b": b, "verdict": "A", "label": "A", "source": "oracle"}],
            (1, "source", ""),
        ),
    ]
    for rows, (line, field, needle) in cases:
        r = await client.post(
            "/api/sessions/import",
            files={"file": ("j.jsonl", jsonl(*rows))},
            data={"session_name": "bad labels"},
        )
        assert r.status_code == 422, r.text
        [error] = r.json()["detail"]["errors"]
        assert (error["line"], error["field"]) == (line, field)
        assert needle in error["message"]
    assert await count_labels(db) == 0
    assert await db.scalar(select(func.count()).select_from(JudgeSession)) == sessions_before


async def test_agreement_scores_the_stated_confidence(
    client: httpx.AsyncClient, threads: dict[str, int]
) -> None:
    """Imported judgments with stated confidences against gold labels: P(A) in the pair's
    order, Brier score and log loss by hand, bins, what is left out, and the tab's section."""
    pairs = [(threads[f"left/q{i}"], threads[f"right/q{i}"]) for i in range(3)]
    # (as written: thread_a, thread_b), verdict, confidence, gold label in that order
    rows = [
        {"thread_a": pairs[0][0], "thread_b": pairs[0][1], "verdict": "A", "confidence": 0.9,
         "label": "A"},  # P(A) 0.9, right
        {"thread_a": pairs[0][1], "thread_b": pairs[0][0], "verdict": "A", "confidence": 0.8,
         "label": "B"},  # shown swapped: P(pair's A) 0.2, wrong
        {"thread_a": pairs[1][0], "thread_b": pairs[1][1], "verdict": "B", "confidence": 0.6,
         "label": "A"},  # P(A) 0.4
        {"thread_a": pairs[1][0], "thread_b": pairs[1][1], "verdict": "A", "label": "A"},
        {"thread_a": pairs[2][0], "thread_b": pairs[2][1], "verdict": "A", "confidence": 0.7,
         "label": "TIE"},  # a tie label: no binary outcome
        {"thread_a": pairs[1][0], "thread_b": pairs[0][1], "verdict": "A",
         "confidence": 0.9},  # a pair nobody labelled: not read, counted as unlabelled
    ]  # fmt: skip
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("c.jsonl", jsonl(*rows))},
        data={"session_name": "calibration"},
    )
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    report = (await client.get(f"/api/sessions/{sid}/agreement")).json()
    assert (report["completed"], report["unlabelled"], report["labelled_pairs"]) == (6, 1, 3)
    cal = report["stated_confidence"]
    p, y = [0.9, 0.2, 0.4], [1, 1, 1]
    assert (cal["judgments"], cal["pairs"], cal["left_out"]) == (3, 2, 2)
    brier = sum((a - b) ** 2 for a, b in zip(p, y, strict=True)) / 3
    assert cal["brier"]["value"] == pytest.approx(brier) and cal["brier"]["n"] == 3
    assert cal["log_loss"]["value"] == pytest.approx(-sum(math.log(a) for a in p) / 3)
    assert cal["brier"]["low"] <= cal["brier"]["value"] <= cal["brier"]["high"]
    full = [b for b in cal["bins"] if b["n"]]
    assert [b["mean_probability"] for b in full] == pytest.approx(sorted(p))
    for b in full:
        assert b["low"] <= b["mean_probability"] <= b["high"] and b["n"] == 1
        assert b["observed"]["value"] == 1.0 and b["observed"]["n"] == 1
    page = await client.get(f"/sessions/{sid}/partials/results/agreement")
    assert 'id="confidence-figures"' in page.text and 'id="confidence-bins"' in page.text
    assert "Reliability of the stated confidence" in page.text  # the chart
    await client.delete("/api/references", params={"session_id": sid})
