"""Pass/fail gate for CI: the judge's pass rate corrected for the judge's own errors.

Two estimators of the true pass rate of a batch, both reported with their intervals:

Rogan-Gladen (``rogan_gladen``)
    A judge with true-positive rate TPR and true-negative rate TNR reports a pass rate
    p_obs = p * TPR + (1 - p) * (1 - TNR), which is biased unless it is perfect; the
    estimator inverts that with the TPR/TNR measured on the persona's calibration pairs.
    Its interval is a parametric bootstrap that draws TPR, TNR and the batch's observed
    rate from their Beta posteriors under the Jeffreys prior, Beta(x + 1/2, n - x + 1/2).
    The old binomial resampling had zero variance when a measured rate was exactly 0 or 1
    (TPR = TNR = 1 on 2 + 2 pairs gave [1, 1]); a posterior never does. It fails closed
    (no estimate, the gate fails) with fewer than ``MIN_CALIBRATION_PER_CLASS`` (10)
    calibration pairs of either human class, when the calibration was measured on another
    prompt version than the one judging, and when TPR + TNR <= 1.
PPI++ (``ppi``)
    Prediction-powered inference with power tuning (Angelopoulos, Duchi and Zrnic, 2023),
    when some items of the batch carry a human label: the mean of the judge's labels on
    the unlabelled items, plus the rectifier (human minus lambda * judge) averaged over
    the labelled ones; lambda is the variance-minimising weight, clipped to [0, 1]
    (lambda = 0 is the human labels alone). It needs no calibration, only that the
    labelled items are a random sample of the batch. Its interval is the normal one.

The gate uses PPI++ when the batch carries at least ``MIN_HUMAN_LABELS_FOR_PPI`` (30)
human labels, and Rogan-Gladen otherwise; ``GateResult.estimator`` says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from llmjudge.core.personas.metrics import wilson_interval

MIN_CALIBRATION_PER_CLASS = 10
MIN_HUMAN_LABELS_FOR_PPI = 30
ROGAN_GLADEN = "rogan_gladen"
PPI = "ppi"

_CHANCE_REASON = (
    "the judge is no better than chance on its calibration pairs (TPR + TNR <= 1); "
    "the pass rate cannot be corrected"
)
_NO_CALIBRATION_REASON = (
    "the persona's calibration pairs lack truly passing or truly failing examples, "
    "so its TPR or TNR is unknown; the pass rate cannot be corrected"
)
_EMPTY_REASON = "no outputs were judged"
_NO_HUMAN_REASON = "no item of the batch carries a human label"


def _few_calibration_reason(pos: int, neg: int, minimum: int) -> str:
    return (
        f"the calibration has {pos} truly passing and {neg} truly failing pairs; "
        f"at least {minimum} of each are needed to trust its TPR and TNR"
    )


def _version_reason(calibrated: int, judging: int) -> str:
    return (
        f"the calibration was measured on prompt version {calibrated} "
        f"but version {judging} is judging; calibrate the current prompt first"
    )


@dataclass(frozen=True)
class PassRateEstimate:
    """One estimator's corrected pass rate; ``defined`` false (with a reason) fails closed."""

    estimator: str  # ROGAN_GLADEN or PPI
    defined: bool
    value: float | None
    low: float | None
    high: float | None
    n: int  # judged items
    n_human: int  # items with a human label
    reason: str | None
    lam: float | None = None  # PPI++'s power-tuning weight


@dataclass(frozen=True)
class GateResult:
    n: int
    observed_pass_rate: float
    corrected_pass_rate: float | None
    ci_low: float | None
    ci_high: float | None
    tpr: float
    tnr: float
    defined: bool
    reason: str | None
    passed: bool | None  # None only when no threshold was asked for
    min_pass_rate: float | None
    summary: str
    estimator: str = ROGAN_GLADEN  # the estimator the gate used
    estimates: tuple[PassRateEstimate, ...] = ()  # every estimator's result
    n_human: int = 0


