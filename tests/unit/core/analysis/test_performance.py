"""Thread performance, coverage and surprise findings on small hand-checked data."""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np
import pytest

from llmjudge.core.analysis.findings import surprise_findings
from llmjudge.core.analysis.outcomes import Outcome
from llmjudge.core.analysis.performance import thread_performance
from llmjudge.core.stats import wilson_bounds as wilson
from tests.unit.core.analysis.test_leaderboard import assert_plain_json

PILLAR_OF = {1: 10, 2: 10, 5: 20, 6: 20, 7: 20, 8: 20}
NAMES = {10: "alpha", 20: "beta", 30: "gamma"}
SIZES = {10: 3, 20: 60, 30: 5}


def c(score: float) -> dict[str, float]:
    return {"clarity": score}


OUTCOMES = [
    # repetition 0
    Outcome(1, 1, 5, "A", scores_a=c(4), scores_b=c(2)),
    Outcome(2, 1, 6, "A", scores_a=c(4), scores_b=c(3)),
    Outcome(3, 2, 5, "B", scores_a=c(1), scores_b=c(5)),
    Outcome(4, 6, 7, "TIE"),
    # repetition 1
    Outcome(5, 5, 1, "B", scores_a=c(2), scores_b=c(4), repetition=1),
    Outcome(6, 7, 1, "B", repetition=1),
    Outcome(7, 2, 6, "B", repetition=1),
    Outcome(8, 7, 5, "A", repetition=1),
    Outcome(9, 8, 2, "A", repetition=1),
    Outcome(10, 1, 6, "A", repetition=1),
    Outcome(11, 1, 7, "A", repetition=1),
]


def test_thread_records() -> None:
    result = thread_performance(OUTCOMES, PILLAR_OF, SIZES, NAMES)
    threads = {t.thread_id: t for t in result.threads}
    # best performance first, ties by thread id
    assert [t.thread_id for t in result.threads] == [1, 8, 6, 7, 5, 2]
    one = threads[1]
    assert (one.usage_count, one.unique_opponents, one.wins, one.losses, one.ties) == (
        6,
        3,
        6,
        0,
        0,
    )
    assert (one.win_rate, one.performance_score, one.consistent_winner) == (1.0, 1.0, True)
    six = threads[6]
    assert (six.usage_count, six.wins, six.losses, six.ties) == (4, 1, 2, 1)
    assert (six.win_rate, six.performance_score) == (0.375, -0.25)
    assert not six.consistent_winner and not six.consistent_loser
    five = threads[5]
    assert (five.wins, five.losses, five.consistent_loser) == (1, 3, True)  # 75% losses
    assert threads[2].consistent_loser  # 3 of 3 lost
    eight = threads[8]
    assert eight.win_rate == 1.0 and not eight.consistent_winner  # a single comparison


def test_likert_consistency_per_thread() -> None:
    threads = {t.thread_id: t for t in thread_performance(OUTCOMES, PILLAR_OF, SIZES).threads}
    one = threads[1].likert["clarity"]
    assert (one.mean, one.std, one.count, one.is_consistent) == (4.0, 0.0, 3, True)
    assert threads[1].likert_consistency_score == 1.0
    five = threads[5].likert["clarity"]  # scores 2, 5, 2
    assert five.mean == pytest.approx(3.0)
    assert five.std == pytest.approx(statistics.stdev([2, 5, 2]))
    assert five.is_consistent is False and threads[5].likert_consistency_score == 0.0
    two = threads[2].likert["clarity"]  # one score: no spread to judge
    assert (two.mean, two.std, two.count, two.is_consistent) == (1.0, None, 1, None)
    assert threads[2].likert_consistency_score is None
    assert threads[7].likert["clarity"].count == 0 and threads[7].likert["clarity"].mean is None


def test_coverage_stats() -> None:
    coverage = thread_performance(OUTCOMES, PILLAR_OF, SIZES).coverage
    assert coverage.thread_count == 6
    assert coverage.mean_usage == pytest.approx(22 / 6)
    assert coverage.over_sampled == [1]  # 6 > 1.5 * 3.67
    assert coverage.under_sampled == [8]  # 1 < 0.5 * 3.67
    assert coverage.evenly_sampled == [2, 5, 6, 7]
    assert coverage.consistent_winners == [1]
    assert coverage.consistent_losers == [2, 5]
    assert coverage.inconsistent_threads == [5]
    (clarity,) = coverage.likert
    given = [4, 2, 4, 3, 1, 5, 2, 4]
    assert clarity.mean == pytest.approx(statistics.mean(given))
    assert clarity.std == pytest.approx(statistics.stdev(given))
    assert (clarity.count, clarity.evaluable_threads, clarity.consistent_threads) == (8, 2, 1)


