"""Single-answer grading end to end: the demo graded by the simulated grader (scores per
model, a leaderboard that agrees with the pairwise one, Spearman printed), reference-guided
grading on the maths question, a fake OpenAI judge answering "[[7]]", a grade outside the
scale failing its item with the reason, and bad sessions refused with nothing stored."""

from __future__ import annotations

import csv
import re
from typing import Any

import httpx
import krippendorff
import numpy as np
import pytest
from fastapi import FastAPI
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import cohen_kappa_score
from sqlalchemy import func, select, text

from llmjudge.sessions.models import JudgeSession
from tests.fakes.servers import FakeOpenAI, FakeState
from tests.integration.test_scaleout import wait_ended


@pytest.fixture(scope="module")
async def demo(client: httpx.AsyncClient) -> dict[str, int]:
    r = await client.post("/api/demo")
    assert r.status_code == 200, r.text
    return {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}


async def _run(client: httpx.AsyncClient, app: FastAPI, body: dict[str, Any]) -> int:
    r = await client.post("/api/sessions", json={"auto_start": True, "seed": 11, **body})
    assert r.status_code in (200, 201), r.text
    sid = int(r.json()["id"])
    ended = await wait_ended(app, sid, 120)
    assert ended["status"] == "completed", ended
    return sid


async def _rows(app: FastAPI, sql: str, **params: Any) -> list[Any]:
    async with app.state.engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def test_the_demo_graded_alone_ranks_the_models_as_the_pairwise_tournament_does(
    client: httpx.AsyncClient, app: FastAPI, demo: dict[str, int]
) -> None:
    pillars = list(demo.values())
    common = {"pillar_ids": pillars, "worker_count": 16}
    single = await _run(
        client,
        app,
        common
        | {"session_name": "demo graded", "comparison_mode": "single", "repetitions_per_pair": 2},
    )
    pairwise = await _run(
        client,
        app,
        common
        | {
            "session_name": "demo pairs",
            "comparison_mode": "round_robin",
            "match_by_prompt_key": True,
        },
    )
    session = (await client.get(f"/api/sessions/{single}")).json()
    assert session["total"] == 60 * 2 and session["completed"] == 120  # 60 threads x 2

    scores = (await client.get(f"/api/sessions/{single}/scores")).json()
    assert (scores["kind"], scores["scale_min"], scores["scale_max"]) == ("score", 1, 10)
    assert scores["grades"] == 120 and len(scores["threads"]) == 60
    by_name = {p["pillar_name"]: p for p in scores["pillars"]}
    assert set(by_name) == set(demo)
    for p in scores["pillars"]:  # 10 threads each, a t interval around the mean
        assert p["n"] == 10 and p["grades"] == 20
        assert p["low"] < p["mean"] < p["high"]
        assert 1 <= p["mean"] <= 10
    assert sum(sum(b["counts"].values()) for b in scores["distribution"]) == 120
    # 10 prompts x C(6, 2) pillar pairs
    assert scores["derived_pairs"] == 150 and scores["unkeyed_threads"] == 0
    assert scores["agreement"] is None  # the demo has no reference grades

    graded_board = (await client.get(f"/api/sessions/{single}/thread-leaderboard")).json()
    assert graded_board["outcome_count"] == 150
    pair_board = (await client.get(f"/api/sessions/{pairwise}/thread-leaderboard")).json()
    pair_score = {p["name"]: p["bt_score"] for p in pair_board["pillar_aggregates"]}
    names = sorted(demo)
    rho = spearmanr([by_name[n]["mean"] for n in names], [pair_score[n] for n in names]).statistic
    print(
        "\nsingle-answer grading vs pairwise leaderboard on the demo (simulated judge, both "
        f"reading the same latent quality through independent noise): Spearman {rho:.3f}\n"
        + "\n".join(
            f"  {n:18} mean grade {by_name[n]['mean']:.2f} "
            f"[{by_name[n]['low']:.2f} to {by_name[n]['high']:.2f}]  "
            f"pairwise BT {pair_score[n]:.0f}"
            for n in sorted(names, key=lambda n: -by_name[n]["mean"])
        )
    )
    assert rho >= 0.8
    # the derived preferences feed the usual leaderboard: the same order again
    graded_score = {p["name"]: p["bt_score"] for p in graded_board["pillar_aggregates"]}
    assert (
        spearmanr([graded_score[n] for n in names], [by_name[n]["mean"] for n in names]).statistic
        >= 0.8
    )

    # each item's own grade, and its member-0 vote, are stored
    rows = await _rows(
        app,
        "SELECT c.score, c.thread_b_id, c.winner, v.status, v.score FROM comparisons c "
        "JOIN comparison_votes v ON v.comparison_id = c.id WHERE c.session_id = :s",
        s=single,
    )
    assert len(rows) == 120
    assert all(b is None and w is None and st == "voted" and vs == s for s, b, w, st, vs in rows)
    assert all(float(s).is_integer() and 1 <= s <= 10 for s, *_ in rows)

    # a pairwise session has no grades
    r = await client.get(f"/api/sessions/{pairwise}/scores")
    assert r.status_code == 409 and "no grades" in r.json()["detail"]


