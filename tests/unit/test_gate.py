import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.personas.gate import corrected_pass_rate, rogan_gladen


def test_rogan_gladen_known_value() -> None:
    assert rogan_gladen(0.6, tpr=0.9, tnr=0.8) == pytest.approx(0.4 / 0.7)
    assert rogan_gladen(0.42, tpr=1.0, tnr=1.0) == pytest.approx(0.42)


def test_rogan_gladen_clips_to_unit_interval() -> None:
    # observed below the false-positive rate alone, and above what a perfect batch gives
    assert rogan_gladen(0.1, tpr=0.9, tnr=0.8) == 0.0
    assert rogan_gladen(0.99, tpr=0.8, tnr=0.9) == 1.0


@pytest.mark.parametrize(("tpr", "tnr"), [(0.5, 0.5), (0.3, 0.7), (0.2, 0.1), (0.0, 0.0)])
def test_rogan_gladen_undefined_at_or_below_chance(tpr: float, tnr: float) -> None:
    assert rogan_gladen(0.5, tpr=tpr, tnr=tnr) is None


@given(st.floats(0, 1), st.floats(0.05, 1), st.floats(0.05, 1))
def test_rogan_gladen_inverts_the_judge_model(p: float, tpr: float, tnr: float) -> None:
    if tpr + tnr <= 1.05:
        return
    observed = p * tpr + (1 - p) * (1 - tnr)
    assert rogan_gladen(observed, tpr=tpr, tnr=tnr) == pytest.approx(p, abs=1e-9)


def simulate_batch(rng: np.random.Generator, n: int, p: float, tpr: float, tnr: float) -> list:
    truth = rng.random(n) < p
    says_pass = np.where(truth, rng.random(n) < tpr, rng.random(n) < 1 - tnr)
    return says_pass.tolist()


@pytest.mark.parametrize(
    ("p", "tpr", "tnr", "calib_pos", "calib_neg", "n"),
    [(0.7, 0.85, 0.8, 150, 100, 300), (0.9, 0.9, 0.7, 120, 40, 200)],
)
def test_interval_covers_true_rate_and_observed_rate_is_biased(
    p: float, tpr: float, tnr: float, calib_pos: int, calib_neg: int, n: int
) -> None:
    rng = np.random.default_rng(12345)
    trials = 200
    covered = naive_covered = 0
    observed, corrected = [], []
    for trial in range(trials):
        # the persona's rates are themselves estimates from its held-out pairs
        tpr_hat = rng.binomial(calib_pos, tpr) / calib_pos
        tnr_hat = rng.binomial(calib_neg, tnr) / calib_neg
        verdicts = simulate_batch(rng, n, p, tpr, tnr)
        r = corrected_pass_rate(
            verdicts, tpr=tpr_hat, tnr=tnr_hat, calib_pos=calib_pos, calib_neg=calib_neg, seed=trial
        )
        assert r.defined
        covered += r.ci_low <= p <= r.ci_high
        half_width = 1.96 * np.sqrt(r.observed_pass_rate * (1 - r.observed_pass_rate) / n)
        naive_covered += abs(r.observed_pass_rate - p) <= half_width
        observed.append(r.observed_pass_rate)
        corrected.append(r.corrected_pass_rate)
    coverage = covered / trials
    assert 0.9 <= coverage <= 1.0
    assert abs(np.mean(corrected) - p) < 0.015
    assert abs(np.mean(observed) - p) > 0.04
    assert naive_covered / trials < 0.75  # a nominal 95% interval around the raw rate


def test_undefined_correction_fails_closed() -> None:
    r = corrected_pass_rate(
        [True] * 80 + [False] * 20, tpr=0.6, tnr=0.4, calib_pos=50, calib_neg=50, min_pass_rate=0.5
    )
    assert not r.defined
    assert r.corrected_pass_rate is None and r.ci_low is None and r.ci_high is None
    assert r.passed is False
    assert r.reason is not None and "TPR + TNR <= 1" in r.reason
    assert r.observed_pass_rate == pytest.approx(0.8)
    assert "FAIL" in r.summary and "80.0%" in r.summary


def test_undefined_without_threshold_has_no_verdict() -> None:
    r = corrected_pass_rate([True, False], tpr=0.5, tnr=0.5, calib_pos=10, calib_neg=10)
    assert not r.defined and r.passed is None and "FAIL" not in r.summary


