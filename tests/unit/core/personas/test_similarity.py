"""The embedding judge's thresholds: F1-optimal fit, held-out metrics, escalation bands."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import f1_score

from llmjudge.core.personas.metrics import wilson_interval
from llmjudge.core.personas.similarity import (
    CORRECT,
    ESCALATE,
    INCORRECT,
    escalate,
    evaluate_threshold,
    fit_escalation,
    fit_threshold,
)

# similarities on a coarse grid, so ties are common
scored = st.lists(
    st.tuples(st.integers(-10, 10).map(lambda v: v / 10), st.booleans()), min_size=1, max_size=60
)


def brute_force_best_f1(s: np.ndarray, y: np.ndarray) -> float:
    candidates = [*np.unique(s), np.inf]
    return max(f1_score(y, s >= t, zero_division=0) for t in candidates)


@given(scored)
def test_fit_reaches_the_best_f1_any_threshold_can(pairs: list[tuple[float, bool]]) -> None:
    s = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    fit = fit_threshold(s, y)
    assert fit.n == len(pairs)
    assert fit.metrics.f1 == pytest.approx(brute_force_best_f1(s, y), abs=1e-12)
    assert fit.metrics.f1 == pytest.approx(f1_score(y, s >= fit.threshold, zero_division=0))
    # the threshold sits in a gap: equal similarities always get the same label
    predicted = s >= fit.threshold
    for value in np.unique(s):
        assert len(set(predicted[s == value])) == 1


def test_separable_pairs_get_a_threshold_in_the_gap() -> None:
    fit = fit_threshold([0.9, 0.8, 0.85, 0.3, 0.4, 0.2], [True, True, True, False, False, False])
    assert fit.metrics.f1 == 1.0 and fit.metrics.accuracy == 1.0
    assert fit.threshold == pytest.approx(0.6)
    # all correct: accept everything (threshold at the lowest similarity)
    assert fit_threshold([0.5, 0.7], [True, True]).threshold == 0.5
    # nothing correct: F1 is 0 whatever the threshold; the highest one accepts nothing
    none = fit_threshold([0.5, 0.7], [False, False])
    assert none.threshold > 0.7 and none.metrics.confusion.fp == 0
    assert fit_threshold([], []).n == 0


def test_fit_is_vectorised() -> None:
    rng = np.random.default_rng(0)
    n = 1_000_000
    y = rng.random(n) < 0.6
    s = np.where(y, rng.normal(0.8, 0.1, n), rng.normal(0.5, 0.15, n))
    start = time.perf_counter()
    fit = fit_threshold(s, y)
    elapsed = time.perf_counter() - start
    print(f"\nfit_threshold on {n:,} pairs: {elapsed:.2f} s, F1 {fit.metrics.f1:.3f}")
    assert elapsed < 5.0  # an O(n^2) scan would take hours
    assert 0.55 < fit.threshold < 0.75 and fit.metrics.f1 > 0.85


def test_held_out_metrics_carry_counts_and_intervals() -> None:
    report = evaluate_threshold([0.9, 0.2, 0.7, 0.4], [True, False, False, True], 0.6)
    assert report.n == 4
    assert (report.confusion.tp, report.confusion.fp, report.confusion.fn) == (1, 1, 1)
    assert report.precision.n == 2 and report.f1.low < report.f1.value < report.f1.high
    with pytest.raises(ValueError):
        evaluate_threshold([0.1], [True, False], 0.5)
    with pytest.raises(ValueError):
        fit_threshold([float("nan")], [True])


def test_escalate_decides_the_ends_and_passes_on_the_middle() -> None:
    out = escalate([0.95, 0.9, 0.6, 0.3, 0.2], accept_at=0.9, reject_below=0.3)
    assert out.tolist() == [CORRECT, CORRECT, ESCALATE, ESCALATE, INCORRECT]
    with pytest.raises(ValueError):
        escalate([0.5], accept_at=0.3, reject_below=0.6)


def test_fit_escalation_on_a_good_embedding() -> None:
    rng = np.random.default_rng(5)
    y = rng.random(2000) < 0.5
    s = np.where(y, rng.normal(0.75, 0.1, 2000), rng.normal(0.5, 0.1, 2000))
    fit = fit_escalation(s, y, min_precision=0.95)
    print(f"\nescalation: {fit}")
    assert fit.reject_below < fit.accept_at
    assert fit.accepted + fit.rejected + fit.escalated == fit.n == 2000
    assert fit.accepted > 500 and fit.rejected > 500 and fit.escalated > 0
    accepted = s >= fit.accept_at
    rejected = s < fit.reject_below
    assert wilson_interval(int(y[accepted].sum()), int(accepted.sum()))[0] >= 0.95
    assert wilson_interval(int((~y[rejected]).sum()), int(rejected.sum()))[0] >= 0.95


def test_fit_escalation_draws_no_band_on_a_handful_of_pairs() -> None:
    fit = fit_escalation([0.9, 0.8, 0.2], [True, True, False])
    assert fit.accepted == 0 and fit.rejected == 0 and fit.escalated == 3


@given(scored, st.floats(0.5, 0.99))
def test_escalation_bands_are_trustworthy(pairs: list[tuple[float, bool]], target: float) -> None:
    s = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    fit = fit_escalation(s, y, min_precision=target)
    assert fit.reject_below <= fit.accept_at
    accepted, rejected = s >= fit.accept_at, s < fit.reject_below
    assert fit.accepted == accepted.sum() and fit.rejected == rejected.sum()
    if accepted.any():
        assert wilson_interval(int(y[accepted].sum()), int(accepted.sum()))[0] >= target - 1e-9