async def _openai_model(client: httpx.AsyncClient, base_url: str, name: str) -> int:
    provider = (
        await client.post(
            "/api/providers",
            json={"name": name, "kind": "openai", "base_url": base_url, "api_key": "test-key"},
        )
    ).json()
    body = {"provider_id": provider["id"], "name": name, "model": name}
    return int((await client.post("/api/models", json=body)).json()["id"])


def _user_text(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")


async def test_a_real_protocol_grader_reads_references_and_fails_grades_off_the_scale(
    client: httpx.AsyncClient, app: FastAPI, demo: dict[str, int]
) -> None:
    def reply(body: dict[str, Any]) -> str:
        text = _user_text(body)
        # one thread (gpt-4's Hawaii post) is graded off the scale, every time
        if "A Cultural and Natural Paradise Awaits" in text:
            return "An excellent post, beyond measure. Rating: [[11]]"
        return "Clear and mostly correct. Rating: [[7]]"

    state = FakeState(responder=reply)
    async with FakeOpenAI(state) as fake:
        model = await _openai_model(client, fake.base_url, "grader-7")
        sid = await _run(
            client,
            app,
            {
                "session_name": "graded by a fake",
                "comparison_mode": "single",
                "pillar_ids": [demo["gpt-4"], demo["llama-13b"]],
                "judge_model_id": model,
            },
        )
    prompts = [_user_text(r.body) for r in state.requests if r.path.endswith("/completions")]
    maths = [p for p in prompts if "(0, 0), (-1, 1), and (3, 3)" in p]
    assert len(maths) == 2  # Q111 for both models, once each
    for p in maths:  # reference-guided: MT-Bench's maths prompt with the reference
        assert "<<<REFERENCE>>>" in p and "5*pi" in p and "comparing the assistant" in p
    others = [p for p in prompts if p not in maths and "REFERENCE" in p]
    assert len(others) == 2  # Q101 (reasoning) has a reference too; no other question
    assert all("overtake" in p for p in others)

    rows = await _rows(
        app,
        "SELECT c.status, c.score, c.parse_error, c.attempts, t.external_id "
        "FROM comparisons c JOIN threads t ON t.id = c.thread_a_id WHERE c.session_id = :s",
        s=sid,
    )
    assert len(rows) == 20
    failed = [r for r in rows if r[0] == "failed"]
    assert [r[4] for r in failed] == ["mtbench-81-gpt-4"]
    status, score, reason, attempts, _ = failed[0]
    assert score is None and attempts == 3  # asked again, never clipped to 10
    assert reason == "score 11 is outside the scale 1 to 10"
    assert all(r[1] == 7.0 for r in rows if r[0] == "completed")
    scores = (await client.get(f"/api/sessions/{sid}/scores")).json()
    assert scores["grades"] == 19 and scores["failed"] == 1
    assert all(p["mean"] == 7.0 for p in scores["pillars"])


async def test_a_reference_grade_in_metadata_is_scored_against(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    rows = [
        {
            "pillar": f"ref-{p}",
            "external_id": str(k),
            "prompt_key": f"r{k}",
            "content": f"answer {p} {k}",
            "metadata": {"quality": q + 0.3 * k, "reference_score": 5.5 + 1.5 * (q + 0.3 * k)},
        }
        for p, q in (("good", 1.5), ("poor", -1.5))
        for k in range(6)
    ]
    import json

    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("ref.jsonl", body)})
    assert r.status_code == 200, r.text
    ids = [p["id"] for p in (await client.get("/api/pillars")).json() if p["name"][:4] == "ref-"]
    sid = await _run(
        client, app, {"session_name": "refs", "comparison_mode": "single", "pillar_ids": ids}
    )
    agreement = (await client.get(f"/api/sessions/{sid}/scores")).json()["agreement"]
    assert agreement["n"] == 12 and agreement["reference_key"] == "reference_score"
    for name in ("spearman", "pearson", "qwk"):
        low, high = agreement["intervals"][name]["low"], agreement["intervals"][name]["high"]
        assert low <= agreement[name] <= high
    assert agreement["spearman"] > 0.5 and agreement["mae"] < 2


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"verdict_format": "tags"}, "must be score or likert"),
        ({"verdict_format": {"kind": "score", "scale": [10, 1]}}, "min < max"),
        ({"verdict_format": {"kind": "score", "pattern": "Score: \\d+"}}, "captures the number"),
        ({"verdict_format": {"kind": "score", "on_unparsed": "tie"}}, "on_unparsed must be fail"),
        ({"prompt_template": "{thread_a} vs {thread_b}"}, "unknown placeholder"),
        ({"comparison_mode": "round_robin", "verdict_format": "score"}, "grades single threads"),
    ],
)
async def test_bad_grading_sessions_are_refused_with_nothing_stored(
    client: httpx.AsyncClient,
    app: FastAPI,
    demo: dict[str, int],
    extra: dict[str, Any],
    says: str,
) -> None:
    async with app.state.sessionmaker() as db:
        before = await db.scalar(select(func.count()).select_from(JudgeSession))
    body = {"session_name": "bad", "comparison_mode": "single", "pillar_ids": list(demo.values())}
    r = await client.post("/api/sessions", json=body | extra)
    assert r.status_code == 422, r.text
    assert re.search(re.escape(says), r.text), r.text
    async with app.state.sessionmaker() as db:
        assert await db.scalar(select(func.count()).select_from(JudgeSession)) == before


