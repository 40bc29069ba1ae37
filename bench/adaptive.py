"""Benchmark: adaptive pair selection against a full free-for-all and random pairs.

Run: .venv/bin/python bench/adaptive.py [--sizes 30 100 300] [--seeds 10 6 3] [--noise 0.5]

Simulated tournaments with a known truth: latent quality per thread ~ N(0, 1), verdicts
from the simulator's pairwise model (noise 0.5, position bias 0.1, tie band 0.1; see
``llmjudge.core.tournaments.simulation.JudgeModel``). Methods, each judging every pair once in a
random order (no swapped twins, so counts are comparable):

- ``ffa``: the full free-for-all, every pair once (n(n-1)/2 comparisons);
- ``random``: uniformly random pairs (repeats allowed), prefixes of one stream;
- ``adaptive``: ``select_batch`` strategy ``information`` for the ``ranking`` rule,
  batches of n/2, epsilon 0.1; ``adaptive-top10``: the same for ``top_k`` with k = 10;
- ``swiss``: ``select_batch`` strategy ``swiss`` (neighbours in a posterior draw);
- ``adaptive-evidence``: the same runs as ``adaptive``, ranked by the design's own fit
  (a negligible prior) instead of the ratings' prior the session shows;
- ``oracle``: ``select_batch`` strategy ``information`` fed the true strengths (on the
  logit scale, ``1.702 q / noise``) with their Laplace covariance at the truth, instead of
  the fit: what the selection could do if it knew the order from the start. It is scored
  on the design's own fit (the negligible prior): under the ratings' prior a design that
  compares only neighbours from its first round is pulled out of order (tau ~0.85 at a
  third at 100 threads). It shows how much of the gap to the target is the learning of the
  order and how much is the judge's information.

Below the table, ``floor``: an approximate lower bound on the share of the free-for-all's
comparisons that ANY design needs to match the free-for-all's expected number of
misordered pairs, from Fisher information (each comparison between exactly equal players,
the best case; comparisons spread over players optimally; misordered pairs counted
locally, ``sum_i density_i * sd_i``). Under the simulator's default judge (noise 0.5
against qualities N(0, 1)) a large share of a free-for-all's pairs are already close
enough to be informative, which is what limits the saving; ``--noise`` shows a sharper
judge.

Every method is refitted with the same Bradley-Terry fit (``fit_state`` with the ratings'
prior, ``SHOWN_PRIOR``: the ranking a session shows; the design itself reads a negligible
prior) and scored against the truth: Kendall's tau, top-10 precision, and coverage (share of threads whose
true rank lies in their 95% rank interval from the Laplace intervals). "to ffa tau" is the
number of comparisons after which the seed-averaged tau first reaches the free-for-all's
(linear interpolation between checkpoints); ">x" means not reached within x.
"""

from __future__ import annotations

import os

# one BLAS thread: the per-round Cholesky inverse is small, and threads on busy cores
# make it 10-100x slower; set before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
from scipy.stats import kendalltau, norm  # noqa: E402

from llmjudge.core.tournaments.adaptive import (
    SHOWN_PRIOR,
    AdaptiveState,
    Budget,
    StopRule,
    fit_state,
    free_for_all_comparisons,
    select_batch,
    state_at,
)
from llmjudge.core.tournaments.adaptive.state import DEFAULT_PRIOR
from llmjudge.core.tournaments.simulation import JudgeModel, judge, simulate_session

MODEL = JudgeModel()  # replaced by --noise
FRACTIONS = (0.1, 0.2, 1 / 3, 0.5, 1.0)  # of the free-for-all's comparisons


def scores(state: AdaptiveState, quality: np.ndarray) -> tuple[float, float, float]:
    """(Kendall tau, top-10 precision, 95% rank-interval coverage) against the truth."""
    n = quality.size
    tau = float(kendalltau(state.theta, quality)[0])
    k = min(10, n)
    top = np.intersect1d(state.order()[:k], np.argsort(-quality)[:k]).size / k
    true_rank = np.empty(n, dtype=np.int64)
    true_rank[np.argsort(-quality)] = np.arange(1, n + 1)
    best, worst = state.rank_intervals(0.95)
    coverage = float(np.mean((best <= true_rank) & (true_rank <= worst)))
    return tau, top, coverage


