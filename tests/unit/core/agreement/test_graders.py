"""Agreement between graders: Krippendorff's interval alpha against Krippendorff's worked
example, a direct double loop over pairs of grades and the ``krippendorff`` package;
hypothesis properties (invariances, bounds); two graders' figures against scipy and
scikit-learn; the lenient or severe grader named only with enough evidence."""

from __future__ import annotations

import itertools
import math

import krippendorff
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import cohen_kappa_score

from llmjudge.core.agreement.graders import (
    MIN_OFFSET_ITEMS,
    alpha_interval_estimate,
    deviating_member,
    grade_offset,
    krippendorff_alpha_interval,
    pair_agreement,
)
from llmjudge.core.agreement.people import krippendorff_alpha_nominal
from llmjudge.core.analysis.scores import MeanScore

NA = math.nan
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: four
# observers, twelve units, values 1-5 with missing data; published alpha_interval = 0.849
# (and alpha_nominal = 0.743). Rows are the observers; our matrix is units x observers.
WORKED = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, NA, NA, NA],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NA, 3],
        [NA, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NA],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NA],
    ]
).T


def double_loop_alpha(grades: np.ndarray) -> float | None:
    """Krippendorff's definition written out: every ordered pair of grades within an item
    (weighted 1 / (m_u - 1)) against every ordered pair of all pairable grades."""
    units = [[v for v in row if not math.isnan(v)] for row in grades.tolist()]
    units = [u for u in units if len(u) >= 2]
    values = [v for u in units for v in u]
    n = len(values)
    if n < 2:
        return None
    observed = 0.0
    for u in units:
        for i, j in itertools.permutations(range(len(u)), 2):
            observed += (u[i] - u[j]) ** 2 / (len(u) - 1)
    expected = 0.0
    for i, j in itertools.permutations(range(n), 2):
        expected += (values[i] - values[j]) ** 2
    if expected == 0:
        return None
    return 1.0 - (n - 1) * observed / expected


def test_the_worked_example_gives_krippendorffs_published_alpha() -> None:
    value = krippendorff_alpha_interval(WORKED)
    assert value == pytest.approx(0.849, abs=5e-4)
    assert value == pytest.approx(double_loop_alpha(WORKED), rel=1e-12)
    found = alpha_interval_estimate(WORKED, rounds=2000, seed=1)
    assert found.n == 11  # the twelfth unit has one value: not pairable
    assert found.low is not None and found.high is not None
    assert found.low < found.value <= found.high <= 1.0


# items x graders, integer grades 1-10 with some missing
_GRADES = st.integers(2, 25).flatmap(
    lambda items: st.integers(2, 5).flatmap(
        lambda graders: st.tuples(
            arrays(np.int64, (items, graders), elements=st.integers(1, 10)),
            arrays(np.bool_, (items, graders), elements=st.booleans()),
        )
    )
)


