"""When a persona may be called trained: enough evidence, then the target.

A prompt version converges on its selection (held-out) pairs when, in this order:

1. each human class (answers the human calls correct, and incorrect) has at least
   ``min_per_class`` pairs (default 10); otherwise the status is "needs more labelled
   pairs", with how many more of which class;
2. at most ``max_bulk_share`` (default 50%) of the labels are bulk "agree with all"
   labels: a click that agrees with every judge label is not evidence of agreement, so a
   persona measured mostly on them is flagged, and by default cannot converge;
3. the selection F1 reaches ``target_f1``: its interval's lower bound by default (a 95%
   Bayesian bootstrap, see ``metrics``), or the point estimate when the user chooses so.

Pure: labels in, a status with its reasons and figures out. Also here: scoring an iteration
(metrics per split, with intervals, from the reviewed decisions) and its outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llmjudge.core.personas.metrics import (
    Estimate,
    confusion_from_decisions,
    confusion_from_labels,
    metrics_with_intervals,
    report_dict,
)

CONVERGED = "converged"
BELOW_TARGET = "below_target"
NEEDS_MORE = "needs_more_labelled_pairs"
MOSTLY_BULK = "mostly_bulk_labels"


@dataclass(frozen=True)
class ConvergenceRule:
    target_f1: float = 0.8
    basis: Literal["lower_bound", "point"] = "lower_bound"
    min_per_class: int = 10
    max_bulk_share: float = 0.5
    bulk_blocks: bool = True
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not 0.0 <= self.target_f1 <= 1.0:
            raise ValueError(f"target_f1 must be within [0, 1], got {self.target_f1}")
        if self.basis not in ("lower_bound", "point"):
            raise ValueError(f"basis must be 'lower_bound' or 'point', got {self.basis!r}")
        if self.min_per_class < 1:
            raise ValueError("min_per_class must be at least 1")
        if not 0.0 <= self.max_bulk_share <= 1.0:
            raise ValueError(f"max_bulk_share must be within [0, 1], got {self.max_bulk_share}")


@dataclass(frozen=True)
class BulkSummary:
    bulk: int
    n: int
    share: float
    mostly: bool  # share > max_bulk_share
    message: str | None


@dataclass(frozen=True)
class ConvergenceStatus:
    status: str  # CONVERGED, BELOW_TARGET, NEEDS_MORE or MOSTLY_BULK
    converged: bool
    f1: Estimate
    compared: float  # the figure compared with the target: F1's lower bound or point
    basis: str
    target_f1: float
    positives: int  # held-out pairs the human calls correct
    negatives: int
    more_positives: int  # still needed to reach min_per_class
    more_negatives: int
    bulk: BulkSummary
    message: str
    warnings: tuple[str, ...]


def bulk_summary(bulk: Sequence[bool], max_share: float = 0.5) -> BulkSummary:
    """How many labels came from a bulk "agree with all", and whether they are most."""
    n = len(bulk)
    k = sum(bool(b) for b in bulk)
    share = k / n if n else 0.0
    mostly = n > 0 and share > max_share
    message = None
    if mostly:
        message = (
            f"{k} of {n} labels ({100 * share:.0f}%) are bulk 'agree with all' labels, more than "
            f"{100 * max_share:.0f}%: agreement was clicked, not checked; review them one by one"
        )
    return BulkSummary(bulk=k, n=n, share=share, mostly=mostly, message=message)


def _pairs(k: int) -> str:
    return f"{k} more pair" + ("" if k == 1 else "s")


def convergence_status(
    human_correct: Sequence[bool],
    judge_correct: Sequence[bool],
    *,
    bulk: Sequence[bool] | None = None,
    rule: ConvergenceRule | None = None,
    rounds: int = 2000,
    seed: int = 0,
) -> ConvergenceStatus:
    """The convergence status of one prompt version on its selection pairs.

    ``human_correct``/``judge_correct`` are aligned labels of the same pairs; ``bulk`` flags
    the pairs whose human label came from a bulk "agree with all" (all False if omitted).
    """
    rule = rule or ConvergenceRule()
    if bulk is not None and len(bulk) != len(human_correct):
        raise ValueError(f"{len(human_correct)} labels but {len(bulk)} bulk flags")
    c = confusion_from_labels(human_correct, judge_correct)
    f1 = metrics_with_intervals(c, confidence=rule.confidence, rounds=rounds, seed=seed).f1
    positives, negatives = c.tp + c.fn, c.tn + c.fp
    more_pos = max(0, rule.min_per_class - positives)
    more_neg = max(0, rule.min_per_class - negatives)
    bulk_info = bulk_summary(bulk if bulk is not None else [], rule.max_bulk_share)
    compared = f1.low if rule.basis == "lower_bound" else f1.value
    what = "F1 lower bound" if rule.basis == "lower_bound" else "F1"
    figures = (
        f"selection F1 {f1.value:.3f} ({100 * rule.confidence:g}% CI {f1.low:.3f}-{f1.high:.3f}) "
        f"on {c.n} pairs ({positives} correct, {negatives} incorrect)"
    )
    warnings = (bulk_info.message,) if bulk_info.message else ()

    if more_pos or more_neg:
        needs = []
        if more_pos:
            needs.append(f"{_pairs(more_pos)} the human calls correct")
        if more_neg:
            needs.append(f"{_pairs(more_neg)} the human calls incorrect")
        status, message = (
            NEEDS_MORE,
            f"Needs more labelled pairs: {' and '.join(needs)} in the selection split "
            f"(at least {rule.min_per_class} of each); {figures}.",
        )
    elif bulk_info.mostly and rule.bulk_blocks:
        status, message = MOSTLY_BULK, f"Cannot converge: {bulk_info.message}; {figures}."
    elif compared >= rule.target_f1:
        status = CONVERGED
        message = f"Converged: {what} {compared:.3f} reaches the target {rule.target_f1:.3f}; "
        message += f"{figures}."
    else:
        status = BELOW_TARGET
        message = f"Not converged: {what} {compared:.3f} is below the target "
        message += f"{rule.target_f1:.3f}; {figures}."
    return ConvergenceStatus(
        status=status,
        converged=status == CONVERGED,
        f1=f1,
        compared=compared,
        basis=rule.basis,
        target_f1=rule.target_f1,
        positives=positives,
        negatives=negatives,
        more_positives=more_pos,
        more_negatives=more_neg,
        bulk=bulk_info,
        message=message,
        warnings=warnings,
    )


# -- scoring an iteration (used by the training loop) --

ITERATION_SPLITS = ("optimisation", "selection", "calibration")


def split_metrics(
    decisions: Sequence[tuple[str, str, bool]], *, rounds: int = 2000
) -> dict[str, dict[str, Any] | None]:
    """Metrics per split from (split, judge_label, human_agrees), each with its count and
    95% intervals (``report_dict``); None for an empty split."""
    out: dict[str, dict[str, Any] | None] = {}
    for side in ITERATION_SPLITS:
        rows = [(label == "correct", agrees) for s, label, agrees in decisions if s == side]
        if not rows:
            out[side] = None
            continue
        judge, human = zip(*rows, strict=True)
        out[side] = report_dict(confusion_from_decisions(judge, human), rounds=rounds)
    return out


def status_dict(st: ConvergenceStatus) -> dict[str, Any]:
    """A ConvergenceStatus as stored with the iteration and shown on the pages."""
    return {
        "status": st.status,
        "converged": st.converged,
        "message": st.message,
        "warnings": list(st.warnings),
        "compared": st.compared,
        "basis": st.basis,
        "target_f1": st.target_f1,
        "f1": st.f1.to_dict(),
        "positives": st.positives,
        "negatives": st.negatives,
        "more_positives": st.more_positives,
        "more_negatives": st.more_negatives,
        "bulk": st.bulk.bulk,
        "bulk_share": st.bulk.share,
        "mostly_bulk": st.bulk.mostly,
    }


def decide(
    selection: Sequence[tuple[bool, bool, bool]],
    *,
    rule: ConvergenceRule,
    number: int,
    max_iterations: int,
) -> tuple[ConvergenceStatus, str | None, str | None]:
    """(status, outcome, note) of an iteration from its selection decisions
    ``(human_correct, judge_correct, bulk)``: ``converged`` when ``convergence_status``
    says so, ``incomplete`` after the last iteration, else None (rewrite and go on).

    Below the minimum evidence the loop goes on (the prompt engineer still learns from the
    optimisation split) but can never converge; the status says how many pairs are missing.
    """
    human = [h for h, _, _ in selection]
    judge = [j for _, j, _ in selection]
    bulk = [b for _, _, b in selection]
    st = convergence_status(human, judge, bulk=bulk, rule=rule)
    if st.converged:
        return st, "converged", st.message
    if number >= max_iterations:
        return st, "incomplete", f"{max_iterations} iteration(s) done; {st.message}"
    return st, None, None
