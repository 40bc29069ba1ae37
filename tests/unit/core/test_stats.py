"""core/stats: the one Wilson interval, the one Cohen's kappa and the bootstrap."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from llmjudge.core.stats import (
    Z95,
    bootstrap_intervals,
    cohen_kappa,
    kappa_from_confusion,
    wilson_bounds,
    wilson_interval,
    z_score,
)

counts = st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))
labels = st.integers(1, 80).flatmap(
    lambda n: st.tuples(
        st.lists(st.sampled_from("ABC"), min_size=n, max_size=n),
        st.lists(st.sampled_from("ABC"), min_size=n, max_size=n),
    )
)


def reference_wilson(k: float, n: float, z: float) -> tuple[float, float]:
    """The textbook formula, written out independently."""
    p = k / n
    denominator = 1 + z**2 / n
    centre = p + z**2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return (centre - spread) / denominator, (centre + spread) / denominator


@given(counts, st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_wilson_matches_the_formula_holds_the_share_and_stays_in_unit_range(
    kn: tuple[int, int], confidence: float
) -> None:
    k, n = kn
    interval = wilson_interval(k, n, confidence)
    assert interval is not None
    low, high = interval
    ref_low, ref_high = reference_wilson(k, n, z_score(confidence))
    assert low == pytest.approx(max(ref_low, 0.0), abs=1e-12)
    assert high == pytest.approx(min(ref_high, 1.0), abs=1e-12)
    assert 0.0 <= low <= k / n <= high <= 1.0
    assert high - low > 0.0
    if k == 0:
        assert low == 0.0  # exact at the ends
    if k == n:
        assert high == 1.0


def test_wilson_hand_worked_and_undefined() -> None:
    # 8 of 10 at 95 %: centre (0.8 + z²/20) / (1 + z²/10)
    low, high = wilson_interval(8, 10)  # type: ignore[misc]
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 0) is None  # no evidence: undefined, not (0, 1) or NaN
    for bad in ((3, 2), (-1, 2), (1, -1)):
        with pytest.raises(ValueError):
            wilson_interval(*bad)
    with pytest.raises(ValueError):
        wilson_interval(1, 2, confidence=1.0)
    with pytest.raises(ValueError):
        wilson_interval(0, 0, confidence=0.0)


def test_wilson_bounds_is_the_scalar_elementwise_and_nan_without_data() -> None:
    wins = np.array([6.0, 0.0, 5.0, 2.5])
    n = np.array([6, 3, 0, 7])
    low, high = wilson_bounds(wins, n, 0.9)
    assert math.isnan(low[2]) and math.isnan(high[2])
    for i in (0, 1, 3):
        assert (low[i], high[i]) == wilson_interval(wins[i], n[i], 0.9)
    assert low[1] == 0.0 and high[0] == 1.0


def test_z_score() -> None:
    assert z_score(0.95) == Z95
    assert z_score(0.9) == pytest.approx(1.6448536, abs=1e-6)


@given(labels)
def test_kappa_equals_scikit_learn(pair: tuple[list[str], list[str]]) -> None:
    first, second = pair
    ours = cohen_kappa(first, second)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = cohen_kappa_score(first, second)
    if math.isnan(theirs):
        assert ours is None
    else:
        assert ours == pytest.approx(theirs, abs=1e-12)


def test_kappa_undefined_is_none() -> None:
    assert cohen_kappa([], []) is None
    assert cohen_kappa(["A", "A"], ["A", "A"]) is None  # one class: expected agreement 1
    assert cohen_kappa(["A", "A", "B", "B"], ["A", "B", "B", "B"]) == pytest.approx(0.5)
    assert cohen_kappa([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)  # any hashable class
    with pytest.raises(ValueError):
        cohen_kappa(["A"], [])


def test_kappa_from_confusion_is_vectorised_over_counts_and_shares() -> None:
    m = np.array([[[2, 1], [0, 1]], [[3, 0], [0, 0]], [[0, 0], [0, 0]]])
    values = kappa_from_confusion(m)
    assert values[0] == pytest.approx(cohen_kappa_score([0, 0, 0, 1], [0, 0, 1, 1]))
    assert math.isnan(values[1]) and math.isnan(values[2])
    assert kappa_from_confusion(m[0] / 4) == pytest.approx(values[0])  # shares too


def test_bootstrap_is_seeded_holds_the_value_and_none_without_items() -> None:
    rng = np.random.default_rng(0)
    parts = rng.integers(0, 2, size=(50, 2)).astype(float)
    parts[:, 1] = 1.0

    def share(sums: np.ndarray) -> np.ndarray:
        return sums[..., 0] / sums[..., 1]

    first = bootstrap_intervals(parts, [share], 500, 3)
    assert first == bootstrap_intervals(parts, [share], 500, 3)
    interval = first[0]
    assert interval is not None
    assert interval[0] <= parts[:, 0].mean() <= interval[1]
    assert bootstrap_intervals(parts[:0], [share], 500, 3) == [None]
    assert bootstrap_intervals(parts, [lambda s: np.full(len(s), np.nan)], 10, 0) == [None]
