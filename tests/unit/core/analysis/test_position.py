"""Position-swap analysis: classification, summary, Likert stability, advice, real data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.analysis.outcomes import Outcome
from llmjudge.core.analysis.position import (
    interpret_consistency,
    position_swap_analysis,
)

MTBENCH = Path(__file__).resolve().parents[5] / "shared" / "data" / "mtbench"

CASES = [
    ("A", "B", "consistent"),
    ("B", "A", "consistent"),
    ("TIE", "TIE", "consistent"),
    ("A", "A", "primacy"),
    ("A", "TIE", "primacy"),
    ("TIE", "A", "primacy"),
    ("B", "B", "recency"),
    ("B", "TIE", "recency"),
    ("TIE", "B", "recency"),
]


def swap_pair(group: int, first: str, second: str, a: int = 7, b: int = 8) -> list[Outcome]:
    # the twin completes first and is listed first: "first" still means the original
    return [
        Outcome(2 * group + 1, b, a, second, swap_group=group, is_swap=True, completed_order=1),  # type: ignore[arg-type]
        Outcome(2 * group, a, b, first, swap_group=group, completed_order=2),  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize(("first", "second", "expected"), CASES)
def test_each_verdict_combination_is_classified(first: str, second: str, expected: str) -> None:
    analysis = position_swap_analysis(swap_pair(3, first, second))
    (pair,) = analysis.pairs
    assert (pair.first, pair.second, pair.classification) == (first, second, expected)
    assert (pair.original_id, pair.swapped_id, pair.thread_a, pair.thread_b) == (6, 7, 7, 8)
    summary, bias = analysis.summary, analysis.position_bias
    assert summary.total_swap_pairs == 1
    assert summary.consistency_rate == (1.0 if expected == "consistent" else 0.0)
    assert summary.consistent_ties == (1 if first == second == "TIE" else 0)
    assert summary.consistent_wins == (1 if expected == "consistent" and first != "TIE" else 0)
    assert summary.inconsistent == (0 if expected == "consistent" else 1)
    assert (bias.primacy_count, bias.recency_count) == (
        int(expected == "primacy"),
        int(expected == "recency"),
    )
    assert bias.leaning == (expected if expected != "consistent" else "none")
    assert bias.dominant_bias == "none"  # one pair is no evidence: the test cannot reject
    winner = {"A": 7, "B": 8}.get(first) if expected == "consistent" else None
    assert pair.winner_thread == winner


def test_summary_bias_and_likert_stability_by_hand() -> None:
    outcomes = [
        # group 1 consistent: thread 7 wins; scores move by 1 and 2
        Outcome(1, 7, 8, "A", scores_a={"clarity": 5}, scores_b={"clarity": 3}, swap_group=1),
        Outcome(
            2,
            8,
            7,
            "B",
            scores_a={"clarity": 1},
            scores_b={"clarity": 4},
            swap_group=1,
            is_swap=True,
        ),
        *swap_pair(2, "A", "A"),
        *swap_pair(3, "A", "TIE"),
        *swap_pair(4, "B", "B"),
        *swap_pair(5, "TIE", "TIE"),
        # left out: a lone original, a group with two originals, a twin of other threads
        Outcome(20, 1, 2, "A", swap_group=9),
        Outcome(21, 1, 2, "A", swap_group=10),
        Outcome(22, 2, 1, "A", swap_group=10),
        Outcome(23, 1, 2, "A", swap_group=11),
        Outcome(24, 1, 3, "A", swap_group=11, is_swap=True),
        Outcome(25, 1, 2, "A"),  # no swap group at all: not counted anywhere
    ]
    analysis = position_swap_analysis(outcomes, max_pairs=2)
    summary = analysis.summary
    assert summary.total_swap_pairs == 5
    assert summary.consistency_rate == pytest.approx(2 / 5)
    assert (summary.consistent_wins, summary.consistent_ties, summary.inconsistent) == (1, 1, 3)
    assert summary.unpaired == 5
    bias = analysis.position_bias
    assert (bias.primacy_count, bias.recency_count, bias.leaning) == (2, 1, "primacy")
    assert bias.p_value == pytest.approx(1.0)  # 2 vs 1 is no evidence
    assert bias.dominant_bias == "none"  # so no bias is named
    (clarity,) = analysis.likert_stability
    # thread 7: 5 then 4 (delta 1); thread 8: 3 then 1 (delta 2)
    assert (clarity.criterion, clarity.mean_delta, clarity.stability_rate, clarity.n) == (
        "clarity",
        1.5,
        0.5,
        2,
    )
    assert [p.swap_group for p in analysis.pairs] == [1, 2]
    assert analysis.interpretation.level == "fair"


def test_binomial_p_value_of_a_one_sided_judge() -> None:
    outcomes = [o for g in range(10) for o in swap_pair(g, "B", "B")]
    bias = position_swap_analysis(outcomes).position_bias
    assert bias.dominant_bias == bias.leaning == "recency"  # 10 vs 0 rejects at 5%
    assert bias.p_value == pytest.approx(2 / 2**10)


@settings(max_examples=30, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5)), min_size=1, max_size=20),
    strength=st.lists(st.integers(0, 3), min_size=6, max_size=6),
)
def test_a_position_blind_judge_is_fully_consistent(
    pairs: list[tuple[int, int]], strength: list[int]
) -> None:
    def judge(a: int, b: int) -> str:
        return "A" if strength[a] > strength[b] else "B" if strength[b] > strength[a] else "TIE"

    outcomes = []
    for g, (a, d) in enumerate(pairs):
        b = (a + d) % 6
        outcomes += [
            Outcome(2 * g, a, b, judge(a, b), swap_group=g),  # type: ignore[arg-type]
            Outcome(2 * g + 1, b, a, judge(b, a), swap_group=g, is_swap=True),  # type: ignore[arg-type]
        ]
    analysis = position_swap_analysis(outcomes)
    assert analysis.summary.consistency_rate == 1.0
    assert analysis.position_bias.dominant_bias == "none"
    assert analysis.interpretation.level == "excellent"


@pytest.mark.parametrize(
    ("rate", "level"),
    [
        (1.0, "excellent"),
        (0.8, "excellent"),
        (0.7999, "good"),
        (0.6, "good"),
        (0.5999, "fair"),
        (0.4, "fair"),
        (0.3999, "poor"),
        (0.0, "poor"),
        (None, "insufficient"),
    ],
)
def test_interpretation_thresholds(rate: float | None, level: str) -> None:
    assert interpret_consistency(rate).level == level


def test_recommendations_follow_level_and_bias() -> None:
    def advice(rate: float, bias: str) -> str:
        return " ".join(interpret_consistency(rate, bias).recommendations)  # type: ignore[arg-type]

    assert "majority voting" in advice(0.5, "none")
    assert "few-shot" in advice(0.3, "none")
    assert "averag" in advice(0.65, "none").lower()
    assert "shown first" in advice(0.5, "primacy") and "shown last" not in advice(0.5, "primacy")
    assert "shown last" in advice(0.5, "recency")
    assert "shown first (primacy)" not in advice(0.9, "primacy")  # no bias advice at excellent
    assert "63%" in interpret_consistency(0.63).message


def test_real_mtbench_judge_consistency() -> None:
    """4,800 real judge calls (80 questions x 30 models vs a baseline, both orders)."""
    lines = (MTBENCH / "judgments-gpt-3.5-turbo-1106.jsonl").read_text().splitlines()
    baseline = "vicuna-13b-v1.3"
    thread_ids: dict[tuple[int, str], int] = {}
    outcomes, plain = [], {}
    for cid, line in enumerate(lines):
        row = json.loads(line)
        verdicts = re.findall(r'\[\["?([ABC])"?\]\]', row["judgment"])
        if not verdicts:
            continue  # failed call or prose verdict: the twin stays unpaired
        winner = {"A": "A", "B": "B", "C": "TIE"}[verdicts[-1]]
        original = row["model_a"] == baseline
        other = row["model_b"] if original else row["model_a"]
        a, b = (
            thread_ids.setdefault((row["question_id"], row[key]), len(thread_ids))
            for key in ("model_a", "model_b")
        )
        group = thread_ids.setdefault((row["question_id"], "pair:" + other), len(thread_ids))
        outcomes.append(Outcome(cid, a, b, winner, swap_group=group, is_swap=not original))  # type: ignore[arg-type]
        plain.setdefault(group, {})[original] = winner
    complete = [(v[True], v[False]) for v in plain.values() if len(v) == 2]
    consistent = sum(pair in {("A", "B"), ("B", "A"), ("TIE", "TIE")} for pair in complete)
    primacy = sum(pair in {("A", "A"), ("A", "TIE"), ("TIE", "A")} for pair in complete)

    analysis = position_swap_analysis(outcomes, max_pairs=0)
    assert analysis.summary.total_swap_pairs == len(complete) > 2_300
    assert analysis.summary.consistency_rate == pytest.approx(consistent / len(complete))
    assert analysis.position_bias.primacy_count == primacy
    # the release reports 69.59% for this judge with its own parser
    assert analysis.summary.consistency_rate == pytest.approx(0.6959, abs=0.01)
    assert analysis.interpretation.level == "good"
    assert analysis.pairs == []


def test_no_swap_pairs() -> None:
    analysis = position_swap_analysis([Outcome(1, 1, 2, "A")])
    assert analysis.summary.total_swap_pairs == 0 and analysis.summary.consistency_rate is None
    assert analysis.position_bias.dominant_bias == "none" and analysis.position_bias.p_value is None
    assert analysis.interpretation.level == "insufficient"


def test_the_shift_of_p_first_wins_is_measured_on_the_judges_probabilities() -> None:
    """Each swap pair: P(X better) shown first 0.8, shown second 1 - 0.4 = 0.6: a shift of
    +0.2 towards the first position; pairs without both probabilities are left out."""
    rows = []
    for g in range(6):
        x, y = 2 * g + 1, 2 * g + 2
        rows.append(Outcome(10 * g, x, y, "A", swap_group=g, prob_a=0.8 + 0.01 * (g % 2)))
        rows.append(Outcome(10 * g + 1, y, x, "A", swap_group=g, is_swap=True, prob_a=0.4))
    rows.append(Outcome(99, 50, 51, "A", swap_group=7, prob_a=0.9))
    rows.append(Outcome(98, 51, 50, "B", swap_group=7, is_swap=True))  # no probability
    shift = position_swap_analysis(rows).probability_shift
    assert shift.pairs == 6
    assert shift.mean_shift == pytest.approx(0.2 + 0.005)
    assert shift.low is not None and shift.high is not None
    assert 0.19 < shift.low <= shift.mean_shift <= shift.high < 0.22
    none = position_swap_analysis([o for o in rows if o.comparison_id >= 98]).probability_shift
    assert (none.pairs, none.mean_shift, none.low) == (0, None, None)
