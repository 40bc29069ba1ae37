"""The Bradley-Terry prior (issue 27): near-separable results stay finite and bounded, and
with plenty of balanced data the prior barely moves the estimate."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR, PairIndex, fit_bradley_terry
from llmjudge.core.ratings.elo import ELO_SCALE


def fit(a: np.ndarray, b: np.ndarray, score: np.ndarray, n: int, prior: float) -> np.ndarray:
    pairs = PairIndex.build(a, b, score, n)
    wins, games = pairs.totals()
    return fit_bradley_terry(pairs, wins, games, prior=prior, tol=1e-10)


@settings(max_examples=40, deadline=None)
@given(games=st.integers(1, 5_000), swapped=st.booleans())
def test_a_player_that_always_wins_gets_a_finite_bounded_gap(games: int, swapped: bool) -> None:
    """A beats B every time: no maximum likelihood estimate exists; the prior's optimum
    solves prior * gap / 2 = games * sigmoid(-gap), so gap <= max(2, ln(games / prior))."""
    a = np.zeros(games, np.int64)
    b = np.ones(games, np.int64)
    score = np.ones(games)
    if swapped:  # the same results with B shown first
        a, b, score = b, a, 1.0 - score
    theta = fit(a, b, score, 2, DEFAULT_PRIOR)
    gap = theta[0] - theta[1]
    assert np.isfinite(gap) and gap > 0
    assert gap <= max(2.0, math.log(games / DEFAULT_PRIOR)) + 1e-6
    # and the optimum is that equation's root (the gradient is zero)
    assert math.isclose(DEFAULT_PRIOR * gap / 2, games / (1 + math.exp(gap)), rel_tol=1e-6)


def test_a_separable_pair_stays_within_a_few_hundred_points() -> None:
    """20 wins of 20 (the demo's strongest model against its weakest on ten questions, both
    orders): about 560 points with the default prior; the old prior of 0.01 gave about
    1,200, and the gap grows without limit as the prior goes to 0."""
    a, b, score = np.zeros(20, np.int64), np.ones(20, np.int64), np.ones(20)
    gap = ELO_SCALE * float(np.ptp(fit(a, b, score, 2, DEFAULT_PRIOR)))
    assert 400 < gap < 700
    weaker = [ELO_SCALE * float(np.ptp(fit(a, b, score, 2, p))) for p in (1e-2, 1e-4, 1e-6)]
    assert weaker[0] > 1_000 and weaker[0] < weaker[1] < weaker[2]


def test_a_near_separable_ladder_keeps_its_order_and_a_bounded_spread() -> None:
    """Six players where each beats every weaker one 19 times in 20 (and the last one of
    each pair is a loss): the spread stays bounded and the order is the true one."""
    rows = []
    for i in range(6):
        for j in range(i + 1, 6):
            rows += [(i, j, 1.0)] * 19 + [(i, j, 0.0)]
    a, b, s = (np.array(c) for c in zip(*rows, strict=True))
    theta = fit(a.astype(np.int64), b.astype(np.int64), s, 6, DEFAULT_PRIOR)
    assert list(np.argsort(-theta)) == list(range(6))
    assert ELO_SCALE * np.ptp(theta) < 2_000


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
@example(seed=188356)
def test_with_plenty_of_balanced_data_the_prior_barely_moves_the_estimate(seed: int) -> None:
    """Eight players with true strengths within ±1 logit, 4,000 verdicts (about 1,000 games
    each): the default prior moves no strength more than 2% of the spread (or 5 Elo points)
    from the maximum likelihood fit (prior -> 0)."""
    rng = np.random.default_rng(seed)
    n, m = 8, 4_000
    true = rng.uniform(-1.0, 1.0, n)
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    score = (rng.random(m) < 1.0 / (1.0 + np.exp(true[b] - true[a]))).astype(float)
    with_prior = fit(a, b, score, n, DEFAULT_PRIOR)
    mle = fit(a, b, score, n, 1e-9)
    moved = ELO_SCALE * np.max(np.abs(with_prior - mle))
    assert moved < max(5.0, 0.02 * ELO_SCALE * np.ptp(mle))
    # the order is kept wherever the fit can tell two players apart: seed 188356 has two
    # 0.004 Elo points apart, which any prior may swap
    gap = ELO_SCALE * (mle[:, None] - mle[None, :])
    ahead = ELO_SCALE * (with_prior[:, None] - with_prior[None, :])
    assert np.all(ahead[gap > 1.0] > 0)
