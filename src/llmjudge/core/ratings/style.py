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
from scipy.sparse import csr_array
from scipy.special import expit

from llmjudge.core.ratings.bradley_terry import (
    DEFAULT_PRIOR,
    PairIndex,
    block_pcg,
    cluster_resamples,
    csr_product,
    fit_bradley_terry,
)
from llmjudge.core.ratings.intervals import DEFAULT_LEVEL, normal_interval, percentile_interval

STYLE_FEATURES: tuple[str, ...] = ("length", "headers", "list_items", "bold")
MAX_CONFOUNDING = 0.99
COEF_PRIOR = 1e-9  # keeps a constant (all-zero) covariate column from making H singular

_HEADER = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+\S", re.MULTILINE)
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]+\S", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")


def answer_text(content: object) -> str:
    """The text whose style a judge sees as the thread's answer: plain text as it is; of a
    conversation ([{"role", "content"}, ...]), the assistant turns joined by blank lines,
    or every turn when none is marked assistant."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    turns = [m for m in content if isinstance(m, dict) and isinstance(m.get("content"), str)]
    answers = [m["content"] for m in turns if m.get("role") == "assistant"]
    return "\n\n".join(answers if answers else [m["content"] for m in turns])


def stored_features(content: object) -> list[float]:
    """One thread's STYLE_FEATURES as stored with it (threads.style_features)."""
    return [float(v) for v in answer_features([answer_text(content)])[0]]


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
    # (k,) share of each covariate absorbed by the strengths (1 - S_jj / D_jj); above
    # MAX_CONFOUNDING its coefficient is not identified and must not be reported
    confounding: np.ndarray

    @property
    def identified(self) -> np.ndarray:
        return self.confounding < MAX_CONFOUNDING


@dataclass(frozen=True, eq=False)
class _Curvature:
    """The Hessian [[L, C], [C', D]] of the style fit at one point, split so that only
    the thread block L (a sparse weighted Laplacian) is ever solved iteratively: the
    covariate block is small (k x k) and handled through its Schur complement."""

    laplacian: csr_array
    diag: np.ndarray  # of L, for the preconditioner
    cross: np.ndarray  # C (n, k)
    solved: np.ndarray  # Y = L^-1 C (n, k)
    schur: np.ndarray  # S = D - C' Y (k, k)
    dense: np.ndarray  # D (k, k)

    @property
    def confounding(self) -> np.ndarray:
        """(k,) share of each covariate's information absorbed by the strengths,
        1 - S_jj / D_jj: near 1, the covariate is (almost) a function of who plays
        and its coefficient is not identified."""
        return 1.0 - np.diag(self.schur) / np.maximum(np.diag(self.dense), 1e-300)

    def solve_theta(self, rhs: np.ndarray, rtol: float) -> np.ndarray:
        return block_pcg(csr_product(self.laplacian), rhs, self.diag, rtol=rtol)


