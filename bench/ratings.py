"""Benchmark: vectorised Bradley-Terry, Elo and bootstrap against baselines in the same run.
Also the rigor layer (cluster bootstrap, sandwich errors, style control, Davidson ties),
each timed with its ratio to the plain fit measured in the same run.

Run: .venv/bin/python bench/ratings.py [--skip-choix-10k]

Baselines:
- choix.ilsr_pairwise (I-LSR, maximum likelihood) on the same data. It builds a dense
  threads x threads Markov chain and LU-factorises it every iteration, so at 10,000 threads
  it is timed for ONE iteration only (in a subprocess with a time cap) and extrapolated
  by the iteration count it needed at 1,000 threads.
- a plain-Python MM (Zermelo/Hunter) loop over the comparisons: timed for a few
  iterations and extrapolated by the iterations a vectorised MM needs to converge.
Data: random pairs judged by a Bradley-Terry model, no ties (choix takes only wins).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import choix
import numpy as np

from llmjudge.core.analysis.leaderboard import leaderboard
from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable
from llmjudge.core.analysis.performance import thread_performance
from llmjudge.core.analysis.position import position_swap_analysis
from llmjudge.core.ratings.bradley_terry import (
    PairIndex,
    bootstrap_bradley_terry,
    cluster_bootstrap_bradley_terry,
    fit_bradley_terry,
)
from llmjudge.core.ratings.elo import elo_array
from llmjudge.core.ratings.intervals import sandwich_bradley_terry
from llmjudge.core.ratings.report import rating_report
from llmjudge.core.ratings.style import (
    answer_features,
    fit_style_bradley_terry,
    pair_style_covariates,
    style_coef_sandwich,
    zscore,
)
from llmjudge.core.ratings.ties import fit_davidson

TOL = 1e-6  # logits, for every method


def simulate(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    true = rng.normal(0.0, 1.0, n)
    a = rng.integers(0, n, m)
    b = rng.integers(0, n - 1, m)
    b += b >= a
    score = (rng.random(m) < 1.0 / (1.0 + np.exp(true[b] - true[a]))).astype(np.float64)
    return a, b, score


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def peak_mib(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def ours(a: np.ndarray, b: np.ndarray, s: np.ndarray, n: int, prior: float = 0.01) -> np.ndarray:
    pairs = PairIndex.build(a, b, s, n)
    wins, games = pairs.totals()
    return fit_bradley_terry(pairs, wins, games, prior=prior, tol=TOL)


def choix_data(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> list[tuple[int, int]]:
    winners = np.where(s == 1.0, a, b).tolist()
    losers = np.where(s == 1.0, b, a).tolist()
    return list(zip(winners, losers, strict=True))


def choix_lsr_steps(n: int, data: list[tuple[int, int]]) -> int:
    """LSR steps ilsr_pairwise takes (its own test: L1 norm of the change below TOL)."""
    params, steps = None, 0
    while True:
        new = choix.lsr_pairwise(n, data, initial_params=params)
        steps += 1
        if params is not None and np.abs(new - params).sum() < TOL:
            return steps
        params = new


def python_mm_iterations(
    a: list[int], b: list[int], s: list[float], n: int, iterations: int
) -> list[float]:
    """Unvectorised MM: p_i <- W_i / sum over i's comparisons of 1 / (p_i + p_j)."""
    wins = [0.0] * n
    for i, j, r in zip(a, b, s, strict=True):
        wins[i] += r
        wins[j] += 1.0 - r
    p = [1.0] * n
    for _ in range(iterations):
        denominator = [0.0] * n
        for i, j in zip(a, b, strict=True):
            inv = 1.0 / (p[i] + p[j])
            denominator[i] += inv
            denominator[j] += inv
        p = [w / d for w, d in zip(wins, denominator, strict=True)]
        total = sum(p) / n
        p = [x / total for x in p]
    return p


def mm_iterations_to_converge(a: np.ndarray, b: np.ndarray, s: np.ndarray, n: int) -> int:
    """The same MM, vectorised, to count the iterations it needs (cap 20,000)."""
    wins = np.bincount(a, s, n) + np.bincount(b, 1.0 - s, n)
    theta = np.zeros(n)
    for k in range(1, 20_001):
        p = np.exp(theta)
        inv = 1.0 / (p[a] + p[b])
        new = np.log(wins / (np.bincount(a, inv, n) + np.bincount(b, inv, n)))
        new -= new.mean()
        if np.abs(new - theta).max() < TOL:
            return k
        theta = new
    return 20_000


def choix_one_step_10k(cap_s: int) -> str:
    """One LSR step at 10,000 threads / 1,000,000 comparisons in a capped subprocess."""
    code = (
        "import time, numpy as np, choix, sys;"
        "sys.path.insert(0, 'bench');"
        "from ratings import simulate, choix_data;"
        "a, b, s = simulate(10_000, 1_000_000, seed=2);"
        "d = choix_data(a, b, s);"
        "t = time.perf_counter(); choix.lsr_pairwise(10_000, d);"
        "print(time.perf_counter() - t)"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=cap_s, check=True
        )
        return out.stdout.strip()
    except subprocess.TimeoutExpired:
        return f">{cap_s}"


