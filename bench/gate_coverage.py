"""Benchmark: coverage of the gate's two pass-rate estimators in seeded simulations.

Run: .venv/bin/python bench/gate_coverage.py [--trials 1000] [--seed 0]

Each trial draws a batch whose items truly pass with probability p, a judge that is right
with probability TPR on passing items and TNR on failing ones, and then:
- Rogan-Gladen: TPR/TNR measured on a fresh calibration set of the given size, the
  interval from the Beta-posterior bootstrap;
- PPI++: a random subset of the batch carries human labels, the interval the normal one.
The baseline is the plain observed pass rate's 95% normal interval, which ignores the
judge's errors, and (for PPI++) the Wilson interval of the human labels alone.
Coverage is the share of trials whose 95% interval holds the true p (nominal 0.95).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmjudge.core.personas.gate import corrected_pass_rate, ppi_pass_rate
from llmjudge.core.personas.metrics import wilson_interval

SCENARIOS = [
    # p, TPR, TNR, batch, calibration (pos, neg), human labels
    (0.7, 0.85, 0.85, 600, (60, 40), 60),
    (0.9, 0.95, 0.80, 300, (100, 30), 30),
    (0.5, 0.75, 0.90, 1000, (200, 200), 100),
    (0.7, 0.98, 0.98, 2000, (15, 15), 40),
]


def run(scenario: tuple, trials: int, seed: int) -> dict[str, tuple[float, float]]:
    p, tpr, tnr, n, (cpos, cneg), n_human = scenario
    rng = np.random.default_rng(seed)
    hits = {"rogan_gladen": [], "ppi": [], "observed": [], "human_only": []}
    width = {k: [] for k in hits}
    for trial in range(trials):
        truth = rng.random(n) < p
        judge = np.where(truth, rng.random(n) < tpr, rng.random(n) >= tnr)
        tpr_hat = rng.binomial(cpos, tpr) / cpos
        tnr_hat = rng.binomial(cneg, tnr) / cneg
        rg = corrected_pass_rate(
            judge.tolist(),
            tpr=tpr_hat,
            tnr=tnr_hat,
            calib_pos=cpos,
            calib_neg=cneg,
            seed=trial,
            rounds=1000,
        )
        labelled = np.zeros(n, dtype=bool)
        labelled[rng.choice(n, n_human, replace=False)] = True
        human = [bool(t) if k else None for t, k in zip(truth, labelled, strict=True)]
        ppi = ppi_pass_rate(judge.tolist(), human)
        obs = judge.mean()
        half = 1.96 * np.sqrt(obs * (1 - obs) / n)
        h_low, h_high = wilson_interval(int(truth[labelled].sum()), n_human)
        for name, low, high in (
            ("rogan_gladen", rg.ci_low, rg.ci_high),
            ("ppi", ppi.low, ppi.high),
            ("observed", obs - half, obs + half),
            ("human_only", h_low, h_high),
        ):
            if low is None or high is None:  # undefined counts as a miss
                hits[name].append(False)
                width[name].append(1.0)
                continue
            hits[name].append(low <= p <= high)
            width[name].append(high - low)
    return {k: (float(np.mean(hits[k])), float(np.mean(width[k]))) for k in hits}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"95% interval coverage (width) over {args.trials} seeded trials per scenario")
    header = f"{'p':>4} {'TPR':>5} {'TNR':>5} {'batch':>6} {'calib':>8} {'human':>6}"
    names = ("rogan_gladen", "ppi", "observed", "human_only")
    print(header + "".join(f" {n:>20}" for n in names))
    for k, scenario in enumerate(SCENARIOS):
        start = time.perf_counter()
        out = run(scenario, args.trials, args.seed + k)
        p, tpr, tnr, n, (cpos, cneg), n_human = scenario
        row = f"{p:>4} {tpr:>5} {tnr:>5} {n:>6} {f'{cpos}+{cneg}':>8} {n_human:>6}"
        row += "".join(f" {out[n][0]:>11.3f} ({out[n][1]:.3f})" for n in names)
        print(row + f"  [{time.perf_counter() - start:.1f} s]")


if __name__ == "__main__":
    main()