Curve = dict[int, tuple[float, float, float]]  # comparisons -> scores


def ffa_run(quality: np.ndarray, rng: np.random.Generator) -> Curve:
    n = quality.size
    i, j = np.triu_indices(n, 1)
    flip = rng.random(i.size) < 0.5
    a, b = np.where(flip, j, i), np.where(flip, i, j)
    s = judge(MODEL, quality[a], quality[b], rng)
    return {int(i.size): scores(fit_state(n, a, b, s, prior=SHOWN_PRIOR), quality)}


def random_run(quality: np.ndarray, rng: np.random.Generator, checkpoints: list[int]) -> Curve:
    n = quality.size
    m = max(checkpoints)
    a = rng.integers(0, n, m)
    b = rng.integers(0, n - 1, m)
    b += b >= a
    s = judge(MODEL, quality[a], quality[b], rng)
    curve, theta = {}, None
    for c in sorted(checkpoints):
        state = fit_state(n, a[:c], b[:c], s[:c], init=theta, prior=SHOWN_PRIOR)
        theta = state.theta
        curve[c] = scores(state, quality)
    return curve


def shown_curve(
    quality: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    s: np.ndarray,
    spends: list[int],
    prior: float = SHOWN_PRIOR,
) -> Curve:
    """Scores of the ranking a session would show after each of ``spends`` calls (with
    ``prior`` DEFAULT_PRIOR: of the design's own fit, the evidence alone)."""
    curve, theta = {}, None
    for c in sorted(spends):
        state = fit_state(quality.size, a[:c], b[:c], s[:c], init=theta, prior=prior)
        theta = state.theta
        curve[c] = scores(state, quality)
    return curve


