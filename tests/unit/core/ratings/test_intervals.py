"""Honest intervals: clusters, cluster bootstrap, sandwich errors, weights, Elo anchoring."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable
from llmjudge.core.ratings.bradley_terry import (
    PairIndex,
    bootstrap_bradley_terry,
    cluster_bootstrap_bradley_terry,
    fit_bradley_terry,
)
from llmjudge.core.ratings.elo import ELO_SCALE, elo_scale
from llmjudge.core.ratings.estimators import bradley_terry, pillar_bradley_terry
from llmjudge.core.ratings.intervals import (
    comparison_clusters,
    leaderboard_order,
    normal_interval,
    percentile_interval,
    sandwich_bradley_terry,
    verdict_weights,
)


def correlated_twins(
    seed: int, n: int = 8, groups: int = 150, copies: int = 3, rho: float = 0.9
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each drawn pair is judged `copies` times (a swap twin and a repetition); with
    probability rho a copy repeats the group's first verdict, else it is a fresh draw.
    Returns (centred true strengths, a, b, score_a, cluster)."""
    rng = np.random.default_rng(seed)
    true = np.linspace(-1.0, 1.0, n)
    a = rng.integers(0, n, groups)
    b = rng.integers(0, n - 1, groups)
    b += b >= a
    p = 1.0 / (1.0 + np.exp(true[b] - true[a]))
    first = np.repeat((rng.random(groups) < p).astype(float), copies)
    a, b, p = np.repeat(a, copies), np.repeat(b, copies), np.repeat(p, copies)
    fresh = (rng.random(a.size) < p).astype(float)
    won = np.where(rng.random(a.size) < rho, first, fresh)
    swapped = np.tile(np.arange(copies) % 2 == 1, groups)  # the twin shows b first
    shown_a, shown_b = np.where(swapped, b, a), np.where(swapped, a, b)
    score = np.where(swapped, 1.0 - won, won)
    return true - true.mean(), shown_a, shown_b, score, np.repeat(np.arange(groups), copies)


def fitted(a: np.ndarray, b: np.ndarray, s: np.ndarray, n: int) -> tuple[PairIndex, np.ndarray]:
    pairs = PairIndex.build(a, b, s, n)
    wins, games = pairs.totals()
    return pairs, fit_bradley_terry(pairs, wins, games)


def test_cluster_bootstrap_covers_where_iid_bootstrap_falls_short() -> None:
    n, trials = 8, 40
    cluster_hits, iid_hits, sandwich_hits = [], [], []
    for trial in range(trials):
        true, a, b, s, cluster = correlated_twins(trial, n=n)
        pairs, theta = fitted(a, b, s, n)
        low, high = percentile_interval(
            cluster_bootstrap_bradley_terry(pairs, theta, cluster, rounds=200, seed=trial), 0.95
        )
        cluster_hits += ((low <= true) & (true <= high)).tolist()
        low, high = percentile_interval(
            bootstrap_bradley_terry(pairs, theta, rounds=200, seed=trial), 0.95
        )
        iid_hits += ((low <= true) & (true <= high)).tolist()
        se = sandwich_bradley_terry(a, b, s, n, theta, cluster)
        low, high = normal_interval(theta, se, 0.95)
        sandwich_hits += ((low <= true) & (true <= high)).tolist()
    assert 0.90 <= np.mean(cluster_hits) <= 0.98
    assert np.mean(iid_hits) < 0.90
    assert 0.90 <= np.mean(sandwich_hits) <= 0.98


def test_one_cluster_per_row_is_the_iid_bootstrap() -> None:
    _, a, b, s, _ = correlated_twins(3)
    pairs, theta = fitted(a, b, s, 8)
    iid = bootstrap_bradley_terry(pairs, theta, rounds=5, seed=7)
    singles = cluster_bootstrap_bradley_terry(pairs, theta, np.arange(a.size), rounds=5, seed=7)
    np.testing.assert_allclose(singles, iid, atol=1e-12)


def test_sandwich_matches_cluster_bootstrap_spread() -> None:
    _, a, b, s, cluster = correlated_twins(5, groups=600)
    pairs, theta = fitted(a, b, s, 8)
    boot = cluster_bootstrap_bradley_terry(pairs, theta, cluster, rounds=400, seed=1)
    se = sandwich_bradley_terry(a, b, s, 8, theta, cluster)
    np.testing.assert_allclose(se, boot.std(axis=0), rtol=0.15)
    # clustering the correlated copies widens the error over one cluster per verdict
    naive = sandwich_bradley_terry(a, b, s, 8, theta, np.arange(a.size))
    assert np.all(se > 1.3 * naive)


def test_sandwich_probe_estimate_agrees_with_exact() -> None:
    _, a, b, s, cluster = correlated_twins(6, n=12, groups=800)
    _, theta = fitted(a, b, s, 12)
    exact = sandwich_bradley_terry(a, b, s, 12, theta, cluster)
    probed = sandwich_bradley_terry(a, b, s, 12, theta, cluster, max_dense=0, probes=800)
    np.testing.assert_allclose(probed, exact, rtol=0.12)