async def test_every_page_and_figure_of_a_grading_session_answers(
    client: httpx.AsyncClient, app: FastAPI, demo: dict[str, int]
) -> None:
    sid = await _run(
        client,
        app,
        {
            "session_name": "graded pages",
            "comparison_mode": "single",
            "pillar_ids": [demo["gpt-4"], demo["alpaca-13b"]],
            "verdict_format": "likert",
        },
    )
    page = await client.get(f"/sessions/{sid}/results?tab=scores")
    assert page.status_code == 200, page.text
    assert 'id="scores-pillars"' in page.text and "Per criterion" in page.text
    # the simulator's note says what its grades rest on
    assert "each grade is that quality placed on the scale" in page.text
    assert ">Position bias<" not in page.text  # pairs-only tabs are not offered
    for tab in (
        "overview",
        "leaderboard",
        "distribution",
        "matrix",
        "performance",
        "findings",
        "style",
        "categories",
        "scores",
    ):
        r = await client.get(f"/sessions/{sid}/partials/results/{tab}")
        assert r.status_code == 200, (tab, r.text[:500])
        assert "cannot be computed" not in r.text, (tab, r.text[:2000])
    items = (await client.get(f"/api/sessions/{sid}/comparisons?limit=50")).json()["items"]
    assert len(items) == 20 and all(i["thread_b_id"] is None for i in items)
    assert all(1 <= i["score"] <= 5 and set(i["scores_a"]) for i in items)
    one = items[0]
    detail = (await client.get(f"/api/sessions/{sid}/comparisons/{one['id']}")).json()
    assert detail["votes"] == [] or detail["votes"][0]["score"] == one["score"]
    export = await client.get(f"/api/sessions/{sid}/export?format=csv")
    table = list(csv.DictReader(line for line in export.text.splitlines() if line[:1] != "#"))
    assert len(table) == 20 and all(1 <= float(row["grade"]) <= 5 for row in table)
    assert all(row["thread_b_id"] == "" for row in table)
    for url in (
        f"/sessions/{sid}",
        f"/sessions/{sid}/comparisons",
        f"/sessions/{sid}/comparisons/{one['id']}",
        f"/threads/{one['thread_a_id']}/comparisons",
        f"/api/sessions/{sid}/export?format=csv",
        f"/api/sessions/{sid}/estimate",
        f"/api/sessions/{sid}/agreement",
        f"/sessions/{sid}/review",
    ):
        r = await client.get(url)
        assert r.status_code == 200, (url, r.text[:1000])


