"""Elo and Bradley-Terry: hand-computed Elo, recovery, reference fits, order, bootstrap."""

from __future__ import annotations

import math

import choix
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq, minimize
from scipy.special import expit
from scipy.stats import kendalltau

from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable
from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR, PairIndex, fit_bradley_terry
from llmjudge.core.ratings.elo import ELO_SCALE, elo
from llmjudge.core.ratings.estimators import bradley_terry, pillar_bradley_terry
from llmjudge.core.ratings.intervals import ranks_from_intervals


def simulate(
    n: int, m: int, seed: int, tie_rate: float = 0.0, spread: float = 1.0
) -> tuple[np.ndarray, OutcomeTable]:
    """Random pairs judged by a Bradley-Terry model with known strengths."""
    rng = np.random.default_rng(seed)
    true = rng.normal(0.0, spread, n)
    a = rng.integers(0, n, m)
    b = rng.integers(0, n - 1, m)
    b += b >= a
    a_wins = rng.random(m) < 1.0 / (1.0 + np.exp(true[b] - true[a]))
    score = np.where(rng.random(m) < tie_rate, 0.5, a_wins.astype(float))
    table = OutcomeTable.from_columns(
        comparison_id=np.arange(m), thread_a=a, thread_b=b, score_a=score
    )
    return true, table


def theta_of(table: OutcomeTable, prior: float = DEFAULT_PRIOR) -> np.ndarray:
    pairs = PairIndex.build(table.a, table.b, table.score_a, table.n_players)
    wins, games = pairs.totals()
    return fit_bradley_terry(pairs, wins, games, prior=prior)


# --- Elo -------------------------------------------------------------------------------


def expected(ra: float, rb: float) -> float:
    return 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0))


def test_elo_matches_hand_computation_in_completion_order() -> None:
    # listed out of order: Elo must replay by completed_order, then comparison_id
    outcomes = [
        Outcome(4, 3, 1, "TIE", completed_order=20.0),
        Outcome(2, 2, 3, "B", completed_order=10.0),
        Outcome(9, 1, 2, "A", completed_order=5.0),
        Outcome(3, 1, 3, "A", completed_order=10.0),
    ]
    r = {1: 1500.0, 2: 1500.0, 3: 1500.0}
    # game 9 (t=5): 1 beats 2
    e = expected(r[1], r[2])
    r[1], r[2] = r[1] + 32 * (1 - e), r[2] - 32 * (1 - e)
    # game 2 (t=10, lower id first): 3 (position B) beats 2
    e = expected(r[2], r[3])
    r[2], r[3] = r[2] + 32 * (0 - e), r[3] - 32 * (0 - e)
    # game 3 (t=10): 1 beats 3
    e = expected(r[1], r[3])
    r[1], r[3] = r[1] + 32 * (1 - e), r[3] - 32 * (1 - e)
    # game 4 (t=20): 3 and 1 tie
    e = expected(r[3], r[1])
    r[3], r[1] = r[3] + 32 * (0.5 - e), r[1] - 32 * (0.5 - e)
    # the same replay worked on paper: 1516 -> 1531.97 -> 1530.47 for thread 1
    assert r[1] == pytest.approx(1530.466, abs=1e-3)
    assert r[3] == pytest.approx(1500.798, abs=1e-3)
    assert elo(outcomes) == pytest.approx(r, abs=1e-9)


def test_elo_first_game_is_sixteen_points() -> None:
    assert elo([Outcome(1, 10, 20, "A")]) == {10: 1516.0, 20: 1484.0}
    assert elo([Outcome(1, 10, 20, "TIE")]) == {10: 1500.0, 20: 1500.0}


# --- Bradley-Terry ---------------------------------------------------------------------