def _curvature(
    pairs: PairIndex,
    a: np.ndarray,
    b: np.ndarray,
    x: np.ndarray,
    h: np.ndarray,
    prior: float,
    rtol: float,
) -> _Curvature:
    n, k = pairs.n_players, x.shape[1]
    laplacian, diag = pairs.laplacian(np.bincount(pairs.row_pair, h, pairs.lo.size), prior)
    hx = h[:, None] * x
    cross = np.empty((n, k))
    for j in range(k):
        cross[:, j] = np.bincount(a, hx[:, j], n) - np.bincount(b, hx[:, j], n)
    dense = x.T @ hx + COEF_PRIOR * np.eye(k)
    solved = block_pcg(csr_product(laplacian), cross, diag, rtol=rtol) if k else cross
    return _Curvature(laplacian, diag, cross, solved, dense - cross.T @ solved, dense)


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
    cg_rtol: float = 1e-9,
    pairs: PairIndex | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """MAP (theta, beta) of logit P(a wins) = theta_a - theta_b + covariates @ beta.

    Newton's method with Armijo backtracking. Each step solves the Hessian system by its
    Schur complement: k + 1 solves of the sparse thread Laplacian (one block CG), then a
    k x k dense solve, so near-collinear covariates cost no extra CG iterations. theta
    carries the N(0, 1/prior) prior of the plain fit; beta is unpenalised (bar
    COEF_PRIOR). Returns theta centred on 0. Pass `pairs` (PairIndex.build(a, b, ...))
    to reuse it across bootstrap rounds.
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    y = np.asarray(score_a, np.float64)
    x = np.asarray(covariates, np.float64).reshape(a.size, -1)
    n, k = n_players, x.shape[1]
    w = np.ones(a.size) if weights is None else np.asarray(weights, np.float64)
    if n == 0:
        return np.zeros(0), np.zeros(k)
    pairs = PairIndex.build(a, b, y, n) if pairs is None else pairs
    if init is None:
        # the plain fit is cheap (pair totals) and lands theta close to the optimum
        wins, games = pairs.totals(w)
        theta, beta = fit_bradley_terry(pairs, wins, games, prior=prior), np.zeros(k)
    else:
        theta, beta = (np.array(v, dtype=np.float64) for v in init)

    def objective(t: np.ndarray, c: np.ndarray) -> tuple[float, np.ndarray]:
        eta = t[a] - t[b] + x @ c
        softplus = np.maximum(eta, 0.0) + np.log1p(np.exp(-np.abs(eta)))
        value = np.sum(w * (softplus - y * eta)) + 0.5 * (prior * t @ t + COEF_PRIOR * c @ c)
        return float(value), eta

    value, eta = objective(theta, beta)
    for _ in range(max_iter):
        prob = expit(eta)
        r = w * (prob - y)
        g_theta = np.bincount(a, r, n) - np.bincount(b, r, n) + prior * theta
        g_beta = r @ x + COEF_PRIOR * beta
        h = w * prob * (1.0 - prob)
        curv = _curvature(pairs, a, b, x, h, prior, cg_rtol)
        base = curv.solve_theta(g_theta[:, None], cg_rtol)[:, 0]
        # Schur complement: S d_beta = C' L^-1 g_theta - g_beta, then back-substitute
        d_beta = np.linalg.solve(curv.schur, curv.cross.T @ base - g_beta)
        d_theta = -base - curv.solved @ d_beta
        size = max(np.max(np.abs(d_theta), initial=0.0), np.max(np.abs(d_beta), initial=0.0))
        if size < tol:
            theta, beta = theta + d_theta, beta + d_beta
            break
        slope = float(g_theta @ d_theta + g_beta @ d_beta)
        t = 1.0
        while t >= 1e-6:
            cand_theta, cand_beta = theta + t * d_theta, beta + t * d_beta
            new_value, new_eta = objective(cand_theta, cand_beta)
            if new_value <= value + 1e-4 * t * slope:
                theta, beta, value, eta = cand_theta, cand_beta, new_value, new_eta
                break
            t *= 0.5
        else:
            break
    return theta - theta.mean(), beta


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
    pairs: PairIndex | None = None,
    confounding: np.ndarray | None = None,
) -> np.ndarray:
    """(k,) cluster-robust standard errors of the covariate coefficients; fills
    `confounding` (k,), when given, with _Curvature.confounding at the fit.

    Needs only the k covariate rows of H^-1, which the Schur complement gives directly:
    rows = S^-1 [-Y', I] with Y = L^-1 C (one block CG). Then var_j = C/(C-1) * sum over
    clusters of (row_j . s_c)^2, and row_j . s_c = sum over the cluster's rows of
    (x_i . row_j) * r_i: no (players + k)^2 matrix anywhere.
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    x = np.asarray(covariates, np.float64).reshape(a.size, -1)
    n, k = n_players, x.shape[1]
    w = np.ones(a.size) if weights is None else np.asarray(weights, np.float64)
    clusters = np.asarray(clusters, np.int64)
    n_clusters = int(clusters.max()) + 1 if clusters.size else 0
    if k == 0 or n == 0 or n_clusters < 2:
        return np.full(k, np.nan)
    y = np.asarray(score_a, np.float64)
    pairs = PairIndex.build(a, b, y, n) if pairs is None else pairs
    prob = expit(theta[a] - theta[b] + x @ beta)
    r = w * (y - prob)
    curv = _curvature(pairs, a, b, x, w * prob * (1.0 - prob), prior, 1e-10)
    s_inv = np.linalg.inv(curv.schur)
    rows_theta = -curv.solved @ s_inv  # (n, k): theta part of each covariate row of H^-1
    # x_i . row_j for every comparison i and covariate j
    projected = rows_theta[a] - rows_theta[b] + x @ s_inv
    out = np.empty(k)
    for j in range(k):
        per_cluster = np.bincount(clusters, projected[:, j] * r, n_clusters)
        out[j] = np.sqrt(np.sum(per_cluster**2) * n_clusters / (n_clusters - 1))
    if confounding is not None:
        confounding[:] = curv.confounding
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

    Which players: style is identified only where it varies for a given player. With
    pillars as players (threads' answers vary within a pillar) it is; with threads as
    players and one text per thread, a density difference is almost d_a - d_b, a
    function of who plays, and `confounding` goes to 1 (see StyleFit.identified).

    Inputs are parallel (m,) arrays; `clusters` (m,) ids from ratings.comparison_clusters.
    Pass the same rows in any order: the fit, its intervals at a fixed seed excepted,
    does not depend on it.
    """
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    z, mean, std = zscore(np.asarray(raw_covariates, np.float64).reshape(a.size, -1))
    if len(names) != z.shape[1]:
        raise ValueError("one name per covariate column")
    pairs = PairIndex.build(a, b, np.asarray(score_a, np.float64), n_players)
    theta, beta = fit_style_bradley_terry(
        a, b, score_a, n_players, z, weights=weights, prior=prior, pairs=pairs
    )
    clusters = np.unique(np.asarray(clusters), return_inverse=True)[1].ravel()
    confounding = np.full(z.shape[1], np.nan)
    se = style_coef_sandwich(
        a,
        b,
        score_a,
        n_players,
        z,
        theta,
        beta,
        clusters,
        weights=weights,
        prior=prior,
        pairs=pairs,
        confounding=confounding,
    )
    coef_low, coef_high = normal_interval(beta, se, level)
    theta_low = theta_high = None
    if bootstrap_rounds > 0:
        thetas = np.empty((bootstrap_rounds, n_players))
        betas = np.empty((bootstrap_rounds, z.shape[1]))
        resamples = cluster_resamples(clusters, bootstrap_rounds, seed, weights)
        for i, row_weights in enumerate(resamples):
            thetas[i], betas[i] = fit_style_bradley_terry(
                a,
                b,
                score_a,
                n_players,
                z,
                weights=row_weights,
                prior=prior,
                init=(theta, beta),
                tol=1e-4,
                cg_rtol=1e-5,
                pairs=pairs,
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
        confounding=confounding,
    )