@pytest.mark.parametrize(
    ("verdicts", "calib_pos", "calib_neg"),
    [([], 50, 50), ([True, False], 0, 50), ([True, False], 50, 0)],
)
def test_no_batch_or_no_calibration_is_undefined(
    verdicts: list, calib_pos: int, calib_neg: int
) -> None:
    r = corrected_pass_rate(
        verdicts, tpr=0.9, tnr=0.9, calib_pos=calib_pos, calib_neg=calib_neg, min_pass_rate=0.1
    )
    assert not r.defined and r.passed is False and r.reason
    assert r.corrected_pass_rate is None


def test_threshold_uses_lower_bound() -> None:
    verdicts = [True] * 180 + [False] * 20  # observed 0.9
    common = {"tpr": 0.95, "tnr": 0.9, "calib_pos": 200, "calib_neg": 100}
    r = corrected_pass_rate(verdicts, **common)
    assert r.passed is None and r.min_pass_rate is None
    assert r.ci_low < r.corrected_pass_rate < r.ci_high
    # corrected point above the threshold, lower bound below it: FAIL
    threshold = (r.ci_low + r.corrected_pass_rate) / 2
    failing = corrected_pass_rate(verdicts, min_pass_rate=threshold, **common)
    assert failing.passed is False
    assert "FAIL (lower bound below threshold)" in failing.summary
    passing = corrected_pass_rate(verdicts, min_pass_rate=r.ci_low - 0.01, **common)
    assert passing.passed is True and "PASS" in passing.summary
    assert (passing.ci_low, passing.ci_high) == (r.ci_low, r.ci_high)


def test_result_fields_and_summary() -> None:
    verdicts = [True] * 175 + [False] * 25
    r = corrected_pass_rate(
        verdicts, tpr=0.9, tnr=0.85, calib_pos=120, calib_neg=80, min_pass_rate=0.9
    )
    assert r.n == 200 and r.defined and r.reason is None
    assert r.observed_pass_rate == pytest.approx(0.875)
    assert r.corrected_pass_rate == pytest.approx(rogan_gladen(0.875, 0.9, 0.85))
    assert (r.tpr, r.tnr, r.min_pass_rate) == (0.9, 0.85, 0.9)
    assert re.fullmatch(
        r"Pass rate 87\.5% observed, \d+\.\d% corrected \(95% CI \d+\.\d%-\d+\.\d%\) "
        r"over 200 outputs; threshold 90\.0%: (PASS|FAIL) \(lower bound .*\)\.",
        r.summary,
    )
    assert (r.passed is True) == (r.ci_low >= 0.9)


def test_bootstrap_is_seeded_and_narrows_with_more_data() -> None:
    kwargs = {"tpr": 0.9, "tnr": 0.8, "calib_pos": 60, "calib_neg": 60}
    small = [True] * 35 + [False] * 15
    a = corrected_pass_rate(small, seed=4, **kwargs)
    assert a == corrected_pass_rate(small, seed=4, **kwargs)
    assert a.ci_low != corrected_pass_rate(small, seed=5, **kwargs).ci_low
    big = corrected_pass_rate(small * 20, seed=4, tpr=0.9, tnr=0.8, calib_pos=1200, calib_neg=1200)
    assert big.ci_high - big.ci_low < (a.ci_high - a.ci_low) / 2
    assert 0.0 <= a.ci_low <= a.ci_high <= 1.0


def test_perfect_judge_is_not_corrected() -> None:
    r = corrected_pass_rate(
        [True] * 30 + [False] * 70, tpr=1.0, tnr=1.0, calib_pos=100, calib_neg=100
    )
    assert r.corrected_pass_rate == pytest.approx(0.3)
    assert r.ci_low < 0.3 < r.ci_high


def test_near_chance_judge_with_little_calibration_gets_a_wide_interval() -> None:
    # resampled rates often fall to chance; those rounds widen the interval to [0, 1]
    r = corrected_pass_rate([True] * 60 + [False] * 40, tpr=0.6, tnr=0.55, calib_pos=8, calib_neg=8)
    assert r.defined
    assert r.ci_low == 0.0 and r.ci_high == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tpr": 1.2},
        {"tnr": -0.1},
        {"min_pass_rate": 1.5},
        {"confidence": 1.0},
        {"rounds": 0},
    ],
)
def test_invalid_arguments_raise(kwargs: dict) -> None:
    args = {"tpr": 0.9, "tnr": 0.9, "calib_pos": 10, "calib_neg": 10} | kwargs
    with pytest.raises(ValueError):
        corrected_pass_rate([True], **args)