def session_run(
    quality: np.ndarray,
    seed: int,
    limit: int,
    rule: StopRule,
    strategy: str,
    prior: float = SHOWN_PRIOR,
) -> Curve:
    spends: list[int] = []
    run = simulate_session(
        quality,
        StopRule(kind="budget", budget=Budget(comparisons=limit)),
        selection_rule=rule,  # shapes the pairs; the budget decides when the run ends
        seed=seed,
        model=MODEL,
        batch_size=max(16, quality.size // 2),  # fixed rounds: a checkpoint every n/2
        strategy=strategy,  # type: ignore[arg-type]
        swap_share=0.0,
        max_comparisons=limit,
        on_round=lambda _state, spent: spends.append(spent),
    )
    return shown_curve(quality, run.a, run.b, run.score_a, spends, prior)


def oracle_run(quality: np.ndarray, seed: int, limit: int) -> Curve:
    n = quality.size
    theta = 1.702 * (quality - quality.mean()) / MODEL.noise
    rng = np.random.default_rng([seed, 3])
    a = b = np.empty(0, dtype=np.int64)
    s = np.empty(0)
    spends, r = [], 0
    size = max(16, n // 2)
    while a.size < limit:
        batch = select_batch(
            state_at(theta, a, b), min(size, limit - a.size), seed=[seed, r], swap_share=0.0
        )
        a, b = np.r_[a, batch.a], np.r_[b, batch.b]
        s = np.r_[s, judge(MODEL, quality[batch.a], quality[batch.b], rng)]
        spends.append(int(a.size))
        r += 1
    return shown_curve(quality, a, b, s, spends, DEFAULT_PRIOR)


def information_floor(n: int, noise: float) -> float:
    """Approximate share of a free-for-all's comparisons that any design needs to match
    its expected misordered pairs (see the module doc)."""
    q = norm.ppf((np.arange(n) + 0.5) / n)  # qualities at the normal quantiles

    def info(d: np.ndarray | float) -> np.ndarray:  # Fisher information of one verdict
        z = np.asarray(d) / noise
        return norm.pdf(z) ** 2 / (noise**2 * norm.cdf(z) * norm.sf(z))

    pair_info = info(q[:, None] - q[None, :])
    np.fill_diagonal(pair_info, 0.0)  # no game against oneself
    info_ffa = pair_info.sum(axis=1)
    best = float(info(0.0))
    density = n * norm.pdf(q)
    misordered_ffa = np.sum(density / np.sqrt(info_ffa))
    # the best allocation of g games (sum g = 2 x comparisons) minimises
    # sum density / sqrt(best * g): g proportional to density^(2/3)
    share = density ** (2 / 3) / np.sum(density ** (2 / 3))
    games_ffa = n * (n - 1)
    misordered_best = np.sum(density / np.sqrt(best * share * games_ffa))
    return float((misordered_best / misordered_ffa) ** 2)  # misordered ~ 1/sqrt(games)


def mean_curve(curves: list[Curve]) -> tuple[np.ndarray, np.ndarray]:
    """Checkpoints common to every seed, and the mean scores there."""
    common = sorted(set.intersection(*(set(c) for c in curves)))
    values = np.array([[c[x] for x in common] for c in curves]).mean(axis=0)
    return np.array(common), values


def reach(x: np.ndarray, tau: np.ndarray, target: float) -> float | None:
    hit = np.flatnonzero(tau >= target)
    if hit.size == 0:
        return None
    k = hit[0]
    if k == 0:
        return float(x[0])
    x0, x1, t0, t1 = x[k - 1], x[k], tau[k - 1], tau[k]
    return float(x0 + (target - t0) / (t1 - t0) * (x1 - x0))


def at(x: np.ndarray, values: np.ndarray, c: float) -> np.ndarray | None:
    """Scores at c comparisons (interpolated), None beyond the curve."""
    if c > x[-1] * 1.0001 or c < x[0]:
        return None
    return np.array([np.interp(c, x, values[:, m]) for m in range(values.shape[1])])


def per_seed(n: int, ffa_count: int, curves: dict[str, list[Curve]], first: int) -> None:
    """Each field on its own: the free-for-all's tau, adaptive and random at a third of its
    comparisons, and the share adaptive needs for the free-for-all's tau minus 0.01."""
    print(f"\n## {n} threads, per field: tau at 33% and the share to reach ffa tau - 0.01")
    print(
        "field  ffa tau  adaptive@33%  random@33%  gap     within 0.01  adaptive share"
        "  evidence-fit@33%  oracle@33%"
    )
    hits = oracle_hits = 0
    for k, ffa in enumerate(curves["ffa"]):
        tau_ffa = ffa[ffa_count][0]
        cells = []
        for name in ("adaptive", "random", "adaptive-evidence", "oracle"):
            x = np.array(sorted(curves[name][k]))
            tau = np.array([curves[name][k][c][0] for c in x])
            cells.append((float(np.interp(ffa_count / 3, x, tau)), x, tau))
        (ad, x, tau), (rnd, _, _), (evidence, _, _), (oracle, _, _) = cells
        r = reach(x, tau, tau_ffa - 0.01)
        hits += ad >= tau_ffa - 0.01
        oracle_hits += oracle >= tau_ffa - 0.01
        share = "not reached" if r is None else f"{r / ffa_count:.1%}"
        print(
            f"{first + k:>5}  {tau_ffa:7.3f}  {ad:12.3f}  {rnd:10.3f}  {ad - tau_ffa:+.3f}"
            f"  {'yes' if ad >= tau_ffa - 0.01 else 'no':>11}  {share:>14}  {evidence:16.3f}"
            f"  {oracle:10.3f}"
        )
    fields = len(curves["ffa"])
    print(
        f"within 0.01 of the free-for-all at 33%: {hits} of {fields} fields "
        f"(the oracle: {oracle_hits} of {fields})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 100, 300])
    parser.add_argument("--seeds", type=int, nargs="+", default=[10, 6, 3])
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the first seeded field (0: the fields the figures in bench/README.md were "
        "measured on; e.g. 100 for fields the design was never looked at on)",
    )
    parser.add_argument(
        "--noise", type=float, default=JudgeModel().noise, help="judge noise (simulator's)"
    )
    args = parser.parse_args()
    global MODEL
    MODEL = JudgeModel(noise=args.noise)
    print(f"judge model: {MODEL}")
    seeds_for = dict(zip(args.sizes, args.seeds + [args.seeds[-1]] * len(args.sizes), strict=False))
    started = time.perf_counter()
    summary = []
    for n in args.sizes:
        ffa_count = free_for_all_comparisons(n)
        limit_adaptive = ffa_count
        grid = sorted({max(n, round(ffa_count * f / 10)) for f in range(1, 21)})
        lim = limit_adaptive
        methods: dict[str, Callable[[np.ndarray, int], Curve]] = {
            "random": lambda q, s, g=grid: random_run(q, np.random.default_rng(s + 7), g),
            "swiss": lambda q, s, m=lim: session_run(q, s, m, StopRule(), "swiss"),
            "adaptive": lambda q, s, m=lim: session_run(q, s, m, StopRule(), "information"),
            "oracle": lambda q, s, m=lim: oracle_run(q, s, m),
            # the same runs, ranked by the design's own fit of the evidence
            "adaptive-evidence": lambda q, s, m=lim: session_run(
                q, s, m, StopRule(), "information", DEFAULT_PRIOR
            ),
            "adaptive-top10": lambda q, s, m=lim // 2: session_run(
                q, s, m, StopRule(kind="top_k", k=10), "information"
            ),
        }
        curves: dict[str, list[Curve]] = {"ffa": [], **{m: [] for m in methods}}
        times: dict[str, float] = dict.fromkeys(curves, 0.0)
        for seed in range(args.first_seed, args.first_seed + seeds_for[n]):
            quality = np.random.default_rng([n, seed]).standard_normal(n)
            t = time.perf_counter()
            curves["ffa"].append(ffa_run(quality, np.random.default_rng([n, seed, 1])))
            times["ffa"] += time.perf_counter() - t
            for name, fn in methods.items():
                t = time.perf_counter()
                curves[name].append(fn(quality, 1000 * n + seed))
                times[name] += time.perf_counter() - t
        per_seed(n, ffa_count, curves, args.first_seed)
        _, ffa_vals = mean_curve(curves["ffa"])
        ffa_tau, ffa_top, ffa_cov = ffa_vals[0]
        print(
            f"\n## {n} threads: free-for-all {ffa_count:,} comparisons, {seeds_for[n]} seeds; "
            f"ffa tau {ffa_tau:.3f}, top-10 {ffa_top:.2f}, coverage {ffa_cov:.2f}"
        )
        cols = [f"{f:.0%}" if f != 1 / 3 else "33%" for f in FRACTIONS]
        print(
            f"{'method':<15} "
            + " ".join(f"tau@{c:<4}" for c in cols)
            + "  top10@33% cov@33%  to ffa tau  to tau .9   s/seed"
        )
        for name in curves:
            if name == "ffa":
                continue
            x, vals = mean_curve(curves[name])
            cells = []
            for f in FRACTIONS:
                v = at(x, vals, f * ffa_count)
                cells.append("   -    " if v is None else f"{v[0]:8.3f}")
            v33 = at(x, vals, ffa_count / 3)
            r_ffa, r_09 = reach(x, vals[:, 0], ffa_tau), reach(x, vals[:, 0], 0.9)

            def fmt(r: float | None, x: np.ndarray = x) -> str:
                return f">{int(x[-1]):,}" if r is None else f"{r:,.0f}"

            top33 = "  -  " if v33 is None else f"{v33[1]:.2f}"
            cov33 = "  -  " if v33 is None else f"{v33[2]:.2f}"
            print(
                f"{name:<15} "
                + " ".join(cells)
                + f"  {top33:>9} {cov33:>7}  {fmt(r_ffa):>10}  {fmt(r_09):>9}"
                + f"  {times[name] / seeds_for[n]:6.1f}"
            )
            if name in ("random", "adaptive", "oracle"):
                summary.append((n, name, r_ffa, ffa_count))
        summary.append((n, "floor", information_floor(n, MODEL.noise) * ffa_count, ffa_count))
    print("\n## comparisons to reach the free-for-all's tau, as a share of its comparisons")
    for n, name, r, ffa_count in summary:
        share = "not reached" if r is None else f"{r / ffa_count:.1%}"
        print(f"{n:>4} threads  {name:<9} {share}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
