"""Win rates against a baseline pillar, raw and length-controlled (pure, numpy).

Input: one row per judgment of a pillar's answer against the baseline's answer to the same
prompt, as arrays: the pillar (``0..pillars-1``), the prompt (``0..prompts-1``), the
preference ``y`` in [0, 1] that the pillar's answer is better (1 a win, 0.5 a tie, or a
probability) and the two answers' lengths.

- **Win rate**: the mean over prompts of the pillar's mean preference on that prompt
  (repetitions and both orders of a prompt count as one prompt), with a percentile
  bootstrap interval over prompts.
- **Length-controlled win rate** (after Dubois et al. 2024, "Length-Controlled AlpacaEval"):
  first a difficulty ``gamma_x`` per prompt, shared by all pillars, from the logistic model
  ``logit P = theta_m + gamma_x`` over every pillar's rows; then per pillar the logistic
  model ``logit P = theta_m + phi_m tanh(d / s) + psi_m gamma_x`` with ``d`` the length
  difference (pillar minus baseline) and ``s`` its standard deviation over all rows (one
  scale, so the pillars' length effects compare). The length effect is learnt from how the
  preference moves with ``d`` across a pillar's prompts: a pillar whose answers are longer
  on every prompt by about the same amount leaves it poorly identified, and the penalty
  then keeps the correction small. Each fit is penalised maximum likelihood with an L2
  penalty on every coefficient but the intercept, its strength chosen per pillar by
  cross-validation as the paper does (its ``LogisticRegressionCV``: the grid of inverse
  strengths ``C`` in ``logspace(-4, 4, 10)``, 5 folds, the log loss against the fractional
  preferences). Ours differs in two places: the penalty is L2 (the paper's is L1 on every
  column, intercept included, by liblinear), and a fold holds whole prompts (theirs holds
  whole rows, i.e. both copies of a fractional row). Fewer than ``CV_FOLDS`` prompts:
  the fixed ``RIDGE``. The bootstrap reuses each pillar's chosen strength (a choice per
  round would cost 50 fits a round). The controlled win rate is the mean over the
  pillar's prompts of ``expit(theta_m + psi_m gamma_x)``: what the judge would prefer were
  both answers equally long. ``phi_m`` is the length effect, in logits per unit of
  ``tanh``. Its interval is a bootstrap over prompts that refits both steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

__all__ = [
    "CV_FOLDS",
    "PENALTY_GRID",
    "RIDGE",
    "BaselineRow",
    "baseline_win_rates",
    "choose_penalty",
]

RIDGE = 0.1  # L2 penalty per coefficient (not the intercepts) without cross-validation
CV_FOLDS = 5
# L2 strengths tried: 1 / C over the paper's C grid (sklearn's default Cs=10)
PENALTY_GRID = 1.0 / np.logspace(-4, 4, 10)
_CV_SEED = 123  # the paper's random_state: which prompts share a fold
_NEWTON_STEPS = 50


@dataclass(frozen=True)
class BaselineRow:
    """One pillar against the baseline. Rates are shares in [0, 1]; None when undefined."""

    pillar: int
    judgments: int
    prompts: int
    win_rate: float | None
    win_rate_low: float | None
    win_rate_high: float | None
    lc_win_rate: float | None
    lc_win_rate_low: float | None
    lc_win_rate_high: float | None
    length_effect: float | None  # phi_m, logits at tanh = 1
    penalty: float | None  # the L2 strength cross-validation chose for this pillar
    mean_length: float | None  # of the pillar's answers in these rows
    baseline_mean_length: float | None


def _logistic_fit(x: np.ndarray, y: np.ndarray, penalty: np.ndarray) -> np.ndarray:
    """Penalised logistic regression with fractional outcomes by Newton's method."""
    beta = np.zeros(x.shape[1])
    for _ in range(_NEWTON_STEPS):
        p = expit(x @ beta)
        grad = x.T @ (y - p) - penalty * beta
        w = p * (1.0 - p)
        hess = (x * w[:, None]).T @ x + np.diag(penalty) + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.max(np.abs(step)) < 1e-10:
            break
    return beta


