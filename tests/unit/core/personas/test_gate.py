import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.personas.gate import corrected_pass_rate, rogan_gladen


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
    # drawn rates often fall to chance; those rounds widen the interval to [0, 1]
    verdicts = [True] * 60 + [False] * 40
    r = corrected_pass_rate(
        verdicts, tpr=0.625, tnr=0.5, calib_pos=8, calib_neg=8, min_calibration_per_class=8
    )
    assert r.defined
    assert r.ci_low == 0.0 and r.ci_high == 1.0
    # 8 + 8 is below the default minimum of 10 per class: no estimate at all
    default = corrected_pass_rate(verdicts, tpr=0.625, tnr=0.5, calib_pos=8, calib_neg=8)
    assert not default.defined and "at least 10 of each" in (default.reason or "")


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


# -- evidence: Beta posteriors, minimum counts, prompt versions, PPI++ ---------------------


def test_two_plus_two_calibration_fails_closed_and_a_large_good_one_passes() -> None:
    verdicts = [True] * 90 + [False] * 10
    tiny = corrected_pass_rate(
        verdicts, tpr=1.0, tnr=1.0, calib_pos=2, calib_neg=2, min_pass_rate=0.5
    )
    assert not tiny.defined and tiny.passed is False
    assert "2 truly passing and 2 truly failing" in (tiny.reason or "")
    assert "FAIL (cannot be verified)" in tiny.summary
    good = corrected_pass_rate(
        verdicts, tpr=0.95, tnr=0.95, calib_pos=200, calib_neg=200, min_pass_rate=0.75
    )
    assert good.defined and good.passed is True and good.estimator == "rogan_gladen"


def test_a_perfect_record_on_two_pairs_gets_a_wide_interval() -> None:
    """The bug: binomial resampling of 2/2 = 1.0 had zero variance, so [1, 1]."""
    verdicts = [True] * 50 + [False] * 50
    r = corrected_pass_rate(
        verdicts, tpr=1.0, tnr=1.0, calib_pos=2, calib_neg=2, min_calibration_per_class=1
    )
    assert r.defined and r.corrected_pass_rate == pytest.approx(0.5)
    assert r.ci_high - r.ci_low > 0.5  # Beta(2.5, 0.5) puts real mass far below 1
    many = corrected_pass_rate(verdicts, tpr=1.0, tnr=1.0, calib_pos=500, calib_neg=500)
    assert many.ci_high - many.ci_low < 0.25


def test_calibration_on_another_prompt_version_fails_closed() -> None:
    kwargs = {"tpr": 0.9, "tnr": 0.9, "calib_pos": 100, "calib_neg": 100, "min_pass_rate": 0.1}
    r = corrected_pass_rate(
        [True] * 10, calibration_prompt_version=3, judging_prompt_version=4, **kwargs
    )
    assert not r.defined and r.passed is False
    assert r.reason == (
        "the calibration was measured on prompt version 3 but version 4 is judging; "
        "calibrate the current prompt first"
    )
    same = corrected_pass_rate(
        [True] * 10, calibration_prompt_version=4, judging_prompt_version=4, **kwargs
    )
    assert same.defined and same.passed is True


def judged_batch(
    rng: np.random.Generator, n: int, p: float, accuracy: float, n_human: int
) -> tuple[list[bool], list[bool | None], np.ndarray]:
    truth = rng.random(n) < p
    judge = np.where(rng.random(n) < accuracy, truth, ~truth)
    labelled = np.zeros(n, dtype=bool)
    labelled[rng.choice(n, n_human, replace=False)] = True
    human = [bool(t) if k else None for t, k in zip(truth, labelled, strict=True)]
    return judge.tolist(), human, truth