def test_bt_recovers_known_strengths() -> None:
    # strengths with a 2-logit spread: at 1 logit, 20,000 verdicts cannot order 50 threads
    # to tau 0.95 whatever the estimator (the true-strength MLE reaches about 0.94)
    true, table = simulate(50, 20_000, seed=1, tie_rate=0.1, spread=2.0)
    fitted = bradley_terry(table, bootstrap_rounds=0)
    scores = fitted.by_player()
    tau = kendalltau(true, [scores[t].score for t in range(50)]).statistic
    assert tau >= 0.95
    assert np.mean([r.score for r in fitted.ratings]) == pytest.approx(1500.0)


def test_bt_matches_choix_map_fit_without_ties() -> None:
    _, table = simulate(20, 2_000, seed=2, spread=1.5)
    data = [
        (int(a), int(b)) if s == 1.0 else (int(b), int(a))
        for a, b, s in zip(table.a, table.b, table.score_a, strict=True)
    ]
    # choix penalises alpha * sum(theta^2); ours is prior/2 * sum(theta^2)
    reference = choix.opt_pairwise(20, data, alpha=DEFAULT_PRIOR / 2, tol=1e-10)
    np.testing.assert_allclose(theta_of(table), reference - reference.mean(), atol=1e-3)


def test_bt_matches_choix_ilsr_maximum_likelihood() -> None:
    _, table = simulate(30, 5_000, seed=3)
    data = [
        (int(a), int(b)) if s == 1.0 else (int(b), int(a))
        for a, b, s in zip(table.a, table.b, table.score_a, strict=True)
    ]
    reference = choix.ilsr_pairwise(30, data, tol=1e-12)
    # a negligible prior makes ours the plain maximum likelihood fit that ILSR computes
    np.testing.assert_allclose(theta_of(table, prior=1e-9), reference - reference.mean(), atol=1e-3)


def test_bt_matches_plain_likelihood_with_ties() -> None:
    _, table = simulate(15, 1_500, seed=4, tie_rate=0.25)
    a, b, s = table.a, table.b, table.score_a
    prior = DEFAULT_PRIOR

    def negative_log_posterior(theta: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = 0.5 * prior * theta @ theta, prior * theta.copy()
        for i, j, score in zip(a.tolist(), b.tolist(), s.tolist(), strict=True):
            p = 1.0 / (1.0 + math.exp(theta[j] - theta[i]))
            value -= score * math.log(p) + (1.0 - score) * math.log(1.0 - p)
            grad[i] -= score - p
            grad[j] += score - p
        return value, grad

    reference = minimize(
        negative_log_posterior,
        np.zeros(15),
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-10, "ftol": 1e-15},
    ).x
    np.testing.assert_allclose(theta_of(table), reference - reference.mean(), atol=1e-3)


def test_undefeated_and_winless_threads_stay_finite() -> None:
    outcomes = [
        Outcome(1, 1, 2, "A"),
        Outcome(2, 1, 3, "A"),
        Outcome(3, 2, 3, "TIE"),
        Outcome(4, 3, 2, "A"),
        Outcome(5, 4, 1, "B"),  # 4 never wins, 1 never loses
        Outcome(6, 2, 4, "A"),
    ]
    ratings = bradley_terry(outcomes, bootstrap_rounds=20)
    scores = {r.player_id: r.score for r in ratings.ratings}
    assert all(math.isfinite(v) for v in scores.values())
    assert scores[1] == max(scores.values()) and scores[4] == min(scores.values())
    assert [r.player_id for r in ratings.ratings] == sorted(scores, key=lambda t: -scores[t])


outcome_rows = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.integers(1, 6),
        st.sampled_from(["A", "B", "TIE"]),
        st.integers(0, 5),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=30, deadline=None)
