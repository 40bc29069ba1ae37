"""Session analysis over the API, on a small session whose figures are worked out by hand.

Threads: alpha = {t1, t2}, beta = {t3, t4 (never compared)}. Completed comparisons, as
(shown A, shown B) -> verdict, with swap groups:

    g0: (t1, t3) A   | swap (t3, t1) B     consistent: t1 wins both
    g1: (t2, t3) A   | swap (t3, t2) A     primacy
    g2: (t1, t2) B   | swap (t2, t1) B     recency
    g3: (t3, t1) TIE | swap (t1, t3) TIE   consistent tie
    g4: (t2, t3) B                          single (no swap twin)

plus one pending and one failed comparison, which no figure may count.
Records: t1 6 played 3-1-2 (W-L-T), t2 5 played 2-3-0, t3 7 played 2-3-2.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.analysis.cache import AnalysisCache
from llmjudge.core.charts.scales import nice_bin_edges
from llmjudge.core.ratings.elo import elo
from llmjudge.sessions.models import Comparison, JudgeSession

HYPERLINK = '=HYPERLINK("http://evil.example","click")'
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# (group, is_swap, a, b, winner, confidence, accuracy of a, accuracy of b)
DONE = [
    (0, False, "t1", "t3", "A", 0.9, 5, 2),
    (0, True, "t3", "t1", "B", 0.9, 2, 5),
    (1, False, "t2", "t3", "A", None, None, None),
    (1, True, "t3", "t2", "A", None, None, None),
    (2, False, "t1", "t2", "B", None, None, None),
    (2, True, "t2", "t1", "B", None, None, None),
    (3, False, "t3", "t1", "TIE", None, None, None),
    (3, True, "t1", "t3", "TIE", None, None, None),
    (4, False, "t2", "t3", "B", None, None, None),
]


# No worker pool: the hand-made running session's pending comparison must stay pending.
IN_PROCESS_WORKERS = False


def split_provenance(text: str) -> tuple[dict[str, Any], str]:
    """A CSV export's leading `# key: <JSON>` block (after its intro line), and the CSV."""
    lines = text.split("\r\n")
    block = 0
    while block < len(lines) and lines[block].startswith("#"):
        block += 1
    provenance = {}
    for line in lines[1:block]:
        key, value = line[2:].split(": ", 1)
        provenance[key] = json.loads(value)
    return provenance, "\r\n".join(lines[block:])


def finite_json(r: httpx.Response) -> Any:
    """The body, refusing NaN/Infinity (not JSON)."""
    assert r.status_code == 200, r.text

    def refuse(token: str) -> None:
        raise AssertionError(f"non-finite number {token} in the response")

    return json.loads(r.text, parse_constant=refuse)


