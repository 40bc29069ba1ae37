import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    f1_score,
    precision_score,
    recall_score,
)

from llmjudge.core.personas.metrics import (
    Confusion,
    compute_metrics,
    confusion_from_decisions,
    confusion_from_labels,
    metrics_with_intervals,
    wilson_interval,
)

label_pairs = st.integers(min_value=1, max_value=60).flatmap(
    lambda n: st.tuples(
        st.lists(st.booleans(), min_size=n, max_size=n),
        st.lists(st.booleans(), min_size=n, max_size=n),
    )
)


def sklearn_metrics(y_true: list[bool], y_pred: list[bool]) -> dict[str, float]:
    t = [int(v) for v in y_true]
    p = [int(v) for v in y_pred]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "precision": precision_score(t, p, labels=[0, 1], zero_division=0),
            "recall": recall_score(t, p, labels=[0, 1], zero_division=0),
            "f1": f1_score(t, p, labels=[0, 1], zero_division=0),
            "kappa": cohen_kappa_score(t, p, labels=[0, 1], replace_undefined_by=0.0),
            "accuracy": accuracy_score(t, p),
        }


def assert_matches_sklearn(y_true: list[bool], y_pred: list[bool]) -> None:
    m = compute_metrics(confusion_from_labels(y_true, y_pred))
    expected = sklearn_metrics(y_true, y_pred)
    for name, value in expected.items():
        got = getattr(m, name)
        assert not math.isnan(got)
        assert got == pytest.approx(value, abs=1e-12), name
    assert m.n == len(y_true)


@given(label_pairs)
def test_metrics_equal_sklearn_on_random_labels(labels: tuple[list[bool], list[bool]]) -> None:
    assert_matches_sklearn(*labels)


@pytest.mark.parametrize(
    ("y_true", "y_pred"),
    [
        ([True] * 5, [True] * 5),  # both raters one class, same: kappa undefined
        ([False] * 5, [False] * 5),
        ([True] * 5, [False] * 5),
        ([False] * 5, [True] * 5),
        ([True, False, True], [True, True, True]),
        ([True, True, True], [True, False, False]),
        ([False, True, False], [False, False, False]),
        ([False, False], [True, False]),
        ([True], [True]),
        ([True], [False]),
    ],
)
def test_one_class_edge_cases_equal_sklearn(y_true: list[bool], y_pred: list[bool]) -> None:
    assert_matches_sklearn(y_true, y_pred)


def test_undefined_kappa_is_zero_where_sklearn_default_is_nan() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isnan(cohen_kappa_score([1, 1, 1], [1, 1, 1]))
    m = compute_metrics(Confusion(tp=3, tn=0, fp=0, fn=0))
    assert m.kappa == 0.0
    assert (m.precision, m.recall, m.f1, m.accuracy) == (1.0, 1.0, 1.0, 1.0)
    m = compute_metrics(Confusion(tp=0, tn=4, fp=0, fn=0))
    assert (m.precision, m.recall, m.f1, m.kappa, m.accuracy) == (0.0, 0.0, 0.0, 0.0, 1.0)


def test_known_values() -> None:
    m = compute_metrics(Confusion(tp=40, tn=30, fp=10, fn=20))
    assert m.precision == pytest.approx(0.8)
    assert m.recall == pytest.approx(40 / 60)
    assert m.f1 == pytest.approx(80 / 110)
    assert m.accuracy == pytest.approx(0.7)
    # p_o = 0.7, p_e = (50*60 + 50*40) / 100^2 = 0.5
    assert m.kappa == pytest.approx(0.4)
    assert m.n == 100


def test_empty_is_all_zero() -> None:
    m = compute_metrics(confusion_from_labels([], []))
    assert m == compute_metrics(Confusion(0, 0, 0, 0))
    assert (m.precision, m.recall, m.f1, m.kappa, m.accuracy, m.n) == (0, 0, 0, 0, 0, 0)


def test_decisions_map_to_user_definitions() -> None:
    # (judge says correct, human agrees) -> cell
    assert confusion_from_decisions([True], [True]) == Confusion(tp=1, tn=0, fp=0, fn=0)
    assert confusion_from_decisions([False], [True]) == Confusion(tp=0, tn=1, fp=0, fn=0)
    assert confusion_from_decisions([True], [False]) == Confusion(tp=0, tn=0, fp=1, fn=0)
    assert confusion_from_decisions([False], [False]) == Confusion(tp=0, tn=0, fp=0, fn=1)


@given(label_pairs)
def test_decisions_equal_labels_with_human_truth(labels: tuple[list[bool], list[bool]]) -> None:
    judge, agrees = labels
    human = [(j and a) or (not j and not a) for j, a in zip(judge, agrees, strict=True)]
    c = confusion_from_decisions(judge, agrees)
    assert c == confusion_from_labels(human, judge)
    assert c.tp + c.fp == sum(judge)
    assert c.tp + c.tn == sum(agrees)
    assert c.n == len(judge)


def test_length_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        confusion_from_labels([True], [True, False])
    with pytest.raises(ValueError):
        confusion_from_decisions([True, True], [False])


