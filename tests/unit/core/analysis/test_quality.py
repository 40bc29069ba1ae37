"""Tournament quality: separability, rank stability, reference agreement, the bias test,
and round histogram bins."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest, kendalltau, spearmanr

from llmjudge.core.analysis.quality import (
    dominant_position_bias,
    ordinal_ranks,
    rank_stability,
    reference_agreement,
    separability,
)
from llmjudge.core.charts.scales import nice_bin_edges, nice_step

intervals = st.lists(
    st.tuples(st.integers(-20, 20), st.integers(0, 10)), min_size=0, max_size=30
).map(
    lambda rows: (
        np.array([r[0] for r in rows], float),
        np.array([r[0] + r[1] for r in rows], float),
    )
)


@settings(max_examples=60, deadline=None)
@given(bounds=intervals, seed=st.integers(0, 2**32 - 1))
def test_separability_counts_non_overlapping_pairs(
    bounds: tuple[np.ndarray, np.ndarray], seed: int
) -> None:
    low, high = bounds
    brute = sum(
        1
        for i, j in itertools.combinations(range(low.size), 2)
        if low[i] > high[j] or low[j] > high[i]
    )
    got = separability(low, high)
    assert got.separated_pairs == brute
    assert got.pairs == low.size * (low.size - 1) // 2 and got.players == low.size
    assert got.share == (brute / got.pairs if got.pairs else None)
    order = np.random.default_rng(seed).permutation(low.size)
    assert separability(low[order], high[order]) == got


def test_separability_of_the_top_k() -> None:
    low = np.array([10.0, 0.0, 20.0, 1.0])
    high = np.array([15.0, 12.0, 25.0, 2.0])
    top = separability(low, high, scores=np.array([3.0, 2.0, 4.0, 1.0]), top_k=2)
    assert (top.players, top.separated_pairs, top.share) == (2, 1, 1.0)
    top3 = separability(low, high, top_k=3)  # by midpoint: 22.5, 12.5, 6
    assert (top3.separated_pairs, top3.pairs) == (2, 3)
    assert separability(low[:1], high[:1]).share is None


def test_rank_stability_of_a_fixed_and_a_swapping_pair() -> None:
    estimate = np.array([3.0, 2.0, 1.0])
    samples = np.array([[3.0, 2.0, 1.0], [3.0, 1.0, 2.0], [3.0, 2.0, 1.0], [3.0, 1.0, 2.0]])
    got = rank_stability(estimate, samples)
    assert got.rank.tolist() == [1, 2, 3]
    assert got.mean_abs_shift.tolist() == [0.0, 0.5, 0.5]
    assert got.held_share.tolist() == [1.0, 0.5, 0.5]
    assert got.overall_mean_abs_shift == pytest.approx(1.0 / 3.0)
    assert got.rounds == 4
    assert rank_stability(estimate, np.empty((0, 3))).overall_mean_abs_shift is None


def test_ordinal_ranks_row_wise_ties_share_the_best() -> None:
    assert ordinal_ranks(np.array([[1.0, 3.0, 3.0], [2.0, 1.0, 0.0]])).tolist() == [
        [3, 1, 1],
        [1, 2, 3],
    ]


def test_reference_agreement_matches_scipy_and_skips_missing() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, np.nan])
    y = np.array([2.0, 1.0, 4.0, 3.0, 6.0, 1.0])
    got = reference_agreement(x, y)
    assert got.n == 5
    assert got.spearman == pytest.approx(spearmanr(x[:5], y[:5]).statistic)
    assert got.kendall == pytest.approx(kendalltau(x[:5], y[:5]).statistic)
    assert got.kendall == pytest.approx(0.6)  # 8 concordant, 2 discordant of 10
    assert got.spearman_p is not None and 0 < got.spearman_p < 1
    assert reference_agreement(x[:2], y[:2]).spearman is None
    assert reference_agreement(np.ones(4), np.arange(4.0)).kendall is None


def test_dominant_bias_is_named_only_when_the_test_rejects() -> None:
    weak = dominant_position_bias(11, 7)  # the larger count, but p = 0.48
    assert weak.dominant == "none"
    assert weak.p_value == pytest.approx(binomtest(11, 18, 0.5).pvalue)
    strong = dominant_position_bias(30, 10)
    assert strong.dominant == "primacy" and strong.p_value is not None and strong.p_value < 0.05
    assert dominant_position_bias(3, 20).dominant == "recency"
    assert dominant_position_bias(0, 0).p_value is None
    # the exact 5% boundary: 15 of 20 rejects (p = 0.041), 14 of 20 does not (p = 0.115)
    assert dominant_position_bias(15, 5).dominant == "primacy"
    assert dominant_position_bias(14, 6).dominant == "none"


def test_nice_bin_edges_examples() -> None:
    assert nice_bin_edges(np.array([1403.7, 1688.2])).tolist() == [
        1400.0,
        1450.0,
        1500.0,
        1550.0,
        1600.0,
        1650.0,
        1700.0,
    ]
    assert nice_bin_edges(np.array([0.02, 0.97]), 5).tolist() == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_bin_edges(np.array([3.0, 3.0])).tolist() == [3.0, 4.0]
    assert nice_bin_edges(np.array([np.nan])).size == 0
    assert nice_step(0.9, 4) == 0.25


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50),
    target=st.integers(1, 20),
)
@example(values=[0.0, 2.6347998903410063e-12], target=5)  # edges rounded to 0 once
def test_nice_bin_edges_cover_values_with_round_steps(values: list[float], target: int) -> None:
    v = np.array(values)
    edges = nice_bin_edges(v, target)
    assert edges[0] <= v.min() and edges[-1] >= v.max()
    assert 1 <= edges.size - 1 <= max(target, 2)
    steps = np.diff(edges)
    np.testing.assert_allclose(steps, steps[0], rtol=1e-6)
    mantissa = steps[0] / 10.0 ** np.floor(np.log10(steps[0]))
    assert any(abs(mantissa - m) < 1e-6 for m in (1.0, 2.0, 2.5, 5.0))
    counts, _ = np.histogram(v, bins=edges)
    assert counts.sum() == v.size
