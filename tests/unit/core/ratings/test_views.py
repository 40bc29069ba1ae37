"""The pure views the product shows from the ratings core: rating options, the
leaderboard's method and quality, the style-control report, categories, Wilson
intervals, answer text, the verdict strength column, the small-multiples chart."""

from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit
from scipy.stats import spearmanr

from llmjudge.core import charts
from llmjudge.core.analysis.categories import MAX_CATEGORIES, category_report, metadata_keys
from llmjudge.core.analysis.leaderboard import leaderboard, pillar_ratings, score_distribution
from llmjudge.core.analysis.outcomes import OutcomeTable, aggregate
from llmjudge.core.ratings.intervals import comparison_clusters, verdict_weights
from llmjudge.core.ratings.report import RatingOptions, quality_advice, rate, rating_report
from llmjudge.core.ratings.style import (
    STYLE_FEATURES,
    answer_features,
    answer_text,
    pair_style_covariates,
    stored_features,
    style_control,
)
from llmjudge.core.ratings.style_report import numeric_metadata_keys, style_report
from llmjudge.core.stats import wilson_bounds as wilson


def planted(
    seed: int = 0, pillars: int = 3, per_pillar: int = 8, rounds: int = 6, length: float = 2.0
) -> tuple[OutcomeTable, dict[int, int], dict[int, np.ndarray]]:
    """Threads 1..P*T in pillars 10, 20, ...; equal pillars; the judge prefers length."""
    rng = np.random.default_rng(seed)
    threads = np.arange(1, pillars * per_pillar + 1)
    pillar_of = {int(t): 10 * (1 + (int(t) - 1) // per_pillar) for t in threads}
    lengths = {
        int(t): float(rng.integers(50, 400) * (1 + pillar_of[int(t)] // 10)) for t in threads
    }
    features = {t: np.array([lengths[t], 0.0, 0.0, 0.0]) for t in lengths}
    a, b, s = [], [], []
    for _ in range(rounds):
        for t in threads.tolist():
            u = int(rng.choice([x for x in threads.tolist() if pillar_of[x] != pillar_of[t]]))
            p = expit(length * (lengths[t] - lengths[u]) / (lengths[t] + lengths[u]))
            a.append(t)
            b.append(u)
            s.append(0.5 if rng.random() < 0.1 else float(rng.random() < p))
    table = OutcomeTable.from_columns(
        comparison_id=np.arange(len(a)),
        thread_a=a,
        thread_b=b,
        score_a=s,
        strength=[2 if x == 1.0 and i % 3 == 0 else 1 for i, x in enumerate(s)],
    )
    return table, pillar_of, features


# -- options and the leaderboard -----------------------------------------------------


def test_options_refuse_what_the_ratings_refuse() -> None:
    RatingOptions().validate()
    for bad in (
        RatingOptions(interval="sandwich", tie_model="davidson"),
        RatingOptions(interval="sandwich", baseline_pillar=3),
        RatingOptions(strong_weight=0.5),
        RatingOptions(level=0.3),
        RatingOptions(tie_model="rao"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError):
            bad.validate()
    assert hash(RatingOptions()) == hash(RatingOptions())  # it keys the figure cache


def test_rate_weights_strong_verdicts_from_the_table() -> None:
    table, _, _ = planted()
    got = rate(table, RatingOptions(strong_weight=3.0, bootstrap_rounds=0))
    want = rating_report(
        table,
        bootstrap_rounds=0,
        weights=verdict_weights(table.strength, 3.0),
        strong_weight=3.0,
    )
    assert [p.score for p in got.players] == pytest.approx([p.score for p in want.players])
    off = rate(table, RatingOptions(bootstrap_rounds=0))
    assert [p.score for p in off.players] != pytest.approx([p.score for p in got.players])


def test_leaderboard_method_quality_and_pillar_clusters() -> None:
    table, pillar_of, _ = planted()
    names = {10: "ten", 20: "twenty", 30: "thirty"}
    ref = {t: float(t) for t in pillar_of}
    board = leaderboard(
        table,
        pillar_of,
        names,
        options=RatingOptions(bootstrap_rounds=30, base=1000.0),
        thread_reference=ref,
        pillar_reference={10: 0.0, 20: 1.0, 30: 2.0},
        reference_source="id",
    )
    m = board.method
    assert (m.level, m.clusters, m.base, m.strong_weight) == (0.95, "pair", 1000.0, 1.0)
    assert m.strong_verdicts == int(np.sum(table.strength == 2))
    assert m.cluster_count == int(comparison_clusters(table).max()) + 1
    # pillars still resample thread pairs, not the three pillar pairs
    assert board.pillar_method.cluster_count == m.cluster_count
    assert np.mean([e.bt_score for e in board.entries]) == pytest.approx(1000.0)
    q = board.quality
    assert q.pairs == len(board.entries) * (len(board.entries) - 1) // 2
    assert q.reference is not None and q.reference.source == "id"
    scores = [e.bt_score for e in board.entries]
    assert q.reference.spearman == pytest.approx(
        spearmanr(scores, [e.thread_id for e in board.entries]).statistic
    )
    assert board.pillar_quality.reference is not None and board.pillar_quality.reference.n == 3
    pillars = [p.pillar_id for p in board.pillar_aggregates]
    ranks = [p.bt_rank for p in board.pillar_aggregates]
    assert ranks == sorted(ranks)  # by rank, then score
    assert set(pillars) == {10, 20, 30}
    with pytest.raises(ValueError, match="baseline pillar"):
        pillar_ratings(table, pillar_of, RatingOptions(baseline_pillar=99))


def test_quality_advice_says_what_to_do() -> None:
    table, _, _ = planted()
    none = rating_report(table, bootstrap_rounds=0)
    assert "No intervals" in quality_advice(none)
    some = rating_report(table, bootstrap_rounds=20)
    text = quality_advice(some, "threads")
    assert "pairs of threads are separated at 95%" in text
    assert ("Buy more comparisons" in text) == (some.separability.share < 0.8)  # type: ignore[union-attr]


def test_score_distribution_bins_are_round() -> None:
    dist = score_distribution({1: 1403.7, 2: 1431.2, 3: 1577.9}, {1: 1, 2: 1, 3: 2}, {}, bins=5)
    step = dist.bin_edges[1] - dist.bin_edges[0]
    assert step in (25.0, 50.0) and all(e % step == 0 for e in dist.bin_edges)
    assert len(dist.bin_edges) <= 6


# -- strength column ---------------------------------------------------------------------


def test_strength_travels_with_its_verdict() -> None:
    table, pillar_of, _ = planted()
    order = np.argsort(table.comparison_id)
    assert table.strength.dtype == np.int8
    picked = table.take(order[:5])
    assert picked.strength.tolist() == table.strength[order[:5]].tolist()
    assert table.map_players(pillar_of).strength.size == len(table)
    plain = OutcomeTable.from_columns(comparison_id=[1], thread_a=[1], thread_b=[2], score_a=[1])
    assert plain.strength.tolist() == [0]
    assert aggregate(table, "majority").strength.size == len(aggregate(table, "majority"))


# -- style -------------------------------------------------------------------------------


def test_answer_text_is_the_assistant_turns() -> None:
    convo = [
        {"role": "user", "content": "# q"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "more?"},
        {"role": "assistant", "content": "two"},
    ]
    assert answer_text("plain") == "plain"
    assert answer_text(convo) == "one\n\ntwo"
    assert answer_text([{"role": "user", "content": "a"}, {"content": "b"}]) == "a\n\nb"
    assert answer_text(None) == "" and answer_text([1, {"role": "x"}]) == ""
    assert stored_features(convo) == answer_features(["one\n\ntwo"])[0].tolist()


def test_style_report_matches_the_direct_fit_and_highlights_rank_changes() -> None:
    table, pillar_of, features = planted(length=3.0)
    names = {10: "ten", 20: "twenty", 30: "thirty"}
    meta = {t: {"q": float(t % 4), "tag": "x"} for t in pillar_of}
    report = style_report(
        table, pillar_of, names, features, meta, RatingOptions(bootstrap_rounds=0)
    )
    assert report.identified and report.comparisons_used == len(table)
    players = np.array(sorted(names))
    pa = np.searchsorted(players, [pillar_of[int(t)] for t in table.players[table.a]])
    pb = np.searchsorted(players, [pillar_of[int(t)] for t in table.players[table.b]])
    feats = np.array([features[int(t)] for t in table.players])
    direct = style_control(
        pa,
        pb,
        table.score_a,
        3,
        pair_style_covariates(feats, table.a, table.b),
        STYLE_FEATURES,
        comparison_clusters(table),
    )
    coef = {c.name: c for c in report.covariates}
    assert coef["length"].coef == pytest.approx(float(direct.coef[0]), abs=1e-6)
    assert coef["length"].ci_low is not None and coef["length"].ci_low > 0
    # constant columns (no markdown anywhere) carry no information: not identified
    assert not coef["headers"].identified and coef["headers"].coef is None
    assert coef["headers"].why == "constant" and coef["length"].why is None
    assert report.reason is not None and "headers" in report.reason
    for row in report.pillars:
        assert row.rank_change == row.raw_rank - row.controlled_rank
    # the longest-writing pillar's raw lead shrinks once length is held out
    by = {r.pillar_id: r for r in report.pillars}
    assert by[30].raw_score - by[10].raw_score > by[30].controlled_score - by[10].controlled_score
    assert numeric_metadata_keys(meta) == ["q"]
    with_meta = style_report(
        table,
        pillar_of,
        names,
        features,
        meta,
        RatingOptions(bootstrap_rounds=0),
        metadata_keys=("q",),
    )
    assert [c.name for c in with_meta.covariates][-1] == "meta:q"


def test_style_report_fails_closed_with_a_reason() -> None:
    table, pillar_of, features = planted()
    one = {t: 10 for t in pillar_of}
    report = style_report(table, one, {}, features, {}, RatingOptions(bootstrap_rounds=0))
    assert not report.identified and "pillars" in (report.reason or "")
    assert report.comparisons_skipped == len(table) and report.pillars == []
    few = table.take(np.arange(5))
    report = style_report(few, pillar_of, {}, features, {}, RatingOptions(bootstrap_rounds=0))
    assert not report.identified and "at least" in (report.reason or "")
    # threads without stored features are left out, and counted
    missing = {t: f for t, f in features.items() if t != 1}
    report = style_report(table, pillar_of, {}, missing, {}, RatingOptions(bootstrap_rounds=0))
    rows_with_1 = int(np.sum((table.players[table.a] == 1) | (table.players[table.b] == 1)))
    assert report.comparisons_skipped == rows_with_1 > 0


# -- categories --------------------------------------------------------------------------


def test_category_report_by_hand() -> None:
    # threads 1, 2 (pillar 10) and 3, 4 (pillar 20); 1 and 3 are "a", 2 and 4 are "b"
    table = OutcomeTable.from_columns(
        comparison_id=[1, 2, 3, 4, 5, 6],
        thread_a=[1, 3, 2, 4, 1, 1],
        thread_b=[3, 1, 4, 2, 4, 2],
        score_a=[1.0, 0.5, 0.0, 1.0, 1.0, 1.0],
    )
    meta = {1: {"cat": "a"}, 2: {"cat": "b"}, 3: {"cat": "a"}, 4: {"cat": "b", "n": 1}}
    report = category_report(
        table,
        {1: 10, 2: 10, 3: 20, 4: 20},
        {10: "ten", 20: "twenty"},
        meta,
        "cat",
        RatingOptions(bootstrap_rounds=0, baseline_pillar=10),
        pillar_order=[20, 10],
    )
    # comparison 5 crosses categories, 6 stays within pillar 10: both left out
    assert report.comparisons_left_out == 2
    assert [c.value for c in report.categories] == ["a", "b"]
    assert [p.name for p in report.pillars] == ["twenty", "ten"]
    # category a: ten beat twenty once and tied once: 1.5 / 2
    assert report.matrix[0] == [pytest.approx(0.25), pytest.approx(0.75)]
    assert report.counts == [[2, 2], [2, 2]]
    # category b: twenty won both
    assert report.matrix[1] == [1.0, 0.0]
    a = {p.pillar_id: p for p in report.categories[0].pillars}
    assert a[10].win_rate == 0.75 and a[10].win_low < 0.75 < a[10].win_high
    assert a[10].rank == 1 and a[10].score > a[20].score  # type: ignore[operator]
    # scores anchor on each category's mean pillar (a baseline may not play everywhere)
    assert (a[10].score + a[20].score) / 2 == pytest.approx(1500.0)  # type: ignore[operator]
    assert metadata_keys(meta) == ["cat", "n"]


def test_category_report_caps_the_categories() -> None:
    n = MAX_CATEGORIES + 3
    a = [2 * i + 1 for i in range(n)]
    b = [2 * i + 2 for i in range(n)]
    table = OutcomeTable.from_columns(
        comparison_id=range(n), thread_a=a, thread_b=b, score_a=[1.0] * n
    )
    pillar_of = {t: 10 if t % 2 else 20 for t in [*a, *b]}
    meta = {t: {"k": (t - 1) // 2} for t in pillar_of}
    report = category_report(table, pillar_of, {}, meta, "k", RatingOptions(bootstrap_rounds=0))
    assert len(report.categories) == MAX_CATEGORIES and report.categories_left_out == 3
    assert report.comparisons_left_out == 3
    assert report.categories[0].value == "0"  # integral numbers print without ".0"


# -- Wilson --------------------------------------------------------------------------------


def test_wilson_known_values() -> None:
    low, high = wilson(np.array([6.0, 0.0, 5.0]), np.array([6, 3, 0]), 0.95)
    assert low[0] == pytest.approx(0.6097, abs=1e-4) and high[0] == 1.0
    assert low[1] == 0.0 and high[1] == pytest.approx(0.5615, abs=1e-4)
    assert math.isnan(low[2]) and math.isnan(high[2])


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 500),
    share=st.floats(0, 1),
    level=st.sampled_from([0.8, 0.9, 0.95, 0.99]),
)
def test_wilson_contains_the_rate_and_narrows_with_evidence(
    n: int, share: float, level: float
) -> None:
    wins = np.array([round(share * n * 2) / 2])
    low, high = wilson(wins, np.array([n]), level)
    p = wins[0] / n
    assert 0 <= low[0] <= p + 1e-12 and p - 1e-12 <= high[0] <= 1
    low4, high4 = wilson(wins * 4, np.array([4 * n]), level)
    assert high4[0] - low4[0] <= high[0] - low[0] + 1e-12
    wider = wilson(wins, np.array([n]), 0.999)
    assert wider[1][0] - wider[0][0] >= high[0] - low[0] - 1e-12


# -- small multiples -------------------------------------------------------------------


def test_small_multiples_chart() -> None:
    svg = charts.small_multiples_chart(
        [
            ("writing · 12", ["a", "b <c>"], [1510.0, 1490.0], [(1500.0, 1520.0), (None, None)]),
            ("math · 8", ["a"], [1530.0], [(1501.0, 1560.0)]),
        ],
        title="Per category",
    )
    root = ET.fromstring(str(svg))
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f".//{ns}g[@class='panel']")) == 2
    assert len(root.findall(f".//{ns}circle")) == 3
    assert len(root.findall(f".//{ns}line[@class='error-bar']")) == 2  # one has no interval
    assert "b &lt;c&gt;" in str(svg)
    assert "No data yet" in str(charts.small_multiples_chart([], title="t"))
    with pytest.raises(ValueError):
        charts.small_multiples_chart([("x", ["a"], [1.0, 2.0], [(None, None)])], title="t")
    with pytest.raises(ValueError):
        charts.small_multiples_chart([("x", ["a"], [math.nan], [(None, None)])], title="t")


def test_views_are_plain_dataclasses() -> None:
    table, pillar_of, features = planted()
    report = style_report(table, pillar_of, {}, features, {}, RatingOptions(bootstrap_rounds=0))
    board = leaderboard(table, pillar_of, {}, options=RatingOptions(bootstrap_rounds=5))
    for item in (report, board.method, board.quality):
        assert dataclasses.asdict(item)


def test_collinear_style_covariates_are_not_identified() -> None:
    from llmjudge.core.ratings.style_report import collinearity

    rng = np.random.default_rng(3)
    base = rng.normal(size=(200, 2))
    x = np.column_stack([base, 2 * base[:, 0] + 1e-9 * rng.normal(size=200), np.ones(200)])
    r2 = collinearity(x)
    assert r2[0] > 0.999 and r2[2] > 0.999 and r2[1] < 0.1 and r2[3] == 0.0
    # headers, list items and bold always together: the report says they cannot be told apart
    table, pillar_of, features = planted(length=3.0)
    marked = {
        t: np.array([f[0], 1 / f[0], 2 / f[0], 1 / f[0]]) if t % 2 else f
        for t, f in features.items()
    }
    report = style_report(table, pillar_of, {}, marked, {}, RatingOptions(bootstrap_rounds=0))
    coef = {c.name: c for c in report.covariates}
    assert coef["length"].identified
    assert not coef["headers"].identified and not coef["bold"].identified
    assert coef["headers"].why == coef["bold"].why == "collinear"
    assert "cannot tell their effects apart" in (report.reason or "")


def test_one_cluster_gives_no_interval_rather_than_a_zero_width_one() -> None:
    # every verdict on one pair of threads: resampling that one cluster changes nothing
    table = OutcomeTable.from_columns(
        comparison_id=range(6), thread_a=[1, 2] * 3, thread_b=[2, 1] * 3, score_a=[1.0, 0.0] * 3
    )
    clustered = rating_report(table, bootstrap_rounds=20)
    assert clustered.cluster_count == 1
    assert all(p.ci_low is None and p.ci_high is None for p in clustered.players)
    assert [p.rank for p in clustered.players] == [1, 2]  # by score, no claim of separation
    assert clustered.separability is None
    iid = rating_report(table, bootstrap_rounds=20, clusters=None)
    assert all(p.ci_low is not None for p in iid.players)