def test_to_dict() -> None:
    d = compute_metrics(Confusion(tp=1, tn=1, fp=1, fn=1)).to_dict()
    assert d["confusion"] == {"tp": 1, "tn": 1, "fp": 1, "fn": 1}
    assert d["n"] == 4
    assert d["accuracy"] == 0.5
    assert set(d) == {"precision", "recall", "f1", "kappa", "accuracy", "n", "confusion"}


# --- held-out split ---------------------------------------------------------------------


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_equals_scipy_and_is_never_zero_width(kn: tuple[int, int]) -> None:
    k, n = kn
    low, high = wilson_interval(k, n)
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert low == pytest.approx(ref.low, abs=1e-9) and high == pytest.approx(ref.high, abs=1e-9)
    assert 0.0 <= low <= k / n <= high <= 1.0
    assert high - low > 0.0


def test_wilson_known_values_and_edges() -> None:
    low, high = wilson_interval(2, 2)
    assert low == pytest.approx(0.3424, abs=1e-4) and high == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)  # no evidence: anything
    assert wilson_interval(0, 5)[0] == 0.0
    for bad in ((3, 2), (-1, 2)):
        with pytest.raises(ValueError):
            wilson_interval(*bad)
    with pytest.raises(ValueError):
        wilson_interval(1, 2, confidence=1.0)


@given(label_pairs)
def test_reported_values_equal_sklearn_and_sit_inside_their_intervals(
    labels: tuple[list[bool], list[bool]],
) -> None:
    y_true, y_pred = labels
    c = confusion_from_labels(y_true, y_pred)
    report = metrics_with_intervals(c, rounds=200, seed=1)
    expected = sklearn_metrics(y_true, y_pred)
    counts = {
        "precision": c.tp + c.fp,
        "recall": c.tp + c.fn,
        "f1": c.n,
        "kappa": c.n,
        "accuracy": c.n,
    }
    for name, value in expected.items():
        est = getattr(report, name)
        assert est.value == pytest.approx(value, abs=1e-12), name
        assert est.low <= est.value <= est.high, name
        assert est.n == counts[name], name
        low_limit = -1.0 if name == "kappa" else 0.0
        assert low_limit <= est.low <= est.high <= 1.0
    assert report.n == len(y_true) and report.confusion == c


def test_a_perfect_record_on_few_pairs_has_a_wide_interval() -> None:
    small = metrics_with_intervals(Confusion(tp=4, tn=3, fp=0, fn=0))
    assert small.f1.value == 1.0 and small.f1.high == 1.0
    assert small.f1.low < 0.8  # a plain bootstrap gives [1, 1] here
    assert small.kappa.low < 0.5
    assert small.precision.method == "wilson" and small.f1.method == "bayesian-bootstrap"
    big = metrics_with_intervals(Confusion(tp=400, tn=300, fp=0, fn=0))
    assert big.f1.low > 0.98


def test_intervals_are_seeded_and_narrow_with_more_pairs() -> None:
    c = Confusion(tp=40, tn=30, fp=10, fn=20)
    assert metrics_with_intervals(c, seed=3) == metrics_with_intervals(c, seed=3)
    assert metrics_with_intervals(c, seed=3).f1 != metrics_with_intervals(c, seed=4).f1
    tenfold = metrics_with_intervals(Confusion(tp=400, tn=300, fp=100, fn=200), seed=3)
    small = metrics_with_intervals(c, seed=3)
    for name in ("precision", "recall", "f1", "kappa", "accuracy"):
        wide, narrow = getattr(small, name), getattr(tenfold, name)
        assert narrow.high - narrow.low < (wide.high - wide.low) / 2, name


def test_empty_report_knows_nothing() -> None:
    report = metrics_with_intervals(Confusion(0, 0, 0, 0))
    for name in ("precision", "recall", "f1", "kappa", "accuracy"):
        est = getattr(report, name)
        assert (est.low, est.high, est.n) == (0.0, 1.0, 0)
    assert set(report.to_dict()["f1"]) == {"value", "low", "high", "n", "method"}
    with pytest.raises(ValueError):
        metrics_with_intervals(Confusion(1, 1, 1, 1), rounds=0)


def test_f1_interval_covers_the_population_f1() -> None:
    """Seeded: judges of known population F1 on 60 pairs; the 95% interval holds it."""
    rng = np.random.default_rng(7)
    shares = np.array([0.35, 0.35, 0.15, 0.15])  # tp, tn, fp, fn
    true_f1 = 2 * 0.35 / (2 * 0.35 + 0.15 + 0.15)
    hits = 0
    trials = 300
    for trial in range(trials):
        tp, tn, fp, fn = (int(x) for x in rng.multinomial(60, shares))
        report = metrics_with_intervals(Confusion(tp, tn, fp, fn), rounds=500, seed=trial)
        hits += report.f1.low <= true_f1 <= report.f1.high
    print(f"\nF1 interval coverage on 60 pairs: {hits / trials:.3f} over {trials} trials")
    assert 0.9 <= hits / trials <= 0.99