def test_ppi_is_used_with_enough_human_labels_and_both_are_reported() -> None:
    rng = np.random.default_rng(3)
    judge, human, _ = judged_batch(rng, 400, 0.7, 0.9, 40)
    kwargs = {"tpr": 0.9, "tnr": 0.9, "calib_pos": 100, "calib_neg": 100}
    r = corrected_pass_rate(judge, human_pass=human, min_pass_rate=0.5, **kwargs)
    assert r.estimator == "ppi" and r.n_human == 40
    assert [e.estimator for e in r.estimates] == ["rogan_gladen", "ppi"]
    assert all(e.defined and e.low <= e.value <= e.high for e in r.estimates)
    ppi = r.estimates[1]
    assert (r.corrected_pass_rate, r.ci_low, r.ci_high) == (ppi.value, ppi.low, ppi.high)
    assert ppi.lam is not None and 0.0 < ppi.lam <= 1.0
    assert "by PPI++ with 40 human labels" in r.summary
    # Below the minimum the gate keeps Rogan-Gladen but still reports PPI++.
    few = [h if i < 100 else None for i, h in enumerate(human)]
    r_few = corrected_pass_rate(judge, human_pass=few, **kwargs)
    assert r_few.estimator == "rogan_gladen" and 0 < r_few.n_human < 30
    assert len(r_few.estimates) == 2
    # PPI++ needs no calibration: a 2 + 2 calibration does not block it.
    r_uncal = corrected_pass_rate(
        judge, human_pass=human, tpr=1.0, tnr=1.0, calib_pos=2, calib_neg=2, min_pass_rate=0.5
    )
    assert r_uncal.defined and r_uncal.estimator == "ppi" and not r_uncal.estimates[0].defined


def test_ppi_without_unlabelled_items_is_the_human_rate_with_its_wilson_interval() -> None:
    from llmjudge.core.personas.gate import ppi_pass_rate
    from llmjudge.core.personas.metrics import wilson_interval

    human = [True] * 30 + [False] * 10
    judge = [True] * 40
    r = ppi_pass_rate(judge, human)
    assert r.lam == 0.0 and r.value == pytest.approx(0.75)
    assert (r.low, r.high) == pytest.approx(wilson_interval(30, 40))
    none = ppi_pass_rate([True, False], [None, None])
    assert not none.defined and none.reason
    with pytest.raises(ValueError):
        ppi_pass_rate([True], [True, False])


def test_ppi_interval_is_never_zero_width() -> None:
    from llmjudge.core.personas.gate import ppi_pass_rate

    # the judge agrees with every human, and every item passes
    r = ppi_pass_rate([True] * 200, [True] * 40 + [None] * 160, lam=1.0)
    assert r.defined and r.value == 1.0 and r.low < 0.99


def coverage(estimator: str, trials: int, seed: int) -> tuple[float, float]:
    """Share of seeded trials whose 95% interval holds the true rate, and mean width."""
    rng = np.random.default_rng(seed)
    p, accuracy = 0.7, 0.85
    hits, widths = 0, []
    for trial in range(trials):
        if estimator == "ppi":
            judge, human, _ = judged_batch(rng, 600, p, accuracy, 60)
            r = corrected_pass_rate(
                judge, human_pass=human, tpr=0.5, tnr=0.5, calib_pos=0, calib_neg=0
            )
        else:
            # TPR/TNR are themselves measured on 60 + 40 calibration pairs
            tpr_hat = rng.binomial(60, accuracy) / 60
            tnr_hat = rng.binomial(40, accuracy) / 40
            judge, _, _ = judged_batch(rng, 600, p, accuracy, 0)
            r = corrected_pass_rate(
                judge, tpr=tpr_hat, tnr=tnr_hat, calib_pos=60, calib_neg=40, seed=trial, rounds=1000
            )
        assert r.defined and r.estimator == estimator
        hits += r.ci_low <= p <= r.ci_high
        widths.append(r.ci_high - r.ci_low)
    return hits / trials, float(np.mean(widths))


@pytest.mark.parametrize("estimator", ["rogan_gladen", "ppi"])
def test_seeded_coverage_is_near_nominal(estimator: str) -> None:
    cover, width = coverage(estimator, 300, seed=2026)
    print(
        f"\n{estimator}: 95% interval coverage {cover:.3f} over 300 trials, mean width {width:.3f}"
    )
    assert 0.91 <= cover <= 0.99


def test_ppi_is_narrower_than_human_labels_alone_with_a_good_judge() -> None:
    from llmjudge.core.personas.gate import ppi_pass_rate
    from llmjudge.core.personas.metrics import wilson_interval

    rng = np.random.default_rng(11)
    ratios = []
    for _ in range(50):
        judge, human, _ = judged_batch(rng, 2000, 0.7, 0.95, 100)
        ppi = ppi_pass_rate(judge, human)
        labels = [h for h in human if h is not None]
        low, high = wilson_interval(sum(labels), len(labels))
        ratios.append((ppi.high - ppi.low) / (high - low))
    assert max(ratios) < 1.0 and np.mean(ratios) < 0.6