@given(rows=outcome_rows, seed=st.integers(0, 2**32 - 1))
def test_results_do_not_depend_on_input_order(
    rows: list[tuple[int, int, str, int]], seed: int
) -> None:
    outcomes = [
        Outcome(cid, a, (a + d) % 7, w, completed_order=float(t))  # type: ignore[arg-type]
        for cid, (a, d, w, t) in enumerate(rows)
    ]
    shuffled = list(outcomes)
    np.random.default_rng(seed).shuffle(shuffled)
    assert elo(shuffled) == elo(outcomes)
    first = bradley_terry(outcomes, bootstrap_rounds=10, seed=5)
    second = bradley_terry(shuffled, bootstrap_rounds=10, seed=5)
    assert [r.player_id for r in first.ratings] == [r.player_id for r in second.ratings]
    for x, y in zip(first.ratings, second.ratings, strict=True):
        assert x.score == pytest.approx(y.score, abs=1e-6)
        assert x.ci_low == pytest.approx(y.ci_low, abs=1e-6)
        assert x.ci_high == pytest.approx(y.ci_high, abs=1e-6)
        assert x.rank == y.rank


def test_bootstrap_intervals_cover_true_strengths() -> None:
    n, m, trials = 10, 1_000, 60
    true = np.linspace(-1.0, 1.0, n)
    true_elo = 1500.0 + ELO_SCALE * (true - true.mean())
    covered = []
    for trial in range(trials):
        rng = np.random.default_rng(10_000 + trial)
        a = rng.integers(0, n, m)
        b = rng.integers(0, n - 1, m)
        b += b >= a
        score = (rng.random(m) < 1.0 / (1.0 + np.exp(true[b] - true[a]))).astype(float)
        table = OutcomeTable.from_columns(
            comparison_id=np.arange(m), thread_a=a, thread_b=b, score_a=score
        )
        ratings = bradley_terry(table, bootstrap_rounds=200, seed=trial).by_player()
        covered += [ratings[t].ci_low <= true_elo[t] <= ratings[t].ci_high for t in range(n)]
    assert 0.90 <= np.mean(covered) <= 0.98


def test_ranks_only_separate_non_overlapping_intervals() -> None:
    low = np.array([1600.0, 1590.0, 1500.0, 1400.0])
    high = np.array([1700.0, 1650.0, 1595.0, 1450.0])
    # thread 2's upper bound 1595 is below thread 0's lower 1600 but above thread 1's 1590
    assert ranks_from_intervals(low, high).tolist() == [1, 1, 2, 4]


def test_bootstrap_ranks_tie_indistinguishable_threads() -> None:
    outcomes = [Outcome(i, 1 + i % 2, 2 - i % 2, "A" if i % 4 < 2 else "B") for i in range(40)]
    ratings = bradley_terry(outcomes, bootstrap_rounds=50)
    assert [r.rank for r in ratings.ratings] == [1, 1]


def test_pillar_ratings_use_cross_pillar_outcomes_only() -> None:
    pillar_of = {1: 10, 2: 10, 3: 20, 4: 20}
    cross = [
        Outcome(1, 1, 3, "A"),
        Outcome(2, 4, 2, "B"),
        Outcome(3, 2, 3, "TIE"),
        Outcome(4, 1, 4, "B"),
    ]
    intra = [Outcome(10 + i, 3, 4, "A") for i in range(5)]
    pillars = pillar_bradley_terry(cross, pillar_of, bootstrap_rounds=0).ratings
    with_intra = pillar_bradley_terry(cross + intra, pillar_of, bootstrap_rounds=0).ratings
    assert [r.player_id for r in pillars] == [10, 20]
    assert [r.score for r in pillars] == pytest.approx([r.score for r in with_intra])
    # pillar 10 scored 2.5 of 4: the maximum likelihood gap log(2.5 / 1.5), shrunk by the
    # prior: 2.5 - 4 * sigmoid(gap) = prior * gap / 2
    gap = (pillars[0].score - pillars[1].score) / ELO_SCALE
    expected = brentq(lambda g: 2.5 - 4 * expit(g) - DEFAULT_PRIOR * g / 2, 0, math.log(2.5 / 1.5))
    assert gap == pytest.approx(expected, abs=1e-4)


def test_empty_input_gives_empty_ratings() -> None:
    assert bradley_terry([]).ratings == []
    assert elo([]) == {}
