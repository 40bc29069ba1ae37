"""Session estimates: arithmetic and the warnings a person acts on."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.tournaments.estimate import ModelCost, estimate_plan
from llmjudge.core.tournaments.pairing import PlanOptions, ThreadRef, build_plan, count_plan

CHEAP = ModelCost(latency_s=1.0)


def test_arithmetic() -> None:
    cost = ModelCost(
        input_per_million=2.5,
        output_per_million=10.0,
        latency_s=3.0,
        tokens_in_per_call=1000,
        tokens_out_per_call=200,
    )
    options = PlanOptions("round_robin", repetitions_per_pair=2)  # swap on
    estimate = estimate_plan({1: 3, 2: 4}, options, cost, workers=(1, 5, 100))
    assert estimate.total_threads == 7
    assert estimate.base_comparisons == 12
    assert estimate.total_comparisons == 48
    assert estimate.minutes_by_workers == {1: 48 * 3 / 60, 5: 10 * 3 / 60, 100: 3 / 60}
    assert (estimate.input_tokens, estimate.output_tokens) == (48_000, 9_600)
    assert estimate.cost_usd == pytest.approx(48_000 * 2.5 / 1e6 + 9_600 * 10 / 1e6)
    assert estimate.warnings == [] and estimate.recommended_repetitions is None


def test_default_worker_counts() -> None:
    estimate = estimate_plan({1: 2, 2: 2}, PlanOptions("round_robin"), CHEAP)
    assert list(estimate.minutes_by_workers) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert estimate.minutes_by_workers[256] == pytest.approx(1 / 60)  # ceil(8 / 256) calls


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.integers(0, 20), st.integers(1, 30), min_size=2, max_size=5),
    st.sampled_from(["pillar_sample", "round_robin", "free_for_all"]),
    st.integers(1, 3),
    st.booleans(),
    st.integers(1, 300),
    st.floats(0.1, 30),
)
def test_totals_follow_count_plan(
    sizes: dict[int, int], mode: str, reps: int, swap: bool, w: int, latency: float
) -> None:
    options = PlanOptions(mode, repetitions_per_pair=reps, position_swap=swap)  # type: ignore[arg-type]
    estimate = estimate_plan(sizes, options, ModelCost(latency_s=latency), workers=(w,))
    total = count_plan(sizes, options)
    assert estimate.total_comparisons == total
    assert estimate.base_comparisons * reps * (2 if swap else 1) == total
    assert estimate.minutes_by_workers[w] == pytest.approx(math.ceil(total / w) * latency / 60)
    assert estimate.input_tokens == total * 1500 and estimate.output_tokens == total * 300


def test_small_pillar_is_named() -> None:
    options = PlanOptions("pillar_sample", samples_per_pillar=5)
    estimate = estimate_plan(
        {1: 3, 2: 5, 3: 2}, options, CHEAP, pillar_names={1: "Reddit", 2: "Forum"}
    )
    small = [w for w in estimate.warnings if "fewer threads" in w]
    assert len(small) == 1
    assert '"Reddit" (3 threads), pillar 3 (2 threads)' in small[0]
    assert "Forum" not in small[0] and "Pillars" in small[0] and "5 samples" in small[0]


def test_unequal_sizes_recommend_repetitions() -> None:
    options = PlanOptions("pillar_sample", samples_per_pillar=5, repetitions_per_pair=2)
    estimate = estimate_plan({1: 5, 2: 23, 3: 10}, options, CHEAP, pillar_names={2: "Email"})
    assert estimate.recommended_repetitions == 5  # ceil(23 / 5)
    unequal = [w for w in estimate.warnings if "unequal" in w]
    assert len(unequal) == 1
    assert "5 to 23 threads" in unequal[0] and '"Email" needs 5 repetitions' in unequal[0]
    assert "2 repetitions leave some unseen" in unequal[0]


def test_enough_repetitions_silence_the_coverage_warning() -> None:
    options = PlanOptions("pillar_sample", samples_per_pillar=5, repetitions_per_pair=5)
    estimate = estimate_plan({1: 5, 2: 23, 3: 10}, options, CHEAP)
    assert estimate.recommended_repetitions == 5 and estimate.warnings == []


def test_equal_sizes_under_sampled_get_a_coverage_warning() -> None:
    options = PlanOptions("pillar_sample", samples_per_pillar=5)
    estimate = estimate_plan({1: 12, 2: 12}, options, CHEAP)
    assert estimate.recommended_repetitions == 3
    assert (
        len(estimate.warnings) == 1
        and "3 repetitions would judge every thread once" in (estimate.warnings[0])
    )


def test_weighted_sampling_recommendation_uses_quotas() -> None:
    # mean 10, 4 samples: quotas 2 and 6; ceil(5 / 2) = 3, ceil(15 / 6) = 3
    options = PlanOptions("pillar_sample", samples_per_pillar=4, sampling="weighted")
    estimate = estimate_plan({1: 5, 2: 15}, options, CHEAP)
    assert estimate.recommended_repetitions == 3
    assert estimate.total_comparisons == 12  # max(2, 6) x 2 orders
    assert not any("unequal" in w or "fewer threads" in w for w in estimate.warnings)


def test_long_free_for_all_warning() -> None:
    options = PlanOptions("free_for_all", position_swap=False)
    quiet = estimate_plan({1: 141}, options, CHEAP)  # 9,870 comparisons
    loud = estimate_plan({1: 142}, options, CHEAP)  # 10,011
    assert not any("Free-for-all" in w for w in quiet.warnings)
    (warning,) = [w for w in loud.warnings if "Free-for-all" in w]
    assert "142 threads makes 10,011 comparisons" in warning


def test_long_run_warning_at_chosen_workers() -> None:
    options = PlanOptions("round_robin", position_swap=False)  # 60 x 60 = 3,600 comparisons
    cost = ModelCost(latency_s=2.0)
    assert estimate_plan({1: 60, 2: 60}, options, cost).warnings == []  # 256 workers: 0.5 min
    at_limit = estimate_plan({1: 60, 2: 60}, options, cost, chosen_workers=2)  # 60 min
    assert at_limit.warnings == []
    (warning,) = estimate_plan({1: 60, 2: 60}, options, cost, chosen_workers=1).warnings
    assert warning.startswith("At 1 worker and 2 s per call this run takes about 2.0 hours.")
    (warning,) = estimate_plan({1: 45, 2: 60}, options, cost, chosen_workers=1).warnings
    assert "takes about 90 minutes" in warning


def test_planned_comparisons_for_key_matched_plans() -> None:
    threads = [ThreadRef(100 * m + q, m, str(q)) for m in range(4) for q in range(10)]
    options = PlanOptions("round_robin", baseline_pillar_id=0, match_by_prompt_key=True)
    with pytest.raises(ValueError, match="key-matched"):
        estimate_plan({m: 10 for m in range(4)}, options, CHEAP)
    planned = len(build_plan(threads, options))
    estimate = estimate_plan({m: 10 for m in range(4)}, options, CHEAP, planned_comparisons=planned)
    assert (estimate.total_comparisons, estimate.base_comparisons) == (60, 30)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": ()}, "worker"),
        ({"workers": (0, 4)}, "worker"),
        ({"chosen_workers": 0}, "chosen_workers"),
        ({"cost": ModelCost(input_per_million=-1)}, "negative"),
        ({"cost": ModelCost(tokens_out_per_call=-1)}, "negative"),
        ({"planned_comparisons": -3}, "negative"),
        ({"sizes": {1: 4}}, "at least 2 pillars"),
    ],
)
def test_invalid_inputs_raise(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "sizes": {1: 4, 2: 4},
        "options": PlanOptions("round_robin"),
        "cost": CHEAP,
    } | kwargs
    with pytest.raises(ValueError, match=message):
        estimate_plan(**arguments)  # type: ignore[arg-type]
