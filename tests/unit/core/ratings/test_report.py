"""rating_report: the one call the service makes, with every rigor option."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.analysis.outcomes import OutcomeTable
from llmjudge.core.ratings.elo import ELO_SCALE
from llmjudge.core.ratings.estimators import bradley_terry
from llmjudge.core.ratings.intervals import verdict_weights
from llmjudge.core.ratings.report import RatingReport, rating_report


def twins_table(seed: int, n: int = 12, groups: int = 400, tie_rate: float = 0.1) -> OutcomeTable:
    """Pairs judged twice (original and swapped twin), correlated verdicts, some ties;
    thread ids 100.. so ids and indices differ."""
    rng = np.random.default_rng(seed)
    true = np.linspace(-1.5, 1.5, n)
    a = rng.integers(0, n, groups)
    b = (a + rng.integers(1, n, groups)) % n
    won = (rng.random(groups) < 1.0 / (1.0 + np.exp(true[b] - true[a]))).astype(float)
    won[rng.random(groups) < tie_rate] = 0.5
    twin = np.where(rng.random(groups) < 0.8, won, 1.0 - won)  # mostly agrees
    return OutcomeTable.from_columns(
        comparison_id=np.arange(2 * groups),
        thread_a=100 + np.concatenate([a, b]),
        thread_b=100 + np.concatenate([b, a]),
        score_a=np.concatenate([won, 1.0 - twin]),
        swap_group=np.tile(np.arange(groups), 2),
        is_swap=np.arange(2 * groups) >= groups,
    )


def widths(report: RatingReport) -> np.ndarray:
    """Interval widths by player id."""
    players = sorted(report.players, key=lambda p: p.player_id)
    return np.array([p.ci_high - p.ci_low for p in players])  # type: ignore[operator]


def best_first(report: RatingReport) -> list[int]:
    return [p.player_id for p in sorted(report.players, key=lambda p: -p.score)]


def test_default_report_is_clustered_bootstrap_sorted_within_ranks() -> None:
    table = twins_table(0)
    report = rating_report(table, bootstrap_rounds=100, seed=2)
    assert (report.clusters, report.interval, report.level, report.tie_model) == (
        "pair",
        "bootstrap",
        0.95,
        "half",
    )
    assert report.bootstrap_rounds == 100 and report.comparisons == len(table)
    ranks = [p.rank for p in report.players]
    assert ranks == sorted(ranks)
    for r in set(ranks):
        scores = [p.score for p in report.players if p.rank == r]
        assert scores == sorted(scores, reverse=True)
    assert np.mean([p.score for p in report.players]) == pytest.approx(1500.0)
    assert all(p.ci_low < p.ci_high for p in report.players)  # type: ignore[operator]
    assert report.separability is not None and 0.0 < report.separability.share < 1.0  # type: ignore[operator]
    assert report.top_separability is not None and report.top_separability.players == 10
    assert report.mean_rank_shift is not None and report.mean_rank_shift > 0
    assert all(0.0 <= p.held_share <= 1.0 for p in report.players)  # type: ignore[operator]
    assert sum(p.comparisons for p in report.players) == 2 * len(table)
    # the same draws as bradley_terry with the same clustering and seed
    plain = bradley_terry(table, bootstrap_rounds=100, seed=2, clusters="pair").by_player()
    for p in report.players:
        assert p.score == pytest.approx(plain[p.player_id].score)
        assert p.ci_low == pytest.approx(plain[p.player_id].ci_low)
        assert p.rank == plain[p.player_id].rank


def test_clustered_intervals_are_wider_than_iid() -> None:
    table = twins_table(1)
    clustered = rating_report(table, bootstrap_rounds=150)
    iid = rating_report(table, bootstrap_rounds=150, clusters=None)
    assert iid.clusters == "none" and widths(clustered).mean() > 1.15 * widths(iid).mean()
    assert clustered.cluster_count < iid.cluster_count == len(table)


def test_baseline_anchor_and_base() -> None:
    table = twins_table(2)
    report = rating_report(table, bootstrap_rounds=50, base=1000.0, baseline_id=105)
    by_id = {p.player_id: p for p in report.players}
    assert by_id[105].score == 1000.0 and by_id[105].ci_low == by_id[105].ci_high == 1000.0
    mean_anchored = {p.player_id: p.score for p in rating_report(table, bootstrap_rounds=0).players}
    gap = mean_anchored[110] - mean_anchored[105]
    assert by_id[110].score - 1000.0 == pytest.approx(gap)
    assert report.baseline_id == 105 and report.base == 1000.0
    with pytest.raises(ValueError):
        rating_report(table, baseline_id=999)


def test_sandwich_intervals_match_bootstrap_width() -> None:
    table = twins_table(3, groups=1_500)
    boot = rating_report(table, bootstrap_rounds=300)
    sandwich = rating_report(table, interval="sandwich")
    np.testing.assert_allclose(widths(sandwich), widths(boot), rtol=0.25)
    assert sandwich.bootstrap_rounds == 0 and sandwich.mean_rank_shift is None
    assert sandwich.players[0].held_share is None
    with pytest.raises(ValueError):
        rating_report(table, interval="sandwich", baseline_id=100)
    with pytest.raises(ValueError):
        rating_report(table, interval="sandwich", tie_model="davidson")


def test_davidson_report_carries_nu_and_the_same_ordering() -> None:
    table = twins_table(4, tie_rate=0.3)
    half = rating_report(table, bootstrap_rounds=0)
    davidson = rating_report(table, bootstrap_rounds=40, tie_model="davidson")
    assert davidson.nu is not None and davidson.nu_low < davidson.nu < davidson.nu_high  # type: ignore[operator]
    assert best_first(davidson)[:3] == best_first(half)[:3]
    assert davidson.separability is not None
    with pytest.raises(ValueError):
        rating_report(table, tie_model="rao")  # type: ignore[arg-type]


def test_strong_verdict_weights_are_reported_and_change_the_fit() -> None:
    table = twins_table(5)
    strength = np.where(np.arange(len(table)) % 4 == 0, "strong", "weak")
    strength[table.score_a == 0.5] = "weak"
    weights = verdict_weights(strength, 3.0)
    weighted = rating_report(table, bootstrap_rounds=0, weights=weights, strong_weight=3.0)
    assert weighted.strong_weight == 3.0
    plain = bradley_terry(table, bootstrap_rounds=0, weights=weights).by_player()
    for p in weighted.players:
        assert p.score == pytest.approx(plain[p.player_id].score)
    unweighted = {p.player_id: p.score for p in rating_report(table, bootstrap_rounds=0).players}
    assert any(abs(unweighted[p.player_id] - p.score) > 1.0 for p in weighted.players)
    # without intervals nothing claims a separation
    assert weighted.separability is None and weighted.players[0].ci_low is None


def test_no_intervals_ranks_by_score() -> None:
    report = rating_report(twins_table(6), bootstrap_rounds=0)
    assert [p.rank for p in report.players] == list(range(1, 13))
    assert report.players[0].score - report.players[-1].score > 1.0 * ELO_SCALE


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), tie_model=st.sampled_from(["half", "davidson"]))
def test_report_is_invariant_to_relabelling_threads(seed: int, tie_model: str) -> None:
    table = twins_table(seed % 1000, n=6, groups=60)
    perm = np.random.default_rng(seed).permutation(6)
    relabelled = OutcomeTable.from_columns(
        comparison_id=table.comparison_id,
        thread_a=200 + perm[table.players[table.a] - 100],
        thread_b=200 + perm[table.players[table.b] - 100],
        score_a=table.score_a,
        swap_group=table.swap_group,
        is_swap=table.is_swap,
    )
    first = rating_report(table, bootstrap_rounds=0, tie_model=tie_model)  # type: ignore[arg-type]
    second = rating_report(relabelled, bootstrap_rounds=0, tie_model=tie_model)  # type: ignore[arg-type]
    new_id = {100 + i: 200 + int(perm[i]) for i in range(6)}
    scores = {p.player_id: p.score for p in second.players}
    for p in first.players:
        assert scores[new_id[p.player_id]] == pytest.approx(p.score, abs=1e-6)
    assert len(first.players) == len(second.players)
