"""Comparison plans: which threads meet, in which order, how often.

Modes
-----
``pillar_sample``
    For every pair of pillars and every pass (``repetitions_per_pair``),
    ``samples_per_pillar`` threads of each pillar are drawn and paired 1:1.
    Per pillar pair and pass that is ``samples_per_pillar`` comparisons,
    whatever the pillar sizes: a pillar with fewer threads reuses them.

    - ``fixed``: each pillar's threads are shuffled once (seeded); pass ``r``
      takes the next ``samples_per_pillar`` threads of that order, wrapping
      around. A pillar meets every other pillar with the same sample in a
      pass, and later passes bring fresh threads while the pillar has any.
    - ``bootstrap``: every pillar pair and pass draws with replacement.
    - ``weighted``: like ``fixed``, but pillar ``i`` has a quota
      ``q_i = max(1, round_half_up(samples_per_pillar * n_i / mean_n))``,
      where ``n_i`` is its size (after ``max_threads_per_pillar``) and
      ``mean_n`` the mean size, so an average pillar draws
      ``samples_per_pillar``. A pillar pair gets ``max(q_i, q_j)``
      comparisons per pass (the pillar with the smaller quota reuses
      threads), so big pillars are seen more.

``round_robin``
    Every thread of pillar ``i`` against every thread of pillar ``j``.
``free_for_all``
    Every thread against every other thread; pillars are ignored.
``single``
    No pairs: each thread is graded alone (single-answer grading), once per
    pass: ``threads * repetitions_per_pair`` items whose ``thread_b`` and
    ``pillar_b`` are None. There is no order to swap (``position_swap`` is
    ignored), no baseline, and no prompt-key matching (every thread is graded).

Options
-------
``max_threads_per_pillar`` first keeps a seeded sample of each bigger
pillar. ``baseline_pillar_id`` keeps only pillar pairs (baseline, other)
(not allowed with ``free_for_all``, which has no pillar pairs).
``match_by_prompt_key`` pairs only threads whose non-null ``prompt_key``
is equal (e.g. answers to the same question); in ``pillar_sample`` the
draws then come from the key-matched pairs of each pillar pair (a pillar
pair with none gets no comparisons). Every base comparison is repeated
``repetitions_per_pair`` times and, with ``position_swap``, gets a mirrored
twin (same ``swap_group``, ``is_swap=True``).

Order
-----
Which thread of a base comparison is shown first is drawn per comparison,
so no pillar always sits in position A. The whole plan is then shuffled,
so a half-finished session is already a representative sample. One seed
gives one plan; the input order of ``threads`` does not matter.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

__all__ = [
    "Mode",
    "PlanArrays",
    "PlanOptions",
    "PlannedComparison",
    "Sampling",
    "ThreadRef",
    "build_plan",
    "build_plan_arrays",
    "count_plan",
    "plan_sizes",
    "weighted_quotas",
]

Mode = Literal["pillar_sample", "round_robin", "free_for_all", "single"]
Sampling = Literal["fixed", "bootstrap", "weighted"]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class ThreadRef:
    id: int
    pillar_id: int
    prompt_key: str | None = None


@dataclass(frozen=True)
class PlanOptions:
    mode: Mode
    samples_per_pillar: int = 5
    repetitions_per_pair: int = 1
    max_threads_per_pillar: int | None = None
    position_swap: bool = True
    sampling: Sampling = "fixed"
    baseline_pillar_id: int | None = None
    match_by_prompt_key: bool = False
    seed: int = 0


@dataclass(frozen=True, slots=True)
class PlannedComparison:
    thread_a: int
    thread_b: int | None  # None: a thread graded alone (mode single)
    pillar_a: int
    pillar_b: int | None
    repetition: int  # 0-based pass
    swap_group: int  # shared by a comparison and its swapped twin
    is_swap: bool
    queue_position: int  # 0..n-1, the order workers take them in


@dataclass(frozen=True)
class PlanArrays:
    """The plan as columns, in queue order (for bulk inserts of big plans); ``thread_b``
    and ``pillar_b`` are None in a plan of single threads (mode ``single``)."""

    thread_a: IntArray
    thread_b: IntArray | None
    pillar_a: IntArray
    pillar_b: IntArray | None
    repetition: IntArray
    swap_group: IntArray
    is_swap: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.thread_a)

    @property
    def single(self) -> bool:
        return self.thread_b is None


# --------------------------------------------------------------------------- validation


def _check_options(options: PlanOptions) -> None:
    if options.mode not in get_args(Mode):
        raise ValueError(f"unknown comparison mode {options.mode!r}")
    if options.sampling not in get_args(Sampling):
        raise ValueError(f"unknown sampling {options.sampling!r}")
    if options.samples_per_pillar < 1:
        raise ValueError("samples_per_pillar must be at least 1")
    if options.repetitions_per_pair < 1:
        raise ValueError("repetitions_per_pair must be at least 1")
    if options.max_threads_per_pillar is not None and options.max_threads_per_pillar < 1:
        raise ValueError("max_threads_per_pillar must be at least 1 (or unset)")
    if options.seed < 0:
        raise ValueError("seed must be a non-negative integer")
    if options.mode == "single" and options.baseline_pillar_id is not None:
        raise ValueError(
            "single-answer grading has no baseline pillar: each thread is graded alone"
        )
    if options.mode == "free_for_all" and options.baseline_pillar_id is not None:
        raise ValueError(
            "a baseline pillar needs a pillar mode: use round_robin or pillar_sample, "
            "free_for_all ignores pillars"
        )


def _check_pillars(sizes: Mapping[int, int], options: PlanOptions) -> None:
    """``sizes``: the non-empty pillars after the cap."""
    if options.mode == "single":
        if sum(sizes.values()) < 1:
            raise ValueError("single-answer grading needs at least 1 thread")
        return
    if sum(sizes.values()) < 2:
        raise ValueError("a plan needs at least 2 threads")
    if options.mode != "free_for_all" and len(sizes) < 2:
        raise ValueError(f"{options.mode} needs threads in at least 2 pillars")
    if options.baseline_pillar_id is not None and options.baseline_pillar_id not in sizes:
        raise ValueError(f"baseline pillar {options.baseline_pillar_id} has no threads in the plan")


def plan_sizes(sizes: Mapping[int, int], options: PlanOptions) -> dict[int, int]:
    """Pillar sizes after ``max_threads_per_pillar``, empty pillars dropped.

    Raises ``ValueError`` when no plan can be built from such pillars.
    """
    _check_options(options)
    if any(n < 0 for n in sizes.values()):
        raise ValueError("pillar sizes cannot be negative")
    cap = options.max_threads_per_pillar
    capped = {p: n if cap is None else min(n, cap) for p, n in sorted(sizes.items()) if n > 0}
    _check_pillars(capped, options)
    return capped


def weighted_quotas(sizes: Mapping[int, int], samples_per_pillar: int) -> dict[int, int]:
    """Per-pillar draws for ``weighted`` sampling (see the module docstring)."""
    total, k = sum(sizes.values()), len(sizes)
    # round_half_up(s * n * k / total), in integers so that it is exact
    return {
        p: max(1, (2 * samples_per_pillar * n * k + total) // (2 * total)) for p, n in sizes.items()
    }


def _pillar_pairs(pillars: Sequence[int], baseline: int | None) -> list[tuple[int, int]]:
    if baseline is None:
        return list(combinations(pillars, 2))
    return [(baseline, p) for p in pillars if p != baseline]


# --------------------------------------------------------------------------- counting


def count_plan(sizes: Mapping[int, int], options: PlanOptions) -> int:
    """Number of comparisons ``build_plan`` makes for pillars of these sizes.

    Closed form, no plan built. Key-matched plans depend on the keys, not
    only on sizes: build them and take ``len`` instead.
    """
    return _base_count(sizes, options) * _passes(options)


def plan_size_bound(
    sizes: Mapping[int, int],
    options: PlanOptions,
    key_counts: Mapping[tuple[int, str], int] | None = None,
) -> int:
    """An upper bound of ``build_plan``'s size, closed form even for key-matched plans
    (matching by prompt key only removes pairs from the unmatched plan).

    ``key_counts``: threads per (pillar, prompt key). With them a key-matched round robin or
    free for all is bounded by its pairs on shared keys (before the per-pillar cap, which
    only removes pairs): two pillars of 1,392 answers to 1,392 prompts make 2,784 with a
    swap, where the unmatched bound says 3,875,328."""
    matched = options.match_by_prompt_key and options.mode != "single"
    if options.match_by_prompt_key:
        options = dataclasses.replace(options, match_by_prompt_key=False)
    bound = count_plan(sizes, options)
    if matched and key_counts is not None and options.mode != "pillar_sample":
        bound = min(bound, _key_matched_count(key_counts, options) * _passes(options))
    return bound


def _key_matched_count(key_counts: Mapping[tuple[int, str], int], options: PlanOptions) -> int:
    """Pairs on shared keys in one pass, as ``_key_matched_pairs`` makes them uncapped."""
    per_key: dict[str, dict[int, int]] = defaultdict(dict)
    for (pillar, key), count in key_counts.items():
        per_key[key][pillar] = count
    total = 0
    baseline = options.baseline_pillar_id
    for by_pillar in per_key.values():
        n = sum(by_pillar.values())
        if options.mode == "free_for_all":
            total += n * (n - 1) // 2
        elif baseline is not None:
            own = by_pillar.get(baseline, 0)
            total += own * (n - own)
        else:
            total += (n * n - sum(c * c for c in by_pillar.values())) // 2
    return total


def _passes(options: PlanOptions) -> int:
    swapped = options.position_swap and options.mode != "single"
    return options.repetitions_per_pair * (2 if swapped else 1)


def _base_count(sizes: Mapping[int, int], options: PlanOptions) -> int:
    """Comparisons in one pass, without swapped twins."""
    n = plan_sizes(sizes, options)
    if options.mode == "single":
        return sum(n.values())
    if options.match_by_prompt_key:
        raise ValueError("count_plan cannot count key-matched plans; build the plan instead")
    total, baseline = sum(n.values()), options.baseline_pillar_id
    if options.mode == "free_for_all":
        return total * (total - 1) // 2
    if options.mode == "round_robin":
        if baseline is not None:
            return n[baseline] * (total - n[baseline])
        return (total * total - sum(v * v for v in n.values())) // 2
    if options.sampling != "weighted":
        return len(_pillar_pairs(list(n), baseline)) * options.samples_per_pillar
    quota = weighted_quotas(n, options.samples_per_pillar)
    return sum(max(quota[i], quota[j]) for i, j in _pillar_pairs(list(n), baseline))


# --------------------------------------------------------------------------- building


def build_plan(threads: Sequence[ThreadRef], options: PlanOptions) -> list[PlannedComparison]:
    """The comparison plan in queue order (``queue_position`` = list index)."""
    plan = build_plan_arrays(threads, options)
    none = [None] * len(plan)
    return list(
        map(
            PlannedComparison,
            plan.thread_a.tolist(),
            none if plan.thread_b is None else plan.thread_b.tolist(),
            plan.pillar_a.tolist(),
            none if plan.pillar_b is None else plan.pillar_b.tolist(),
            plan.repetition.tolist(),
            plan.swap_group.tolist(),
            plan.is_swap.tolist(),
            range(len(plan)),
        )
    )


def build_plan_arrays(threads: Sequence[ThreadRef], options: PlanOptions) -> PlanArrays:
    """Like :func:`build_plan`, as numpy columns in queue order."""
    _check_options(options)
    rng_cap, rng_sample, rng_orient, rng_queue = (
        np.random.default_rng(s) for s in np.random.SeedSequence(options.seed).spawn(4)
    )
    ids, pillars, keys, members = _index(threads, options, rng_cap)
    _check_pillars({p: len(m) for p, m in members.items()}, options)
    if options.mode == "single":
        return _single_plan(ids, pillars, members, options, rng_queue)

    if options.mode == "pillar_sample":
        a, b, rep = _pillar_sample(pillars, keys, members, options, rng_sample)
    else:
        if options.match_by_prompt_key:
            a, b = _key_matched_pairs(pillars, keys, members, options)
        elif options.mode == "round_robin":
            a, b = _round_robin_pairs(members, options.baseline_pillar_id)
        else:
            pool = np.sort(np.concatenate(list(members.values())))  # capped threads
            i, j = np.triu_indices(len(pool), 1)
            a, b = pool[i], pool[j]
        reps = options.repetitions_per_pair
        a, b = np.tile(a, reps), np.tile(b, reps)
        rep = np.repeat(np.arange(reps, dtype=np.int64), len(a) // reps)

    if len(a) == 0:
        raise ValueError("no comparisons: no two threads that may meet share a prompt key")
    flip = rng_orient.random(len(a)) < 0.5
    a, b = np.where(flip, b, a), np.where(flip, a, b)
    group = np.arange(len(a), dtype=np.int64)
    swapped = np.zeros(len(a), dtype=bool)
    if options.position_swap:
        a, b = np.concatenate([a, b]), np.concatenate([b, a])
        rep, group = np.tile(rep, 2), np.tile(group, 2)
        swapped = np.concatenate([swapped, ~swapped])

    order = rng_queue.permutation(len(a))
    a, b = a[order], b[order]
    return PlanArrays(
        thread_a=ids[a],
        thread_b=ids[b],
        pillar_a=pillars[a],
        pillar_b=pillars[b],
        repetition=rep[order],
        swap_group=group[order],
        is_swap=swapped[order],
    )


def _single_plan(
    ids: IntArray,
    pillars: IntArray,
    members: Mapping[int, IntArray],
    options: PlanOptions,
    rng: np.random.Generator,
) -> PlanArrays:
    """Each (capped) thread once per pass, shuffled; ``swap_group`` numbers the threads, so
    the repetitions of one thread share it."""
    pool = np.sort(np.concatenate(list(members.values())))
    reps = options.repetitions_per_pair
    a = np.tile(pool, reps)
    rep = np.repeat(np.arange(reps, dtype=np.int64), len(pool))
    group = np.tile(np.arange(len(pool), dtype=np.int64), reps)
    order = rng.permutation(len(a))
    return PlanArrays(
        thread_a=ids[a[order]],
        thread_b=None,
        pillar_a=pillars[a[order]],
        pillar_b=None,
        repetition=rep[order],
        swap_group=group[order],
        is_swap=np.zeros(len(a), dtype=bool),
    )


def _index(
    threads: Sequence[ThreadRef], options: PlanOptions, rng: np.random.Generator
) -> tuple[IntArray, IntArray, list[str | None], dict[int, IntArray]]:
    """Threads sorted by id as arrays, and each pillar's (capped) member indices."""
    ordered = sorted(threads, key=lambda t: t.id)
    ids = np.fromiter((t.id for t in ordered), dtype=np.int64, count=len(ordered))
    if len(ids) > 1 and np.any(ids[1:] == ids[:-1]):
        raise ValueError("thread ids must be unique")
    pillars = np.fromiter((t.pillar_id for t in ordered), dtype=np.int64, count=len(ordered))
    keys = [t.prompt_key for t in ordered]
    members: dict[int, IntArray] = {}
    cap = options.max_threads_per_pillar
    by_pillar = np.argsort(pillars, kind="stable")  # ids stay sorted inside a pillar
    unique, starts = np.unique(pillars[by_pillar], return_index=True)
    groups = np.split(by_pillar, starts[1:]) if len(unique) else []
    for pillar, index in zip(unique.tolist(), groups, strict=True):
        if cap is not None and len(index) > cap:
            index = np.sort(rng.choice(index, size=cap, replace=False))
        members[pillar] = index
    return ids, pillars, keys, members


