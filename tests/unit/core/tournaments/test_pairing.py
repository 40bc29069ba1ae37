"""Comparison plans: exact counts, invariants, sampling behaviour, determinism, speed."""

from __future__ import annotations

import math
import random
import time
from collections import Counter, defaultdict
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.tournaments.pairing import (
    PlannedComparison,
    PlanOptions,
    ThreadRef,
    build_plan,
    build_plan_arrays,
    count_plan,
)


def _threads(sizes: dict[int, int], keys: int | None = None) -> list[ThreadRef]:
    """Thread ids 1000 * pillar + i; with ``keys``, prompt_key = str(i % keys)."""
    return [
        ThreadRef(1000 * p + i, p, None if keys is None else str(i % keys))
        for p, n in sizes.items()
        for i in range(n)
    ]


def _expected_count(sizes: dict[int, int], o: PlanOptions) -> int:
    """The counting rules of the brief, written independently of the module."""
    cap = o.max_threads_per_pillar
    n = {p: min(v, cap) if cap else v for p, v in sizes.items() if v > 0}
    total = sum(n.values())
    if o.baseline_pillar_id is None:
        pairs = [(i, j) for i in n for j in n if i < j]
    else:
        pairs = [(o.baseline_pillar_id, j) for j in n if j != o.baseline_pillar_id]
    if o.mode == "free_for_all":
        base = total * (total - 1) // 2
    elif o.mode == "round_robin":
        base = sum(n[i] * n[j] for i, j in pairs)
    elif o.sampling == "weighted":
        mean = Fraction(total, len(n))
        quota = {
            p: max(1, math.floor(o.samples_per_pillar * v / mean + Fraction(1, 2)))
            for p, v in n.items()
        }
        base = sum(max(quota[i], quota[j]) for i, j in pairs)
    else:
        base = len(pairs) * o.samples_per_pillar
    return base * o.repetitions_per_pair * (2 if o.position_swap else 1)


def _check_invariants(
    plan: list[PlannedComparison], threads: list[ThreadRef], o: PlanOptions
) -> None:
    pillar_of = {t.id: t.pillar_id for t in threads}
    assert [c.queue_position for c in plan] == list(range(len(plan)))
    groups: dict[int, list[PlannedComparison]] = defaultdict(list)
    for c in plan:
        assert c.thread_a != c.thread_b
        assert (pillar_of[c.thread_a], pillar_of[c.thread_b]) == (c.pillar_a, c.pillar_b)
        assert 0 <= c.repetition < o.repetitions_per_pair
        if o.mode != "free_for_all":
            assert c.pillar_a != c.pillar_b
        if o.baseline_pillar_id is not None:
            assert o.baseline_pillar_id in (c.pillar_a, c.pillar_b)
        groups[c.swap_group].append(c)
    for members in groups.values():
        if not o.position_swap:
            assert len(members) == 1 and not members[0].is_swap
            continue
        assert len(members) == 2
        original, twin = sorted(members, key=lambda c: c.is_swap)
        assert (original.is_swap, twin.is_swap) == (False, True)
        assert (twin.thread_a, twin.thread_b) == (original.thread_b, original.thread_a)
        assert (twin.pillar_a, twin.pillar_b) == (original.pillar_b, original.pillar_a)
        assert twin.repetition == original.repetition
    if o.max_threads_per_pillar is not None:
        used = defaultdict(set)
        for c in plan:
            used[c.pillar_a].add(c.thread_a)
            used[c.pillar_b].add(c.thread_b)
        assert all(len(ids) <= o.max_threads_per_pillar for ids in used.values())


@st.composite
def _cases(draw: st.DrawFn) -> tuple[dict[int, int], PlanOptions]:
    mode = draw(st.sampled_from(["pillar_sample", "round_robin", "free_for_all"]))
    pillar_ids = draw(st.lists(st.integers(0, 50), min_size=2, max_size=6, unique=True))
    sizes = {p: draw(st.integers(1, 9)) for p in pillar_ids}
    baseline = None
    if mode != "free_for_all" and draw(st.booleans()):
        baseline = draw(st.sampled_from(pillar_ids))
    options = PlanOptions(
        mode=mode,
        samples_per_pillar=draw(st.integers(1, 7)),
        repetitions_per_pair=draw(st.integers(1, 3)),
        max_threads_per_pillar=draw(st.none() | st.integers(1, 6)),
        position_swap=draw(st.booleans()),
        sampling=draw(st.sampled_from(["fixed", "bootstrap", "weighted"])),
        baseline_pillar_id=baseline,
        seed=draw(st.integers(0, 2**32)),
    )
    return sizes, options