def test_sandwich_without_correlation_matches_fisher_information() -> None:
    # one verdict per cluster, as i.i.d. data: the sandwich is close to the model-based
    # (inverse Hessian) error, which for two players is 1/sqrt(m p (1-p)) / 2 per player
    rng = np.random.default_rng(2)
    m = 20_000
    a, b = np.zeros(m, np.int64), np.ones(m, np.int64)
    s = (rng.random(m) < 0.7).astype(float)
    _, theta = fitted(a, b, s, 2)
    se = sandwich_bradley_terry(a, b, s, 2, theta, np.arange(m))
    p = s.mean()
    np.testing.assert_allclose(se, 0.5 / np.sqrt(m * p * (1 - p)), rtol=0.03)


def swap_table() -> OutcomeTable:
    rows = [
        Outcome(1, 10, 20, "A", swap_group=1),
        Outcome(2, 20, 10, "B", swap_group=1, is_swap=True),
        Outcome(3, 10, 20, "A", repetition=1, swap_group=2),
        Outcome(4, 20, 10, "B", repetition=1, swap_group=2, is_swap=True),
        Outcome(5, 10, 30, "TIE"),
        Outcome(6, 30, 10, "A"),
    ]
    return OutcomeTable.from_outcomes(rows)


def test_comparison_clusters_by_pair_and_by_swap_group() -> None:
    table = swap_table()
    by_id = dict(
        zip(table.comparison_id.tolist(), comparison_clusters(table).tolist(), strict=True)
    )
    assert by_id[1] == by_id[2] == by_id[3] == by_id[4] != by_id[5] == by_id[6]
    swap = dict(
        zip(table.comparison_id.tolist(), comparison_clusters(table, "swap").tolist(), strict=True)
    )
    assert swap[1] == swap[2] != swap[3] == swap[4]
    assert len({swap[1], swap[3], swap[5], swap[6]}) == 4
    with pytest.raises(ValueError):
        comparison_clusters(table, "thread")  # type: ignore[arg-type]


def test_verdict_weights_count_strong_verdicts_only_when_asked() -> None:
    strengths = ["strong", "weak", None, 2, 1]
    assert verdict_weights(strengths).tolist() == [1.0] * 5
    assert verdict_weights(strengths, 3.0).tolist() == [3.0, 1.0, 1.0, 3.0, 1.0]
    with pytest.raises(ValueError):
        verdict_weights(strengths, 0.0)


def test_weighted_fit_equals_repeated_rows() -> None:
    rng = np.random.default_rng(4)
    m, n = 300, 6
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    s = rng.choice([0.0, 0.5, 1.0], m)
    w = rng.choice([1.0, 3.0], m)
    table = OutcomeTable.from_columns(comparison_id=np.arange(m), thread_a=a, thread_b=b, score_a=s)
    weighted = bradley_terry(table, bootstrap_rounds=0, weights=w)
    reps = np.repeat(np.arange(m), w.astype(int))
    repeated = OutcomeTable.from_columns(
        comparison_id=np.arange(reps.size), thread_a=a[reps], thread_b=b[reps], score_a=s[reps]
    )
    plain = bradley_terry(repeated, bootstrap_rounds=0)
    assert [r.player_id for r in weighted.ratings] == [r.player_id for r in plain.ratings]
    np.testing.assert_allclose(
        [r.score for r in weighted.ratings], [r.score for r in plain.ratings], atol=1e-6
    )


def test_bradley_terry_cluster_option_widens_intervals() -> None:
    _, a, b, s, cluster = correlated_twins(8)
    table = OutcomeTable.from_columns(
        comparison_id=np.arange(a.size), thread_a=a, thread_b=b, score_a=s, swap_group=cluster
    )
    iid = bradley_terry(table, bootstrap_rounds=200, seed=1).by_player()
    clustered = bradley_terry(table, bootstrap_rounds=200, seed=1, clusters="pair").by_player()
    by_array = bradley_terry(table, bootstrap_rounds=200, seed=1, clusters=cluster).by_player()
    widths = {
        name: np.mean([r[t].ci_high - r[t].ci_low for t in range(8)])  # type: ignore[operator]
        for name, r in (("iid", iid), ("pair", clustered), ("array", by_array))
    }
    assert widths["pair"] > 1.3 * widths["iid"] and widths["array"] > 1.3 * widths["iid"]
    assert [clustered[t].score for t in range(8)] == [iid[t].score for t in range(8)]


def test_pillar_clusters_follow_thread_pairs() -> None:
    _, a, b, s, cluster = correlated_twins(9, n=8, groups=300)
    table = OutcomeTable.from_columns(
        comparison_id=np.arange(a.size), thread_a=a, thread_b=b, score_a=s
    )
    pillar_of = {t: t % 4 for t in range(8)}
    iid = pillar_bradley_terry(table, pillar_of, bootstrap_rounds=200).ratings
    clustered = pillar_bradley_terry(
        table, pillar_of, bootstrap_rounds=200, clusters="pair"
    ).ratings
    width = lambda rs: np.mean([r.ci_high - r.ci_low for r in rs])  # noqa: E731
    assert [r.score for r in clustered] == pytest.approx([r.score for r in iid])
    assert width(clustered) > 1.2 * width(iid)