async def test_the_form_offers_single_answer_grading_and_makes_it(
    client: httpx.AsyncClient, app: FastAPI, demo: dict[str, int]
) -> None:
    page = await client.get("/sessions/new")
    assert page.status_code == 200
    assert 'value="single"' in page.text and 'id="single-grading-why"' in page.text
    form = {
        "session_name": "graded from the form",
        "pillar_ids": [str(demo["gpt-4"]), str(demo["llama-13b"])],
        "comparison_mode": "single",
        "repetitions_per_pair": "3",
        "position_swap": "1",
        "match_by_prompt_key": "1",
    }
    estimate = await client.post(
        "/sessions/new/estimate", data=form, headers={"HX-Request": "true"}
    )
    assert estimate.status_code == 200 and "60" in estimate.text  # 20 threads x 3
    r = await client.post("/sessions/new", data=form, headers={"HX-Request": "true"})
    assert r.status_code in (200, 204, 303), r.text
    made = [
        s for s in (await client.get("/api/sessions")).json() if s["name"] == "graded from the form"
    ]
    assert len(made) == 1 and made[0]["comparison_mode"] == "single" and made[0]["total"] == 60


async def test_a_panel_of_graders_stores_each_grade_and_their_median(
    client: httpx.AsyncClient, app: FastAPI, demo: dict[str, int]
) -> None:
    judge = next(
        m["id"] for m in (await client.get("/api/models")).json() if m["name"] == "simulated-judge"
    )
    body = {
        "session_name": "graded by a panel",
        "comparison_mode": "single",
        "pillar_ids": [demo["gpt-4"], demo["vicuna-13b-v1.3"]],
        "panel": {"members": [{"model_id": judge}] * 3, "rule": "median"},
    }
    estimate = (await client.post("/api/sessions/estimate", json=body)).json()
    assert (estimate["total_comparisons"], estimate["panel_members"]) == (20, 3)
    bad = await client.post(
        "/api/sessions", json=body | {"panel": body["panel"] | {"rule": "majority"}}
    )
    assert bad.status_code == 422 and "mean or median" in bad.text
    sid = await _run(client, app, body)
    rows = await _rows(
        app,
        "SELECT c.score, array_agg(v.score ORDER BY v.member), c.votes_cast "
        "FROM comparisons c JOIN comparison_votes v ON v.comparison_id = c.id "
        "WHERE c.session_id = :s GROUP BY c.id",
        s=sid,
    )
    assert len(rows) == 20
    for score, members, cast in rows:
        assert cast == 3 and len(members) == 3 and score == sorted(members)[1]
    assert any(len(set(m)) > 1 for _, m, _ in rows)  # members graded independently
    report = await client.get(f"/api/sessions/{sid}/panel")
    assert report.status_code == 200, report.text
    found = report.json()
    assert (found["kind"], found["rule"], found["items"], found["comparisons"]) == (
        "grades",
        "median",
        20,
        20,
    )
    await _check_against_the_stored_votes(app, sid, found)
    # a median of whole grades is a whole grade: kappa against the panel is defined
    assert all(m["agreement_with_panel"]["qwk"]["value"] is not None for m in found["members"])
    # 20 items: just enough to look for a lenient grader; three equal judges give none
    assert found["deviation"]["member"] is None, found["deviation"]
    tab = await client.get(f"/sessions/{sid}/partials/results/panel")
    assert tab.status_code == 200, tab.text[:500]
    assert 'id="graders-members"' in tab.text and "Krippendorff" in tab.text


