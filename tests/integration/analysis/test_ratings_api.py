"""Ranking rigor over the API and the results page, on an imported session with planted
outcomes: three pillars answer the same 12 questions (MT-Bench-like: a `category` and a
numeric `quality` in each thread's metadata); every cross-pillar pair of answers to one
question is judged three times, each in both orders (the swap twin repeats the verdict,
so twins are perfectly correlated). All pillars are equally good; the judge prefers the
longer answer (planted length effect), and the "long" pillar writes the longest answers.
Some decided verdicts are marked strong (comparisons.strength = 2).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import httpx
import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import kendalltau, spearmanr
from sqlalchemy import select, update

from llmjudge.catalog.models import Thread
from llmjudge.core.analysis.outcomes import OutcomeTable
from llmjudge.core.ratings.intervals import comparison_clusters
from llmjudge.core.ratings.style import (
    STYLE_FEATURES,
    answer_features,
    pair_style_covariates,
    stored_features,
    style_control,
)
from llmjudge.core.ratings.ties import fit_davidson
from llmjudge.sessions.models import Comparison

PILLARS = ("rr-long", "rr-mid", "rr-short")
QUESTIONS = 12
REPS = 3
LENGTH_EFFECT = 3.0  # logit per unit of (len_a - len_b) / (len_a + len_b)


def _answer(rng: np.random.Generator, pillar: str, q: int) -> str:
    words = {"rr-long": (150, 320), "rr-mid": (60, 200), "rr-short": (10, 90)}[pillar]
    n = int(rng.integers(*words))
    body = " ".join(f"word{(q * 7 + i) % 31}" for i in range(n))
    if pillar == "rr-long" and q % 2 == 0:
        body = f"## Answer\n\n- **first** point\n- second point\n\n{body}"
    return body


def _catalog_rows() -> list[dict[str, Any]]:
    rng = np.random.default_rng(11)
    return [
        {
            "pillar": p,
            "external_id": f"q{q}",
            "title": f"Q{q} by {p}",
            "content": [
                {"role": "user", "content": f"Question {q}?"},
                {"role": "assistant", "content": _answer(rng, p, q)},
            ],
            "metadata": {
                "category": "writing" if q < QUESTIONS // 2 else "math",
                "quality": float(q % 5) + (0.5 if p == "rr-long" else 0.0),
                "note": "free text",
            },
        }
        for p in PILLARS
        for q in range(QUESTIONS)
    ]


def _planted_lines(ids: dict[tuple[str, int], int], lengths: dict[int, int]) -> list[dict]:
    """Every cross-pillar pair of answers to one question, and of answers to a question
    and the next (so the threads form one connected tournament), REPS times, both orders
    (twin = same verdict); P(A wins) from the planted length effect, 15% ties."""
    rng = np.random.default_rng(5)
    lines = []
    for a, b in _pairs(ids):
        la, lb = lengths[a], lengths[b]
        for rep in range(REPS):
            if rng.random() < 0.15:
                verdict = "TIE"
            else:
                verdict = (
                    "A" if rng.random() < expit(LENGTH_EFFECT * (la - lb) / (la + lb)) else "B"
                )
            swapped = {"A": "B", "B": "A", "TIE": "TIE"}[verdict]
            lines.append({"thread_a": a, "thread_b": b, "verdict": verdict, "repetition": rep})
            lines.append({"thread_a": b, "thread_b": a, "verdict": swapped, "repetition": rep})
    return lines


def _pairs(ids: dict[tuple[str, int], int]) -> list[tuple[int, int]]:
    out = []
    for q in range(QUESTIONS):
        for i, p in enumerate(PILLARS):
            out += [(ids[(p, q)], ids[(r, q)]) for r in PILLARS[i + 1 :]]
        nxt = (q + 1) % QUESTIONS
        out += [(ids[(p, q)], ids[(r, nxt)]) for p in PILLARS for r in PILLARS if p != r]
    return out


PAIRS = QUESTIONS * (3 + 6)


def finite_json(r: httpx.Response) -> Any:
    assert r.status_code == 200, r.text

    def refuse(token: str) -> None:
        raise AssertionError(f"non-finite number {token} in the response")

    return json.loads(r.text, parse_constant=refuse)


@pytest.fixture(scope="module")
async def planted(client: httpx.AsyncClient, app: Any) -> dict[str, Any]:
    rows = _catalog_rows()
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    items = (await client.get("/api/threads", params={"limit": 500})).json()["items"]
    ids = {
        (t["pillar_name"], int(t["external_id"][1:])): t["id"]
        for t in items
        if t["pillar_name"] in PILLARS
    }
    pillar_ids = {t["pillar_name"]: t["pillar_id"] for t in items if t["pillar_name"] in PILLARS}
    texts = {
        ids[(r["pillar"], int(r["external_id"][1:]))]: r["content"][1]["content"] for r in rows
    }
    lengths = {t: len(text) for t, text in texts.items()}
    lines = _planted_lines(ids, lengths)
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", "\n".join(json.dumps(x) for x in lines).encode())},
        data={"session_name": "planted"},
    )
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    # strong verdicts: a decided verdict where the winner's answer is over twice as long
    strong = [
        i
        for i, x in enumerate(lines)
        if x["verdict"] != "TIE"
        and (
            lengths[x["thread_a"]] > 2 * lengths[x["thread_b"]]
            if x["verdict"] == "A"
            else lengths[x["thread_b"]] > 2 * lengths[x["thread_a"]]
        )
    ]
    async with app.state.sessionmaker() as db:
        await db.execute(
            update(Comparison)
            .where(Comparison.session_id == sid, Comparison.winner != "TIE")
            .values(strength=1)
        )
        await db.execute(
            update(Comparison)
            .where(Comparison.session_id == sid, Comparison.queue_position.in_(strong))
            .values(strength=2)
        )
        await db.commit()
    return {
        "sid": sid,
        "ids": ids,
        "pillar_ids": pillar_ids,
        "texts": texts,
        "lines": lines,
        "strong": strong,
        "rows": rows,
    }


def _table(lines: list[dict]) -> OutcomeTable:
    score = {"A": 1.0, "B": 0.0, "TIE": 0.5}
    return OutcomeTable.from_columns(
        comparison_id=np.arange(len(lines)),
        thread_a=[x["thread_a"] for x in lines],
        thread_b=[x["thread_b"] for x in lines],
        score_a=[score[x["verdict"]] for x in lines],
        completed_order=np.zeros(len(lines)),
    )


async def board(client: httpx.AsyncClient, sid: int, **params: Any) -> dict[str, Any]:
    return finite_json(await client.get(f"/api/sessions/{sid}/thread-leaderboard", params=params))


# -- stored per thread, per comparison --------------------------------------------------


async def test_style_features_are_stored_at_import(app: Any, planted: dict[str, Any]) -> None:
    async with app.state.sessionmaker() as db:
        stored = dict(
            (
                await db.execute(
                    select(Thread.id, Thread.style_features).where(
                        Thread.id.in_(list(planted["texts"]))
                    )
                )
            ).all()
        )
    for t, text in planted["texts"].items():
        expected = answer_features([text])[0]  # the assistant turn, not the question
        assert stored[t] == pytest.approx(expected.tolist(), rel=1e-12)
    headed = next(r for r in planted["rows"] if r["pillar"] == "rr-long")
    assert stored_features(headed["content"])[1] > 0  # "## Answer" counts as a header


async def test_strength_is_read_into_the_outcomes(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    body = await board(client, planted["sid"], bootstrap_rounds=0)
    assert body["method"]["strong_verdicts"] == len(planted["strong"]) > 0
    assert body["method"]["strong_weight"] == 1.0  # off by default


# -- the leaderboard ----------------------------------------------------------------------


async def test_default_leaderboard_says_how_it_was_made(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    body = await board(client, planted["sid"])
    m = body["method"]
    assert (m["level"], m["interval"], m["clusters"], m["tie_model"]) == (
        0.95,
        "bootstrap",
        "pair",
        "half",
    )
    assert m["bootstrap_rounds"] == 200 and m["base"] == 1500 and m["baseline_id"] is None
    # one cluster per pair of threads
    assert m["cluster_count"] == PAIRS
    assert body["confidence_level"] == 0.95
    entries = body["entries"]
    scores = [e["bt_score"] for e in entries]
    assert np.mean(scores) == pytest.approx(1500.0)  # the mean thread is the anchor
    # sorted by rank, then by score within a rank
    keys = [(e["rank"], -e["bt_score"]) for e in entries]
    assert keys == sorted(keys)
    for e in entries:
        assert e["bt_ci_low"] <= e["bt_score"] <= e["bt_ci_high"]
        assert 1 <= e["rank_low"] <= e["rank_high"] <= len(entries)
        assert 0 <= e["rank_held"] <= 1
        assert e["elo_score"] is not None  # the sequential Elo stays, as its own column
    q = body["quality"]
    assert q["pairs"] == len(entries) * (len(entries) - 1) // 2
    assert 0 <= q["separable_share"] <= 1 and q["separated_pairs"] <= q["pairs"]
    assert q["mean_rank_shift"] > 0
    assert "pairs of threads are separated at 95%" in q["advice"]
    pq = body["pillar_quality"]
    assert pq["pairs"] == 3
    assert body["pillar_method"]["cluster_count"] == PAIRS  # thread pairs, not pillar pairs


async def test_anchor_on_a_baseline_thread_or_pillar_at_1000(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    sid, base_thread = planted["sid"], planted["ids"][("rr-mid", 3)]
    mean = await board(client, sid)
    anchored = await board(client, sid, elo_base=1000, baseline_thread=base_thread)
    assert anchored["method"]["base"] == 1000 and anchored["method"]["baseline_id"] == base_thread
    by = {e["thread_id"]: e for e in anchored["entries"]}
    assert by[base_thread]["bt_score"] == pytest.approx(1000.0)
    # the reference has no uncertainty of its own: a zero-width interval
    assert by[base_thread]["bt_ci_low"] == pytest.approx(by[base_thread]["bt_ci_high"])
    # anchoring shifts every score by one constant: differences are unchanged
    before = {e["thread_id"]: e["bt_score"] for e in mean["entries"]}
    shift = {round(by[t]["bt_score"] - s, 6) for t, s in before.items()}
    assert max(shift) - min(shift) < 1e-6
    pillar = planted["pillar_ids"]["rr-short"]
    at_pillar = await board(client, sid, elo_base=1000, baseline_pillar=pillar)
    rows = {p["pillar_id"]: p for p in at_pillar["pillar_aggregates"]}
    assert rows[pillar]["bt_score"] == pytest.approx(1000.0)
    assert at_pillar["pillar_method"]["baseline_id"] == pillar
    # a baseline that did not play, and empty means "the mean" (a form's first choice)
    r = await client.get(
        f"/api/sessions/{sid}/thread-leaderboard", params={"baseline_thread": 2**31 - 2}
    )
    assert r.status_code == 422 and "baseline" in r.json()["detail"]
    empty = await board(client, sid, baseline_thread="", bootstrap_rounds=0)
    assert empty["method"]["baseline_id"] is None


async def test_cluster_bootstrap_is_wider_than_iid_on_correlated_twins(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    sid = planted["sid"]

    def mean_width(body: dict[str, Any]) -> float:
        return float(np.mean([e["bt_ci_high"] - e["bt_ci_low"] for e in body["entries"]]))

    pair = await board(client, sid, clusters="pair")
    swap = await board(client, sid, clusters="swap")
    iid = await board(client, sid, clusters="none")
    assert iid["method"]["clusters"] == "none" and iid["method"]["cluster_count"] == len(
        planted["lines"]
    )
    assert swap["method"]["cluster_count"] == len(planted["lines"]) // 2
    # twins repeat each other: resampling them apart pretends to twice the evidence
    assert mean_width(iid) < 0.85 * mean_width(swap)
    assert mean_width(swap) <= mean_width(pair) * 1.1
    # the point estimates do not depend on the clustering
    scores = {e["thread_id"]: e["bt_score"] for e in iid["entries"]}
    for e in pair["entries"]:
        assert e["bt_score"] == pytest.approx(scores[e["thread_id"]])


async def test_sandwich_interval_and_the_level(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    sid = planted["sid"]
    sand = await board(client, sid, interval="sandwich")
    assert sand["method"]["interval"] == "sandwich" and sand["method"]["bootstrap_rounds"] == 0
    for e in sand["entries"]:
        assert e["bt_ci_low"] < e["bt_score"] < e["bt_ci_high"]
        assert e["rank_low"] is None  # rank stability needs bootstrap rounds
    wide = await board(client, sid, interval="sandwich", level=0.99)
    narrow = await board(client, sid, interval="sandwich", level=0.8)
    assert narrow["confidence_level"] == 0.8
    narrow_of = {e["thread_id"]: e for e in narrow["entries"]}
    for w in wide["entries"]:
        n = narrow_of[w["thread_id"]]
        assert w["bt_ci_high"] - w["bt_ci_low"] > n["bt_ci_high"] - n["bt_ci_low"]
    for bad in ({"ties": "davidson"}, {"baseline_thread": planted["ids"][("rr-mid", 0)]}):
        r = await client.get(
            f"/api/sessions/{sid}/thread-leaderboard", params={"interval": "sandwich", **bad}
        )
        assert r.status_code == 422, r.text
        assert "sandwich" in r.json()["detail"]


async def test_davidson_ties_report_nu_with_its_interval(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    body = await board(client, planted["sid"], ties="davidson", bootstrap_rounds=20)
    m = body["method"]
    assert m["tie_model"] == "davidson"
    table = _table(planted["lines"])
    fit = fit_davidson(table.a, table.b, table.score_a, table.n_players)
    assert m["nu"] == pytest.approx(fit.nu, rel=1e-5)
    assert m["nu_low"] < m["nu"] < m["nu_high"]
    # 15% ties among evenly matched pairs: nu near 2 * 0.15 / 0.85
    assert 0.15 < m["nu"] < 0.7
    assert (await board(client, planted["sid"]))["method"]["nu"] is None


async def test_strong_verdicts_count_as_several_wins_when_asked(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    sid = planted["sid"]
    plain = await board(client, sid, bootstrap_rounds=0)
    strong = await board(client, sid, bootstrap_rounds=0, strong_weight=3)
    assert strong["method"]["strong_weight"] == 3.0
    # strong wins go to the longest answers: weighting them spreads the scores
    spread = {
        k: np.ptp([e["bt_score"] for e in body["entries"]])
        for k, body in (("plain", plain), ("strong", strong))
    }
    assert spread["strong"] > spread["plain"]
    for bad in (0.5, 11):
        r = await client.get(
            f"/api/sessions/{sid}/thread-leaderboard", params={"strong_weight": bad}
        )
        assert r.status_code == 422


async def test_query_values_are_bounded(client: httpx.AsyncClient, planted: dict[str, Any]) -> None:
    url = f"/api/sessions/{planted['sid']}/thread-leaderboard"
    for params in (
        {"level": 0.3},
        {"level": 0.999},
        {"clusters": "thread"},
        {"interval": "bca"},
        {"ties": "rao"},
        {"elo_base": 1200},
        {"baseline_pillar": "x"},
    ):
        r = await client.get(url, params=params)
        assert r.status_code == 422, params


async def test_agreement_with_a_reference(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    body = await board(
        client,
        planted["sid"],
        reference_key="quality",
        reference_ranking="rr-short, rr-mid,rr-long",
    )
    ref = body["quality"]["reference"]
    quality = {
        planted["ids"][(r["pillar"], int(r["external_id"][1:]))]: r["metadata"]["quality"]
        for r in planted["rows"]
    }
    scores = [e["bt_score"] for e in body["entries"]]
    refs = [quality[e["thread_id"]] for e in body["entries"]]
    assert ref["source"] == "quality" and ref["n"] == len(scores)
    assert ref["spearman"] == pytest.approx(spearmanr(scores, refs).statistic)
    assert ref["kendall"] == pytest.approx(kendalltau(scores, refs).statistic)
    pillar_ref = body["pillar_quality"]["reference"]
    order = [p["name"] for p in body["pillar_aggregates"]]
    expected = spearmanr(
        [-order.index(n) for n in ("rr-short", "rr-mid", "rr-long")], [0, -1, -2]
    ).statistic
    assert pillar_ref["n"] == 3 and pillar_ref["spearman"] == pytest.approx(expected)
    for params in ({"reference_key": "note"}, {"reference_ranking": "nope,rr-mid"}):
        r = await client.get(f"/api/sessions/{planted['sid']}/thread-leaderboard", params=params)
        assert r.status_code == 422


# -- style control -----------------------------------------------------------------------


async def test_style_control_finds_the_planted_length_effect(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    sid = planted["sid"]
    body = finite_json(
        await client.get(f"/api/sessions/{sid}/style", params={"bootstrap_rounds": 50})
    )
    st = body["style"]
    assert st["identified"] and st["comparisons_used"] == len(planted["lines"])
    assert "quality" in body["available_metadata"] and "note" not in body["available_metadata"]
    coef = {c["name"]: c for c in st["covariates"]}
    assert list(coef) == list(STYLE_FEATURES)
    length = coef["length"]
    assert length["identified"] and length["ci_low"] > 0  # the judge prefers longer answers
    # the same fit, computed here from the texts: the stored features are the ones used
    table = _table(planted["lines"])
    texts = planted["texts"]
    features = answer_features([texts[t] for t in table.players.tolist()])
    pillar_of = {t: p for (p, _), t in planted["ids"].items()}
    names = sorted(PILLARS)
    pa = np.array([names.index(pillar_of[int(t)]) for t in table.players[table.a]])
    pb = np.array([names.index(pillar_of[int(t)]) for t in table.players[table.b]])
    fit = style_control(
        pa,
        pb,
        table.score_a,
        3,
        pair_style_covariates(features, table.a, table.b),
        STYLE_FEATURES,
        comparison_clusters(table, "pair"),
    )
    assert length["coef"] == pytest.approx(float(fit.coef[0]), abs=1e-4)
    assert length["se"] == pytest.approx(float(fit.coef_se[0]), rel=1e-3)
    rows = {p["name"]: p for p in st["pillars"]}
    # raw: the long pillar wins on length; controlled, its lead shrinks
    assert rows["rr-long"]["raw_score"] > rows["rr-short"]["raw_score"]
    raw_gap = rows["rr-long"]["raw_score"] - rows["rr-short"]["raw_score"]
    controlled_gap = rows["rr-long"]["controlled_score"] - rows["rr-short"]["controlled_score"]
    assert controlled_gap < raw_gap
    for p in st["pillars"]:
        assert p["rank_change"] == p["raw_rank"] - p["controlled_rank"]
        assert p["controlled_ci_low"] <= p["controlled_score"] <= p["controlled_ci_high"]
    with_meta = finite_json(
        await client.get(
            f"/api/sessions/{sid}/style", params={"metadata": "quality", "bootstrap_rounds": 0}
        )
    )
    assert [c["name"] for c in with_meta["style"]["covariates"]][-1] == "meta:quality"
    r = await client.get(f"/api/sessions/{sid}/style", params={"metadata": "note"})
    assert r.status_code == 422 and "numeric" in r.json()["detail"]


async def test_style_control_says_why_when_not_identified(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    ids = planted["ids"]
    # threads of one pillar only: nothing separates style from who plays
    lines = [
        {"thread_a": ids[("rr-mid", q)], "thread_b": ids[("rr-mid", q + 1)], "verdict": "A"}
        for q in range(QUESTIONS - 1)
    ]
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", "\n".join(json.dumps(x) for x in lines).encode())},
        data={"session_name": "one pillar"},
    )
    sid = r.json()["session_id"]
    st = finite_json(await client.get(f"/api/sessions/{sid}/style"))["style"]
    assert not st["identified"] and "pillars" in st["reason"]
    assert st["covariates"] == [] and st["comparisons_skipped"] == len(lines)
    page = await client.get(f"/sessions/{sid}/results", params={"tab": "style"})
    assert page.status_code == 200 and 'id="style-not-identified"' in page.text


# -- categories ---------------------------------------------------------------------------


async def test_categories_rank_pillars_per_category(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    sid = planted["sid"]
    body = finite_json(
        await client.get(
            f"/api/sessions/{sid}/categories", params={"key": "category", "bootstrap_rounds": 30}
        )
    )
    assert {"category", "quality", "note"} <= set(body["available_keys"])
    cr = body["categories"]
    thread_pillar = {t: p for (p, _), t in planted["ids"].items()}
    category = {
        planted["ids"][(r["pillar"], int(r["external_id"][1:]))]: r["metadata"]["category"]
        for r in planted["rows"]
    }
    inside = [x for x in planted["lines"] if category[x["thread_a"]] == category[x["thread_b"]]]
    assert cr["key"] == "category"
    # pairs across the two categories (question 5 vs 6, 11 vs 0) are left out
    assert cr["comparisons_left_out"] == len(planted["lines"]) - len(inside) > 0
    assert {c["value"]: c["comparisons"] for c in cr["categories"]} == {
        v: sum(category[x["thread_a"]] == v for x in inside) for v in ("writing", "math")
    }
    # win rates by hand: each verdict counts for both sides, ties half
    points: dict[tuple[str, str], float] = {}
    games: dict[tuple[str, str], int] = {}
    for x in inside:
        s = {"A": 1.0, "B": 0.0, "TIE": 0.5}[x["verdict"]]
        cat = category[x["thread_a"]]
        for t, v in ((x["thread_a"], s), (x["thread_b"], 1 - s)):
            key = (cat, thread_pillar[t])
            points[key] = points.get(key, 0.0) + v
            games[key] = games.get(key, 0) + 1
    columns = [p["name"] for p in cr["pillars"]]
    for c, row, counts in zip(cr["categories"], cr["matrix"], cr["counts"], strict=True):
        for name, value, n in zip(columns, row, counts, strict=True):
            assert n == games[(c["value"], name)]
            assert value == pytest.approx(points[(c["value"], name)] / n)
        for p in c["pillars"]:
            assert p["win_low"] <= p["win_rate"] <= p["win_high"]
            assert p["ci_low"] <= p["score"] <= p["ci_high"]
        assert np.mean([p["score"] for p in c["pillars"]]) == pytest.approx(1500.0)
    none = finite_json(await client.get(f"/api/sessions/{sid}/categories", params={"key": "nope"}))
    assert none["categories"]["categories"] == []


# -- findings and the page ----------------------------------------------------------------


async def test_findings_name_threads_by_title(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    found = finite_json(await client.get(f"/api/sessions/{planted['sid']}/findings"))
    for f in found["findings"]:
        if f["thread_id"] is not None:
            title = found["thread_labels"][str(f["thread_id"])]["title"]
            assert f["message"].startswith(f"\u201c{title}\u201d")  # quoted, as it may be cut
            assert "Thread " not in f["message"]
        if f["kind"] in ("overperformer", "underperformer", "pillar_upset"):
            assert "interval" in f["message"]


async def test_results_page_tabs_use_the_same_options(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    sid = planted["sid"]
    page = await client.get(
        f"/sessions/{sid}/results",
        params={"tab": "leaderboard", "ties": "davidson", "strong_weight": 3, "level": 0.9},
    )
    assert page.status_code == 200
    text = page.text
    assert "Davidson" in text and "ν =" in text
    assert "count as 3 wins" in text
    assert "Score, Elo points (90% interval)" in text and "Elo (order-dependent)" in text
    assert "Tournament quality" in text and 'id="rating-options"' in text
    # sort links carry the options
    assert "ties=davidson" in text
    overview = await client.get(f"/sessions/{sid}/results")
    assert "95% interval" in overview.text and 'id="quality-pillars"' in overview.text
    style = await client.get(f"/sessions/{sid}/partials/results/style")
    assert style.status_code == 200 and 'id="style-ranking"' in style.text
    assert 'id="style-coefficients"' in style.text
    cats = await client.get(f"/sessions/{sid}/partials/results/categories")
    assert cats.status_code == 200 and "chart-multiples" in cats.text
    assert 'id="category-matrix"' in cats.text
    bad = await client.get(
        f"/sessions/{sid}/partials/results/leaderboard",
        params={"interval": "sandwich", "ties": "davidson"},
    )
    assert bad.status_code == 422 and 'id="tab-error"' in bad.text  # the API's status


async def test_page_and_api_share_one_computation_and_the_export_says_how(
    client: httpx.AsyncClient, app: Any, planted: dict[str, Any]
) -> None:
    sid = planted["sid"]
    params = {"ties": "davidson", "bootstrap_rounds": 7, "level": 0.9}
    await board(client, sid, **params)
    cache = app.state.analysis_cache
    before = cache.computed
    page = await client.get(
        f"/sessions/{sid}/partials/results/leaderboard", params={**params, "sort": "bt"}
    )
    assert page.status_code == 200 and 'id="tab-error"' not in page.text
    assert cache.computed == before  # the page read the API's cached leaderboard
    r = await client.get(
        f"/api/sessions/{sid}/export",
        params={"format": "csv", "table": "leaderboard", **params},
    )
    assert r.status_code == 200
    # The export's provenance comes first, as `#` lines; text cells are quoted.
    table = "\n".join(ln for ln in r.text.splitlines() if not ln.startswith("#"))
    row = next(csv.DictReader(io.StringIO(table)))
    assert (row["ci_level"], row["ci_method"], row["tie_model"]) == (
        "0.9",
        "bootstrap/pair",
        "davidson",
    )


async def test_imported_judgments_keep_their_strength(
    client: httpx.AsyncClient, app: Any, planted: dict[str, Any]
) -> None:
    ids = planted["ids"]
    a, b = ids[("rr-long", 0)], ids[("rr-short", 0)]
    lines = [
        {"thread_a": a, "thread_b": b, "verdict": "A", "strength": "strong"},
        {"thread_a": b, "thread_b": a, "verdict": "B", "strength": 1},
        {"thread_a": a, "thread_b": b, "judgment": "A is far better. [[A>>B]]"},
        {"thread_a": a, "thread_b": b, "judgment": "Slightly. [[A>B]]"},
        {"thread_a": a, "thread_b": b, "verdict": "TIE", "strength": "strong"},
        {"thread_a": a, "thread_b": b, "verdict": "B"},
    ]
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", "\n".join(json.dumps(x) for x in lines).encode())},
        data={"session_name": "strengths"},
    )
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    async with app.state.sessionmaker() as db:
        stored = (
            await db.execute(
                select(Comparison.strength)
                .where(Comparison.session_id == sid)
                .order_by(Comparison.queue_position)
            )
        ).scalars()
        # a tie has no strength; a verdict without one stays NULL
        assert list(stored) == [2, 1, 2, 1, None, None]
    body = await board(client, sid, bootstrap_rounds=0, strong_weight=3)
    assert body["method"]["strong_verdicts"] == 2 and body["method"]["strong_weight"] == 3
    bad = {"thread_a": a, "thread_b": b, "verdict": "A", "strength": "huge"}
    r = await client.post(
        "/api/sessions/import",
        files={"file": ("j.jsonl", json.dumps(bad).encode())},
        data={"session_name": "bad"},
    )
    assert r.status_code == 422 and "strength" in r.text


async def test_findings_link_the_thread_they_name(
    client: httpx.AsyncClient, planted: dict[str, Any]
) -> None:
    sid = planted["sid"]
    found = finite_json(await client.get(f"/api/sessions/{sid}/findings"))["findings"]
    named = [f for f in found if f["thread_id"] is not None]
    assert named
    page = await client.get(f"/sessions/{sid}/partials/results/findings")
    for f in named:
        assert f'<a href="/threads/{f["thread_id"]}" class="finding-thread">' in page.text
    assert "Thread " not in page.text.split('id="findings"')[1]
