"""Style control: Bradley-Terry with covariates, as Arena-Hard-Auto and LMArena do.

A judge may prefer the longer or the more heavily formatted answer whatever its content.
Style control fits, jointly by logistic regression,

    logit P(a beats b) = theta_a - theta_b + x_ab . beta

where x_ab are the pair's style differences (z-scored) and beta their coefficients; the
thetas are then strengths with the style effect held out ("controlled"). Ties count as
half a win, as in ratings.bradley_terry; verdict weights (strong verdicts) multiply rows.

Per-answer features (answer_features) are computed once, at import, and stored per thread:
- length: characters of the answer text (not tokens: no tokenizer is assumed);
- headers, list_items, bold: markdown counts per character (densities).
Pair features (pair_style_covariates): (len_a - len_b) / (len_a + len_b) for length,
(d_a - d_b) / (d_a + d_b + 1) for each density, then z-scored over the comparisons.
Numeric thread metadata enters as the difference meta_a - meta_b, z-scored the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import LinearOperator, cg
from scipy.special import expit

from llmjudge.analysis.ratings import (
    DEFAULT_LEVEL,
    DEFAULT_PRIOR,
    PairIndex,
    fit_bradley_terry,
    normal_interval,
    percentile_interval,
)

STYLE_FEATURES: tuple[str, ...] = ("length", "headers", "list_items", "bold")
COEF_PRIOR = 1e-9  # keeps a constant (all-zero) covariate column from making H singular

_HEADER = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+\S", re.MULTILINE)
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]+\S", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")


def answer_features(texts: Sequence[str]) -> np.ndarray:
    """(len(texts), 4) per-answer features in STYLE_FEATURES order: length in characters,
    then markdown headers, list items and bold spans per character (0 for empty text)."""
    out = np.zeros((len(texts), len(STYLE_FEATURES)))
    for i, text in enumerate(texts):
        n = len(text)
        out[i, 0] = n
        if n:
            out[i, 1] = len(_HEADER.findall(text)) / n
            out[i, 2] = len(_LIST_ITEM.findall(text)) / n
            out[i, 3] = len(_BOLD.findall(text)) / n
    return out


def zscore(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns of (m, k) `x` z-scored; (z, mean, std). A constant column becomes zeros
    (std reported as 0) instead of NaN."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=0) if x.shape[0] else np.zeros(x.shape[1])
    std = x.std(axis=0) if x.shape[0] else np.zeros(x.shape[1])
    safe = np.where(std > 0, std, 1.0)
    return np.where(std > 0, (x - mean) / safe, 0.0), mean, std


def pair_style_covariates(
    features: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    metadata: np.ndarray | None = None,
) -> np.ndarray:
    """(m, 4 + q) raw (not yet z-scored) pair covariates for comparisons a vs b.

    `features` is (players, 4) from answer_features, indexed like the table's players;
    `metadata` (players, q) numeric thread metadata (differenced as meta_a - meta_b).
    """
    fa, fb = features[a], features[b]
    length_sum = fa[:, 0] + fb[:, 0]
    length = np.divide(fa[:, 0] - fb[:, 0], length_sum, out=np.zeros(a.size), where=length_sum > 0)
    density = (fa[:, 1:] - fb[:, 1:]) / (fa[:, 1:] + fb[:, 1:] + 1.0)
    columns = [length[:, None], density]
    if metadata is not None:
        meta = np.asarray(metadata, dtype=np.float64)
        columns.append(meta[a] - meta[b])
    return np.hstack(columns)


@dataclass(frozen=True, eq=False)
class StyleFit:
    """Joint fit; theta (players,) centred natural logits, coef (k,) per z-score unit."""

    theta: np.ndarray
    coef: np.ndarray
    coef_se: np.ndarray  # cluster-robust sandwich standard errors
    coef_low: np.ndarray  # interval at `level`: bootstrap percentile if rounds > 0, else Wald
    coef_high: np.ndarray
    theta_low: np.ndarray | None  # bootstrap percentile interval; None without bootstrap
    theta_high: np.ndarray | None
    names: tuple[str, ...]
    covariate_mean: np.ndarray  # of the raw pair covariates, to z-score new data alike
    covariate_std: np.ndarray
    level: float
    bootstrap_rounds: int
    comparisons: int


def fit_style_bradley_terry(
    a: np.ndarray,
    b: np.ndarray,
    score_a: np.ndarray,
    n_players: int,
    covariates: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    prior: float = DEFAULT_PRIOR,
    init: tuple[np.ndarray, np.ndarray] | None = None,
    tol: float = 1e-7,
    max_iter: int = 100,
    cg_rtol: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray]:
    """MAP (theta, beta) of logit P(a wins) = theta_a - theta_b + covariates @ beta.

    Newton's method, the Hessian X^T W X applied matrix-free (bincount for the thread
    columns, a dense (m, k) product for the covariates) inside Jacobi-preconditioned CG,
    with Armijo backtracking. theta carries the N(0, 1/prior) prior of the plain fit; beta
    is unpenalised (bar COEF_PRIOR). Returns theta centred on 0.
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    y = np.asarray(score_a, np.float64)
    x = np.asarray(covariates, np.float64).reshape(a.size, -1)
    n, k = n_players, x.shape[1]
    w = np.ones(a.size) if weights is None else np.asarray(weights, np.float64)
    penalty = np.concatenate([np.full(n, prior), np.full(k, COEF_PRIOR)])
    if init is None:
        # the plain fit is cheap (pair totals) and lands theta close to the optimum
        pairs = PairIndex.build(a, b, y, n)
        wins, games = pairs.totals(w)
        params = np.concatenate([fit_bradley_terry(pairs, wins, games, prior=prior), np.zeros(k)])
    else:
        params = np.concatenate([init[0], init[1]]).astype(np.float64)

    def linear(v: np.ndarray) -> np.ndarray:
        return v[a] - v[b] + x @ v[n:]

    def transpose(u: np.ndarray) -> np.ndarray:
        return np.concatenate([np.bincount(a, u, n) - np.bincount(b, u, n), u @ x])

    def objective(eta: np.ndarray, p: np.ndarray) -> float:
        softplus = np.maximum(eta, 0.0) + np.log1p(np.exp(-np.abs(eta)))
        return float(np.sum(w * (softplus - y * eta)) + 0.5 * np.sum(penalty * p * p))

    eta = linear(params)
    value = objective(eta, params)
    for _ in range(max_iter):
        prob = expit(eta)
        grad = transpose(w * (prob - y)) + penalty * params
        h = w * prob * (1.0 - prob)
        diag = np.concatenate([np.bincount(a, h, n) + np.bincount(b, h, n), h @ (x * x)]) + penalty
        hess = LinearOperator(
            (n + k, n + k),
            matvec=lambda v, h=h: transpose(h * linear(v)) + penalty * v,
            dtype=np.float64,
        )
        jacobi = LinearOperator((n + k, n + k), matvec=lambda v, d=diag: v / d, dtype=np.float64)
        step, _ = cg(hess, -grad, M=jacobi, rtol=cg_rtol, maxiter=1_000)
        if np.max(np.abs(step), initial=0.0) < tol:
            params += step
            break
        slope = float(grad @ step)
        t = 1.0
        while t >= 1e-6:
            candidate = params + t * step
            new_eta = linear(candidate)
            new_value = objective(new_eta, candidate)
            if new_value <= value + 1e-4 * t * slope:
                params, value, eta = candidate, new_value, new_eta
                break
            t *= 0.5
        else:
            break
    theta = params[:n]
    return theta - theta.mean(), params[n:].copy()