def _with_missing(drawn: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    grades, missing = drawn
    out = grades.astype(float)
    out[missing] = np.nan
    return out


@settings(max_examples=200, deadline=None)
@given(_GRADES)
def test_alpha_equals_the_double_loop_and_the_krippendorff_package(
    drawn: tuple[np.ndarray, np.ndarray],
) -> None:
    grades = _with_missing(drawn)
    mine, direct = krippendorff_alpha_interval(grades), double_loop_alpha(grades)
    if direct is None:
        assert mine is None
        return
    assert mine == pytest.approx(direct, rel=1e-9, abs=1e-9)
    assert mine <= 1.0 + 1e-12
    assert mine == pytest.approx(
        krippendorff.alpha(reliability_data=grades.T, level_of_measurement="interval"),
        rel=1e-9,
        abs=1e-9,
    )


@settings(max_examples=150, deadline=None)
@given(
    _GRADES,
    st.floats(-50, 50),
    st.floats(0.1, 20),
    st.randoms(use_true_random=False),
)
def test_alpha_ignores_shift_scale_and_the_order_of_items_and_graders(
    drawn: tuple[np.ndarray, np.ndarray], shift: float, scale: float, rnd: object
) -> None:
    grades = _with_missing(drawn)
    base = krippendorff_alpha_interval(grades)
    rows = np.array(rnd.sample(range(grades.shape[0]), grades.shape[0]))  # type: ignore[attr-defined]
    cols = np.array(rnd.sample(range(grades.shape[1]), grades.shape[1]))  # type: ignore[attr-defined]
    moved = krippendorff_alpha_interval(grades[rows][:, cols] * scale + shift)
    if base is None:
        assert moved is None
    else:
        assert moved == pytest.approx(base, rel=1e-7, abs=1e-7)


@settings(max_examples=150, deadline=None)
@given(
    arrays(np.int64, st.tuples(st.integers(2, 30), st.integers(2, 4)), elements=st.integers(0, 1))
)
def test_on_two_values_interval_alpha_is_nominal_alpha(grades: np.ndarray) -> None:
    counts = np.stack([(grades == 0).sum(axis=1), (grades == 1).sum(axis=1), 0 * grades[:, 0]], 1)
    assert krippendorff_alpha_interval(grades.astype(float)) == (
        pytest.approx(krippendorff_alpha_nominal(counts))
        if krippendorff_alpha_nominal(counts) is not None
        else None
    )


def test_alpha_is_one_when_graders_agree_and_undefined_without_variation() -> None:
    same = np.repeat(np.arange(1.0, 9.0)[:, None], 3, axis=1)
    assert krippendorff_alpha_interval(same) == pytest.approx(1.0)
    assert krippendorff_alpha_interval(np.full((5, 3), 7.3)) is None
    assert krippendorff_alpha_interval(np.array([[1.0, NA], [NA, 2.0]])) is None  # unpairable
    none = alpha_interval_estimate(np.full((5, 3), 7.3), rounds=50)
    assert (none.value, none.n, none.low) == (None, 5, None)


def test_pair_agreement_equals_scipy_and_sklearn_over_items_both_graded() -> None:
    rng = np.random.default_rng(3)
    truth = rng.integers(1, 11, 60).astype(float)
    a = np.clip(truth + rng.integers(-1, 2, 60), 1, 10)
    b = np.clip(truth + rng.integers(-2, 3, 60), 1, 10)
    a[[0, 5]] = np.nan
    b[[7]] = np.nan
    found = pair_agreement(a, b, (1, 10), rounds=300, seed=2)
    both = ~np.isnan(a) & ~np.isnan(b)
    x, y = a[both], b[both]
    assert found.n == 57 == found.spearman.n == found.qwk.n
    assert found.spearman.value == pytest.approx(spearmanr(x, y).statistic)
    assert found.pearson.value == pytest.approx(pearsonr(x, y).statistic)
    assert found.mean_abs_difference.value == pytest.approx(np.abs(x - y).mean())
    assert found.qwk.value == pytest.approx(
        cohen_kappa_score(x.astype(int), y.astype(int), weights="quadratic", labels=range(1, 11))
    )
    for e in (found.spearman, found.pearson, found.mean_abs_difference, found.qwk):
        assert e.low is not None and e.low <= e.value <= e.high
    # a mean of grades is not on whole points: no kappa, the rest unchanged
    halves = pair_agreement(a, b + 0.5, (1, 10), rounds=0)
    assert halves.qwk.value is None and halves.spearman.value is not None


def _offset(mean: float, n: int, half: float) -> MeanScore:
    return MeanScore(0, n, mean, 1.0, mean - half, mean + half)


def test_grade_offset_is_the_mean_difference_with_a_t_interval() -> None:
    member = np.array([5.0, 6, 7, NA, 9])
    panel = np.array([4.0, 6, 6, 3, NA])
    o = grade_offset(member, panel)
    assert o is not None and o.n == 3 and o.mean == pytest.approx(2 / 3)
    assert o.low is not None and o.low < o.mean < o.high
    assert grade_offset(np.array([NA]), np.array([1.0])) is None


def test_the_deviating_member_is_named_only_with_enough_evidence() -> None:
    labels = ["a", "b", "c"]
    few = [_offset(2.0, MIN_OFFSET_ITEMS - 1, 0.5), None, _offset(0.1, 5, 0.5)]
    found = deviating_member(few, labels)
    assert found.member is None and f"needs {MIN_OFFSET_ITEMS} items" in found.statement
    assert f"at most {MIN_OFFSET_ITEMS - 1} here" in found.statement
    vague = [_offset(0.3, 40, 0.5), _offset(-0.2, 40, 0.5), _offset(0.0, 40, 0.5)]
    assert deviating_member(vague, labels).member is None
    clear = [_offset(0.6, 40, 0.3), _offset(-0.9, 40, 0.5), _offset(3.0, 10, 0.5)]
    found = deviating_member(clear, labels)
    assert found.member == 1 and "severe" in found.statement and "below" in found.statement
    assert "1 member(s) with fewer than" in found.statement  # c: too few items to judge
    lenient = deviating_member([_offset(0.6, 40, 0.3), None, None], labels)
    assert lenient.member == 0 and "lenient" in lenient.statement
