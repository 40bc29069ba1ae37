"""Plan size (issue 14): a closed-form upper bound, checked before any plan is built, and an
estimate that says when a plan is over the per-session limit."""

from __future__ import annotations

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


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(2, 12), min_size=2, max_size=4),
    keys=st.integers(1, 4),
    mode=st.sampled_from(["round_robin", "free_for_all"]),
    swap=st.booleans(),
    reps=st.integers(1, 3),
)
def test_the_bound_holds_for_key_matched_plans(
    sizes: list[int], keys: int, mode: str, swap: bool, reps: int
) -> None:
    threads = [
        ThreadRef(100 * p + i, p, f"k{i % keys}") for p, n in enumerate(sizes) for i in range(n)
    ]
    options = PlanOptions(
        mode=mode,  # type: ignore[arg-type]
        match_by_prompt_key=True,
        position_swap=swap,
        repetitions_per_pair=reps,
    )
    size_map = dict(enumerate(sizes))
    assert len(build_plan(threads, options)) <= plan_size_bound(size_map, options)
    plain = PlanOptions(mode=mode, position_swap=swap, repetitions_per_pair=reps)  # type: ignore[arg-type]
    assert plan_size_bound(size_map, plain) == count_plan(size_map, plain)


def test_a_huge_plan_is_counted_without_being_built_and_flagged_over_the_limit() -> None:
    # 300M comparisons: what the probe got accepted. Counting it is instant.
    sizes = {1: 30_000, 2: 20_000}
    options = PlanOptions(mode="round_robin", repetitions_per_pair=1, position_swap=False)
    assert plan_size_bound(sizes, options) == 600_000_000
    est = estimate_plan(sizes, options, ModelCost(), max_comparisons=2_000_000)
    assert est.over_limit and est.total_comparisons == 600_000_000
    assert any("at most 2,000,000" in w for w in est.warnings)
    small = estimate_plan({1: 10, 2: 10}, options, ModelCost(), max_comparisons=2_000_000)
    assert not small.over_limit
    assert not any("at most" in w for w in small.warnings)
    assert estimate_plan({1: 10, 2: 10}, options, ModelCost(), max_comparisons=99).over_limit