def _difficulty(
    pillar: np.ndarray, prompt: np.ndarray, y: np.ndarray, pillars: int, prompts: int
) -> np.ndarray:
    """gamma per prompt from ``logit P = theta_m + gamma_x`` (penalised, centred), by
    Newton's method: the Hessian's prompt block is diagonal, so each step eliminates it
    and solves a pillars x pillars system (the Schur complement) instead of a dense one."""
    theta = np.zeros(pillars)
    gamma = np.zeros(prompts)
    pen_t, pen_g = 1e-6, RIDGE  # theta nearly free; the tiny penalty keeps the system definite
    cell = pillar * prompts + prompt
    for _ in range(_NEWTON_STEPS):
        p = expit(theta[pillar] + gamma[prompt])
        r, w = y - p, p * (1.0 - p)
        g_t = np.bincount(pillar, weights=r, minlength=pillars) - pen_t * theta
        g_g = np.bincount(prompt, weights=r, minlength=prompts) - pen_g * gamma
        h_t = np.bincount(pillar, weights=w, minlength=pillars) + pen_t
        h_g = np.bincount(prompt, weights=w, minlength=prompts) + pen_g
        h_tg = np.bincount(cell, weights=w, minlength=pillars * prompts).reshape(pillars, prompts)
        scaled = h_tg / h_g
        schur = np.diag(h_t) - scaled @ h_tg.T
        d_t = np.linalg.solve(schur, g_t - scaled @ g_g)
        d_g = (g_g - h_tg.T @ d_t) / h_g
        step = max(float(np.max(np.abs(d_t), initial=0.0)), float(np.max(np.abs(d_g))))
        if step > 5.0:  # damped where the data nearly separate
            d_t, d_g = d_t * (5.0 / step), d_g * (5.0 / step)
        theta += d_t
        gamma += d_g
        if step < 1e-9:
            break
    return gamma - gamma.mean()