@settings(max_examples=250, deadline=None)
@given(_cases())
def test_counts_match_the_formula_and_invariants_hold(
    case: tuple[dict[int, int], PlanOptions],
) -> None:
    sizes, options = case
    threads = _threads(sizes)
    plan = build_plan(threads, options)
    assert len(plan) == count_plan(sizes, options) == _expected_count(sizes, options)
    _check_invariants(plan, threads, options)


@settings(max_examples=60, deadline=None)
@given(_cases(), st.randoms(use_true_random=False))
def test_same_seed_same_plan_whatever_the_input_order(
    case: tuple[dict[int, int], PlanOptions], rnd: random.Random
) -> None:
    sizes, options = case
    threads = _threads(sizes)
    shuffled = threads[:]
    rnd.shuffle(shuffled)
    assert build_plan(shuffled, options) == build_plan(threads, options)


def test_different_seeds_give_different_orders() -> None:
    threads = _threads({1: 6, 2: 6, 3: 6})
    plans = {
        tuple(
            (c.thread_a, c.thread_b)
            for c in build_plan(threads, PlanOptions("round_robin", seed=s))
        )
        for s in range(5)
    }
    assert len(plans) == 5


def test_round_robin_is_every_cross_pillar_pair_once() -> None:
    sizes = {1: 3, 2: 4, 3: 2}
    plan = build_plan(_threads(sizes), PlanOptions("round_robin", position_swap=False))
    pairs = Counter(frozenset((c.thread_a, c.thread_b)) for c in plan)
    expected = {
        frozenset((a.id, b.id))
        for a in _threads(sizes)
        for b in _threads(sizes)
        if a.pillar_id < b.pillar_id
    }
    assert set(pairs) == expected and set(pairs.values()) == {1}


def test_free_for_all_is_every_pair_and_ignores_pillars() -> None:
    sizes = {1: 5, 2: 1}
    plan = build_plan(_threads(sizes), PlanOptions("free_for_all", repetitions_per_pair=2))
    pairs = Counter(frozenset((c.thread_a, c.thread_b)) for c in plan)
    assert len(pairs) == 15 and set(pairs.values()) == {4}  # 2 repetitions x 2 orders
    assert any(c.pillar_a == c.pillar_b for c in plan)


def test_orientation_is_randomised() -> None:
    sizes = {p: 40 for p in range(1, 5)}
    plan = build_plan(_threads(sizes), PlanOptions("round_robin", baseline_pillar_id=1, seed=3))
    originals = [c for c in plan if not c.is_swap]
    baseline_first = sum(c.pillar_a == 1 for c in originals) / len(originals)
    assert 0.45 < baseline_first < 0.55  # 4,800 coin flips: 0.5 +- 0.014 (2 sd)


