"""Scoring an iteration and deciding whether the loop goes on (pure): metrics per split
from the reviewed decisions, the F1 that decides, and the outcome."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmjudge.personas.metrics import compute_metrics, confusion_from_decisions


def split_metrics(
    decisions: Sequence[tuple[str, str, bool]],
) -> dict[str, dict[str, Any] | None]:
    """Metrics.to_dict() per split from (split, judge_label, human_agrees); None when empty."""
    out: dict[str, dict[str, Any] | None] = {}
    for side in ("optimisation", "holdout"):
        rows = [(label == "correct", agrees) for s, label, agrees in decisions if s == side]
        if not rows:
            out[side] = None
            continue
        judge, human = zip(*rows, strict=True)
        out[side] = compute_metrics(confusion_from_decisions(judge, human)).to_dict()
    return out


def deciding_f1(metrics: Mapping[str, Mapping[str, Any] | None]) -> tuple[float, str]:
    """The F1 that decides convergence: held-out when there is a held-out part."""
    held = metrics.get("holdout")
    if held is not None and held.get("n"):
        return float(held["f1"]), "holdout"
    opt = metrics.get("optimisation") or {}
    return float(opt.get("f1", 0.0)), "optimisation"


def decide(
    metrics: Mapping[str, Mapping[str, Any] | None],
    *,
    target_f1: float,
    number: int,
    max_iterations: int,
) -> tuple[float, str, str | None, str | None]:
    """(deciding F1, its split, outcome, note): ``converged`` at the target, ``incomplete``
    after the last iteration, else None (rewrite the prompt and go on)."""
    f1, basis = deciding_f1(metrics)
    if f1 >= target_f1:
        return f1, basis, "converged", f"{basis} F1 {f1:.3f} reached the target {target_f1:.2f}"
    if number >= max_iterations:
        note = (
            f"{max_iterations} iterations done with {basis} F1 {f1:.3f}, "
            f"below the target {target_f1:.2f}"
        )
        return f1, basis, "incomplete", note
    return f1, basis, None, None
