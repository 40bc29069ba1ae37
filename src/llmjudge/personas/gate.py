"""Pass/fail gate for CI: the judge's pass rate corrected for the judge's own errors.

A judge with true-positive rate TPR and true-negative rate TNR reports a pass rate
p_obs = p * TPR + (1 - p) * (1 - TNR), which is biased unless it is perfect. The
Rogan-Gladen estimator inverts that. Its interval is a percentile bootstrap that
resamples both the batch verdicts and the persona's calibration rates (measured on its
held-out pairs), so a judge calibrated on few pairs gets a wide interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_CHANCE_REASON = (
    "the judge is no better than chance on its held-out data (TPR + TNR <= 1); "
    "the pass rate cannot be corrected"
)
_NO_CALIBRATION_REASON = (
    "the persona's held-out data lacks truly passing or truly failing examples, "
    "so its TPR or TNR is unknown; the pass rate cannot be corrected"
)
_EMPTY_REASON = "no outputs were judged"


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


def rogan_gladen(observed: float, tpr: float, tnr: float) -> float | None:
    """True pass rate from an observed one: (p_obs + TNR - 1) / (TPR + TNR - 1), in [0, 1].

    None when TPR + TNR <= 1: such a judge carries no information about the true rate.
    """
    denominator = tpr + tnr - 1.0
    if denominator <= 0.0:
        return None
    return min(max((observed + tnr - 1.0) / denominator, 0.0), 1.0)


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
) -> GateResult:
    """Bias-corrected pass rate of a batch with a bootstrap interval and optional gate.

    ``calib_pos``/``calib_neg`` are the numbers of truly correct/incorrect held-out pairs
    that ``tpr``/``tnr`` were measured on. With ``min_pass_rate`` the gate passes when the
    interval's lower bound reaches it; when the correction is undefined it fails closed.
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

    n = len(judge_pass)
    observed = sum(bool(v) for v in judge_pass) / n if n else 0.0
    reason = None
    if n == 0:
        reason = _EMPTY_REASON
    elif calib_pos <= 0 or calib_neg <= 0:
        reason = _NO_CALIBRATION_REASON
    corrected = rogan_gladen(observed, tpr, tnr) if reason is None else None
    if reason is None and corrected is None:
        reason = _CHANCE_REASON
    if reason is not None:
        passed = None if min_pass_rate is None else False
        return GateResult(
            n=n,
            observed_pass_rate=observed,
            corrected_pass_rate=None,
            ci_low=None,
            ci_high=None,
            tpr=tpr,
            tnr=tnr,
            defined=False,
            reason=reason,
            passed=passed,
            min_pass_rate=min_pass_rate,
            summary=_undefined_summary(n, observed, min_pass_rate, reason),
        )

    ci_low, ci_high = _bootstrap_interval(
        n, observed, tpr, tnr, calib_pos, calib_neg, rounds, seed, confidence
    )
    passed = None if min_pass_rate is None else ci_low >= min_pass_rate
    return GateResult(
        n=n,
        observed_pass_rate=observed,
        corrected_pass_rate=corrected,
        ci_low=ci_low,
        ci_high=ci_high,
        tpr=tpr,
        tnr=tnr,
        defined=True,
        reason=None,
        passed=passed,
        min_pass_rate=min_pass_rate,
        summary=_summary(n, observed, corrected, ci_low, ci_high, confidence, min_pass_rate),
    )


def _bootstrap_interval(
    n: int,
    observed: float,
    tpr: float,
    tnr: float,
    calib_pos: int,
    calib_neg: int,
    rounds: int,
    seed: int,
    confidence: float,
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    p_obs = rng.binomial(n, observed, rounds) / n
    tpr_b = rng.binomial(calib_pos, tpr, rounds) / calib_pos
    tnr_b = rng.binomial(calib_neg, tnr, rounds) / calib_neg
    denominator = tpr_b + tnr_b - 1.0
    undefined = denominator <= 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = np.clip((p_obs + tnr_b - 1.0) / denominator, 0.0, 1.0)
    # A round where the resampled judge is no better than chance says the true rate could
    # be anything: it counts as 0 for the lower bound and 1 for the upper, widening the
    # interval instead of silently dropping the rounds that argue against the judge.
    alpha = (1.0 - confidence) / 2.0
    low = float(np.quantile(np.where(undefined, 0.0, estimate), alpha))
    high = float(np.quantile(np.where(undefined, 1.0, estimate), 1.0 - alpha))
    return low, high


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
    corrected: float,
    ci_low: float,
    ci_high: float,
    confidence: float,
    min_pass_rate: float | None,
) -> str:
    text = (
        f"Pass rate {_pct(observed)} observed, {_pct(corrected)} corrected "
        f"({100.0 * confidence:g}% CI {_pct(ci_low)}-{_pct(ci_high)}) over {_outputs(n)}"
    )
    if min_pass_rate is None:
        return text + "."
    if ci_low >= min_pass_rate:
        verdict = "PASS (lower bound at or above threshold)"
    else:
        verdict = "FAIL (lower bound below threshold)"
    return f"{text}; threshold {_pct(min_pass_rate)}: {verdict}."
