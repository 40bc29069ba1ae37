"""Simulated adaptive tournaments: the estimate of comparisons to stop, and the bench's engine.

The judge model is the built-in simulator's pairwise model (``providers/simulator.py``),
restated here so this pure module imports no provider: each player has a latent quality
``q`` (standard normal by default) and a verdict on (A, B) is

    d = q_A - q_B + position_bias + noise * N(0, 1);  TIE if |d| < tie_band, else A if d > 0.

The defaults are the simulator's documented defaults; a test checks the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from llmjudge.core.fields import build_from
from llmjudge.core.tournaments.adaptive import (
    AdaptiveState,
    Position,
    StopRule,
    Strategy,
    check_stop,
    fit_state,
    free_for_all_comparisons,
    select_batch,
    stability_widths,
)

__all__ = [
    "ComparisonEstimate",
    "JudgeModel",
    "SimRun",
    "default_batch_size",
    "estimate_comparisons",
    "judge",
    "simulate_session",
]


@dataclass(frozen=True)
class JudgeModel:
    """The simulator's pairwise judge (defaults = ``SimulatorParams`` defaults)."""

    noise: float = 0.5
    position_bias: float = 0.1
    tie_band: float = 0.1


def judge(
    model: JudgeModel, q_a: np.ndarray, q_b: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Score for the player in position A (1 win, 0.5 tie, 0 loss), one per call."""
    d = q_a - q_b + model.position_bias + model.noise * rng.standard_normal(np.shape(q_a))
    return np.where(np.abs(d) < model.tie_band, 0.5, (d > 0).astype(np.float64))


def default_batch_size(n: int, spent: int = 0) -> int:
    """About one comparison per player per round (at least 16), growing with the spend
    (an eighth of it) so a long run refits O(log) times, not O(spent / n) times: the
    stopping point overshoots by at most an eighth. Use the same in the live engine so
    the estimate matches the runs."""
    return max(16, n // 2, spent // 8)


@dataclass(frozen=True, eq=False)
class SimRun:
    a: np.ndarray  # every judge call, in order
    b: np.ndarray
    score_a: np.ndarray
    is_swap: np.ndarray
    state: AdaptiveState  # the final fit
    rounds: int
    stopped_by: str  # "rule", "budget" or "cap"
    progress: str


def simulate_session(
    quality: np.ndarray,
    rule: StopRule,
    *,
    seed: int = 0,
    model: JudgeModel = JudgeModel(),
    batch_size: int | None = None,
    max_comparisons: int | None = None,
    strategy: Strategy = "information",
    epsilon: float = 0.1,
    position: Position = "once",
    swap_share: float = 0.1,
    on_round: Callable[[AdaptiveState, int], None] | None = None,
    selection_rule: StopRule | None = None,
) -> SimRun:
    """Run an adaptive session against simulated judges until the rule or the budget
    stops it, or ``max_comparisons`` (default: a full free-for-all) is reached. Rounds
    are ``batch_size`` judge calls, default :func:`default_batch_size`.
    ``on_round(state, spent)`` is called after each round's refit. ``selection_rule``
    shapes pair selection when it should differ from the stopping rule (the bench)."""
    quality = np.asarray(quality, dtype=np.float64)
    n = quality.size
    cap = max_comparisons if max_comparisons is not None else free_for_all_comparisons(n)
    seeds = np.random.SeedSequence(seed)
    judge_rng = np.random.default_rng(seeds.spawn(1)[0])
    parts: dict[str, list[np.ndarray]] = {"a": [], "b": [], "s": [], "w": []}
    empty = np.empty(0, dtype=np.int64)
    state = fit_state(n, empty, empty, np.empty(0))
    widths: list[float] = []
    spent, rounds = 0, 0
    while True:
        decision = check_stop(state, rule, spent=spent, width_history=widths)
        if decision.stop or spent >= cap:
            break
        room = cap - spent
        if decision.remaining is not None:
            room = min(room, decision.remaining)
        size = batch_size or default_batch_size(n, spent)
        batch = select_batch(
            state,
            min(size, room),
            rule=selection_rule or rule,
            seed=seeds.spawn(1)[0],
            strategy=strategy,
            epsilon=epsilon,
            position=position,
            swap_share=swap_share,
        )
        if len(batch) == 0:
            break
        parts["a"].append(batch.a)
        parts["b"].append(batch.b)
        parts["s"].append(judge(model, quality[batch.a], quality[batch.b], judge_rng))
        parts["w"].append(batch.is_swap)
        spent += len(batch)
        rounds += 1
        a, b = np.concatenate(parts["a"]), np.concatenate(parts["b"])
        s = np.concatenate(parts["s"])
        state = fit_state(n, a, b, s, init=state.theta)
        widths = stability_widths(n, a, b, s, rule, init=state.theta)
        if on_round is not None:
            on_round(state, spent)
    cat = {k: (np.concatenate(v) if v else np.empty(0)) for k, v in parts.items()}
    return build_from(
        SimRun,
        decision,  # progress
        a=cat["a"].astype(np.int64),
        b=cat["b"].astype(np.int64),
        score_a=cat["s"],
        is_swap=cat["w"].astype(bool),
        state=state,
        rounds=rounds,
        stopped_by=decision.reason or "cap",
    )


@dataclass(frozen=True)
class ComparisonEstimate:
    """Expected judge calls to stop, from simulated runs: an estimate, not a promise."""

    label: str
    runs: int
    median: int
    low: int  # smallest and largest over the runs
    high: int
    per_run: tuple[int, ...]
    stopped_by_rule: int  # runs the rule stopped (the others hit the budget or the cap)
    free_for_all: int  # judge calls of a full free-for-all, one order per pair
    free_for_all_both_orders: int
    both_orders_equivalent: int  # median calls had every pair been judged in both orders
    notes: tuple[str, ...] = field(default=())


def estimate_comparisons(
    n: int,
    rule: StopRule,
    *,
    runs: int = 5,
    seed: int = 0,
    model: JudgeModel = JudgeModel(),
    batch_size: int | None = None,
    strategy: Strategy = "information",
    epsilon: float = 0.1,
    position: Position = "once",
    swap_share: float = 0.1,
    max_comparisons: int | None = None,
) -> ComparisonEstimate:
    """Judge calls an adaptive session over ``n`` players needs before ``rule`` (or its
    budget) stops it: ``runs`` seeded simulations, latent qualities standard normal."""
    if n < 2:
        raise ValueError("an adaptive session needs at least two players")
    if runs < 1:
        raise ValueError("at least one run")
    cap = max_comparisons if max_comparisons is not None else free_for_all_comparisons(n)
    spent, by_rule, pairs = [], 0, []
    for r, child in enumerate(np.random.SeedSequence(seed).spawn(runs)):
        quality = np.random.default_rng(child).standard_normal(n)
        run = simulate_session(
            quality,
            rule,
            seed=seed * 1_000_003 + r,
            model=model,
            batch_size=batch_size,
            max_comparisons=cap,
            strategy=strategy,
            epsilon=epsilon,
            position=position,
            swap_share=swap_share,
        )
        spent.append(int(run.a.size))
        pairs.append(int(np.count_nonzero(~run.is_swap)))
        by_rule += run.stopped_by == "rule"
    median = int(np.median(spent))
    notes = []
    if by_rule < runs:
        notes.append(
            f"{runs - by_rule} of {runs} runs did not meet the rule within the cap "
            f"of {cap:,} comparisons or the budget"
        )
    label = (
        f"estimate: median of {runs} simulated runs under the simulator's judge model "
        f"(noise {model.noise:g}, position bias {model.position_bias:g}, "
        f"tie band {model.tie_band:g}, latent qualities N(0, 1))"
    )
    return ComparisonEstimate(
        label=label,
        runs=runs,
        median=median,
        low=min(spent),
        high=max(spent),
        per_run=tuple(spent),
        stopped_by_rule=by_rule,
        free_for_all=free_for_all_comparisons(n),
        free_for_all_both_orders=free_for_all_comparisons(n, both_orders=True),
        both_orders_equivalent=2 * int(math.ceil(np.median(pairs))),
        notes=tuple(notes),
    )
