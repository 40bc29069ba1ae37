"""Grading statistics against scipy and scikit-learn on the same data, and the pairwise
preferences grades imply."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn.metrics import cohen_kappa_score, mean_absolute_error

from llmjudge.core.analysis.scores import (
    _resampled_ranks,
    derived_pairs,
    distribution,
    mean_scores,
    score_agreement,
)
from llmjudge.core.stats import weighted_kappa


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(3, 60),
    seed=st.integers(0, 10_000),
    noise=st.integers(0, 4),
)
def test_agreement_figures_equal_scipy_and_sklearn(n: int, seed: int, noise: int) -> None:
    rng = np.random.default_rng(seed)
    reference = rng.integers(1, 11, n).astype(float)
    judge = np.clip(reference + rng.integers(-noise, noise + 1, n), 1, 10)
    found = score_agreement(judge, reference, (1, 10), rounds=50, seed=seed)
    assert found.n == n
    constant = np.all(judge == judge[0]) or np.all(reference == reference[0])
    if constant:
        assert found.spearman is None and found.pearson is None
    else:
        assert found.spearman == pytest.approx(stats.spearmanr(judge, reference).statistic)
        assert found.pearson == pytest.approx(stats.pearsonr(judge, reference).statistic)
    assert found.mae == pytest.approx(mean_absolute_error(reference, judge))
    expected = cohen_kappa_score(
        judge.astype(int), reference.astype(int), weights="quadratic", labels=list(range(1, 11))
    )
    if np.isnan(expected):
        assert found.qwk is None
    else:
        assert found.qwk == pytest.approx(expected)
        assert weighted_kappa(
            judge.astype(int).tolist(), reference.astype(int).tolist(), range(1, 11)
        ) == pytest.approx(expected)


def test_agreement_intervals_hold_the_figure_and_narrow_with_evidence() -> None:
    rng = np.random.default_rng(4)
    widths = []
    for n in (20, 400):
        ref = rng.integers(1, 11, n).astype(float)
        judge = np.clip(ref + rng.normal(0, 1.5, n).round(), 1, 10)
        found = score_agreement(judge, ref, (1, 10), rounds=300, seed=1)
        for name in ("spearman", "pearson", "mae", "qwk"):
            low, high = found.intervals[name]
            assert low <= getattr(found, name) <= high
        widths.append(found.intervals["pearson"][1] - found.intervals["pearson"][0])
    assert widths[1] < widths[0] / 2
    assert score_agreement([], [], (1, 10)).n == 0


def test_means_carry_student_t_intervals() -> None:
    values = [3.0, 5.0, 4.0, 8.0, 6.0]
    (found,) = mean_scores([7] * 5, values)
    low, high = stats.t.interval(0.95, df=4, loc=np.mean(values), scale=stats.sem(values))
    assert (found.n, found.mean) == (5, 5.2)
    assert (found.low, found.high) == (pytest.approx(low), pytest.approx(high))
    (lone,) = mean_scores([1], [4.0])
    assert lone.low is None and lone.high is None and lone.sd is None  # undefined


def test_grades_imply_pairwise_preferences_on_shared_prompts() -> None:
    # threads 1, 2, 3 answer k (pillars 10, 20, 30); 4 answers k in pillar 10 as well;
    # 5 answers m alone; 6 has no key. Thread 1 is graded twice (mean 6).
    pairs = derived_pairs(
        [1, 1, 2, 3, 4, 5, 6],
        [10, 10, 20, 30, 10, 20, 30],
        ["k", "k", "k", "k", "k", "m", None],
        [5, 7, 6, 2, 9, 4, 8],
    )
    got = {
        (int(a), int(b)): float(s)
        for a, b, s in zip(pairs.thread_a, pairs.thread_b, pairs.score_a, strict=True)
    }
    # same pillar (1, 4) never meet; 1 ties 2 at 6.0
    assert got == {(1, 2): 0.5, (1, 3): 1.0, (2, 3): 1.0, (2, 4): 0.0, (3, 4): 0.0}
    assert pairs.unkeyed == 1


def test_the_distribution_bins_whole_points_per_pillar() -> None:
    bins = distribution([1, 1, 2, 2, 2], [1, 10, 10, 10, 5.4], (1, 10))
    assert [b.low for b in bins] == list(range(1, 11))
    assert bins[0].counts == {1: 1} and bins[9].counts == {1: 1, 2: 2}
    assert bins[4].counts == {2: 1}  # 5.4 is in the bin of 5
    wide = distribution([1, 1], [0, 100], (0, 100))
    assert len(wide) == 10 and wide[0].counts == {1: 1} and wide[-1].counts == {1: 1}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(1, 6) | st.floats(-3, 3, allow_nan=False), min_size=1, max_size=40),
    st.integers(0, 2**32 - 1),
)
def test_resampled_ranks_are_scipys_average_ranks_of_each_resample(
    values: list[float], seed: int
) -> None:
    v = np.asarray(values, dtype=float)
    picks = np.random.default_rng(seed).integers(0, v.size, size=(7, v.size))
    assert np.array_equal(_resampled_ranks(v, picks), stats.rankdata(v[picks], axis=-1))