def rogan_gladen(observed: float, tpr: float, tnr: float) -> float | None:
    """True pass rate from an observed one: (p_obs + TNR - 1) / (TPR + TNR - 1), in [0, 1].

    None when TPR + TNR <= 1: such a judge carries no information about the true rate.
    """
    denominator = tpr + tnr - 1.0
    if denominator <= 0.0:
        return None
    return min(max((observed + tnr - 1.0) / denominator, 0.0), 1.0)


def _jeffreys(rng: np.random.Generator, successes: int, n: int, rounds: int) -> np.ndarray:
    return rng.beta(successes + 0.5, n - successes + 0.5, rounds)


def rogan_gladen_estimate(
    judge_pass: Sequence[bool],
    *,
    tpr: float,
    tnr: float,
    calib_pos: int,
    calib_neg: int,
    rounds: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    min_calibration_per_class: int = MIN_CALIBRATION_PER_CLASS,
    calibration_prompt_version: int | None = None,
    judging_prompt_version: int | None = None,
) -> PassRateEstimate:
    """The calibration-corrected pass rate and its Beta-posterior bootstrap interval."""
    n = len(judge_pass)
    passes = sum(bool(v) for v in judge_pass)
    reason = None
    if n == 0:
        reason = _EMPTY_REASON
    elif calib_pos <= 0 or calib_neg <= 0:
        reason = _NO_CALIBRATION_REASON
    elif min(calib_pos, calib_neg) < min_calibration_per_class:
        reason = _few_calibration_reason(calib_pos, calib_neg, min_calibration_per_class)
    elif (
        calibration_prompt_version is not None
        and judging_prompt_version is not None
        and calibration_prompt_version != judging_prompt_version
    ):
        reason = _version_reason(calibration_prompt_version, judging_prompt_version)
    corrected = rogan_gladen(passes / n, tpr, tnr) if reason is None else None
    if reason is None and corrected is None:
        reason = _CHANCE_REASON
    if reason is not None or corrected is None:
        return PassRateEstimate(ROGAN_GLADEN, False, None, None, None, n, 0, reason)

    rng = np.random.default_rng(seed)
    # The rates were measured as x / n on the calibration pairs: recover the counts.
    tpr_b = _jeffreys(rng, round(tpr * calib_pos), calib_pos, rounds)
    tnr_b = _jeffreys(rng, round(tnr * calib_neg), calib_neg, rounds)
    p_obs = _jeffreys(rng, passes, n, rounds)
    denominator = tpr_b + tnr_b - 1.0
    undefined = denominator <= 0.0
    safe = np.where(undefined, 1.0, denominator)
    estimate = np.clip((p_obs + tnr_b - 1.0) / safe, 0.0, 1.0)
    # A round where the drawn judge is no better than chance says the true rate could be
    # anything: it counts as 0 for the lower bound and 1 for the upper, widening the
    # interval instead of silently dropping the rounds that argue against the judge.
    alpha = (1.0 - confidence) / 2.0
    low = float(np.quantile(np.where(undefined, 0.0, estimate), alpha))
    high = float(np.quantile(np.where(undefined, 1.0, estimate), 1.0 - alpha))
    if high <= low:
        # Nearly every round fell outside [0, 1] on the same side and was clipped to the
        # boundary. A batch of n items cannot place a rate closer to a boundary than the
        # exact bound of zero events in n, 1 - alpha ** (1 / n): widen to it.
        reach = 1.0 - alpha ** (1.0 / n)
        if low <= 0.0:
            high = max(high, reach)
        else:
            low = min(low, 1.0 - reach)
    return PassRateEstimate(
        ROGAN_GLADEN, True, corrected, min(low, corrected), max(high, corrected), n, 0, None
    )


