"""Ratings with the judge's probabilities as fractional outcomes: a verdict with P(A is
better) = p counts p wins for A and 1 - p for B, in Bradley-Terry (checked against a
direct maximum-likelihood fit with scipy.optimize) and in Elo; without probabilities
nothing changes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import log_expit

from llmjudge.core.analysis.outcomes import OutcomeTable, aggregate
from llmjudge.core.ratings.elo import ELO_SCALE, elo_array
from llmjudge.core.ratings.report import rating_report

PRIOR = 0.5


def random_table(seed: int, n: int = 6, m: int = 300, with_probs: float = 0.7) -> OutcomeTable:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    strength = rng.normal(0, 1, n)
    p_true = 1 / (1 + np.exp(-(strength[a] - strength[b])))
    score = np.where(rng.random(m) < p_true, 1.0, 0.0)
    score[rng.random(m) < 0.1] = 0.5
    prob = np.clip(p_true + rng.normal(0, 0.1, m), 0, 1)
    prob[rng.random(m) >= with_probs] = np.nan
    return OutcomeTable.from_columns(
        comparison_id=np.arange(m),
        thread_a=a + 100,
        thread_b=b + 100,
        score_a=score,
        prob_a=prob,
        completed_order=np.arange(m, dtype=float),
    )


def direct_fit(table: OutcomeTable) -> np.ndarray:
    """The penalised Bradley-Terry maximum likelihood with fractional results, written out
    and handed to scipy: no code of the application's solver."""
    s = np.where(np.isnan(table.prob_a), table.score_a, table.prob_a)

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        d = theta[table.a] - theta[table.b]
        value = -np.sum(s * log_expit(d) + (1 - s) * log_expit(-d)) + PRIOR / 2 * theta @ theta
        r = s - 1 / (1 + np.exp(-d))
        grad = -np.bincount(table.a, r, table.n_players) + np.bincount(table.b, r, table.n_players)
        return float(value), grad + PRIOR * theta

    out = minimize(loss, np.zeros(table.n_players), jac=True, method="BFGS", tol=1e-10)
    assert np.linalg.norm(loss(out.x)[1]) < 1e-6  # at the optimum, whatever BFGS reports
    return out.x


@pytest.mark.parametrize("seed", range(5))
def test_bradley_terry_with_fractional_outcomes_is_the_maximum_likelihood(seed: int) -> None:
    table = random_table(seed)
    report = rating_report(table, bootstrap_rounds=0, prior=PRIOR)
    theta = direct_fit(table)
    expected = 1500 + ELO_SCALE * (theta - theta.mean())
    got = {p.player_id: p.score for p in report.players}
    assert [got[int(i)] for i in table.players] == pytest.approx(expected.tolist(), abs=1e-4)
    # the probabilities matter: the hard verdicts alone give other ratings
    hard = rating_report(
        OutcomeTable.from_columns(
            comparison_id=table.comparison_id,
            thread_a=table.players[table.a],
            thread_b=table.players[table.b],
            score_a=table.score_a,
        ),
        bootstrap_rounds=0,
        prior=PRIOR,
    )
    assert max(abs(got[p.player_id] - p.score) for p in hard.players) > 1.0


def test_without_probabilities_the_ratings_read_the_hard_verdicts() -> None:
    table = random_table(1, with_probs=0.0)
    assert table.rating_score is table.score_a
    assert np.isnan(table.prob_a).all()


def test_elo_scores_a_probability_as_a_fractional_result() -> None:
    table = random_table(2, m=50)
    ratings = [1500.0] * table.n_players
    for i, j, s, p in zip(table.a, table.b, table.score_a, table.prob_a, strict=True):
        result = s if np.isnan(p) else p
        delta = 32 * (result - 1 / (1 + 10 ** ((ratings[j] - ratings[i]) / 400)))
        ratings[i] += delta
        ratings[j] -= delta
    assert elo_array(table).tolist() == pytest.approx(ratings)


def test_a_swap_pair_merges_to_its_order_balanced_probability() -> None:
    table = OutcomeTable.from_columns(
        comparison_id=[1, 2],
        thread_a=[10, 20],
        thread_b=[20, 10],
        score_a=[1.0, 1.0],  # each order's first answer wins: a position-biased judge
        prob_a=[0.9, 0.7],  # P(10 better) = 0.9 shown first, 1 - 0.7 = 0.3 shown second
        swap_group=[5, 5],
        is_swap=[False, True],
    )
    merged = aggregate(table, "swap_consistent")
    assert merged.score_a.tolist() == [0.5]
    assert merged.prob_a.tolist() == pytest.approx([0.6])


def test_a_probability_outside_zero_and_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"prob_a must lie in \[0, 1\]"):
        OutcomeTable.from_columns(
            comparison_id=[1], thread_a=[1], thread_b=[2], score_a=[1.0], prob_a=[1.2]
        )