async def _check_against_the_stored_votes(app: FastAPI, sid: int, found: dict[str, Any]) -> None:
    """The report's per-member figures equal scipy's, scikit-learn's and krippendorff's on
    the stored votes: each member's grade of a thread (mean of its repetitions) against the
    panel's grade of it (the mean of the comparisons' grades)."""
    votes = await _rows(
        app,
        "SELECT c.thread_a_id, v.member, avg(v.score) FROM comparisons c "
        "JOIN comparison_votes v ON v.comparison_id = c.id WHERE c.session_id = :s "
        "AND c.status = 'completed' AND v.status = 'voted' GROUP BY c.thread_a_id, v.member",
        s=sid,
    )
    panel_rows = await _rows(
        app,
        "SELECT thread_a_id, avg(score) FROM comparisons WHERE session_id = :s "
        "AND status = 'completed' GROUP BY thread_a_id ORDER BY thread_a_id",
        s=sid,
    )
    threads = [t for t, _ in panel_rows]
    panel = np.array([g for _, g in panel_rows], dtype=float)
    m = len(found["members"])
    grades = np.full((len(threads), m), np.nan)
    row = {t: i for i, t in enumerate(threads)}
    for t, k, g in votes:
        grades[row[t], k] = g
    whole = bool(np.all(panel == np.rint(panel)))
    for k, member in enumerate(found["members"]):
        own = grades[:, k]
        assert member["items"] == int((~np.isnan(own)).sum())
        assert member["mean_grade"]["mean"] == pytest.approx(np.nanmean(own))
        versus = member["agreement_with_panel"]
        assert versus["n"] == versus["spearman"]["n"] == member["items"]
        assert versus["spearman"]["value"] == pytest.approx(spearmanr(own, panel).statistic)
        assert versus["pearson"]["value"] == pytest.approx(pearsonr(own, panel).statistic)
        assert versus["mean_abs_difference"]["value"] == pytest.approx(np.abs(own - panel).mean())
        if whole:
            assert versus["qwk"]["value"] == pytest.approx(
                cohen_kappa_score(own.astype(int), panel.astype(int), weights="quadratic")
            )
        else:
            assert versus["qwk"]["value"] is None
        for figure in ("spearman", "pearson", "mean_abs_difference"):
            e = versus[figure]
            assert e["low"] is not None and e["low"] <= e["value"] <= e["high"], (figure, e)
        assert member["offset"]["mean"] == pytest.approx(np.mean(own - panel))
        assert member["offset"]["n"] == member["items"]
    for pair in found["pairs"]:
        a, b = grades[:, pair["first"]], grades[:, pair["second"]]
        got = pair["agreement"]
        assert got["spearman"]["value"] == pytest.approx(spearmanr(a, b).statistic)
        assert got["mean_abs_difference"]["value"] == pytest.approx(np.abs(a - b).mean())
        assert got["qwk"]["value"] == pytest.approx(
            cohen_kappa_score(a.astype(int), b.astype(int), weights="quadratic")
        )
    assert len(found["pairs"]) == m * (m - 1) // 2
    alpha = found["alpha"]
    assert alpha["n"] == len(threads)
    assert alpha["value"] == pytest.approx(
        krippendorff.alpha(reliability_data=grades.T, level_of_measurement="interval")
    )
    assert alpha["low"] < alpha["value"] <= alpha["high"]


