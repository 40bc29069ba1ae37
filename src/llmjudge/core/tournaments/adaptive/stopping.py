"""When an adaptive tournament stops: the budget, the stopping rules and the check.

:func:`check_stop` reads a rule and the budget against the current state."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from llmjudge.core.tournaments.adaptive.state import (
    DENSE_LIMIT,
    AdaptiveState,
    fit_state,
    z_value,
)

RuleKind = Literal["ranking", "top_k", "budget"]


@dataclass(frozen=True)
class Budget:
    """A cap in judge calls, in USD, or both (whichever comes first)."""

    comparisons: int | None = None
    usd: float | None = None
    cost_per_comparison: float = 0.0  # USD per judge call

    def limit(self) -> int | None:
        """The cap in judge calls, or None when unbounded."""
        limits = []
        if self.comparisons is not None:
            limits.append(int(self.comparisons))
        if self.usd is not None:
            if self.cost_per_comparison <= 0:
                raise ValueError("a USD budget needs a positive cost per comparison")
            limits.append(math.floor(self.usd / self.cost_per_comparison + 1e-9))
        return min(limits) if limits else None

    def remaining(self, spent: int) -> int | None:
        limit = self.limit()
        return None if limit is None else max(0, limit - spent)

    def describe(self, spent: int) -> str:
        limit = self.limit()
        if self.usd is not None:
            used = spent * self.cost_per_comparison
            return f"spent ${used:,.2f} of ${self.usd:,.2f} ({spent:,} comparisons)"
        if limit is None:
            return f"spent {spent:,} comparisons (no budget)"
        return f"spent {spent:,} of {limit:,} comparisons"


@dataclass(frozen=True)
class StopRule:
    """What the session watches. ``ranking``: every adjacent pair separated at
    ``confidence``, or the mean rank-interval width (:func:`rank_width`) moved by less than
    ``tolerance * (n - 1)`` ranks in each of the last ``stable_rounds`` steps of
    :func:`stability_widths` (each step the last ninth of the results). ``top_k``: the
    current top ``k`` each separated from every other player at ``confidence``. ``budget``: spend it all.
    The budget always applies. ``min_games``: no rule but ``budget`` stops while a player
    has fewer comparisons (fail closed)."""

    kind: RuleKind = "ranking"
    confidence: float = 0.95
    k: int = 5
    stable_rounds: int = 2
    tolerance: float = 0.01
    min_games: int = 3
    budget: Budget = Budget()

    def __post_init__(self) -> None:
        if self.kind not in ("ranking", "top_k", "budget"):
            raise ValueError(f"unknown stopping rule {self.kind!r}")
        if not 0.5 < self.confidence < 1.0:
            raise ValueError("confidence must be in (0.5, 1)")
        if self.k < 1:
            raise ValueError("k must be at least 1")
        if self.stable_rounds < 1:
            raise ValueError("stable_rounds must be at least 1")
        if self.kind == "budget" and self.budget.limit() is None:
            raise ValueError("the budget rule needs a budget")


@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: str  # "", "rule" or "budget"
    progress: str  # for the live page, e.g. "top 5 separated at 95%: 3 of 5"
    done: int  # separated players or pairs so far
    total: int  # how many the rule needs
    spent: str  # spend against the budget, in words
    remaining: int | None  # judge calls left in the budget


def rank_width(state: AdaptiveState, confidence: float = 0.95) -> float:
    """Mean rank-interval width (worst - best), the number the ``ranking`` rule tracks."""
    best, worst = state.rank_intervals(confidence)
    return float(np.mean(worst - best))


STABILITY_STEP = 8 / 9  # each earlier width is of the first 8/9 of the results before it


def stability_widths(
    n: int,
    a: np.ndarray,
    b: np.ndarray,
    score_a: np.ndarray,
    rule: StopRule,
    *,
    init: np.ndarray | None = None,
    dense_limit: int = DENSE_LIMIT,
) -> list[float]:
    """The ``ranking`` rule's history: :func:`rank_width` of the fits on the first
    ``m * (8/9)^k`` of the ``m`` results, ``k = stable_rounds .. 1``, oldest first (the
    current fit's width is the last point; :func:`check_stop` adds it). Empty for the
    other rules, which read no history.

    A function of the results and their order only (judging order: queue position), not
    of how they were cut into rounds or of how many had come back when a round was
    planned, so a live session stops where its simulation (the estimate) does. The step
    matches :func:`~llmjudge.core.tournaments.simulation.default_batch_size`'s growth (an
    eighth of the spend), so a check costs ``stable_rounds`` extra warm-started fits."""
    if rule.kind != "ranking":
        return []
    m = int(np.asarray(a).size)
    widths = []
    for k in range(rule.stable_rounds, 0, -1):
        cut = int(math.floor(m * STABILITY_STEP**k))
        state = fit_state(n, a[:cut], b[:cut], score_a[:cut], init=init, dense_limit=dense_limit)
        widths.append(rank_width(state, rule.confidence))
    return widths


def _separated_adjacent(state: AdaptiveState, confidence: float) -> int:
    order = state.order()
    i, j = order[:-1], order[1:]
    z = (state.theta[i] - state.theta[j]) / np.sqrt(state.diff_var(i, j))
    return int(np.sum(z >= z_value(confidence, two_sided=False)))


def _separated_top(state: AdaptiveState, k: int, confidence: float) -> int:
    """Players of the current top k whose lead over every player outside it is
    significant (one-sided, pair by pair)."""
    order = state.order()
    top, rest = order[:k], order[k:]
    if rest.size == 0:
        return int(top.size)
    i = np.repeat(top, rest.size)
    j = np.tile(rest, top.size)
    z = (state.theta[i] - state.theta[j]) / np.sqrt(state.diff_var(i, j))
    return int(
        np.sum(z.reshape(top.size, rest.size).min(axis=1) >= z_value(confidence, two_sided=False))
    )


def check_stop(
    state: AdaptiveState,
    rule: StopRule,
    *,
    spent: int,
    width_history: Sequence[float] = (),
) -> StopDecision:
    """Whether to stop now. ``spent``: judge calls made (finished or not: they are paid
    for). ``width_history``: :func:`stability_widths` of the results ``state`` was fitted
    on, oldest first; the rule compares them and the current width."""
    remaining = rule.budget.remaining(spent)
    spent_text = rule.budget.describe(spent)
    out_of_budget = remaining is not None and remaining <= 0
    pct = f"{100 * rule.confidence:g}%"
    few = int(np.sum(state.games < rule.min_games))
    evidence = "" if few == 0 else f"; {few:,} below {rule.min_games} comparisons"

    if rule.kind == "budget":
        limit = rule.budget.limit() or 0
        return StopDecision(
            stop=out_of_budget,
            reason="budget" if out_of_budget else "",
            progress=spent_text,
            done=min(spent, limit),
            total=limit,
            spent=spent_text,
            remaining=remaining,
        )
    if rule.kind == "top_k":
        k = min(rule.k, state.n)
        done, total = _separated_top(state, k, rule.confidence), k
        met = done == total
        progress = f"top {k} separated at {pct}: {done} of {total}{evidence}"
    else:
        total = state.n - 1
        done = _separated_adjacent(state, rule.confidence)
        widths = [*width_history, rank_width(state, rule.confidence)]
        stable_for = 0
        # steps in a row, counted back from now, in which the mean width moved by less
        # than tolerance * (n - 1) ranks; intervals spanning half the field say nothing
        # yet (they saturate at n - 1 early on, and saturated widths do not move)
        if len(widths) > 1 and widths[-1] < 0.5 * (state.n - 1):
            step = np.abs(np.diff(widths[-(rule.stable_rounds + 1) :]))[::-1]
            moved = step > rule.tolerance * (state.n - 1)
            stable_for = int(np.argmax(moved)) if moved.any() else int(step.size)
        met = done == total or stable_for >= rule.stable_rounds
        progress = (
            f"adjacent pairs separated at {pct}: {done} of {total}; rank intervals "
            f"stable for {stable_for} of {rule.stable_rounds} checks{evidence}"
        )
    met = met and few == 0
    stop = met or out_of_budget
    return StopDecision(
        stop=stop,
        reason="rule" if met else ("budget" if out_of_budget else ""),
        progress=progress,
        done=done,
        total=total,
        spent=spent_text,
        remaining=remaining,
    )