def test_pillar_coverage_goals() -> None:
    alpha, beta, gamma = thread_performance(OUTCOMES, PILLAR_OF, SIZES, NAMES).pillars
    # alpha: 2 of 3 threads used (> 50% goal for a small pillar)
    assert (alpha.pillar_id, alpha.threads_used, alpha.thread_count) == (10, 2, 3)
    assert alpha.sample_coverage == pytest.approx(2 / 3) and alpha.meets_coverage_goal
    # both alpha threads appear in both repetitions
    assert alpha.repetition_overlap == 1.0 and alpha.meets_overlap_goal is False
    # alpha scored 2 of 3 in repetition 0 and 4 of 6 in repetition 1
    assert alpha.win_rate_variance == pytest.approx(0.0) and alpha.meets_variance_goal
    assert len(alpha.flags) == 1 and "recur" in alpha.flags[0]
    # beta: 4 of 60 used, under the 20% goal of a large pillar; 5, 6, 7 in both repetitions
    assert beta.sample_coverage == pytest.approx(4 / 60) and beta.coverage_goal == 0.2
    assert not beta.meets_coverage_goal and beta.repetition_overlap == 0.75
    # beta scored 2 of 5 (0.4) then 3 of 8 (0.375)
    assert beta.win_rate_variance == pytest.approx(0.0125**2)
    assert beta.flags[0] == "beta: 4 of 60 threads used (7%), goal above 20%."
    # gamma: never used
    assert (gamma.threads_used, gamma.sample_coverage, gamma.meets_coverage_goal) == (0, 0.0, False)
    assert gamma.repetition_overlap is None and gamma.win_rate_variance is None


def test_win_rate_variance_flag() -> None:
    swing = [
        Outcome(1, 1, 5, "A"),
        Outcome(2, 1, 5, "A"),
        Outcome(3, 1, 5, "B", repetition=1),
        Outcome(4, 1, 5, "B", repetition=1),
    ]
    alpha = thread_performance(swing, PILLAR_OF, SIZES).pillars[0]
    assert alpha.win_rate_variance == pytest.approx(0.25)  # 1.0 then 0.0
    assert alpha.meets_variance_goal is False
    assert any("varies across repetitions" in flag for flag in alpha.flags)


def test_single_repetition_has_no_overlap_or_variance() -> None:
    alpha = thread_performance(OUTCOMES[:4], PILLAR_OF, SIZES).pillars[0]
    assert alpha.repetition_overlap is None and alpha.meets_overlap_goal is None
    assert alpha.win_rate_variance is None and alpha.meets_variance_goal is None


def test_adaptive_asks_again_without_planned_repetitions() -> None:
    """An adaptive session numbers a pair asked again as a repetition; the goals about
    planned repetitions do not apply to it (they warned of repetitions nobody asked for)."""
    planned = thread_performance(OUTCOMES, PILLAR_OF, SIZES, NAMES).pillars
    asked_again = thread_performance(
        OUTCOMES, PILLAR_OF, SIZES, NAMES, planned_repetitions=False
    ).pillars
    assert planned[0].repetition_overlap == 1.0  # the same outcomes, read as planned
    for pillar in asked_again:
        assert pillar.repetition_overlap is None and pillar.win_rate_variance is None
        assert not any("repetitions" in flag for flag in pillar.flags)
    assert [p.sample_coverage for p in asked_again] == [p.sample_coverage for p in planned]


# --- findings --------------------------------------------------------------------------


def test_findings_against_pillar_averages_and_rankings() -> None:
    # beta deliberately ranked above alpha, although alpha wins their matches
    findings = surprise_findings(
        OUTCOMES,
        PILLAR_OF,
        NAMES,
        pillar_scores={10: 1400.0, 20: 1600.0},
        thread_names={1: "Q1 answer", 5: "Q5 answer"},
    )
    kinds = [(f.kind, f.thread_id, f.pillar_id, f.other_pillar_id) for f in findings]
    assert kinds == [
        # alpha averages 50% (1.0 and 0.0); beta 50% (0.25, 0.375, 0.375, 1.0 - thread 8
        # has one match only). Thread 2 (0 of 3) and thread 5 (1 of 4) are 25+ points
        # below, but their 95% intervals include 50%: no claim.
        ("overperformer", 1, 10, None),
        # thread 1 won every match (its spread is an artefact): thread 5 is the most
        # consistent one left
        ("most_consistent", 5, 20, None),
        ("cross_pillar_upset", 1, 10, 20),
        ("pillar_upset", None, 10, 20),
    ]
    over = findings[0]
    low, high = wilson(np.array([6.0]), np.array([6]), 0.95)
    assert over.numbers == {
        "win_rate": 1.0,
        "pillar_avg_win_rate": 0.5,
        "deviation": 0.5,
        "matches": 6.0,
        "win_rate_low": pytest.approx(float(low[0])),
        "win_rate_high": 1.0,
    }
    assert over.numbers["win_rate_low"] > 0.5  # the interval excludes the pillar average
    assert over.message == (
        "\u201cQ1 answer\u201d wins 100% of its 6 matches (95% interval 61%–100%), 50"
        " percentage points above alpha's average thread (50%)."
    )
    assert findings[1].message.startswith("\u201cQ5 answer\u201d is the most consistent")
    upset = findings[2]
    assert (upset.numbers["opponents_met"], upset.numbers["opponents_beaten"]) == (3.0, 3.0)
    assert upset.numbers["sign_test_p"] == pytest.approx(1 / 8)  # 3 of 3 by chance
    assert upset.message == (
        "\u201cQ1 answer\u201d of alpha beat 3 of the 3 threads it met from higher-ranked beta"
        " (one-sided sign test p = 0.12)."
    )
    pillar = findings[3]
    assert pillar.numbers["win_rate"] == pytest.approx(6 / 9) and pillar.numbers["matches"] == 9
    lo, hi = wilson(np.array([6.0]), np.array([9]), 0.95)
    assert (pillar.numbers["win_rate_low"], pillar.numbers["win_rate_high"]) == pytest.approx(
        (float(lo[0]), float(hi[0]))
    )
    assert "(95% interval 35%–88%)" in pillar.message
    for finding in findings:
        assert_plain_json(dataclasses.asdict(finding))