@given(
    st.lists(st.tuples(st.booleans(), st.sampled_from([True, False, None])), max_size=80),
    st.integers(0, 60),
    st.integers(0, 60),
    st.integers(0, 60),
    st.integers(0, 60),
)
def test_every_reported_estimate_is_well_formed(
    items: list[tuple[bool, bool | None]], tp: int, fn: int, tn: int, fp: int
) -> None:
    judge = [j for j, _ in items]
    human = [h for _, h in items]
    pos, neg = tp + fn, tn + fp
    r = corrected_pass_rate(
        judge,
        tpr=tp / pos if pos else 0.0,
        tnr=tn / neg if neg else 0.0,
        calib_pos=pos,
        calib_neg=neg,
        human_pass=human,
        min_pass_rate=0.5,
        rounds=100,
    )
    assert r.passed is (r.defined and r.ci_low is not None and r.ci_low >= 0.5)
    assert r.estimator in {e.estimator for e in r.estimates}
    for e in r.estimates:
        if e.defined:
            assert 0.0 <= e.low <= e.value <= e.high <= 1.0
            # Never the zero-width interval of the old bootstrap, except where every
            # posterior draw clips at a bound of [0, 1] (and such an interval never passes).
            assert e.high > e.low or (e.high <= 0.0 and not r.passed) or e.low >= 1.0
        else:
            assert e.reason and e.value is None
    if r.estimator == "rogan_gladen" and r.defined:
        assert min(pos, neg) >= 10


def _result(verdicts: list[dict[str, object]], passed: bool | None) -> dict[str, object]:
    return {
        "persona_id": 3,
        "persona_name": "Support | judge",
        "prompt_version": 2,
        "n": len(verdicts),
        "verdicts": verdicts,
        "observed_pass_rate": 0.5,
        "corrected_pass_rate": 0.4567,
        "ci_low": 0.21,
        "ci_high": 0.7,
        "min_pass_rate": 0.9,
        "passed": passed,
        "reason": None,
        "summary": "FAIL (lower bound below threshold)",
        "calibration": {"tpr": 0.9, "tnr": 0.8, "calib_pos": 10, "calib_neg": 12},
        "warnings": ["few held-out answers"],
    }


def test_junit_has_one_case_per_item_with_the_judges_reason() -> None:
    from xml.etree import ElementTree

    from llmjudge.personas.evaluate import EvaluateItem
    from llmjudge.personas.gate_cli import junit_xml

    items = [EvaluateItem(input=f"question {i}\nsecond line", output="a") for i in range(3)]
    verdicts = [
        {"index": 2, "label": "incorrect", "passed": False, "reasoning": "Wrong\x01 <b>", "parse_error": False},
        {"index": 0, "label": "correct", "passed": True, "reasoning": "fine", "parse_error": False},
        {"index": 1, "label": "incorrect", "passed": False, "reasoning": "", "parse_error": True},
    ]  # fmt: skip
    suite = ElementTree.fromstring(junit_xml(_result(verdicts, False), items).encode())
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [f"item {i + 1}: question {i}" for i in range(3)]
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")
    assert cases[0].find("failure") is None
    assert cases[1].find("failure").get("message").startswith("the judge's reply was unreadable")
    # A control character XML cannot carry is replaced; markup stays text.
    assert cases[2].find("failure").text == "Wrong\ufffd <b>"


def test_step_summary_is_one_safe_markdown_table_row_per_failure() -> None:
    from llmjudge.personas.evaluate import EvaluateItem
    from llmjudge.personas.gate_cli import step_summary

    items = [EvaluateItem(input="a | b", output="x"), EvaluateItem(input="ok", output="y")]
    verdicts = [
        {"index": 0, "label": "incorrect", "passed": False, "reasoning": "line one\nline <two>", "parse_error": False},
        {"index": 1, "label": "correct", "passed": True, "reasoning": "fine", "parse_error": False},
    ]  # fmt: skip
    text = step_summary(_result(verdicts, False), items)
    assert text.startswith("### llmjudge gate: FAIL (Support \\| judge)")
    assert "| 2 | 0.500 | 0.457 | 0.210 to 0.700 | 0.900 |" in text
    assert "#### Failed items (1)" in text
    assert "| 1 | a \\| b | line one |" in text
    assert "fine" not in text and "<two>" not in text
    assert step_summary(_result([], None), []).startswith("### llmjudge gate: NO THRESHOLD")
