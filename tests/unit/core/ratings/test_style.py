"""Style control: features, pair covariates, the joint fit against scikit-learn, its errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression

from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR
from llmjudge.core.ratings.style import (
    STYLE_FEATURES,
    answer_features,
    fit_style_bradley_terry,
    pair_style_covariates,
    style_coef_sandwich,
    style_control,
    zscore,
)

NAMES = list(STYLE_FEATURES)


def planted(
    seed: int, pillars: int = 6, threads: int = 600, m: int = 6_000, length_coef: float = 0.8
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pillars (players) compared through their threads, whose length helps them win.

    Returns (true pillar strengths, a, b, score_a, raw covariates, cluster per row)."""
    rng = np.random.default_rng(seed)
    pillar = np.arange(threads) % pillars
    features = np.column_stack(
        [
            rng.lognormal(6.0, 0.7, threads),
            rng.random(threads) * 0.01,
            rng.random(threads) * 0.02,
            rng.random(threads) * 0.005,
        ]
    )
    ta = rng.integers(0, threads, m)
    tb = rng.integers(0, threads - 1, m)
    tb += tb >= ta
    keep = pillar[ta] != pillar[tb]
    ta, tb = ta[keep], tb[keep]
    raw = pair_style_covariates(features, ta, tb)
    z, _, _ = zscore(raw)
    true = np.linspace(-1.0, 1.0, pillars)
    eta = true[pillar[ta]] - true[pillar[tb]] + length_coef * z[:, 0]
    score = (rng.random(ta.size) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    score[rng.random(ta.size) < 0.1] = 0.5
    cluster = np.unique(np.minimum(ta, tb) * threads + np.maximum(ta, tb), return_inverse=True)[1]
    return true - true.mean(), pillar[ta], pillar[tb], score, raw, cluster


def sklearn_fit(
    a: np.ndarray, b: np.ndarray, s: np.ndarray, n: int, z: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Unpenalised logistic regression on the same design: player 0 dropped as the
    reference, ties as two half-weighted rows (one win, one loss)."""
    x = np.zeros((a.size, n - 1 + z.shape[1]))
    for j in range(1, n):
        x[:, j - 1] = (a == j).astype(float) - (b == j)
    x[:, n - 1 :] = z
    model = LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-12, max_iter=10_000)
    model.set_params(solver="newton-cg")
    model.fit(
        np.vstack([x, x]),
        np.concatenate([np.ones(a.size), np.zeros(a.size)]),
        sample_weight=np.concatenate([s, 1.0 - s]),
    )
    theta = np.concatenate([[0.0], model.coef_[0][: n - 1]])
    return theta - theta.mean(), model.coef_[0][n - 1 :]


def test_answer_features_count_markdown_per_character() -> None:
    text = "# Title\n\nSome **bold** text.\n\n- one\n- two\n1. three\n## Sub\n__also__"
    got = answer_features([text, "", "plain"])
    n = len(text)
    assert got[0].tolist() == pytest.approx([n, 2 / n, 3 / n, 2 / n])
    assert got[1].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert got[2].tolist() == [5.0, 0.0, 0.0, 0.0]
    # not markdown: a hash without a space, a hyphen inside a line, a lone asterisk pair
    assert answer_features(["#tag and a-b and ** x"])[0, 1:].tolist() == [0.0, 0.0, 0.0]


def test_pair_covariates_follow_the_arena_formulas() -> None:
    features = np.array([[300.0, 0.01, 0.0, 0.02], [100.0, 0.03, 0.0, 0.0], [0.0, 0, 0, 0]])
    meta = np.array([[2.0], [5.0], [1.0]])
    x = pair_style_covariates(features, np.array([0, 2]), np.array([1, 2]), meta)
    assert x[0].tolist() == pytest.approx([0.5, -0.02 / 1.04, 0.0, 0.02 / 1.02, -3.0])
    assert x[1].tolist() == [0.0, 0.0, 0.0, 0.0, 0.0]  # both empty: no division by zero


def test_zscore_leaves_constant_columns_at_zero() -> None:
    z, mean, std = zscore(np.array([[1.0, 4.0], [3.0, 4.0]]))
    assert z.tolist() == [[-1.0, 0.0], [1.0, 0.0]]
    assert mean.tolist() == [2.0, 4.0] and std.tolist() == [1.0, 0.0]


def test_style_fit_matches_sklearn_logistic_regression() -> None:
    true, a, b, s, raw, cluster = planted(0)
    z, _, _ = zscore(raw)
    fit = style_control(a, b, s, 6, raw, NAMES, cluster, prior=1e-12)
    theta_ref, coef_ref = sklearn_fit(a, b, s, 6, z)
    np.testing.assert_allclose(fit.coef, coef_ref, atol=1e-4)
    np.testing.assert_allclose(fit.theta, theta_ref, atol=1e-4)
    assert np.argsort(fit.theta).tolist() == np.argsort(theta_ref).tolist()
    # the planted length effect is found, and only it
    assert fit.coef_low[0] > 0.5 and fit.coef_high[0] < 1.1
    assert np.all((fit.coef_low[1:] < 0) & (fit.coef_high[1:] > 0)) or np.all(
        np.abs(fit.coef[1:]) < 0.1
    )
    # random ties (as half wins) shrink the scale a little; the order is exact
    assert np.argsort(fit.theta).tolist() == np.argsort(true).tolist()
    assert np.abs(fit.theta - true).max() < 0.25


def test_style_control_changes_the_ranking_length_inflates() -> None:
    # pillar 0 is weakest but writes the longest answers: raw BT overrates it
    rng = np.random.default_rng(1)
    threads, pillars, m = 400, 4, 8_000
    pillar = np.arange(threads) % pillars
    length = np.where(pillar == 0, 3_000.0, 600.0) * rng.lognormal(0.0, 0.3, threads)
    features = np.column_stack([length, np.zeros((threads, 3))])
    ta = rng.integers(0, threads, m)
    tb = rng.integers(0, threads - 1, m)
    tb += tb >= ta
    keep = pillar[ta] != pillar[tb]
    ta, tb = ta[keep], tb[keep]
    raw = pair_style_covariates(features, ta, tb)
    true = np.array([-0.3, 0.0, 0.2, 0.4])
    eta = true[pillar[ta]] - true[pillar[tb]] + 1.5 * raw[:, 0]
    s = (rng.random(ta.size) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    fit = style_control(pillar[ta], pillar[tb], s, 4, raw[:, :1], ["length"], np.arange(ta.size))
    raw_fit, _ = fit_style_bradley_terry(pillar[ta], pillar[tb], s, 4, np.zeros((ta.size, 0)))
    assert np.argmax(raw_fit) == 0  # uncontrolled: the verbose pillar looks best
    assert np.argmin(fit.theta) == 0  # controlled: it is the weakest
    assert fit.coef_low[0] > 0


def test_sandwich_matches_an_independent_dense_computation() -> None:
    _, a, b, s, raw, cluster = planted(2, m=2_000)
    z, _, _ = zscore(raw)
    theta, beta = fit_style_bradley_terry(a, b, s, 6, z)
    se = style_coef_sandwich(a, b, s, 6, z, theta, beta, cluster)
    # dense: X with one column per pillar and per covariate; the same prior on theta
    x = np.zeros((a.size, 6 + z.shape[1]))
    x[np.arange(a.size), a] += 1.0
    x[np.arange(a.size), b] -= 1.0
    x[:, 6:] = z
    p = 1.0 / (1.0 + np.exp(-(x @ np.concatenate([theta, beta]))))
    hess = x.T @ (x * (p * (1 - p))[:, None]) + np.diag([DEFAULT_PRIOR] * 6 + [1e-9] * 4)
    scores = np.zeros((cluster.max() + 1, x.shape[1]))
    np.add.at(scores, cluster, x * (s - p)[:, None])
    inv = np.linalg.inv(hess)
    c = scores.shape[0]
    cov = inv @ scores.T @ scores @ inv * c / (c - 1)
    np.testing.assert_allclose(se, np.sqrt(np.diag(cov)[6:]), rtol=1e-5)


def test_bootstrap_intervals_cover_the_estimates() -> None:
    _, a, b, s, raw, cluster = planted(3, m=2_000)
    fit = style_control(a, b, s, 6, raw, NAMES, cluster, bootstrap_rounds=40, seed=1)
    assert fit.theta_low is not None and fit.theta_high is not None
    assert fit.theta_low.shape == fit.theta_high.shape == (6,)
    assert np.all((fit.theta_low <= fit.theta) & (fit.theta <= fit.theta_high))
    assert np.all((fit.coef_low <= fit.coef) & (fit.coef <= fit.coef_high))
    # bootstrap and sandwich agree on the size of the length coefficient's error
    width = fit.coef_high[0] - fit.coef_low[0]
    assert width == pytest.approx(2 * 1.96 * fit.coef_se[0], rel=0.35)
    with pytest.raises(ValueError):
        style_control(a, b, s, 6, raw, ["length"], cluster)


def test_weights_equal_repeated_rows() -> None:
    _, a, b, s, raw, _ = planted(4, m=1_500)
    z, _, _ = zscore(raw)
    w = np.where(np.arange(a.size) % 3 == 0, 3.0, 1.0)
    reps = np.repeat(np.arange(a.size), w.astype(int))
    theta_w, beta_w = fit_style_bradley_terry(a, b, s, 6, z, weights=w)
    theta_r, beta_r = fit_style_bradley_terry(a[reps], b[reps], s[reps], 6, z[reps])
    np.testing.assert_allclose(theta_w, theta_r, atol=1e-7)
    np.testing.assert_allclose(beta_w, beta_r, atol=1e-7)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_style_fit_is_invariant_to_row_order_and_relabelling(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, n = 200, 5
    a = rng.integers(0, n, m)
    b = (a + rng.integers(1, n, m)) % n
    s = rng.choice([0.0, 0.5, 1.0], m)
    raw = rng.normal(size=(m, 2))
    cluster = rng.integers(0, 60, m)
    fit = style_control(a, b, s, n, raw, ["x", "y"], cluster)
    order, perm = rng.permutation(m), rng.permutation(n)
    again = style_control(
        perm[a[order]], perm[b[order]], s[order], n, raw[order], ["x", "y"], cluster[order]
    )
    np.testing.assert_allclose(again.theta[perm], fit.theta, atol=1e-6)
    np.testing.assert_allclose(again.coef, fit.coef, atol=1e-6)
    np.testing.assert_allclose(again.coef_se, fit.coef_se, atol=1e-6)
    assert fit.theta.shape == (n,) and fit.coef.shape == fit.coef_se.shape == (2,)
    assert fit.comparisons == m


def test_confounding_flags_covariates_that_only_say_who_plays() -> None:
    # pillars as players: thread styles vary within a pillar, every coefficient identified
    _, a, b, s, raw, cluster = planted(5, m=3_000)
    fit = style_control(a, b, s, 6, raw, NAMES, cluster)
    assert fit.identified.all() and np.all(fit.confounding < 0.5)
    # threads as players with one text each: density differences are nearly d_a - d_b
    rng = np.random.default_rng(6)
    n, m = 40, 6_000
    features = np.column_stack([rng.lognormal(6.0, 0.7, n), rng.random((n, 3)) * 0.01])
    ta = rng.integers(0, n, m)
    tb = (ta + rng.integers(1, n, m)) % n
    raw_t = pair_style_covariates(features, ta, tb)
    st_ = rng.choice([0.0, 1.0], m)
    thread_fit = style_control(ta, tb, st_, n, raw_t, NAMES, np.arange(m))
    assert not thread_fit.identified[1:].any()
    assert np.all(thread_fit.confounding[1:] > 0.99)