def style_coef_sandwich(
    a: np.ndarray,
    b: np.ndarray,
    score_a: np.ndarray,
    n_players: int,
    covariates: np.ndarray,
    theta: np.ndarray,
    beta: np.ndarray,
    clusters: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    prior: float = DEFAULT_PRIOR,
) -> np.ndarray:
    """(k,) cluster-robust standard errors of the covariate coefficients.

    Needs only the k covariate rows of H^-1 (k conjugate-gradient solves), not the
    (players + k)^2 inverse: var_j = C/(C-1) * sum over clusters of (e_j' H^-1 s_c)^2,
    and e_j' H^-1 s_c = sum over the cluster's rows of (x_i . H^-1 e_j) * r_i.
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    x = np.asarray(covariates, np.float64).reshape(a.size, -1)
    n, k = n_players, x.shape[1]
    w = np.ones(a.size) if weights is None else np.asarray(weights, np.float64)
    clusters = np.asarray(clusters, np.int64)
    n_clusters = int(clusters.max()) + 1 if clusters.size else 0
    if k == 0 or n_clusters < 2:
        return np.full(k, np.nan)
    prob = expit(theta[a] - theta[b] + x @ beta)
    r = w * (np.asarray(score_a, np.float64) - prob)
    h = w * prob * (1.0 - prob)
    penalty = np.concatenate([np.full(n, prior), np.full(k, COEF_PRIOR)])

    def linear(v: np.ndarray) -> np.ndarray:
        return v[a] - v[b] + x @ v[n:]

    def matvec(v: np.ndarray) -> np.ndarray:
        u = h * linear(v)
        return np.concatenate([np.bincount(a, u, n) - np.bincount(b, u, n), u @ x]) + penalty * v

    hess = LinearOperator((n + k, n + k), matvec=matvec, dtype=np.float64)
    diag = np.concatenate([np.bincount(a, h, n) + np.bincount(b, h, n), h @ (x * x)]) + penalty
    jacobi = LinearOperator((n + k, n + k), matvec=lambda v: v / diag, dtype=np.float64)
    out = np.empty(k)
    for j in range(k):
        unit = np.zeros(n + k)
        unit[n + j] = 1.0
        row, _ = cg(hess, unit, M=jacobi, rtol=1e-10, maxiter=5_000)
        per_cluster = np.bincount(clusters, linear(row) * r, n_clusters)
        out[j] = np.sqrt(np.sum(per_cluster**2) * n_clusters / (n_clusters - 1))
    return out


def style_control(
    a: np.ndarray,
    b: np.ndarray,
    score_a: np.ndarray,
    n_players: int,
    raw_covariates: np.ndarray,
    names: Sequence[str],
    clusters: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    prior: float = DEFAULT_PRIOR,
    level: float = DEFAULT_LEVEL,
    bootstrap_rounds: int = 0,
    seed: int = 0,
) -> StyleFit:
    """Style-controlled Bradley-Terry: z-score `raw_covariates` (from
    pair_style_covariates), fit jointly, and report coefficients with sandwich standard
    errors and intervals at `level`. With bootstrap_rounds > 0, clusters are resampled
    (as in ratings.cluster_bootstrap_bradley_terry) for percentile intervals of both the
    controlled strengths and the coefficients.

    Inputs are parallel (m,) arrays; `clusters` (m,) ids from ratings.comparison_clusters.
    Pass the same rows in any order: the fit, its intervals at a fixed seed excepted,
    does not depend on it.
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    z, mean, std = zscore(np.asarray(raw_covariates, np.float64).reshape(a.size, -1))
    if len(names) != z.shape[1]:
        raise ValueError("one name per covariate column")
    theta, beta = fit_style_bradley_terry(a, b, score_a, n_players, z, weights=weights, prior=prior)
    clusters = np.unique(np.asarray(clusters), return_inverse=True)[1].ravel()
    se = style_coef_sandwich(
        a, b, score_a, n_players, z, theta, beta, clusters, weights=weights, prior=prior
    )
    coef_low, coef_high = normal_interval(beta, se, level)
    theta_low = theta_high = None
    if bootstrap_rounds > 0:
        n_clusters = int(clusters.max()) + 1
        rng = np.random.default_rng(seed)
        thetas = np.empty((bootstrap_rounds, n_players))
        betas = np.empty((bootstrap_rounds, z.shape[1]))
        base = np.ones(a.size) if weights is None else np.asarray(weights, np.float64)
        for i in range(bootstrap_rounds):
            counts = np.bincount(rng.integers(0, n_clusters, n_clusters), minlength=n_clusters)
            thetas[i], betas[i] = fit_style_bradley_terry(
                a,
                b,
                score_a,
                n_players,
                z,
                weights=base * counts[clusters],
                prior=prior,
                init=(theta, beta),
                tol=1e-4,
                cg_rtol=1e-4,
            )
        theta_low, theta_high = percentile_interval(thetas, level)
        coef_low, coef_high = percentile_interval(betas, level)
    return StyleFit(
        theta=theta,
        coef=beta,
        coef_se=se,
        coef_low=coef_low,
        coef_high=coef_high,
        theta_low=theta_low,
        theta_high=theta_high,
        names=tuple(names),
        covariate_mean=mean,
        covariate_std=std,
        level=level,
        bootstrap_rounds=bootstrap_rounds,
        comparisons=int(a.size),
    )