def row(name: str, seconds: float, note: str = "") -> None:
    print(f"  {name:<44} {seconds:>10.3f} s  {note}")


def synthetic_answers(count: int, seed: int) -> list[str]:
    """Markdown-ish answers of varied length: headers, list items, bold spans."""
    rng = np.random.default_rng(seed)
    parts = ["## Heading\n", "- a list item\n", "Some **bold** words here. ", "Plain prose. "]
    return [
        "".join(parts[k] for k in rng.integers(0, 4, int(rng.integers(5, 60))))
        for _ in range(count)
    ]


def rigor(
    big: tuple[np.ndarray, np.ndarray, np.ndarray],
    small: tuple[np.ndarray, np.ndarray, np.ndarray],
    t_plain_big: float,
    t_plain_small: float,
    t_iid_boot_big: float,
    theta_big: np.ndarray,
    theta_small: np.ndarray,
) -> None:
    a, b, s = big
    n = 10_000
    print("Honest intervals, style control, ties: 10,000 threads / 1,000,000 comparisons")
    print(f"  (ratios are to the plain fit above, {t_plain_big:.3f} s, in this run)")
    # each comparison and its swap twin form a cluster, as a session with swaps makes
    clusters = np.arange(a.size) // 2
    pairs = PairIndex.build(a, b, s, n)
    t_cluster, _ = timed(
        lambda: cluster_bootstrap_bradley_terry(pairs, theta_big, clusters, rounds=10, seed=0)
    )
    row(
        "cluster bootstrap, 10 rounds",
        t_cluster,
        f"{t_cluster / t_plain_big:.1f}x the plain fit; "
        f"{t_cluster / t_iid_boot_big:.2f}x the i.i.d. bootstrap",
    )
    t_sandwich, _ = timed(
        lambda: sandwich_bradley_terry(a, b, s, n, theta_big, clusters, probes=20)
    )
    row(
        "sandwich SE, 20 probes (n > 2,000)",
        t_sandwich,
        f"{t_sandwich / t_plain_big:.1f}x the plain fit",
    )
    texts = synthetic_answers(n, seed=3)
    t_features, features = timed(lambda: answer_features(texts))
    row("answer_features, 10,000 answers", t_features, "once, at import")
    z, _, _ = zscore(pair_style_covariates(features, a, b))
    t_style, (theta, beta) = timed(lambda: fit_style_bradley_terry(a, b, s, n, z))
    row(
        "style control fit, 4 covariates",
        t_style,
        f"{t_style / t_plain_big:.1f}x the plain fit",
    )
    t_style_se, _ = timed(
        lambda: style_coef_sandwich(a, b, s, n, z, theta, beta, clusters, pairs=pairs)
    )
    row("style coefficients' sandwich SE", t_style_se, f"{t_style_se / t_plain_big:.1f}x")
    t_style_boot, _ = timed(
        lambda: [
            fit_style_bradley_terry(
                a,
                b,
                s,
                n,
                z,
                weights=np.bincount(
                    np.random.default_rng(r).integers(0, a.size // 2, a.size // 2),
                    minlength=a.size // 2,
                )[clusters].astype(float),
                init=(theta, beta),
                tol=1e-4,
                cg_rtol=1e-5,
                pairs=pairs,
            )
            for r in range(3)
        ]
    )
    row(
        "style control, 3 cluster-bootstrap rounds",
        t_style_boot,
        f"{t_style_boot / 3 / t_plain_big:.1f}x the plain fit per round",
    )
    tied = np.where(np.random.default_rng(4).random(a.size) < 0.15, 0.5, s)
    t_davidson, fit = timed(lambda: fit_davidson(a, b, tied, n))
    row(
        "Davidson tie model (15% ties)",
        t_davidson,
        f"{t_davidson / t_plain_big:.1f}x the plain fit; nu = {fit.nu:.3f}",
    )
    sa, sb, ss = small
    t_dense, _ = timed(
        lambda: sandwich_bradley_terry(sa, sb, ss, 1_000, theta_small, np.arange(sa.size) // 2)
    )
    row(
        "sandwich SE exact (dense), 1,000 / 100,000",
        t_dense,
        f"{t_dense / t_plain_small:.1f}x the plain fit at 1k",
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-choix-10k", action="store_true")
    parser.add_argument("--choix-cap", type=int, default=300, help="seconds for choix at 10k")
    args = parser.parse_args()

    print("Bradley-Terry fit (tolerance 1e-6 logits), no ties")
    small = simulate(1_000, 100_000, seed=1)
    data_small = choix_data(*small)
    t_ours_small, theta_small = timed(lambda: ours(*small, 1_000), repeat=3)
    t_choix_small, theta_choix = timed(
        lambda: choix.ilsr_pairwise(1_000, data_small, tol=TOL, max_iter=1_000)
    )
    steps = choix_lsr_steps(1_000, data_small)
    agreement = np.abs(ours(*small, 1_000, prior=1e-9) - (theta_choix - theta_choix.mean())).max()
    a_l, b_l, s_l = (x.tolist() for x in small)
    mm_iters = mm_iterations_to_converge(*small, 1_000)
    t_mm5, _ = timed(lambda: python_mm_iterations(a_l, b_l, s_l, 1_000, 5))
    t_mm = t_mm5 / 5 * mm_iters
    print(" 1,000 threads / 100,000 comparisons")
    row("ours (Newton-CG, sparse Hessian)", t_ours_small)
    row(
        "choix.ilsr_pairwise",
        t_choix_small,
        f"{steps} LSR steps; ours {t_choix_small / t_ours_small:.0f}x faster",
    )
    row(
        "plain-Python MM (extrapolated)",
        t_mm,
        f"5 iterations x {mm_iters} needed; ours {t_mm / t_ours_small:.0f}x faster",
    )
    print(f"  max |theta ours - theta choix| = {agreement:.1e} logits (ours with prior 1e-9)")

    big = simulate(10_000, 1_000_000, seed=2)
    t_ours_big, _ = timed(lambda: ours(*big, 10_000), repeat=2)
    mem_big = peak_mib(lambda: ours(*big, 10_000))
    print(" 10,000 threads / 1,000,000 comparisons")
    row("ours (Newton-CG, sparse Hessian)", t_ours_big, f"peak traced memory {mem_big:.0f} MiB")
    if args.skip_choix_10k:
        print("  choix.ilsr_pairwise: skipped")
    else:
        one = choix_one_step_10k(args.choix_cap)
        if one.startswith(">"):
            print(f"  choix one LSR step: over the {args.choix_cap} s cap (dense 10k x 10k chain)")
        else:
            step_s = float(one)
            row("choix one LSR step (dense 10k x 10k)", step_s)
            row(
                "choix.ilsr_pairwise (extrapolated)",
                step_s * steps,
                f"x {steps} steps as at 1k; ours {step_s * steps / t_ours_big:.0f}x faster",
            )

    print("Elo (sequential replay)")
    a, b, s = big
    table = OutcomeTable.from_columns(
        comparison_id=np.arange(a.size), thread_a=a, thread_b=b, score_a=s
    )
    t_elo, _ = timed(lambda: elo_array(table))
    row("1,000,000 outcomes", t_elo)
    objects = [
        Outcome(i, int(x), int(y), "A" if r == 1.0 else "B")
        for i, (x, y, r) in enumerate(zip(*(v[:100_000] for v in big), strict=True))
    ]
    t_build, _ = timed(lambda: OutcomeTable.from_outcomes(objects))
    row("OutcomeTable.from_outcomes, 100,000 Outcome", t_build)

    print("Bootstrap (resample comparisons, warm-started fits)")
    pairs = PairIndex.build(*small, 1_000)
    t_boot, _ = timed(lambda: bootstrap_bradley_terry(pairs, theta_small, rounds=100, seed=0))
    row("100 rounds, 1,000 threads / 100,000", t_boot)
    pairs_big = PairIndex.build(*big, 10_000)
    theta_big = ours(*big, 10_000)
    t_boot_big, _ = timed(lambda: bootstrap_bradley_terry(pairs_big, theta_big, rounds=10, seed=0))
    row("10 rounds, 10,000 threads / 1,000,000", t_boot_big)

    rigor(big, small, t_ours_big, t_ours_small, t_boot_big, theta_big, theta_small)

    print("Whole analyses")
    half = 50_000  # each comparison and its swapped twin
    small_table = OutcomeTable.from_columns(
        comparison_id=np.arange(2 * half),
        thread_a=np.concatenate([small[0][:half], small[1][:half]]),
        thread_b=np.concatenate([small[1][:half], small[0][:half]]),
        score_a=np.concatenate([small[2][:half], small[2][half : 2 * half]]),
        swap_group=np.tile(np.arange(half), 2),
        is_swap=np.arange(2 * half) >= half,
    )
    pillar_of = {t: t % 10 for t in range(10_000)}
    names = {p: f"pillar {p}" for p in range(10)}
    t_board, _ = timed(lambda: leaderboard(small_table, pillar_of, names, bootstrap_rounds=100))
    row("leaderboard 1k/100k, 100 bootstrap rounds", t_board)
    t_report, _ = timed(lambda: rating_report(small_table, bootstrap_rounds=100))
    row("rating_report 1k/100k, 100 clustered rounds", t_report, "swap twins as clusters")
    t_perf, _ = timed(lambda: thread_performance(table, pillar_of, dict.fromkeys(range(10), 1_000)))
    row("thread_performance 10k/1M", t_perf)
    t_pos, _ = timed(lambda: position_swap_analysis(small_table, max_pairs=100))
    row("position_swap_analysis, 50,000 swap pairs", t_pos)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
