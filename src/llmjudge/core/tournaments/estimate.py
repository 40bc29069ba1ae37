"""What a session will cost before it runs: comparisons, time, tokens, money.

Arithmetic (per model call = per comparison; in mode ``single`` a comparison is one
thread graded alone, with no swapped twin):

- comparisons: :func:`~llmjudge.core.tournaments.pairing.count_plan`;
  ``base_comparisons`` is one pass without swapped twins, so
  ``total = base * repetitions_per_pair * (2 if position_swap else 1)``;
- minutes with ``w`` workers: ``ceil(total / w) * latency_s / 60`` (each
  worker runs its share of calls one after another);
- tokens: ``total * tokens_in_per_call`` and ``total * tokens_out_per_call``;
- cost: tokens / 1e6 * the model's price per million, input plus output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from llmjudge.core.tournaments.pairing import PlanOptions, count_plan, plan_sizes, weighted_quotas

__all__ = [
    "DEFAULT_WORKERS",
    "Estimate",
    "LONG_RUN_MINUTES",
    "LONG_FREE_FOR_ALL",
    "ModelCost",
    "estimate_plan",
]

DEFAULT_WORKERS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LONG_FREE_FOR_ALL = 10_000  # comparisons; beyond this a sampled mode is usually wiser
LONG_RUN_MINUTES = 60.0


@dataclass(frozen=True)
class ModelCost:
    input_per_million: float = 0.0  # USD per million input tokens
    output_per_million: float = 0.0
    latency_s: float = 2.0  # seconds per call
    tokens_in_per_call: int = 1500
    tokens_out_per_call: int = 300


@dataclass(frozen=True)
class Estimate:
    total_threads: int  # threads that can appear in the plan (after max_threads_per_pillar)
    base_comparisons: int  # one pass, without swapped twins
    total_comparisons: int
    minutes_by_workers: dict[int, float]
    input_tokens: int
    output_tokens: int
    cost_usd: float
    warnings: list[str]
    recommended_repetitions: int | None  # passes to sample every thread once (pillar_sample)
    over_limit: bool = False  # more comparisons than one session may plan


def estimate_plan(
    sizes: Mapping[int, int],
    options: PlanOptions,
    cost: ModelCost,
    workers: Sequence[int] = DEFAULT_WORKERS,
    pillar_names: Mapping[int, str] | None = None,
    *,
    chosen_workers: int | None = None,
    planned_comparisons: int | None = None,
    max_comparisons: int | None = None,
) -> Estimate:
    """Estimate a session over pillars of ``sizes`` (pillar id -> thread count).

    ``chosen_workers`` is the worker count the run will use (default: the
    largest of ``workers``); the long-run warning is judged at it.
    ``planned_comparisons`` is the length of an already built plan, needed
    for key-matched plans that :func:`count_plan` cannot count.
    ``max_comparisons``: the most one session may plan; a larger total says so
    (``over_limit`` and a warning) and such a session cannot be created.
    Raises ``ValueError`` for impossible options, as ``count_plan`` does.
    """
    if not workers or any(w < 1 for w in workers):
        raise ValueError("worker counts must be at least 1")
    if chosen_workers is not None and chosen_workers < 1:
        raise ValueError("chosen_workers must be at least 1")
    if min(cost.input_per_million, cost.output_per_million, cost.latency_s) < 0:
        raise ValueError("prices and latency cannot be negative")
    if min(cost.tokens_in_per_call, cost.tokens_out_per_call) < 0:
        raise ValueError("token counts cannot be negative")

    n = plan_sizes(sizes, options)
    swapped = options.position_swap and options.mode != "single"  # one thread: no order
    passes = options.repetitions_per_pair * (2 if swapped else 1)
    total = count_plan(sizes, options) if planned_comparisons is None else planned_comparisons
    if total < 0:
        raise ValueError("planned_comparisons cannot be negative")
    minutes = {w: math.ceil(total / w) * cost.latency_s / 60 for w in sorted(set(workers))}
    input_tokens = total * cost.tokens_in_per_call
    output_tokens = total * cost.tokens_out_per_call
    run_workers = chosen_workers if chosen_workers is not None else max(workers)
    run_minutes = math.ceil(total / run_workers) * cost.latency_s / 60

    name = _namer(pillar_names)
    warnings: list[str] = []
    recommended = None
    if options.mode == "pillar_sample":
        recommended = _recommended_repetitions(n, options)
        warnings += _sampling_warnings(n, options, recommended, name)
    if options.mode == "free_for_all" and total > LONG_FREE_FOR_ALL:
        warnings.append(
            f"Free-for-all over {sum(n.values()):,} threads makes {total:,} comparisons. "
            "Consider pillar_sample or round_robin, or cap threads per pillar."
        )
    over = max_comparisons is not None and total > max_comparisons
    if over:
        warnings.append(over_limit_message(total, max_comparisons or 0))
    if run_minutes > LONG_RUN_MINUTES:
        warnings.append(
            f"At {run_workers} {_plural(run_workers, 'worker', 'workers')} and "
            f"{cost.latency_s:g} s per call this run takes about "
            f"{_duration(run_minutes)}. Add workers, lower repetitions or sample fewer threads."
        )
    return Estimate(
        total_threads=sum(n.values()),
        base_comparisons=total // passes,
        total_comparisons=total,
        minutes_by_workers=minutes,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=(input_tokens * cost.input_per_million + output_tokens * cost.output_per_million)
        / 1_000_000,
        warnings=warnings,
        recommended_repetitions=recommended,
        over_limit=over,
    )


def over_limit_message(total: int, limit: int) -> str:
    return (
        f"This plan makes {total:,} comparisons; one session may make at most {limit:,} "
        "(LLMJUDGE_MAX_COMPARISONS_PER_SESSION). Sample fewer threads, lower repetitions or "
        "split the pillars over several sessions."
    )


def _recommended_repetitions(sizes: Mapping[int, int], options: PlanOptions) -> int:
    """Passes after which every thread of every pillar has been drawn once (fixed order)."""
    if options.sampling == "weighted":
        quota = weighted_quotas(sizes, options.samples_per_pillar)
        return max(math.ceil(n / quota[p]) for p, n in sizes.items())
    return math.ceil(max(sizes.values()) / options.samples_per_pillar)


def _sampling_warnings(
    sizes: Mapping[int, int], options: PlanOptions, recommended: int, name: Callable[[int], str]
) -> list[str]:
    warnings = []
    samples, reps = options.samples_per_pillar, options.repetitions_per_pair
    small = [p for p, n in sizes.items() if n < samples]
    if small and options.sampling != "weighted":  # weighted reuses threads by design
        listed = ", ".join(f"{name(p)} ({sizes[p]} threads)" for p in small)
        warnings.append(
            f"{_plural(len(small), 'Pillar', 'Pillars')} {listed} "
            f"{_plural(len(small), 'has', 'have')} fewer threads than the {samples} samples "
            "per pillar: their threads will be judged more than once in each pass. "
            "Add threads or lower samples per pillar."
        )
    if reps >= recommended:
        return warnings
    smallest, largest = min(sizes.values()), max(sizes.values())
    unseen = f"{reps} {_plural(reps, 'repetition leaves', 'repetitions leave')} some unseen"
    if smallest != largest and options.sampling != "weighted":
        biggest = max(sizes, key=lambda p: sizes[p])
        warnings.append(
            f"Pillar sizes are unequal ({smallest} to {largest} threads): with {samples} "
            f"samples per pillar, {name(biggest)} needs {recommended} repetitions for each of "
            f"its threads to be judged once; {unseen}. "
            f"Set repetitions to {recommended}, or use weighted sampling."
        )
    else:
        warnings.append(
            f"Each pass judges only a sample of each pillar: {recommended} repetitions would "
            f"judge every thread once; {unseen}."
        )
    return warnings


def _namer(names: Mapping[int, str] | None) -> Callable[[int], str]:
    known = dict(names or {})
    return lambda pillar: f'"{known[pillar]}"' if pillar in known else f"pillar {pillar}"


def _plural(count: int, one: str, many: str) -> str:
    return one if count == 1 else many


def _duration(minutes: float) -> str:
    if minutes < 120:
        return f"{minutes:.0f} minutes"
    hours = minutes / 60
    return f"{hours:.1f} hours" if hours < 48 else f"{hours / 24:.1f} days"
