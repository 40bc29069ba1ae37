"""Plan size (issue 14): a closed-form upper bound, checked before any plan is built, and an
estimate that says when a plan is over the per-session limit."""

from __future__ import annotations

from collections import Counter

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


def _key_counts(threads: list[ThreadRef]) -> dict[tuple[int, str], int]:
    return dict(Counter((t.pillar_id, t.prompt_key) for t in threads if t.prompt_key))


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    keys=st.integers(1, 5),
    mode=st.sampled_from(["round_robin", "free_for_all"]),
    baseline=st.booleans(),
    swap=st.booleans(),
    reps=st.integers(1, 3),
    cap=st.one_of(st.none(), st.integers(1, 9)),
)
def test_the_key_matched_bound_is_exact_before_the_cap(
    sizes: list[int],
    keys: int,
    mode: str,
    baseline: bool,
    swap: bool,
    reps: int,
    cap: int | None,
) -> None:
    threads = [
        ThreadRef(100 * p + i, p, f"k{(i * 7 + p) % keys}" if i % 4 else None)
        for p, n in enumerate(sizes)
        for i in range(n)
    ]
    options = PlanOptions(
        mode=mode,  # type: ignore[arg-type]
        match_by_prompt_key=True,
        position_swap=swap,
        repetitions_per_pair=reps,
        baseline_pillar_id=0 if baseline and mode == "round_robin" else None,
        max_threads_per_pillar=cap,
    )
    bound = plan_size_bound(dict(enumerate(sizes)), options, _key_counts(threads))
    try:
        built = len(build_plan(threads, options))
    except ValueError:  # no pair shares a key
        built = 0
    assert built <= bound
    if cap is None or cap >= max(sizes):
        assert built == bound
    assert bound <= plan_size_bound(dict(enumerate(sizes)), options)


def test_a_key_matched_plan_is_bounded_by_its_shared_keys() -> None:
    """Two pillars answering the same 1,392 prompts, round robin in both orders: 2,784
    comparisons, not the unmatched 3,875,328 (which the limit of 2,000,000 refused)."""
    threads = [ThreadRef(10_000 * p + i, p, f"q{i}") for p in (1, 2) for i in range(1392)]
    options = PlanOptions(mode="round_robin", match_by_prompt_key=True, position_swap=True)
    sizes = {1: 1392, 2: 1392}
    assert plan_size_bound(sizes, options) == 3_875_328
    assert plan_size_bound(sizes, options, _key_counts(threads)) == 2_784
    assert len(build_plan(threads, options)) == 2_784