def _round_robin_pairs(
    members: Mapping[int, IntArray], baseline: int | None
) -> tuple[IntArray, IntArray]:
    a_parts, b_parts = [], []
    for i, j in _pillar_pairs(list(members), baseline):
        a_parts.append(np.repeat(members[i], len(members[j])))
        b_parts.append(np.tile(members[j], len(members[i])))
    return np.concatenate(a_parts), np.concatenate(b_parts)


def _key_matched_pairs(
    pillars: IntArray,
    keys: Sequence[str | None],
    members: Mapping[int, IntArray],
    options: PlanOptions,
) -> tuple[IntArray, IntArray]:
    """All pairs of (capped) threads with equal non-null keys, allowed by the mode.

    Pillar modes orient each pair (lower pillar, higher pillar), or
    (baseline, other); ordered by key, then thread id.
    """
    by_key: dict[str, list[int]] = defaultdict(list)
    for index in np.sort(np.concatenate(list(members.values()))).tolist():
        key = keys[index]
        if key is not None:
            by_key[key].append(index)
    a_parts, b_parts = [], []
    baseline = options.baseline_pillar_id
    for key in sorted(by_key):
        group = np.array(by_key[key], dtype=np.int64)
        if options.mode != "free_for_all":
            group = group[np.argsort(pillars[group], kind="stable")]
        i, j = np.triu_indices(len(group), 1)
        a, b = group[i], group[j]
        if options.mode != "free_for_all":
            pa, pb = pillars[a], pillars[b]
            keep = pa != pb
            if baseline is not None:
                keep &= (pa == baseline) | (pb == baseline)
                backwards = pb == baseline
                a, b = np.where(backwards, b, a), np.where(backwards, a, b)
            a, b = a[keep], b[keep]
        a_parts.append(a)
        b_parts.append(b)
    if not a_parts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(a_parts), np.concatenate(b_parts)