def test_findings_name_threads_by_title_or_say_they_left() -> None:
    found = surprise_findings(OUTCOMES, PILLAR_OF, NAMES, pillar_scores={10: 0.0, 20: 1.0})
    assert all("Thread 1 " in f.message for f in found if f.thread_id == 1)
    titled = surprise_findings(
        OUTCOMES, PILLAR_OF, NAMES, pillar_scores={10: 0.0, 20: 1.0}, thread_names={1: "Q1"}
    )
    assert all(f.message.startswith("\u201cQ1\u201d ") for f in titled if f.thread_id == 1)


def test_most_consistent_skips_scores_pinned_at_a_bound() -> None:
    # thread 1 always scores 1 (the floor) and always loses: its zero spread is trivial.
    # Thread 3 scores 4 or 5 (a little spread), thread 5 3 or 4 (more).
    def games(score_1: float, winner: str) -> list[Outcome]:
        return [
            Outcome(i, 1, 3 if i % 2 else 5, winner, scores_a=c(score_1), scores_b=c(4))  # type: ignore[arg-type]
            for i in range(6)
        ] + [
            Outcome(10 + i, 3, 5, "A" if i % 2 else "B", scores_a=c(4 + i % 2), scores_b=c(3))
            for i in range(4)
        ]

    pillars, scores = {1: 10, 3: 20, 5: 20}, {10: 0.0, 20: 1.0}

    def most_consistent(outcomes: list[Outcome]) -> list[int | None]:
        found = surprise_findings(outcomes, pillars, NAMES, pillar_scores=scores)
        return [f.thread_id for f in found if f.kind == "most_consistent"]

    assert most_consistent(games(1, "B")) == [3]  # floor and all losses
    assert most_consistent(games(2, "B")) == [3]  # all losses: the record is pinned
    assert most_consistent(games(1, "TIE")) == [3]  # the scores are pinned at the floor
    assert most_consistent(games(5, "TIE")) == [3]  # ... or at the ceiling
    assert most_consistent(games(2, "TIE")) == [1]  # no bound: its zero spread counts


def test_findings_with_fitted_pillar_ranking_have_no_upsets() -> None:
    kinds = {f.kind for f in surprise_findings(OUTCOMES, PILLAR_OF, NAMES)}
    assert kinds == {"overperformer", "most_consistent"}


def test_findings_respect_margin_and_minimum_matches() -> None:
    strict = surprise_findings(
        OUTCOMES, PILLAR_OF, NAMES, pillar_scores={10: 0.0, 20: 1.0}, margin=0.3
    )
    assert [f.thread_id for f in strict if f.kind.endswith("performer")] == [1]
    too_strict = surprise_findings(
        OUTCOMES, PILLAR_OF, NAMES, pillar_scores={10: 0.0, 20: 1.0}, margin=0.6
    )
    assert not [f for f in too_strict if f.kind.endswith("performer")]
    # one match: 1 of 1 is no evidence at 95%, but it is at a 50% level
    loose = surprise_findings(
        OUTCOMES, PILLAR_OF, NAMES, pillar_scores={10: 0.0, 20: 1.0}, min_matches=1
    )
    assert 8 not in {f.thread_id for f in loose if f.kind == "overperformer"}
    loose = surprise_findings(
        OUTCOMES, PILLAR_OF, NAMES, pillar_scores={10: 0.0, 20: 1.0}, min_matches=1, level=0.5
    )
    assert 8 in {f.thread_id for f in loose if f.kind == "overperformer"}


def test_performance_output_is_plain_json() -> None:
    assert_plain_json(dataclasses.asdict(thread_performance(OUTCOMES, PILLAR_OF, SIZES, NAMES)))


def test_empty_input() -> None:
    result = thread_performance([], {}, {10: 4}, NAMES)
    assert result.threads == [] and result.coverage.mean_usage is None
    (alpha,) = result.pillars
    assert alpha.threads_used == 0 and not alpha.meets_coverage_goal
    assert surprise_findings([], {}, NAMES) == []
