"""Mode single: one item per thread and pass, no second thread, counted as built."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.tournaments.estimate import ModelCost, estimate_plan
from llmjudge.core.tournaments.pairing import (
    PlanOptions,
    ThreadRef,
    build_plan,
    count_plan,
    plan_size_bound,
)


def _threads(sizes: list[int]) -> list[ThreadRef]:
    out, next_id = [], 1
    for pillar, n in enumerate(sizes, start=1):
        for k in range(n):
            out.append(ThreadRef(next_id, pillar, f"q{k}"))
            next_id += 1
    return out


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 12), min_size=1, max_size=5).filter(lambda s: sum(s) > 0),
    reps=st.integers(1, 4),
    cap=st.one_of(st.none(), st.integers(1, 6)),
    swap=st.booleans(),
    matched=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_each_thread_is_graded_once_per_pass(
    sizes: list[int], reps: int, cap: int | None, swap: bool, matched: bool, seed: int
) -> None:
    options = PlanOptions(
        mode="single",
        repetitions_per_pair=reps,
        max_threads_per_pillar=cap,
        position_swap=swap,  # nothing to swap: ignored
        match_by_prompt_key=matched,  # every thread is graded: ignored
        seed=seed,
    )
    plan = build_plan(_threads(sizes), options)
    capped = sum(n if cap is None else min(n, cap) for n in sizes)
    assert len(plan) == capped * reps
    assert count_plan(dict(enumerate(sizes, start=1)), options) == len(plan)
    assert plan_size_bound(dict(enumerate(sizes, start=1)), options) == len(plan)
    assert all(c.thread_b is None and c.pillar_b is None and not c.is_swap for c in plan)
    per_thread = Counter(c.thread_a for c in plan)
    assert set(per_thread.values()) == {reps}
    assert {(c.thread_a, c.repetition) for c in plan} == {
        (t, r) for t in per_thread for r in range(reps)
    }
    groups = {c.thread_a: c.swap_group for c in plan}  # one group per thread
    assert all(groups[c.thread_a] == c.swap_group for c in plan)
    assert [c.queue_position for c in plan] == list(range(len(plan)))


def test_one_seed_one_plan_and_a_lone_thread_is_enough() -> None:
    threads = _threads([3, 2])
    options = PlanOptions(mode="single", repetitions_per_pair=2, seed=5)
    assert build_plan(threads, options) == build_plan(threads[::-1], options)
    assert len(build_plan(_threads([1]), PlanOptions(mode="single"))) == 1


def test_single_has_no_baseline() -> None:
    with pytest.raises(ValueError, match="no baseline"):
        build_plan(_threads([2, 2]), PlanOptions(mode="single", baseline_pillar_id=1))


def test_the_estimate_counts_one_call_per_grade_without_swaps() -> None:
    options = PlanOptions(mode="single", repetitions_per_pair=3, position_swap=True)
    est = estimate_plan({1: 10, 2: 5}, options, ModelCost(latency_s=1.0), workers=(5,))
    assert (est.total_threads, est.base_comparisons, est.total_comparisons) == (15, 15, 45)
    assert est.minutes_by_workers == {5: 9 / 60}
    assert est.input_tokens == 45 * 1500
