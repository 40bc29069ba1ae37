"""Davidson's tie model: recovery of a planted nu, an independent optimiser, edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR, PairIndex, fit_bradley_terry
from llmjudge.core.ratings.ties import fit_davidson


def davidson_probabilities(
    theta_a: np.ndarray, theta_b: np.ndarray, nu: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P(a wins), P(b wins), P(tie)) under Davidson's model: what the data is drawn from."""
    half = 0.5 * (np.asarray(theta_a) - np.asarray(theta_b))
    d = np.exp(half) + np.exp(-half) + nu
    return np.exp(half) / d, np.exp(-half) / d, nu / d


def simulate(
    n: int, m: int, nu: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    true = rng.normal(0.0, 1.0, n)
    a = rng.integers(0, n, m)
    b = rng.integers(0, n - 1, m)
    b += b >= a
    p_a, p_b, _ = davidson_probabilities(true[a], true[b], nu)
    u = rng.random(m)
    score = np.where(u < p_a, 1.0, np.where(u < p_a + p_b, 0.0, 0.5))
    return true - true.mean(), a, b, score


@pytest.mark.parametrize("nu", [0.3, 0.8, 2.0])
def test_davidson_recovers_a_planted_tie_parameter(nu: float) -> None:
    true, a, b, s = simulate(30, 40_000, nu, seed=int(nu * 10))
    fit = fit_davidson(a, b, s, 30)
    assert fit.nu == pytest.approx(nu, rel=0.06)
    assert fit.nu_low is not None and fit.nu_high is not None
    assert fit.nu_low < nu < fit.nu_high
    assert np.abs(fit.theta - true).max() < 0.15
    assert fit.ties == float(np.sum(s == 0.5)) and fit.comparisons == 40_000


def test_davidson_interval_covers_planted_nu() -> None:
    hits = []
    for seed in range(40):
        _, a, b, s = simulate(8, 1_500, 0.6, seed=100 + seed)
        fit = fit_davidson(a, b, s, 8)
        hits.append(fit.nu_low <= 0.6 <= fit.nu_high)  # type: ignore[operator]
    assert 0.85 <= np.mean(hits) <= 1.0


def test_davidson_matches_a_general_purpose_optimiser() -> None:
    _, a, b, s = simulate(10, 2_000, 0.7, seed=5)

    def negative_log_posterior(params: np.ndarray) -> float:
        theta, lam = params[:10], params[10]
        half = 0.5 * (theta[a] - theta[b])
        log_d = np.log(np.exp(half) + np.exp(-half) + np.exp(lam))
        ll = np.where(s == 1.0, half, np.where(s == 0.0, -half, lam)) - log_d
        return float(-ll.sum() + 0.5 * DEFAULT_PRIOR * theta @ theta)

    reference = minimize(
        negative_log_posterior, np.zeros(11), method="BFGS", options={"gtol": 1e-9}
    )
    fit = fit_davidson(a, b, s, 10)
    theta_ref = reference.x[:10] - reference.x[:10].mean()
    np.testing.assert_allclose(fit.theta, theta_ref, atol=1e-5)
    assert fit.nu == pytest.approx(np.exp(reference.x[10]), rel=1e-5)


def test_without_ties_nu_is_zero_and_the_fit_is_plain_bradley_terry() -> None:
    _, a, b, s = simulate(12, 3_000, 0.0, seed=6)
    assert not np.any(s == 0.5)
    fit = fit_davidson(a, b, s, 12)
    pairs = PairIndex.build(a, b, s, 12)
    wins, games = pairs.totals()
    plain = fit_bradley_terry(pairs, wins, games, tol=1e-9)
    assert fit.nu == 0.0 and fit.nu_low is None
    np.testing.assert_allclose(fit.theta, plain, atol=1e-6)


def test_empty_input_and_only_ties() -> None:
    fit = fit_davidson(np.array([], int), np.array([], int), np.array([]), 0)
    assert fit.theta.shape == (0,) and fit.nu == 0.0
    only = fit_davidson(np.array([0, 1]), np.array([1, 2]), np.array([0.5, 0.5]), 3)
    assert only.nu == np.inf and only.nu_low is None and only.theta.tolist() == [0.0, 0.0, 0.0]


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 4), st.integers(1, 4), st.sampled_from([0.0, 0.5, 1.0])),
        min_size=2,
        max_size=40,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_davidson_is_invariant_to_order_relabelling_and_orientation(
    rows: list[tuple[int, int, float]], seed: int
) -> None:
    a = np.array([r[0] for r in rows])
    b = (a + np.array([r[1] for r in rows])) % 5
    s = np.array([r[2] for r in rows])
    fit = fit_davidson(a, b, s, 5)
    rng = np.random.default_rng(seed)
    order, perm = rng.permutation(a.size), rng.permutation(5)
    flip = rng.random(a.size) < 0.5  # show some pairs the other way round
    a2 = np.where(flip, b, a)[order]
    b2 = np.where(flip, a, b)[order]
    s2 = np.where(flip, 1.0 - s, s)[order]
    again = fit_davidson(perm[a2], perm[b2], s2, 5)
    np.testing.assert_allclose(again.theta[perm], fit.theta, atol=1e-5)
    assert again.nu == pytest.approx(fit.nu, rel=1e-5, abs=1e-9)
    assert np.all(np.isfinite(fit.theta)) and fit.theta.shape == (5,)