async def test_a_panel_of_graders_names_its_lenient_member(
    client: httpx.AsyncClient, app: FastAPI, demo: dict[str, int]
) -> None:
    """Three simulated graders, one of them lenient by two scale points (a planted offset
    the report does not know of), grading the demo's 60 threads; the panel's grade is the
    members' mean."""
    provider = await client.post(
        "/api/providers",
        json={"name": "lenient-sim", "kind": "simulator", "settings": {"score_bias": 2.0}},
    )
    assert provider.status_code in (200, 201), provider.text
    lenient = await client.post(
        "/api/models",
        json={"provider_id": provider.json()["id"], "name": "lenient <grader>", "model": "judge"},
    )
    judge = next(
        m["id"] for m in (await client.get("/api/models")).json() if m["name"] == "simulated-judge"
    )
    assert lenient.status_code in (200, 201), lenient.text
    members = [{"model_id": judge}, {"model_id": lenient.json()["id"]}, {"model_id": judge}]
    sid = await _run(
        client,
        app,
        {
            "session_name": "a lenient grader",
            "comparison_mode": "single",
            "pillar_ids": list(demo.values()),
            "panel": {"members": members, "rule": "mean"},
            "worker_count": 16,
        },
    )
    found = (await client.get(f"/api/sessions/{sid}/panel")).json()
    assert found["kind"] == "grades" and found["items"] == 60
    await _check_against_the_stored_votes(app, sid, found)
    assert found["deviation"]["member"] == 1, found["deviation"]
    assert "lenient" in found["deviation"]["statement"]
    offset = found["members"][1]["offset"]
    assert offset["low"] > 0 and offset["n"] == 60
    # a mean of three grades is not a whole point: no kappa against the panel
    assert all(m["agreement_with_panel"]["qwk"]["value"] is None for m in found["members"])
    print(
        f"\nlenient grader planted at +2 points, panel mean of three: offset "
        f"{offset['mean']:+.2f} [{offset['low']:+.2f}, {offset['high']:+.2f}] over "
        f"{offset['n']} threads; Krippendorff's alpha {found['alpha']['value']:.3f} "
        f"[{found['alpha']['low']:.3f}, {found['alpha']['high']:.3f}]"
    )
    page = await client.get(f"/sessions/{sid}/results?tab=panel")
    assert page.status_code == 200, page.text[:500]
    assert "lenient &lt;grader&gt;" in page.text and "lenient <grader>" not in page.text
    assert 'id="graders-deviation"' in page.text and "lenient" in page.text
    assert f"{offset['mean']:+.2f}" in page.text and "n=60" in page.text


async def test_a_panel_of_graders_with_nothing_graded_reports_nothing_and_claims_nothing(
    client: httpx.AsyncClient, demo: dict[str, int]
) -> None:
    judge = next(
        m["id"] for m in (await client.get("/api/models")).json() if m["name"] == "simulated-judge"
    )
    r = await client.post(
        "/api/sessions",
        json={
            "session_name": "graders not started",
            "comparison_mode": "single",
            "pillar_ids": [demo["gpt-4"], demo["llama-13b"]],
            "panel": {"members": [{"model_id": judge}] * 2, "rule": "mean"},
        },
    )
    assert r.status_code in (200, 201), r.text
    sid = r.json()["id"]
    found = (await client.get(f"/api/sessions/{sid}/panel")).json()
    assert (found["kind"], found["items"], found["comparisons"]) == ("grades", 0, 0)
    assert found["alpha"] == {"value": None, "n": 0, "low": None, "high": None}
    assert [m["items"] for m in found["members"]] == [0, 0]
    assert found["members"][0]["agreement_with_panel"]["spearman"]["value"] is None
    assert found["deviation"]["member"] is None
    assert "needs 20 items" in found["deviation"]["statement"]
    tab = await client.get(f"/sessions/{sid}/partials/results/panel")
    assert tab.status_code == 200 and 'id="results-empty"' in tab.text