def ppi_pass_rate(
    judge_pass: Sequence[bool],
    human_pass: Sequence[bool | None],
    *,
    confidence: float = 0.95,
    lam: float | None = None,
) -> PassRateEstimate:
    """PPI++ estimate of the true pass rate from judge labels and some human labels.

    ``human_pass[i]`` is the human's label of item ``i`` or None. With n labelled and N
    unlabelled items, the estimate is ``mean_L(Y) + lam * (mean_U(f) - mean_L(f))`` and
    its variance ``lam^2 Var_U(f) / N + Var_L(Y - lam f) / n``; ``lam`` defaults to the
    power-tuned ``Cov_L(Y, f) / ((1 + n / N) Var(f))`` clipped to [0, 1]. With ``lam`` 0
    (no unlabelled items, or a judge whose labels carry no information) it is the human
    labels' own rate with its Wilson interval. The variances are floored at the Jeffreys
    variance of an event seen zero times, so a judge that agreed with all n humans still
    leaves an interval of the width n pairs can justify, never zero.
    """
    if len(human_pass) != len(judge_pass):
        raise ValueError(f"{len(judge_pass)} judge labels but {len(human_pass)} human labels")
    if lam is not None and not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be within [0, 1], got {lam}")
    f = np.asarray([bool(v) for v in judge_pass], dtype=float)
    known = np.asarray([h is not None for h in human_pass], dtype=bool)
    y = np.asarray([bool(h) for h in human_pass], dtype=float)[known]
    f_l, f_u = f[known], f[~known]
    n, big_n = int(known.sum()), int((~known).sum())
    if n == 0:
        reason = _EMPTY_REASON if len(f) == 0 else _NO_HUMAN_REASON
        return PassRateEstimate(PPI, False, None, None, None, len(f), 0, reason)
    if lam is None:
        var_f = float(f.var())
        if big_n == 0 or n < 2 or var_f == 0.0:
            lam = 0.0
        else:
            cov = float(np.mean((y - y.mean()) * (f_l - f_l.mean())))
            lam = float(np.clip(cov / ((1.0 + n / big_n) * var_f), 0.0, 1.0))
    if big_n == 0:
        lam = 0.0
    if lam == 0.0:
        low, high = wilson_interval(int(y.sum()), n, confidence)
        value = float(y.mean())
        return PassRateEstimate(PPI, True, value, low, high, len(f), n, None, 0.0)
    value = float(y.mean() + lam * (f_u.mean() - f_l.mean()))
    var_rect = max(float(np.var(y - lam * f_l, ddof=1)) if n > 1 else 0.0, _floor(n))
    var_u = max(float(np.var(f_u, ddof=1)) if big_n > 1 else 0.0, _floor(big_n))
    se = float(np.sqrt(lam * lam * var_u / big_n + var_rect / n))
    z = float(norm.ppf(0.5 + confidence / 2.0))
    value_c = min(max(value, 0.0), 1.0)
    low, high = max(0.0, value - z * se), min(1.0, value + z * se)
    return PassRateEstimate(
        PPI, True, value_c, min(low, value_c), max(high, value_c), len(f), n, None, lam
    )


def _floor(n: int) -> float:
    q = 0.5 / (n + 1)  # Jeffreys posterior mean of an event seen 0 times in n
    return q * (1.0 - q)