@pytest.fixture(scope="module")
async def catalog(client: httpx.AsyncClient) -> dict[str, Any]:
    rows = [
        {"pillar": "alpha", "external_id": "t1", "title": HYPERLINK, "content": "one"},
        {"pillar": "alpha", "external_id": "t2", "title": "Two", "content": "two"},
        {"pillar": "beta", "external_id": "t3", "title": "Three", "content": "three"},
        {"pillar": "beta", "external_id": "t4", "title": "Four", "content": "four"},
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    threads = (await client.get("/api/threads", params={"limit": 500})).json()["items"]
    ids = {t["external_id"]: t["id"] for t in threads}
    pillars = {t["external_id"]: t["pillar_id"] for t in threads}
    return {"ids": ids, "pillars": pillars}


async def make_session(
    db: AsyncSession, catalog: dict[str, Any], *, calculate_elo: bool = True
) -> int:
    ids, pillars = catalog["ids"], catalog["pillars"]
    s = JudgeSession(
        name="hand-made",
        status="running",
        comparison_mode="round_robin",
        pillar_ids=sorted({pillars["t1"], pillars["t3"]}),
        options={"calculate_elo": calculate_elo, "position_swap": True},
        worker_count=2,
        criteria=["accuracy"],
        total=len(DONE) + 2,
        completed=len(DONE),
        failed=1,
    )
    db.add(s)
    await db.flush()
    for i, (group, swap, a, b, winner, conf, sa, sb) in enumerate(DONE):
        db.add(
            Comparison(
                session_id=s.id,
                queue_position=i,
                thread_a_id=ids[a],
                thread_b_id=ids[b],
                pillar_a_id=pillars[a],
                pillar_b_id=pillars[b],
                swap_group=group,
                is_swap=swap,
                status="completed",
                winner=winner,
                confidence=conf,
                scores_a=None if sa is None else {"accuracy": sa},
                scores_b=None if sb is None else {"accuracy": sb},
                completed_at=T0 + timedelta(seconds=i),
                cost_usd=0.01,
                input_tokens=100,
            )
        )
    for i, status in ((len(DONE), "pending"), (len(DONE) + 1, "failed")):
        db.add(
            Comparison(
                session_id=s.id,
                queue_position=i,
                thread_a_id=ids["t1"],
                thread_b_id=ids["t2"],
                pillar_a_id=pillars["t1"],
                pillar_b_id=pillars["t2"],
                swap_group=5 + i,
                status=status,
                error="boom" if status == "failed" else None,
            )
        )
    await db.commit()
    return s.id


@pytest.fixture(scope="module")
async def sid(app: Any, catalog: dict[str, Any]) -> int:
    async with app.state.sessionmaker() as db:
        return await make_session(db, catalog)


def by_ext(entries: list[dict[str, Any]], catalog: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names = {v: k for k, v in catalog["ids"].items()}
    return {names[e["thread_id"]]: e for e in entries}


async def test_leaderboard_counts_completed_comparisons_only(
    client: httpx.AsyncClient, sid: int, catalog: dict[str, Any]
) -> None:
    body = finite_json(await client.get(f"/api/sessions/{sid}/thread-leaderboard"))
    assert body["session"]["status"] == "running"
    assert body["outcome_count"] == 9  # the pending and the failed one are not counted
    rows = by_ext(body["entries"], catalog)
    assert set(rows) == {"t1", "t2", "t3"}
    record = {k: (r["matches_played"], r["wins"], r["losses"], r["ties"]) for k, r in rows.items()}
    assert record == {"t1": (6, 3, 1, 2), "t2": (5, 2, 3, 0), "t3": (7, 2, 3, 2)}
    assert rows["t1"]["win_rate"] == pytest.approx(4 / 6)
    assert rows["t2"]["win_rate"] == pytest.approx(2 / 5)
    assert rows["t3"]["win_rate"] == pytest.approx(3 / 7)
    assert rows["t3"]["raw_win_rate"] == pytest.approx(2 / 7)
    assert rows["t1"]["avg_confidence"] == pytest.approx(0.9)
    assert rows["t2"]["avg_confidence"] is None
    assert rows["t1"]["avg_likert_scores"] == {"accuracy": 5.0}
    assert rows["t3"]["avg_likert_scores"] == {"accuracy": 2.0}
    assert rows["t2"]["avg_likert_scores"] == {"accuracy": None}
    assert rows["t1"]["thread_title"] == HYPERLINK
    assert rows["t1"]["thread_external_id"] == "t1"
    assert rows["t1"]["pillar"] == {"id": catalog["pillars"]["t1"], "name": "alpha"}
    # t1 has the best record; BT puts it first, with an interval around its score
    assert body["entries"][0]["thread_id"] == catalog["ids"]["t1"]
    for r in body["entries"]:
        assert r["bt_ci_low"] <= r["bt_score"] <= r["bt_ci_high"]
    # Elo replays the verdicts in completion order: zero-sum around 1500
    assert sum(r["elo_score"] for r in body["entries"]) == pytest.approx(4500)
    expected_elo = elo(
        [
            _outcome(i, catalog["ids"][a], catalog["ids"][b], w)
            for i, (_, _, a, b, w, *_rest) in enumerate(DONE)
        ]
    )
    for r in body["entries"]:
        assert r["elo_score"] == pytest.approx(expected_elo[r["thread_id"]])
    aggregates = {p["name"]: p for p in body["pillar_aggregates"]}
    assert aggregates["alpha"]["thread_count"] == 2
    assert aggregates["beta"]["thread_count"] == 1
    alpha_elo = [r["elo_score"] for r in body["entries"] if r["pillar"]["name"] == "alpha"]
    assert aggregates["alpha"]["avg_elo"] == pytest.approx(sum(alpha_elo) / 2)
    # alpha's threads beat beta's 3-2-2: alpha leads the pillar-level ranking
    assert body["pillar_aggregates"][0]["name"] == "alpha"
    assert aggregates["alpha"]["bt_score"] > aggregates["beta"]["bt_score"]


def _outcome(i: int, a: int, b: int, winner: str) -> Any:
    from llmjudge.core.analysis.outcomes import Outcome

    return Outcome(comparison_id=i, thread_a=a, thread_b=b, winner=winner, completed_order=i)


async def test_aggregation_choices(
    client: httpx.AsyncClient, sid: int, catalog: dict[str, Any]
) -> None:
    url = f"/api/sessions/{sid}/thread-leaderboard"
    swap = finite_json(await client.get(url, params={"aggregation": "swap_consistent"}))
    # one outcome per swap group: g0 t1 wins, g1-g3 disagree or tie -> ties, g4 t3 wins
    assert swap["outcome_count"] == 5
    rows = by_ext(swap["entries"], catalog)
    record = {k: (r["wins"], r["losses"], r["ties"]) for k, r in rows.items()}
    assert record == {"t1": (1, 0, 2), "t2": (0, 1, 2), "t3": (1, 1, 2)}
    majority = finite_json(await client.get(url, params={"aggregation": "majority"}))
    # per thread pair: (t1,t3) 2 of 4 -> tie; (t2,t3) t3 2 of 3; (t1,t2) 1-1 -> tie
    assert majority["outcome_count"] == 3
    rows = by_ext(majority["entries"], catalog)
    record = {k: (r["wins"], r["losses"], r["ties"]) for k, r in rows.items()}
    assert record == {"t1": (0, 0, 2), "t2": (0, 1, 1), "t3": (1, 0, 1)}
    r = await client.get(url, params={"aggregation": "best_of"})
    assert r.status_code == 422
    r = await client.get(url, params={"bootstrap_rounds": 2001})
    assert r.status_code == 422


async def test_pillar_matrix(client: httpx.AsyncClient, sid: int) -> None:
    body = finite_json(await client.get(f"/api/sessions/{sid}/pillar-matrix"))
    assert [p["name"] for p in body["pillars"]] == ["alpha", "beta"]
    assert body["pillars"][0]["intra_pillar_matches"] == 2  # g2
    assert body["cells"][0][0] is None and body["cells"][1][1] is None
    ab, ba = body["cells"][0][1], body["cells"][1][0]
    assert (ab["wins"], ab["losses"], ab["ties"], ab["n"]) == (3, 2, 2, 7)
    assert ab["win_rate"] == pytest.approx(4 / 7)
    assert (ba["wins"], ba["losses"], ba["ties"], ba["n"]) == (2, 3, 2, 7)
    assert ba["win_rate"] == pytest.approx(3 / 7)


async def test_position_swap_analysis(
    client: httpx.AsyncClient, sid: int, catalog: dict[str, Any]
) -> None:
    url = f"/api/sessions/{sid}/position-swap-analysis"
    body = finite_json(await client.get(url))
    summary = body["summary"]
    assert summary["total_swap_pairs"] == 4
    assert summary["consistency_rate"] == pytest.approx(0.5)
    assert (summary["consistent_wins"], summary["consistent_ties"]) == (1, 1)
    assert summary["inconsistent"] == 2
    assert summary["unpaired"] == 1  # g4 has no twin
    bias = body["position_bias"]
    assert (bias["primacy_count"], bias["recency_count"]) == (1, 1)
    assert bias["dominant_bias"] == "none"
    assert body["interpretation"]["level"] == "fair"
    assert body["interpretation"]["recommendations"]
    stability = body["likert_stability"]
    assert stability == [
        {"criterion": "accuracy", "mean_delta": 0.0, "stability_rate": 1.0, "n": 2}
    ]
    assert body["pairs_total"] == 4 and len(body["pairs"]) == 4
    classes = {p["swap_group"]: p["classification"] for p in body["pairs"]}
    assert classes == {0: "consistent", 1: "primacy", 2: "recency", 3: "consistent"}
    assert body["pairs"][0]["winner_thread"] == catalog["ids"]["t1"]
    assert str(catalog["ids"]["t1"]) in body["thread_labels"]
    page = finite_json(await client.get(url, params={"pairs_limit": 2, "pairs_offset": 3}))
    assert page["pairs_total"] == 4
    assert [p["swap_group"] for p in page["pairs"]] == [3]


async def test_thread_performance(
    client: httpx.AsyncClient, sid: int, catalog: dict[str, Any]
) -> None:
    body = finite_json(await client.get(f"/api/sessions/{sid}/thread-performance"))
    rows = by_ext(body["threads"], catalog)
    t1 = rows["t1"]
    assert (t1["usage_count"], t1["unique_opponents"]) == (6, 2)
    assert t1["performance_score"] == pytest.approx((3 - 1) / 6)
    assert t1["likert"]["accuracy"] == {
        "mean": 5.0,
        "std": 0.0,
        "count": 2,
        "is_consistent": True,
    }
    assert rows["t2"]["performance_score"] == pytest.approx(-1 / 5)
    assert body["coverage_stats"]["thread_count"] == 3
    assert body["coverage_stats"]["mean_usage"] == pytest.approx(6.0)
    coverage = {p["name"]: p for p in body["pillars"]}
    assert (coverage["alpha"]["thread_count"], coverage["alpha"]["threads_used"]) == (2, 2)
    assert coverage["alpha"]["meets_coverage_goal"] is True
    # beta has t4, never compared: half its threads used, the goal is above half
    assert (coverage["beta"]["thread_count"], coverage["beta"]["threads_used"]) == (2, 1)
    assert coverage["beta"]["sample_coverage"] == pytest.approx(0.5)
    assert coverage["beta"]["meets_coverage_goal"] is False
    assert coverage["beta"]["flags"]
    label = body["thread_labels"][str(catalog["ids"]["t3"])]
    assert (label["external_id"], label["pillar"]["name"]) == ("t3", "beta")


async def test_elo_distribution(
    client: httpx.AsyncClient, sid: int, catalog: dict[str, Any]
) -> None:
    board = finite_json(
        await client.get(f"/api/sessions/{sid}/thread-leaderboard", params={"bootstrap_rounds": 0})
    )
    elo_of = {r["thread_id"]: r["elo_score"] for r in board["entries"]}
    body = finite_json(
        await client.get(f"/api/sessions/{sid}/elo-distribution", params={"bins": 4})
    )
    assert body["score"] == "elo"
    # at most 4 bins, with round edges (a multiple of a 1/2/2.5/5 x 10^k step) covering
    # every score: 1480, 1500, ... not 1483.7
    edges = body["bin_edges"]
    assert 2 <= len(edges) <= 5
    assert edges == nice_bin_edges(list(elo_of.values()), 4).tolist()
    step = edges[1] - edges[0]
    assert step in (10.0, 20.0, 25.0, 50.0, 100.0)
    assert all(e % step == 0 for e in edges)
    assert edges[0] <= min(elo_of.values()) and max(elo_of.values()) <= edges[-1]
    alpha = next(p for p in body["pillars"] if p["name"] == "alpha")
    scores = [elo_of[catalog["ids"]["t1"]], elo_of[catalog["ids"]["t2"]]]
    assert sorted(alpha["scores"]) == pytest.approx(sorted(scores))
    assert alpha["mean"] == pytest.approx(sum(scores) / 2)
    assert alpha["std_dev"] == pytest.approx(abs(scores[0] - scores[1]) / 2)
    assert (alpha["min"], alpha["max"]) == pytest.approx((min(scores), max(scores)))
    assert sum(alpha["histogram"]) == 2


async def test_findings(client: httpx.AsyncClient, sid: int, catalog: dict[str, Any]) -> None:
    body = finite_json(await client.get(f"/api/sessions/{sid}/findings"))
    # t1 and t3 both score Likert without spread; t3 has played more
    assert [f["kind"] for f in body["findings"]] == ["most_consistent"]
    assert body["findings"][0]["thread_id"] == catalog["ids"]["t3"]
    assert body["thread_labels"][str(catalog["ids"]["t3"])]["title"] == "Three"


async def test_unknown_session_is_404(client: httpx.AsyncClient) -> None:
    for path in (
        "thread-leaderboard",
        "elo-distribution",
        "pillar-matrix",
        "thread-performance",
        "position-swap-analysis",
        "findings",
        "export",
    ):
        r = await client.get(f"/api/sessions/999999/{path}")
        assert r.status_code == 404, path
        r = await client.get(f"/api/sessions/{2**31}/{path}")  # beyond the id column's range
        assert r.status_code == 422, path


async def test_export_csv_neutralises_formulas(
    client: httpx.AsyncClient, sid: int, catalog: dict[str, Any]
) -> None:
    r = await client.get(f"/api/sessions/{sid}/export", params={"format": "csv"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    provenance, table = split_provenance(r.text)
    assert provenance["table"] == "comparisons" and provenance["session"]["id"] == sid
    rows = list(csv.DictReader(io.StringIO(table)))
    assert len(rows) == len(DONE) + 2  # every comparison, pending and failed included
    assert [row["status"] for row in rows[-2:]] == ["pending", "failed"]
    first = rows[0]
    assert first["thread_a_title"] == "'" + HYPERLINK
    assert first["pillar_a_name"] == "alpha" and first["thread_b_title"] == "Three"
    assert (first["winner"], first["winner_thread_id"]) == ("A", str(catalog["ids"]["t1"]))
    assert (first["score_a_accuracy"], first["score_b_accuracy"]) == ("5.0", "2.0")
    assert first["cost_usd"] == "0.01" and first["input_tokens"] == "100"
    assert not any(v.startswith("=") for row in rows for v in row.values())

    r = await client.get(
        f"/api/sessions/{sid}/export", params={"format": "csv", "table": "leaderboard"}
    )
    assert r.status_code == 200
    provenance, table = split_provenance(r.text)
    assert provenance["table"] == "leaderboard"
    query = provenance["query"]
    assert (query["format"], query["aggregation"], query["bootstrap_rounds"]) == ("csv", "all", 200)
    assert query["rating"]["bootstrap_rounds"] == 200 and query["rating"]["level"] == 0.95
    board = list(csv.DictReader(io.StringIO(table)))
    assert [row["rank"] for row in board][0] == "1"
    top = board[0]
    assert (top["thread_title"], top["wins"], top["likert_accuracy"]) == (
        "'" + HYPERLINK,
        "3",
        "5.0",
    )
    assert float(top["bt_ci_low"]) <= float(top["bt_score"]) <= float(top["bt_ci_high"])


async def test_export_json(client: httpx.AsyncClient, sid: int) -> None:
    r = await client.get(
        f"/api/sessions/{sid}/export", params={"format": "json", "bootstrap_rounds": 0}
    )
    body = finite_json(r)
    assert list(body)[0] == "provenance"  # the header object comes first
    assert body["session"]["id"] == sid
    assert len(body["comparisons"]) == len(DONE) + 2
    assert body["comparisons"][0]["score_a_accuracy"] == 5
    assert [e["wins"] for e in body["leaderboard"]["entries"]][0] == 3
    assert body["leaderboard"]["entries"][0]["bt_ci_low"] is None


async def test_exports_say_what_produced_them(
    client: httpx.AsyncClient, app: Any, sid: int
) -> None:
    from llmjudge import __version__
    from llmjudge.core.judging.prompts import DEFAULT_TEMPLATE

    async with app.state.sessionmaker() as db:
        c = (
            (
                await db.execute(
                    select(Comparison)
                    .where(Comparison.session_id == sid)
                    .order_by(Comparison.queue_position)
                )
            )
            .scalars()
            .first()
        )
        assert c is not None
        raw, c.raw_response = c.raw_response, '{"winner": "A"}\n# not a comment, "quoted"'
        cost, c.cost_usd = c.cost_usd, 0.1 + 0.2  # 0.30000000000000004
        await db.commit()
    try:
        r = await client.get(f"/api/sessions/{sid}/export", params={"format": "csv"})
        provenance, table = split_provenance(r.text)
        assert provenance["product"] == "llmjudge" and provenance["version"] == __version__
        assert datetime.fromisoformat(provenance["exported_at"]).tzinfo is not None
        assert provenance["criteria"] == ["accuracy"] and provenance["seed"] is None
        assert provenance["options"] == {"calculate_elo": True, "position_swap": True}
        # No judge recorded: unknown, so `simulated` is null rather than a reassuring false.
        assert provenance["judges"] == [] and provenance["simulated"] is None
        template = provenance["prompt_template"]
        assert template["builtin"] is True
        assert (
            template["sha256"] == "sha256:" + hashlib.sha256(DEFAULT_TEMPLATE.encode()).hexdigest()
        )
        assert provenance["session"]["total"] == len(DONE) + 2
        # The raw judge response survives, with its newline and its #, as one quoted cell.
        first = next(csv.DictReader(io.StringIO(table)))
        assert first["raw_response"] == '{"winner": "A"}\n# not a comment, "quoted"'
        assert first["cost_usd"] == "0.3"
        assert not any(line.startswith("#") for line in table.split("\r\n"))

        body = finite_json(
            await client.get(f"/api/sessions/{sid}/export", params={"format": "json"})
        )
        assert body["provenance"]["table"] == "all"
        assert body["provenance"]["query"]["bootstrap_rounds"] == 200
        assert body["comparisons"][0]["raw_response"].startswith('{"winner": "A"}')
        assert body["comparisons"][0]["cost_usd"] == 0.3
        top = body["leaderboard"]["entries"][0]
        assert top["bt_score"] == round(top["bt_score"], 1)
        assert top["win_rate"] == round(top["win_rate"], 4)
    finally:
        async with app.state.sessionmaker() as db:
            c = await db.get(Comparison, c.id)
            assert c is not None
            c.raw_response, c.cost_usd = raw, cost
            await db.commit()


async def test_concurrent_polls_share_one_computation(
    client: httpx.AsyncClient, app: Any, sid: int
) -> None:
    url = f"/api/sessions/{sid}/thread-leaderboard"
    assert (await client.get(url)).status_code == 200  # the session's data is loaded
    cache = app.state.analysis_cache
    started = cache.computed
    responses = await asyncio.gather(
        *(client.get(url, params={"bootstrap_rounds": 37}) for _ in range(5))
    )
    assert {r.status_code for r in responses} == {200}
    assert len({r.text for r in responses}) == 1
    assert cache.computed == started + 1


async def test_cache_is_lru_and_forgets_failures() -> None:
    cache = AnalysisCache(max_figures=2)
    calls: list[str] = []

    def maker(key: str) -> Any:
        async def make() -> str:
            calls.append(key)
            if key == "bad":
                raise ValueError("no")
            return key.upper()

        return make

    assert await cache.figure("a", 1, maker("a")) == "A"
    assert await cache.figure("b", 1, maker("b")) == "B"
    assert await cache.figure("a", 1, maker("a")) == "A"  # hit; "a" is now the newest
    assert await cache.figure("c", 1, maker("c")) == "C"  # evicts "b", the least recent
    assert await cache.figure("a", 1, maker("a")) == "A"
    assert await cache.figure("b", 1, maker("b")) == "B"
    assert calls == ["a", "b", "c", "b"]
    for _ in range(2):
        with pytest.raises(ValueError):
            await cache.figure("bad", 1, maker("bad"))
    assert calls.count("bad") == 2  # a failure is not served from the cache


async def test_cache_shares_a_running_computation_with_newer_versions() -> None:
    cache = AnalysisCache()
    release = asyncio.Event()
    started: list[int] = []

    def maker(version: int) -> Any:
        async def make() -> int:
            started.append(version)
            await release.wait()
            return version

        return make

    first = asyncio.ensure_future(cache.figure("board", 10, maker(10)))
    await asyncio.sleep(0)
    # polls of newer results while version 10 is computed share it: no pile-up of work
    newer = [asyncio.ensure_future(cache.figure("board", v, maker(v))) for v in (11, 12)]
    await asyncio.sleep(0)
    release.set()
    assert await first == 10 and [await t for t in newer] == [10, 10]
    assert started == [10]
    # once it is done, the next poll computes the current version
    assert await cache.figure("board", 12, maker(12)) == 12
    assert started == [10, 12]
    assert await cache.figure("board", 10, maker(10)) == 10  # still cached
    assert started == [10, 12]


async def test_figures_follow_new_completions(
    client: httpx.AsyncClient, app: Any, sid: int, catalog: dict[str, Any]
) -> None:
    url = f"/api/sessions/{sid}/thread-leaderboard"
    cache = app.state.analysis_cache
    before = finite_json(await client.get(url))
    started = cache.computed
    again = finite_json(await client.get(url))
    assert again == before and cache.computed == started  # polled: served from cache
    async with app.state.sessionmaker() as db:
        await db.execute(
            update(Comparison)
            .where(Comparison.session_id == sid, Comparison.status == "pending")
            .values(status="completed", winner="A", completed_at=T0 + timedelta(minutes=5))
        )
        await db.execute(
            update(JudgeSession)
            .where(JudgeSession.id == sid)
            .values(completed=JudgeSession.completed + 1, status="completed")
        )
        await db.commit()
    after = finite_json(await client.get(url))
    assert after["outcome_count"] == 10 and after["session"]["status"] == "completed"
    t1 = by_ext(after["entries"], catalog)["t1"]
    assert (t1["matches_played"], t1["wins"]) == (7, 4)


async def test_session_without_elo(
    client: httpx.AsyncClient, app: Any, catalog: dict[str, Any]
) -> None:
    async with app.state.sessionmaker() as db:
        other = await make_session(db, catalog, calculate_elo=False)
    body = finite_json(await client.get(f"/api/sessions/{other}/thread-leaderboard"))
    assert all(r["elo_score"] is None for r in body["entries"])
    assert all(p["avg_elo"] is None for p in body["pillar_aggregates"])
    assert all(r["bt_score"] is not None for r in body["entries"])
    dist = finite_json(await client.get(f"/api/sessions/{other}/elo-distribution"))
    assert dist["score"] == "bt"
    r = await client.get(f"/api/sessions/{other}/elo-distribution", params={"score": "elo"})
    assert r.status_code == 409


async def test_session_with_no_results_yet(
    client: httpx.AsyncClient, app: Any, catalog: dict[str, Any]
) -> None:
    async with app.state.sessionmaker() as db:
        s = JudgeSession(
            name="empty",
            status="running",
            comparison_mode="round_robin",
            pillar_ids=[catalog["pillars"]["t1"]],
            options={},
            criteria=["accuracy"],
            total=1,
        )
        db.add(s)
        await db.commit()
        empty = s.id
    for path in (
        "thread-leaderboard",
        "elo-distribution",
        "pillar-matrix",
        "thread-performance",
        "position-swap-analysis",
        "findings",
    ):
        body = finite_json(await client.get(f"/api/sessions/{empty}/{path}"))
        assert body["session"]["completed"] == 0, path
    board = finite_json(await client.get(f"/api/sessions/{empty}/thread-leaderboard"))
    assert board["entries"] == [] and board["outcome_count"] == 0
    swap = finite_json(await client.get(f"/api/sessions/{empty}/position-swap-analysis"))
    assert swap["summary"]["consistency_rate"] is None
    assert swap["interpretation"]["level"] == "insufficient"


def test_no_nan_helper_rejects_nan() -> None:
    response = httpx.Response(200, text='{"x": NaN}')
    with pytest.raises(AssertionError):
        finite_json(response)
