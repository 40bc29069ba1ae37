"""Aggregation, leaderboard, pillar matrix and distributions on small hand-checked data."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.special import expit

from llmjudge.core.analysis.leaderboard import leaderboard, pillar_matrix, score_distribution
from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable, aggregate, as_table
from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR
from llmjudge.core.ratings.elo import ELO_SCALE, elo
from llmjudge.core.ratings.estimators import bradley_terry
from llmjudge.core.ratings.report import rating_report

PILLAR_OF = {1: 10, 2: 10, 3: 20, 4: 20}
NAMES = {10: "alpha", 20: "beta"}

# threads 1, 2 in alpha; 3, 4 in beta
OUTCOMES = [
    # swap group 1: thread 1 wins in both orders
    Outcome(1, 1, 3, "A", 0.9, {"clarity": 5}, {"clarity": 3}, 1, False, 0, 1.0),
    Outcome(2, 3, 1, "B", 0.7, {"clarity": 2}, {"clarity": 4}, 1, True, 0, 2.0),
    # swap group 2: position A wins both times (disagreement on the thread)
    Outcome(3, 2, 4, "A", swap_group=2, completed_order=3.0),
    Outcome(4, 4, 2, "A", swap_group=2, is_swap=True, completed_order=4.0),
    Outcome(5, 1, 2, "TIE", completed_order=5.0),
    Outcome(6, 3, 4, "B", completed_order=6.0),
    Outcome(7, 1, 3, "B", repetition=1, completed_order=7.0),
]


def results(table: OutcomeTable) -> list[tuple[int, int, int, float]]:
    """(comparison_id, thread_a, thread_b, score_a) per outcome, in table order."""
    return list(
        zip(
            table.comparison_id.tolist(),
            table.players[table.a].tolist(),
            table.players[table.b].tolist(),
            table.score_a.tolist(),
            strict=True,
        )
    )


def assert_plain_json(value: object) -> None:
    """Only JSON-native Python types, no numpy scalars, no NaN."""
    if isinstance(value, dict):
        for k, v in value.items():
            assert type(k) in (str, int)
            assert_plain_json(v)
    elif isinstance(value, list):
        for v in value:
            assert_plain_json(v)
    else:
        assert type(value) in (str, int, float, bool, type(None)), type(value)
        assert not (isinstance(value, float) and not math.isfinite(value))


# --- aggregation -----------------------------------------------------------------------


def test_all_keeps_every_verdict_in_completion_order() -> None:
    table = aggregate(list(reversed(OUTCOMES)), "all")
    assert [r[0] for r in results(table)] == [1, 2, 3, 4, 5, 6, 7]
    assert results(table)[1] == (2, 3, 1, 0.0)


def test_swap_consistent_merges_each_pair_into_one_outcome() -> None:
    table = aggregate(OUTCOMES, "swap_consistent")
    assert results(table) == [
        (1, 1, 3, 1.0),  # agreeing pair: its winner, oriented like the original
        (3, 2, 4, 0.5),  # disagreeing pair: one tie
        (5, 1, 2, 0.5),
        (6, 3, 4, 0.0),
        (7, 1, 3, 0.0),
    ]
    assert table.completed_order.tolist() == [2.0, 4.0, 5.0, 6.0, 7.0]
    assert table.confidence[0] == pytest.approx(0.8)
    # each thread's scores averaged over both orders: thread 1 got 5 and 4, thread 3 got 3, 2
    assert table.scores_a[0, 0] == 4.5 and table.scores_b[0, 0] == 2.5
    assert not table.is_swap.any()


def test_majority_over_every_verdict_on_an_unordered_pair() -> None:
    table = aggregate(OUTCOMES, "majority")
    assert results(table) == [
        (3, 2, 4, 0.5),  # 1 vote each: no majority
        (5, 1, 2, 0.5),
        (6, 3, 4, 0.0),
        (1, 1, 3, 1.0),  # thread 1 won 2 of 3 verdicts; completes with the last vote
    ]
    assert (table.swap_group == -1).all()


def test_majority_needs_more_than_half_of_the_votes() -> None:
    votes = [Outcome(1, 1, 2, "A"), Outcome(2, 1, 2, "TIE")]
    assert aggregate(votes, "majority").score_a.tolist() == [0.5]
    votes.append(Outcome(3, 2, 1, "B"))  # thread 1 wins again, shown in position B
    assert aggregate(votes, "majority").score_a.tolist() == [1.0]


def test_unknown_aggregation_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(OUTCOMES, "best_of_three")  # type: ignore[arg-type]


def test_self_comparison_is_rejected() -> None:
    with pytest.raises(ValueError, match="itself"):
        as_table([Outcome(1, 5, 5, "A")])


verdicts = st.sampled_from(["A", "B", "TIE"])


@settings(max_examples=50, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 3), verdicts, st.none() | verdicts),
        min_size=1,
        max_size=25,
    )
)
def test_aggregations_match_plain_counting(
    rows: list[tuple[int, int, str, str | None]],
) -> None:
    """Random swap pairs (twin sometimes missing) against a plain-Python reference."""
    outcomes = []
    for g, (a, d, first, second) in enumerate(rows):
        b = (a + d) % 4
        outcomes.append(Outcome(2 * g, a, b, first, swap_group=g))  # type: ignore[arg-type]
        if second is not None:
            outcomes.append(Outcome(2 * g + 1, b, a, second, swap_group=g, is_swap=True))  # type: ignore[arg-type]

    def winner(o: Outcome) -> int | None:
        return {"A": o.thread_a, "B": o.thread_b, "TIE": None}[o.winner]

    def merged(table: OutcomeTable) -> dict[int, int | None]:
        """comparison id -> winning thread (None for a tie)."""
        return {cid: a if s == 1.0 else b if s == 0.0 else None for cid, a, b, s in results(table)}

    expected_swap = {}
    for g in range(len(rows)):
        group = [o for o in outcomes if o.swap_group == g]
        named = {winner(o) for o in group}
        expected_swap[2 * g] = named.pop() if len(named) == 1 else None
    assert merged(aggregate(outcomes, "swap_consistent")) == expected_swap

    expected_majority = {}
    for pair in {frozenset((o.thread_a, o.thread_b)) for o in outcomes}:
        group = [o for o in outcomes if {o.thread_a, o.thread_b} == pair]
        wins = [winner(o) for o in group]
        top = [t for t in pair if 2 * wins.count(t) > len(group)]
        expected_majority[min(o.comparison_id for o in group)] = top[0] if top else None
    assert merged(aggregate(outcomes, "majority")) == expected_majority


# --- leaderboard -----------------------------------------------------------------------


def test_leaderboard_records_and_averages() -> None:
    board = leaderboard(OUTCOMES, PILLAR_OF, NAMES, bootstrap_rounds=30, seed=1)
    assert board.outcome_count == 7 and board.aggregation == "all"
    rows = {e.thread_id: e for e in board.entries}
    one = rows[1]
    # thread 1: beat 3 twice, tied 2, lost to 3 once
    assert (one.pillar_id, one.matches_played, one.wins, one.losses, one.ties) == (10, 4, 2, 1, 1)
    assert one.win_rate == 0.625 and one.raw_win_rate == 0.5
    assert one.avg_confidence == pytest.approx(0.8)
    assert one.avg_likert_scores == {"clarity": 4.5}
    assert rows[2].avg_confidence is None and rows[2].avg_likert_scores == {"clarity": None}
    three = rows[3]
    assert (three.wins, three.losses, three.ties, three.win_rate) == (1, 3, 0, 0.25)
    assert rows[3].avg_likert_scores == {"clarity": 2.5}
    # ratings are the ones of the rating functions, entries ordered by rank then score
    assert {t: e.elo_score for t, e in rows.items()} == elo(OUTCOMES)
    # the fit is the plain Bradley-Terry fit; its intervals the cluster (thread pair)
    # bootstrap of rating_report, the leaderboard's default
    bt = bradley_terry(OUTCOMES, bootstrap_rounds=0).by_player()
    report = {
        p.player_id: p
        for p in rating_report(as_table(OUTCOMES), bootstrap_rounds=30, seed=1).players
    }
    assert board.method.clusters == "pair" and board.method.level == 0.95
    for t, e in rows.items():
        assert e.bt_score == pytest.approx(bt[t].score)
        assert (e.bt_score, e.bt_ci_low, e.bt_ci_high, e.rank) == (
            report[t].score,
            report[t].ci_low,
            report[t].ci_high,
            report[t].rank,
        )
    assert [(e.rank, -e.bt_score) for e in board.entries] == sorted(
        (e.rank, -e.bt_score) for e in board.entries
    )


def test_leaderboard_pillar_aggregates() -> None:
    board = leaderboard(OUTCOMES, PILLAR_OF, NAMES, bootstrap_rounds=0)
    by_id = {p.pillar_id: p for p in board.pillar_aggregates}
    elo_of = {e.thread_id: e.elo_score for e in board.entries}
    bt_of = {e.thread_id: e.bt_score for e in board.entries}
    assert by_id[10].name == "alpha" and by_id[10].thread_count == 2
    assert by_id[10].avg_elo == pytest.approx((elo_of[1] + elo_of[2]) / 2)
    assert by_id[20].avg_bt == pytest.approx((bt_of[3] + bt_of[4]) / 2)
    # cross-pillar verdicts: alpha won 3 (ids 1, 2, 3) and lost 2 (ids 4, 7); the maximum
    # likelihood gap log(3/2), shrunk by the prior: 3 - 5 * sigmoid(gap) = prior * gap / 2
    gap = (by_id[10].bt_score - by_id[20].bt_score) / ELO_SCALE
    expected = brentq(lambda g: 3 - 5 * expit(g) - DEFAULT_PRIOR * g / 2, 0.0, math.log(3 / 2))
    assert gap == pytest.approx(expected, abs=1e-4)
    assert 0 < gap < math.log(3 / 2)
    assert [p.pillar_id for p in board.pillar_aggregates] == [10, 20]
    assert by_id[10].bt_ci_low is None and by_id[10].bt_rank == 1


def test_leaderboard_applies_the_aggregation() -> None:
    board = leaderboard(OUTCOMES, PILLAR_OF, NAMES, aggregation="swap_consistent")
    assert board.outcome_count == 5
    two = next(e for e in board.entries if e.thread_id == 2)
    assert (two.wins, two.losses, two.ties) == (0, 0, 2)


def test_leaderboard_needs_a_pillar_for_every_thread() -> None:
    with pytest.raises(KeyError):
        leaderboard(OUTCOMES, {1: 10, 2: 10, 3: 20}, NAMES, bootstrap_rounds=0)


def test_outputs_are_plain_json() -> None:
    board = leaderboard(OUTCOMES, PILLAR_OF, NAMES, bootstrap_rounds=10)
    matrix = pillar_matrix(OUTCOMES, PILLAR_OF, NAMES)
    dist = score_distribution(elo(OUTCOMES), PILLAR_OF, NAMES)
    for result in (board, matrix, dist):
        data = dataclasses.asdict(result)
        assert_plain_json(data)
        json.dumps(data, allow_nan=False)


def test_empty_leaderboard() -> None:
    board = leaderboard([], {}, NAMES)
    assert board.entries == [] and board.pillar_aggregates == [] and board.outcome_count == 0


# --- pillar matrix ---------------------------------------------------------------------


def test_pillar_matrix_counts_both_perspectives() -> None:
    matrix = pillar_matrix(OUTCOMES, PILLAR_OF, {**NAMES, 30: "gamma"})
    assert [(p.pillar_id, p.name, p.intra_pillar_matches) for p in matrix.pillars] == [
        (10, "alpha", 1),  # id 5
        (20, "beta", 1),  # id 6
        (30, "gamma", 0),
    ]
    alpha_beta = matrix.cells[0][1]
    assert alpha_beta is not None
    assert (alpha_beta.wins, alpha_beta.losses, alpha_beta.ties, alpha_beta.n) == (3, 2, 0, 5)
    assert alpha_beta.win_rate == pytest.approx(0.6)
    beta_alpha = matrix.cells[1][0]
    assert beta_alpha is not None
    assert (beta_alpha.wins, beta_alpha.losses, beta_alpha.win_rate) == (2, 3, pytest.approx(0.4))
    assert matrix.cells[0][0] is None
    gamma = matrix.cells[2][0]
    assert gamma is not None and gamma.n == 0 and gamma.win_rate is None


def test_pillar_matrix_ties_count_half() -> None:
    matrix = pillar_matrix(
        [Outcome(1, 1, 3, "TIE"), Outcome(2, 4, 2, "A")], PILLAR_OF, NAMES, order=[20, 10]
    )
    beta_alpha = matrix.cells[0][1]
    assert beta_alpha is not None
    assert (beta_alpha.wins, beta_alpha.ties, beta_alpha.n) == (1, 1, 2)
    assert beta_alpha.win_rate == 0.75


# --- distributions ---------------------------------------------------------------------


def test_score_distribution_shares_bin_edges() -> None:
    dist = score_distribution(
        {1: 1600.0, 2: 1500.0, 3: 1400.0, 4: 1450.0}, PILLAR_OF, NAMES, bins=2
    )
    assert dist.bin_edges == [1400.0, 1500.0, 1600.0]
    alpha, beta = dist.pillars
    assert (alpha.pillar_id, alpha.thread_ids, alpha.scores) == (10, [1, 2], [1600.0, 1500.0])
    assert (alpha.mean, alpha.median, alpha.std_dev, alpha.min, alpha.max) == (
        1550.0,
        1550.0,
        50.0,
        1500.0,
        1600.0,
    )
    assert alpha.histogram == [0, 2]  # the last bin includes its right edge
    assert beta.histogram == [2, 0] and beta.mean == 1425.0 and beta.std_dev == 25.0


def test_score_distribution_of_nothing() -> None:
    assert score_distribution({}, {}, {}).pillars == []