def test_elo_scale_anchors_mean_or_baseline() -> None:
    theta = np.array([0.5, -0.2, 1.0])
    mean_anchored = elo_scale(theta, base=1000.0)
    assert mean_anchored.mean() == pytest.approx(1000.0)
    assert mean_anchored[2] - mean_anchored[0] == pytest.approx(0.5 * ELO_SCALE)
    assert ELO_SCALE == pytest.approx(400.0 / np.log(10.0))
    anchored = elo_scale(theta, base=1500.0, baseline=1)
    assert anchored[1] == 1500.0
    assert anchored[0] == pytest.approx(1500.0 + 0.7 * ELO_SCALE)
    # row-wise on bootstrap samples: the baseline's own interval has zero width
    samples = np.random.default_rng(0).normal(size=(50, 3))
    low, high = percentile_interval(elo_scale(samples, baseline=1))
    assert low[1] == high[1] == 1500.0 and np.all(high[[0, 2]] > low[[0, 2]])


def test_leaderboard_order_sorts_by_score_within_rank() -> None:
    ranks = np.array([2, 1, 1, 2, 4])
    scores = np.array([1600.0, 1650.0, 1700.0, 1620.0, 1400.0])
    ids = np.array([5, 6, 7, 8, 9])
    assert leaderboard_order(ranks, scores, ids).tolist() == [2, 1, 3, 0, 4]


def test_percentile_interval_rejects_bad_level() -> None:
    with pytest.raises(ValueError):
        percentile_interval(np.zeros((3, 2)), 1.0)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 5), st.sampled_from([0.0, 0.5, 1.0])),
        min_size=2,
        max_size=40,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_relabelling_players_permutes_fit_and_sandwich(
    rows: list[tuple[int, int, float]], seed: int
) -> None:
    a = np.array([r[0] for r in rows])
    b = (a + np.array([r[1] for r in rows])) % 6
    s = np.array([r[2] for r in rows])
    cluster = np.minimum(a, b) * 6 + np.maximum(a, b)
    cluster = np.unique(cluster, return_inverse=True)[1]
    perm = np.random.default_rng(seed).permutation(6)  # new label of each player
    _, theta = fitted(a, b, s, 6)
    _, theta_p = fitted(perm[a], perm[b], s, 6)
    np.testing.assert_allclose(theta_p[perm], theta, atol=1e-6)
    se = sandwich_bradley_terry(a, b, s, 6, theta, cluster)
    se_p = sandwich_bradley_terry(perm[a], perm[b], s, 6, theta_p, cluster)
    np.testing.assert_allclose(se_p[perm], se, atol=1e-6)
    # row order: the sandwich is a sum over rows and clusters
    order = np.random.default_rng(seed + 1).permutation(a.size)
    se_o = sandwich_bradley_terry(a[order], b[order], s[order], 6, theta, cluster[order])
    # sqrt of a variance at round-off level (a player with no information) is ~1e-8
    np.testing.assert_allclose(se_o, se, rtol=1e-6, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 6), st.integers(1, 6), st.sampled_from(["A", "B", "TIE"])),
        min_size=1,
        max_size=30,
    ),
    rounds=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_clustered_ratings_do_not_depend_on_input_order(
    rows: list[tuple[int, int, str]], rounds: int, seed: int
) -> None:
    outcomes = [
        Outcome(cid, x, (x + d) % 7, w, swap_group=cid // 2)  # type: ignore[arg-type]
        for cid, (x, d, w) in enumerate(rows)
    ]
    shuffled = list(outcomes)
    np.random.default_rng(seed).shuffle(shuffled)
    first = bradley_terry(outcomes, bootstrap_rounds=rounds, seed=3, clusters="pair")
    second = bradley_terry(shuffled, bootstrap_rounds=rounds, seed=3, clusters="pair")
    assert len(first.ratings) == len(
        {o.thread_a for o in outcomes} | {o.thread_b for o in outcomes}
    )
    pair_clusters = len({frozenset((o.thread_a, o.thread_b)) for o in outcomes})
    for x, y in zip(first.ratings, second.ratings, strict=True):
        assert (x.player_id, x.rank) == (y.player_id, y.rank)
        assert x.score == pytest.approx(y.score, abs=1e-6)
        assert x.ci_low == pytest.approx(y.ci_low, abs=1e-6)
        assert x.ci_high == pytest.approx(y.ci_high, abs=1e-6)
        # one cluster resamples to itself: no interval rather than a zero-width one
        assert (x.ci_low is None) == (pair_clusters < 2)
        assert x.ci_low is None or x.ci_low <= x.ci_high  # type: ignore[operator]
    pairs, theta = fitted(*(np.array(v) for v in ([0, 1], [1, 0], [1.0, 1.0])), 2)
    assert cluster_bootstrap_bradley_terry(
        pairs, theta, np.array([0, 0]), rounds=rounds, seed=seed
    ).shape == (rounds, 2)