def test_queue_order_is_shuffled() -> None:
    plan = build_plan(_threads({1: 10, 2: 10, 3: 10}), PlanOptions("round_robin"))
    first_half = plan[: len(plan) // 2]
    assert 0.4 < sum(c.is_swap for c in first_half) / len(first_half) < 0.6
    pillar_pairs = Counter(frozenset((c.pillar_a, c.pillar_b)) for c in first_half)
    assert len(pillar_pairs) == 3 and min(pillar_pairs.values()) > 70  # ~100 each


# --------------------------------------------------------------------------- pillar_sample


def _draws(plan: list[PlannedComparison], pillar: int, other: int, rep: int) -> list[int]:
    """Threads of ``pillar`` drawn against ``other`` in pass ``rep`` (originals only)."""
    return [
        c.thread_a if c.pillar_a == pillar else c.thread_b
        for c in plan
        if not c.is_swap and c.repetition == rep and {c.pillar_a, c.pillar_b} == {pillar, other}
    ]


def test_fixed_sampling_fresh_threads_each_pass_and_same_sample_per_pass() -> None:
    sizes = {1: 12, 2: 12, 3: 12}
    options = PlanOptions("pillar_sample", samples_per_pillar=4, repetitions_per_pair=3, seed=7)
    plan = build_plan(_threads(sizes), options)
    seen: set[int] = set()
    for rep in range(3):
        against_2, against_3 = _draws(plan, 1, 2, rep), _draws(plan, 1, 3, rep)
        assert len(set(against_2)) == 4 and set(against_2) == set(against_3)
        assert not seen & set(against_2)  # a big enough pillar brings fresh threads
        seen |= set(against_2)
    assert len(seen) == 12  # 3 passes x 4 samples = every thread of pillar 1 once


def test_small_pillar_reuses_threads_cyclically() -> None:
    options = PlanOptions("pillar_sample", samples_per_pillar=5, repetitions_per_pair=2)
    plan = build_plan(_threads({1: 2, 2: 10}), options)
    draws = Counter(_draws(plan, 1, 2, 0) + _draws(plan, 1, 2, 1))
    assert sorted(draws.values()) == [5, 5]  # 10 slots over 2 threads, evenly
    assert len(set(_draws(plan, 2, 1, 0) + _draws(plan, 2, 1, 1))) == 10


def test_bootstrap_draws_with_replacement() -> None:
    options = PlanOptions("pillar_sample", samples_per_pillar=30, sampling="bootstrap", seed=1)
    plan = build_plan(_threads({1: 10, 2: 10}), options)
    draws = _draws(plan, 1, 2, 0)
    assert len(draws) == 30 and len(set(draws)) < 10 + 1 and Counter(draws).most_common(1)[0][1] > 3


def test_weighted_gives_big_pillars_more_comparisons() -> None:
    sizes = {1: 4, 2: 8, 3: 24}  # mean 12: quotas 2, 4, 12 for 6 samples
    options = PlanOptions(
        "pillar_sample", samples_per_pillar=6, sampling="weighted", position_swap=False
    )
    plan = build_plan(_threads(sizes), options)
    per_pair = Counter(frozenset((c.pillar_a, c.pillar_b)) for c in plan)
    assert per_pair == {frozenset((1, 2)): 4, frozenset((1, 3)): 12, frozenset((2, 3)): 12}
    assert count_plan(sizes, options) == 28
    assert len(set(_draws(plan, 3, 1, 0))) == 12  # distinct draws from the big pillar


def test_cap_keeps_a_seeded_sample() -> None:
    def used(seed: int) -> frozenset[int]:
        options = PlanOptions("round_robin", max_threads_per_pillar=3, seed=seed)
        plan = build_plan(_threads({1: 20, 2: 2}), options)
        return frozenset(t for c in plan for t in (c.thread_a, c.thread_b) if t < 2000)

    assert len(used(11)) == 3 and used(11) == used(11)
    assert len({used(seed) for seed in range(10)}) > 1


# --------------------------------------------------------------------------- prompt keys


def test_mtbench_replay_plan() -> None:
    """31 models x 80 questions, baseline, key-matched round robin with swap = 4,800."""
    threads = [ThreadRef(100 * model + q, model, f"q{q}") for model in range(31) for q in range(80)]
    options = PlanOptions("round_robin", baseline_pillar_id=0, match_by_prompt_key=True)
    plan = build_plan(threads, options)
    assert len(plan) == 4800
    key_of = {t.id: t.prompt_key for t in threads}
    assert all(key_of[c.thread_a] == key_of[c.thread_b] for c in plan)
    pairs = Counter((key_of[c.thread_a], max(c.pillar_a, c.pillar_b)) for c in plan)
    assert len(pairs) == 2400 and set(pairs.values()) == {2}
    _check_invariants(plan, threads, options)


@settings(max_examples=80, deadline=None)
@given(_cases(), st.integers(1, 4), st.booleans())
def test_key_matching_pairs_only_equal_keys(
    case: tuple[dict[int, int], PlanOptions], n_keys: int, some_null: bool
) -> None:
    sizes, options = case
    options = PlanOptions(**{**options.__dict__, "match_by_prompt_key": True})
    threads = _threads(sizes, keys=n_keys)
    if some_null:  # every third thread has no key and must never be paired
        threads = [ThreadRef(t.id, t.pillar_id, None) if t.id % 3 == 0 else t for t in threads]
    key_of = {t.id: t.prompt_key for t in threads}
    try:
        plan = build_plan(threads, options)
    except ValueError as exc:
        assert "share a prompt key" in str(exc)
        return
    _check_invariants(plan, threads, options)
    assert all(key_of[c.thread_a] is not None for c in plan)
    assert all(key_of[c.thread_a] == key_of[c.thread_b] for c in plan)
    copies = options.repetitions_per_pair * (2 if options.position_swap else 1)
    if (
        options.mode == "pillar_sample"
        and options.sampling != "weighted"
        and options.max_threads_per_pillar is None
    ):
        matched_pillar_pairs = {
            (a.pillar_id, b.pillar_id)
            for a in threads
            for b in threads
            if a.pillar_id < b.pillar_id
            and a.prompt_key is not None
            and a.prompt_key == b.prompt_key
            and (options.baseline_pillar_id in (None, a.pillar_id, b.pillar_id))
        }
        assert len(plan) == len(matched_pillar_pairs) * options.samples_per_pillar * copies
    if options.mode == "round_robin" and options.max_threads_per_pillar is None:
        # exactly the matched cross-pillar pairs, each once per repetition and orientation
        allowed = {
            frozenset((a.id, b.id))
            for a in threads
            for b in threads
            if a.pillar_id < b.pillar_id
            and a.prompt_key is not None
            and a.prompt_key == b.prompt_key
            and (options.baseline_pillar_id in (None, a.pillar_id, b.pillar_id))
        }
        assert Counter(frozenset((c.thread_a, c.thread_b)) for c in plan) == dict.fromkeys(
            allowed, copies
        )


def test_key_matched_pillar_sample_draws_matched_pairs() -> None:
    threads = _threads({1: 6, 2: 6, 3: 6}, keys=3)
    options = PlanOptions("pillar_sample", samples_per_pillar=4, match_by_prompt_key=True)
    plan = build_plan(threads, options)
    key_of = {t.id: t.prompt_key for t in threads}
    assert len(plan) == 3 * 4 * 2
    assert all(key_of[c.thread_a] == key_of[c.thread_b] for c in plan)


def test_key_matching_without_shared_keys_raises() -> None:
    threads = [ThreadRef(1, 1, "x"), ThreadRef(2, 2, "y"), ThreadRef(3, 2, None)]
    with pytest.raises(ValueError, match="share a prompt key"):
        build_plan(threads, PlanOptions("round_robin", match_by_prompt_key=True))


def test_key_matched_free_for_all_pairs_within_a_pillar_too() -> None:
    threads = [ThreadRef(1, 1, "k"), ThreadRef(2, 1, "k"), ThreadRef(3, 2, "j")]
    plan = build_plan(threads, PlanOptions("free_for_all", match_by_prompt_key=True))
    assert {(c.thread_a, c.thread_b) for c in plan} == {(1, 2), (2, 1)}


# --------------------------------------------------------------------------- errors, counting


@pytest.mark.parametrize(
    ("threads", "options", "message"),
    [
        (_threads({1: 5}), PlanOptions("round_robin"), "at least 2 pillars"),
        (_threads({1: 5}), PlanOptions("pillar_sample"), "at least 2 pillars"),
        (_threads({1: 1}), PlanOptions("free_for_all"), "at least 2 threads"),
        ([], PlanOptions("free_for_all"), "at least 2 threads"),
        (_threads({1: 2, 2: 2}), PlanOptions("round_robin", baseline_pillar_id=9), "baseline"),
        (_threads({1: 2, 2: 2}), PlanOptions("free_for_all", baseline_pillar_id=1), "pillar mode"),
        (_threads({1: 2, 2: 2}), PlanOptions("pillar_sample", samples_per_pillar=0), "samples"),
        (_threads({1: 2, 2: 2}), PlanOptions("round_robin", repetitions_per_pair=0), "repetitions"),
        (
            _threads({1: 2, 2: 2}),
            PlanOptions("round_robin", max_threads_per_pillar=0),
            "max_threads",
        ),
        (_threads({1: 2, 2: 2}), PlanOptions("round_robin", seed=-1), "seed"),
        (_threads({1: 2, 2: 2}), PlanOptions("swiss"), "unknown comparison mode"),  # type: ignore[arg-type]
        (_threads({1: 2, 2: 2}), PlanOptions("pillar_sample", sampling="x"), "unknown sampling"),  # type: ignore[arg-type]
        ([ThreadRef(1, 1), ThreadRef(1, 2)], PlanOptions("round_robin"), "unique"),
    ],
)
def test_impossible_options_raise(
    threads: list[ThreadRef], options: PlanOptions, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build_plan(threads, options)


def test_count_plan_errors_and_empty_pillars() -> None:
    with pytest.raises(ValueError, match="key-matched"):
        count_plan({1: 3, 2: 3}, PlanOptions("round_robin", match_by_prompt_key=True))
    with pytest.raises(ValueError, match="negative"):
        count_plan({1: 3, 2: -1}, PlanOptions("round_robin"))
    with pytest.raises(ValueError, match="at least 2 pillars"):
        count_plan({1: 3, 2: 0}, PlanOptions("round_robin"))
    assert count_plan({1: 3, 2: 0, 3: 2}, PlanOptions("round_robin")) == 12


def test_large_free_for_all_is_fast() -> None:
    threads = _threads({p: 100 for p in range(10)})
    start = time.perf_counter()
    plan = build_plan(threads, PlanOptions("free_for_all", seed=5))
    elapsed = time.perf_counter() - start
    assert (
        len(plan) == 999_000 == count_plan({p: 100 for p in range(10)}, PlanOptions("free_for_all"))
    )
    assert elapsed < 10, f"1,000-thread free-for-all took {elapsed:.1f} s"
    arrays = build_plan_arrays(threads, PlanOptions("free_for_all", seed=5))
    assert len(arrays) == len(plan)
    assert (int(arrays.thread_a[123]), int(arrays.thread_b[123])) == (
        plan[123].thread_a,
        plan[123].thread_b,
    )
