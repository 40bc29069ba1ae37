"""The panel report's maths: members against each other (Cohen's kappa), against the
panel and the reference (accuracy, paired difference), position consistency, and the
effective number of independent votes. Pure functions over class codes (A 0, B 1, TIE 2;
missing -1), no I/O; the aggregation rules are ``panels``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llmjudge.core.agreement.judges import Estimate, wilson
from llmjudge.core.judging.panels import CLASSES
from llmjudge.core.stats import cohen_kappa

_CODE = {label: k for k, label in enumerate(CLASSES)}
_EPS = 1e-9

__all__ = [
    "NEff",
    "PanelComparison",
    "codes",
    "kappa_matrix",
    "n_eff",
    "panel_vs_member",
    "position_consistency",
]


def codes(winners: Sequence[str | None]) -> np.ndarray:
    """Class codes (A 0, B 1, TIE 2; missing -1)."""
    return np.fromiter((-1 if w is None else _CODE[w] for w in winners), dtype=np.int64)


def kappa_matrix(votes: np.ndarray) -> list[list[float | None]]:
    """Cohen's kappa between every two members on the comparisons both voted on;
    ``votes``: (comparisons, members) class codes, -1 missing. None where undefined."""
    votes = np.asarray(votes, dtype=np.int64)
    m = votes.shape[1]
    out: list[list[float | None]] = [[None] * m for _ in range(m)]
    for i in range(m):
        for j in range(i, m):
            both = (votes[:, i] >= 0) & (votes[:, j] >= 0)
            a = [CLASSES[x] for x in votes[both, i]]
            b = [CLASSES[x] for x in votes[both, j]]
            k = cohen_kappa(a, b) if a else None
            out[i][j] = out[j][i] = k
    return out


def position_consistency(
    winners: np.ndarray, swap_group: np.ndarray, is_swap: np.ndarray
) -> Estimate:
    """Share of swap pairs whose two orders gave the same verdict in the pair's order.
    ``winners``: class codes in the pair's order (-1 missing); a pair counts when both of
    its orders have a verdict (the first original and the first swap of the group)."""
    winners = np.asarray(winners, dtype=np.int64)
    swap_group = np.asarray(swap_group, dtype=np.int64)
    is_swap = np.asarray(is_swap, dtype=bool)
    ok = winners >= 0
    first: dict[int, int] = {}
    second: dict[int, int] = {}
    for g, s, w, present in zip(swap_group, is_swap, winners, ok, strict=True):
        if present:
            (second if s else first).setdefault(int(g), int(w))
    pairs = [g for g in first if g in second]
    same = sum(first[g] == second[g] for g in pairs)
    return wilson(same, len(pairs))


@dataclass(frozen=True)
class PanelComparison:
    """The panel against one member on the comparisons both answered and a reference
    labels: accuracies, their paired difference with a 95 % interval, and the verdict."""

    member: int
    n: int
    panel_accuracy: Estimate
    member_accuracy: Estimate
    difference: Estimate  # panel - member
    beats: bool  # the interval's low end is above 0


def panel_vs_member(
    panel: np.ndarray, member: np.ndarray, reference: np.ndarray, index: int
) -> PanelComparison:
    """Paired comparison (each comparison scored for both): the difference of accuracies
    with a normal interval on the per-comparison differences. The panel beats the member
    only when that interval lies above 0 (fails closed below evidence)."""
    panel = np.asarray(panel, dtype=np.int64)
    member = np.asarray(member, dtype=np.int64)
    reference = np.asarray(reference, dtype=np.int64)
    same = (panel >= 0) & (member >= 0) & (reference >= 0)
    pc = panel[same] == reference[same]
    mc = member[same] == reference[same]
    n = int(same.sum())
    if n < 2:
        diff = Estimate(None, n)
        return PanelComparison(
            index, n, wilson(int(pc.sum()), n), wilson(int(mc.sum()), n), diff, False
        )
    d = pc.astype(float) - mc.astype(float)
    mu = float(d.mean())
    se = float(d.std(ddof=1)) / math.sqrt(n)
    diff = Estimate(mu, n, mu - 1.959963984540054 * se, mu + 1.959963984540054 * se)
    beats = bool(diff.low is not None and diff.low > 0)
    return PanelComparison(
        index, n, wilson(int(pc.sum()), n), wilson(int(mc.sum()), n), diff, beats
    )


@dataclass(frozen=True)
class NEff:
    value: float | None
    members: int
    n: int  # comparisons used (every member voted, reference known)
    mean_error_correlation: float | None


def n_eff(errors: np.ndarray) -> NEff:
    """Effective number of independent votes, Kish-style: m / (1 + (m - 1) * rho), with
    rho the mean correlation between members' error indicators (= m^2 / sum of the error
    correlation matrix). Members that err together count as fewer votes; independent
    errors give m, identical errors give 1. None when some member's errors do not vary
    (never or always wrong: its correlation is undefined) or with fewer than 2 members.

    ``errors``: (comparisons, members) booleans, only comparisons every member voted on.
    """
    errors = np.asarray(errors, dtype=float)
    n, m = errors.shape if errors.ndim == 2 else (0, 0)
    if m < 2 or n < 3:
        return NEff(None, m, n, None)
    sd = errors.std(axis=0)
    if (sd <= _EPS).any():
        return NEff(None, m, n, None)
    r = np.corrcoef(errors, rowvar=False)
    rho = float((r.sum() - m) / (m * (m - 1)))
    value = m / (1.0 + (m - 1) * rho) if 1.0 + (m - 1) * rho > _EPS else float(m)
    return NEff(float(np.clip(value, 1.0, m)), m, n, rho)