def _log_loss(x: np.ndarray, y: np.ndarray, beta: np.ndarray) -> float:
    """Mean log loss of fractional outcomes ``y`` (the paper's clipping at 1e-15)."""
    p = np.clip(expit(x @ beta), 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def choose_penalty(x: np.ndarray, y: np.ndarray, prompt: np.ndarray) -> float:
    """The L2 strength of ``PENALTY_GRID`` with the least mean held-out log loss over
    ``CV_FOLDS`` folds of whole prompts; ``RIDGE`` with fewer prompts than folds. Equal
    losses go to the stronger penalty (the grid's order)."""
    prompts = np.unique(prompt)
    if prompts.size < CV_FOLDS:
        return RIDGE
    order = np.random.default_rng(_CV_SEED).permutation(prompts.size)
    fold_of = np.empty(prompts.size, dtype=np.int64)
    fold_of[order] = np.arange(prompts.size) % CV_FOLDS
    fold = fold_of[np.searchsorted(prompts, prompt)]
    losses = np.zeros(PENALTY_GRID.size)
    for k in range(CV_FOLDS):
        test = fold == k
        for i, strength in enumerate(PENALTY_GRID):
            penalty = np.array([0.0, strength, strength])
            beta = _logistic_fit(x[~test], y[~test], penalty)
            losses[i] += _log_loss(x[test], y[test], beta) / CV_FOLDS
    return float(PENALTY_GRID[int(np.argmin(losses))])


def _lc(
    y: np.ndarray,
    length: np.ndarray,
    gamma_x: np.ndarray,
    prompt: np.ndarray,
    penalty: float | None = None,
) -> tuple[float, float, float]:
    """(controlled win rate, phi, the L2 strength used) of one pillar's rows; ``length``
    is tanh(d / s); without ``penalty`` it is chosen by cross-validation."""
    x = np.column_stack([np.ones(y.size), length, gamma_x])
    if penalty is None:
        penalty = choose_penalty(x, y, prompt)
    theta, phi, psi = _logistic_fit(x, y, np.array([0.0, penalty, penalty]))
    controlled = expit(theta + psi * gamma_x)
    # mean over prompts, each prompt once
    per_prompt = np.bincount(prompt, weights=controlled) / np.maximum(np.bincount(prompt), 1)
    seen = np.bincount(prompt) > 0
    return float(per_prompt[seen].mean()), float(phi), penalty


def _rates(
    pillar: np.ndarray,
    prompt: np.ndarray,
    y: np.ndarray,
    diff: np.ndarray,
    pillars: int,
    prompts: int,
    penalties: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(win rate, controlled win rate, phi, L2 strength) per pillar; NaN where the pillar
    has no rows. ``penalties`` (per pillar) skips the cross-validation."""
    win = np.full(pillars, np.nan)
    lc = np.full(pillars, np.nan)
    phi = np.full(pillars, np.nan)
    chosen = np.full(pillars, np.nan)
    if y.size == 0:
        return win, lc, phi, chosen
    gamma = _difficulty(pillar, prompt, y, pillars, prompts)
    sd = diff.std()
    length = np.tanh(diff / sd) if sd > 0 else np.zeros_like(diff)
    for m in range(pillars):
        mine = pillar == m
        if not mine.any():
            continue
        px = prompt[mine]
        counts = np.bincount(px, minlength=prompts)
        sums = np.bincount(px, weights=y[mine], minlength=prompts)
        seen = counts > 0
        win[m] = float((sums[seen] / counts[seen]).mean())
        given = None if penalties is None or np.isnan(penalties[m]) else float(penalties[m])
        lc[m], phi[m], chosen[m] = _lc(y[mine], length[mine], gamma[px], px, given)
    return win, lc, phi, chosen


def baseline_win_rates(
    pillar: np.ndarray,
    prompt: np.ndarray,
    preference: np.ndarray,
    length: np.ndarray,
    baseline_length: np.ndarray,
    *,
    pillars: int,
    rounds: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> list[BaselineRow]:
    """Each pillar's raw and length-controlled win rate against the baseline, with
    bootstrap intervals over prompts; see the module docstring."""
    pillar = np.asarray(pillar, dtype=np.int64)
    prompt_codes, prompt = np.unique(np.asarray(prompt), return_inverse=True)
    y = np.asarray(preference, dtype=float)
    if y.size and (np.nanmin(y) < 0 or np.nanmax(y) > 1):
        raise ValueError("preferences must lie in [0, 1]")
    length = np.asarray(length, dtype=float)
    base = np.asarray(baseline_length, dtype=float)
    diff = length - base
    prompts = prompt_codes.size
    win, lc, phi, chosen = _rates(pillar, prompt, y, diff, pillars, prompts)
    boot_win = np.full((rounds, pillars), np.nan)
    boot_lc = np.full((rounds, pillars), np.nan)
    rng = np.random.default_rng(seed)
    by_prompt = [np.flatnonzero(prompt == x) for x in range(prompts)]
    for r in range(rounds if prompts else 0):
        picked = rng.integers(0, prompts, prompts)
        rows = np.concatenate([by_prompt[x] for x in picked])
        # each drawn prompt is a new prompt (a prompt drawn twice counts twice)
        new_prompt = np.repeat(np.arange(prompts), [by_prompt[x].size for x in picked])
        boot_win[r], boot_lc[r], _, _ = _rates(
            pillar[rows], new_prompt, y[rows], diff[rows], pillars, prompts, chosen
        )
    tail = 50.0 * (1.0 - level)
    out = []
    for m in range(pillars):
        mine = pillar == m
        n_prompts = int(np.unique(prompt[mine]).size)

        def interval(samples: np.ndarray) -> tuple[float | None, float | None]:
            s = samples[~np.isnan(samples)]
            if s.size == 0:
                return None, None
            low, high = np.percentile(s, [tail, 100.0 - tail])
            return float(low), float(high)

        wl, wh = interval(boot_win[:, m])
        ll, lh = interval(boot_lc[:, m])
        out.append(
            BaselineRow(
                pillar=m,
                judgments=int(mine.sum()),
                prompts=n_prompts,
                win_rate=None if np.isnan(win[m]) else float(win[m]),
                win_rate_low=wl,
                win_rate_high=wh,
                lc_win_rate=None if np.isnan(lc[m]) else float(lc[m]),
                lc_win_rate_low=ll,
                lc_win_rate_high=lh,
                length_effect=None if np.isnan(phi[m]) else float(phi[m]),
                penalty=None if np.isnan(chosen[m]) else float(chosen[m]),
                mean_length=float(length[mine].mean()) if mine.any() else None,
                baseline_mean_length=float(base[mine].mean()) if mine.any() else None,
            )
        )
    return out