def _pillar_sample(
    pillars: IntArray,
    keys: Sequence[str | None],
    members: Mapping[int, IntArray],
    options: PlanOptions,
    rng: np.random.Generator,
) -> tuple[IntArray, IntArray, IntArray]:
    reps, sampling = options.repetitions_per_pair, options.sampling
    quota = (
        weighted_quotas({p: len(m) for p, m in members.items()}, options.samples_per_pillar)
        if sampling == "weighted"
        else dict.fromkeys(members, options.samples_per_pillar)
    )
    candidates: dict[tuple[int, int], tuple[IntArray, IntArray]] = {}
    orders: dict[int, IntArray] = {}
    if options.match_by_prompt_key:
        candidates = _split_by_pillar_pair(
            *_key_matched_pairs(pillars, keys, members, options), pillars
        )
    else:  # one seeded order per pillar, shared by all its pillar pairs
        orders = {p: rng.permutation(m) for p, m in members.items()}

    a_parts, b_parts, rep_parts = [], [], []
    for i, j in _pillar_pairs(list(members), options.baseline_pillar_id):
        m = max(quota[i], quota[j])
        # slot k of pass r is the (r * m + k)-th draw of the fixed order, wrapping around
        slots = (np.arange(reps)[:, None] * m + np.arange(m)[None, :]).ravel()
        if options.match_by_prompt_key:
            if (i, j) not in candidates:
                continue  # no shared keys between these pillars
            cand_a, cand_b = candidates[(i, j)]
            pick = (
                rng.integers(0, len(cand_a), size=reps * m)
                if sampling == "bootstrap"
                else rng.permutation(len(cand_a))[slots % len(cand_a)]
            )
            a, b = cand_a[pick], cand_b[pick]
        elif sampling == "bootstrap":
            a = rng.choice(members[i], size=reps * m)
            b = rng.choice(members[j], size=reps * m)
        else:
            a = orders[i][slots % len(orders[i])]
            b = orders[j][slots % len(orders[j])]
        a_parts.append(a)
        b_parts.append(b)
        rep_parts.append(np.repeat(np.arange(reps, dtype=np.int64), m))
    if not a_parts:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty
    return np.concatenate(a_parts), np.concatenate(b_parts), np.concatenate(rep_parts)


def _split_by_pillar_pair(
    a: IntArray, b: IntArray, pillars: IntArray
) -> dict[tuple[int, int], tuple[IntArray, IntArray]]:
    if len(a) == 0:
        return {}
    pa, pb = pillars[a], pillars[b]
    order = np.lexsort((pb, pa))  # stable: keeps key order inside a pillar pair
    a, b, pa, pb = a[order], b[order], pa[order], pb[order]
    starts = np.flatnonzero(np.r_[True, (pa[1:] != pa[:-1]) | (pb[1:] != pb[:-1])])
    ends = np.r_[starts[1:], len(a)]
    return {(int(pa[s]), int(pb[s])): (a[s:e], b[s:e]) for s, e in zip(starts, ends, strict=True)}
