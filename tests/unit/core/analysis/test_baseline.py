"""Win rates against a baseline: the raw rate by hand, intervals, and a planted length
effect that the raw rate ranks wrongly and the length-controlled rate undoes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import spearmanr

from llmjudge.core.analysis.baseline import (
    PENALTY_GRID,
    RIDGE,
    BaselineRow,
    baseline_win_rates,
    choose_penalty,
)


def test_the_raw_rate_is_the_mean_over_prompts_with_ties_half() -> None:
    # pillar 0: prompt "p" twice (a win and a tie: 0.75), prompt "q" a loss -> (0.75 + 0) / 2
    rows = baseline_win_rates(
        pillar=[0, 0, 0, 1],
        prompt=["p", "p", "q", "p"],
        preference=[1.0, 0.5, 0.0, 1.0],
        length=[10, 10, 10, 10],
        baseline_length=[10, 10, 10, 10],
        pillars=3,
        rounds=50,
    )
    assert rows[0].win_rate == pytest.approx(0.375)
    assert (rows[0].judgments, rows[0].prompts) == (3, 2)
    assert rows[1].win_rate == 1.0 and rows[1].prompts == 1
    assert rows[2].win_rate is None and rows[2].lc_win_rate is None and rows[2].judgments == 0
    assert rows[0].win_rate_low <= rows[0].win_rate <= rows[0].win_rate_high


def test_preferences_outside_zero_one_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        baseline_win_rates([0], ["p"], [1.5], [1], [1], pillars=1)


def _planted(seed: int, rounds: int = 0) -> tuple[np.ndarray, list[BaselineRow]]:
    """Five pillars whose judge adds 1.5 logits for a much longer answer; the worse a
    pillar, the longer its answers; every prompt shifts all pillars alike (difficulty)."""
    rng = np.random.default_rng(seed)
    quality = np.array([-0.3, 0.0, 0.3, 0.6, 0.9])
    verbosity = np.array([1.4, 0.9, 0.4, -0.1, -0.6])  # log length ratio to the baseline
    prompts = 600
    difficulty = rng.normal(0, 0.8, prompts)
    base = rng.uniform(150, 600, prompts)
    pillar = np.repeat(np.arange(5), prompts)
    prompt = np.tile(np.arange(prompts), 5)
    length = base[prompt] * np.exp(verbosity[pillar] + rng.normal(0, 0.5, pillar.size))
    d = length - base[prompt]
    logit = quality[pillar] + PLANTED * np.tanh(d / d.std()) + difficulty[prompt]
    y = (rng.random(pillar.size) < 1 / (1 + np.exp(-logit))).astype(float)
    return quality, baseline_win_rates(
        pillar, prompt, y, length, base[prompt], pillars=5, rounds=rounds, seed=seed
    )


PLANTED = 1.5


def test_a_planted_length_effect_fools_the_raw_rate_and_not_the_controlled_one() -> None:
    """Over eight seeded fields: the raw rate always ranks the verbose pillars first; the
    controlled rate ranks the planted order on most fields (a pillar always 4x longer than
    the baseline leaves its length effect poorly identified, so not on every one), and the
    length effects average out at the planted 1.5 logits."""
    raw_rho, lc_rho, effects = [], [], []
    for seed in range(1, 9):
        quality, rows = _planted(seed)
        raw_rho.append(spearmanr([r.win_rate for r in rows], quality)[0])
        lc_rho.append(spearmanr([r.lc_win_rate for r in rows], quality)[0])
        effects += [r.length_effect for r in rows]
    assert max(raw_rho) < 0
    assert sum(rho > 0.89 for rho in lc_rho) >= 6 and min(lc_rho) > 0.59, lc_rho
    assert np.mean(effects) == pytest.approx(PLANTED, abs=0.25)


def test_the_controlled_rate_has_a_bootstrap_interval_over_prompts() -> None:
    _, rows = _planted(1, rounds=40)
    for r in rows:
        assert r.lc_win_rate_low <= r.lc_win_rate <= r.lc_win_rate_high
        assert r.win_rate_low <= r.win_rate <= r.win_rate_high
        assert r.lc_win_rate_high - r.lc_win_rate_low < 0.3  # widest for the 4x-long pillar
        assert r.mean_length > r.baseline_mean_length * 0.4 and r.prompts == 600


def test_cross_validation_weakens_the_penalty_for_a_real_effect_and_keeps_it_for_noise() -> None:
    """The L2 strength of a pillar's fit is chosen by 5-fold cross-validation over
    prompts: a strong planted length effect is let through (a weak penalty), preferences
    unrelated to anything are shrunk (the strongest penalties); below 5 prompts, RIDGE."""
    rng = np.random.default_rng(4)
    n = 400
    prompt = np.arange(n) // 2
    length = np.tanh(rng.normal(0, 1.5, n))
    gamma = np.repeat(rng.normal(0, 0.5, n // 2), 2)
    x = np.column_stack([np.ones(n), length, gamma])
    signal = expit(0.2 + 3.0 * length + gamma)
    strong = choose_penalty(x, signal, prompt)
    noise = choose_penalty(x, rng.uniform(0.3, 0.7, n), prompt)
    assert strong <= 1.0 < noise
    assert strong in PENALTY_GRID and noise in PENALTY_GRID
    assert choose_penalty(x[:8], signal[:8], prompt[:8]) == RIDGE  # 4 prompts


def test_the_report_names_each_pillars_chosen_penalty() -> None:
    rng = np.random.default_rng(5)
    prompts = np.tile(np.arange(40), 2)
    pillar = np.repeat([0, 1], 40)
    length = rng.normal(500, 100, 80)
    rows = baseline_win_rates(
        pillar, prompts, rng.uniform(0, 1, 80), length, np.full(80, 500.0), pillars=2, rounds=5
    )
    assert all(r.penalty in PENALTY_GRID for r in rows)