def corrected_pass_rate(
    judge_pass: Sequence[bool],
    *,
    tpr: float,
    tnr: float,
    calib_pos: int,
    calib_neg: int,
    min_pass_rate: float | None = None,
    rounds: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    min_calibration_per_class: int = MIN_CALIBRATION_PER_CLASS,
    calibration_prompt_version: int | None = None,
    judging_prompt_version: int | None = None,
    human_pass: Sequence[bool | None] | None = None,
    min_human_labels_for_ppi: int = MIN_HUMAN_LABELS_FOR_PPI,
) -> GateResult:
    """Bias-corrected pass rate of a batch with an interval and an optional gate.

    ``calib_pos``/``calib_neg`` are the numbers of truly correct/incorrect calibration
    pairs that ``tpr``/``tnr`` were measured on, on ``calibration_prompt_version``.
    ``human_pass`` (aligned with ``judge_pass``, None where unlabelled) enables PPI++; the
    gate uses it with at least ``min_human_labels_for_ppi`` labels. With ``min_pass_rate``
    the gate passes when the chosen estimator's lower bound reaches it; when that
    estimator is undefined it fails closed.
    """
    for name, value in (("tpr", tpr), ("tnr", tnr)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be within [0, 1], got {value}")
    if min_pass_rate is not None and not 0.0 <= min_pass_rate <= 1.0:
        raise ValueError(f"min_pass_rate must be within [0, 1], got {min_pass_rate}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if min_calibration_per_class < 1:
        raise ValueError("min_calibration_per_class must be at least 1")

    n = len(judge_pass)
    observed = sum(bool(v) for v in judge_pass) / n if n else 0.0
    rg = rogan_gladen_estimate(
        judge_pass,
        tpr=tpr,
        tnr=tnr,
        calib_pos=calib_pos,
        calib_neg=calib_neg,
        rounds=rounds,
        seed=seed,
        confidence=confidence,
        min_calibration_per_class=min_calibration_per_class,
        calibration_prompt_version=calibration_prompt_version,
        judging_prompt_version=judging_prompt_version,
    )
    estimates: tuple[PassRateEstimate, ...] = (rg,)
    used = rg
    n_human = 0
    if human_pass is not None:
        ppi = ppi_pass_rate(judge_pass, human_pass, confidence=confidence)
        estimates = (rg, ppi)
        n_human = ppi.n_human
        if ppi.defined and n_human >= min_human_labels_for_ppi:
            used = ppi
    passed = None
    if min_pass_rate is not None:
        passed = used.defined and used.low is not None and used.low >= min_pass_rate
    defined = (
        used.defined and used.value is not None and used.low is not None and used.high is not None
    )
    # An undefined estimate fails closed: no rate, no interval, and the reason in its place.
    reason = None if defined else (used.reason or _EMPTY_REASON)
    return GateResult(
        n=n,
        observed_pass_rate=observed,
        corrected_pass_rate=used.value if defined else None,
        ci_low=used.low if defined else None,
        ci_high=used.high if defined else None,
        tpr=tpr,
        tnr=tnr,
        defined=defined,
        reason=reason,
        passed=passed,
        min_pass_rate=min_pass_rate,
        summary=(
            _summary(n, observed, used, confidence, min_pass_rate)
            if reason is None
            else _undefined_summary(n, observed, min_pass_rate, reason)
        ),
        estimator=used.estimator,
        estimates=estimates,
        n_human=n_human,
    )


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _outputs(n: int) -> str:
    return f"{n} output" + ("" if n == 1 else "s")


def _undefined_summary(n: int, observed: float, min_pass_rate: float | None, reason: str) -> str:
    text = f"Pass rate {_pct(observed)} observed over {_outputs(n)}; {reason}."
    if min_pass_rate is not None:
        text += f" Threshold {_pct(min_pass_rate)}: FAIL (cannot be verified)."
    return text


def _summary(
    n: int,
    observed: float,
    used: PassRateEstimate,
    confidence: float,
    min_pass_rate: float | None,
) -> str:
    assert used.value is not None and used.low is not None and used.high is not None
    how = (
        "corrected"
        if used.estimator == ROGAN_GLADEN
        else f"by PPI++ with {used.n_human} human labels"
    )
    text = (
        f"Pass rate {_pct(observed)} observed, {_pct(used.value)} {how} "
        f"({100.0 * confidence:g}% CI {_pct(used.low)}-{_pct(used.high)}) over {_outputs(n)}"
    )
    if min_pass_rate is None:
        return text + "."
    if used.low >= min_pass_rate:
        verdict = "PASS (lower bound at or above threshold)"
    else:
        verdict = "FAIL (lower bound below threshold)"
    return f"{text}; threshold {_pct(min_pass_rate)}: {verdict}."
