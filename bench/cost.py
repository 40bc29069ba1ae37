"""Benchmark: dollars to rank 100 threads as well as a free-for-all does, live, in batch,
and with prompt caching. Simulated judge, real prices.

Run: .venv/bin/python bench/cost.py [--threads 100] [--seeds 6]

The judge is the simulator's pairwise model (``core.tournaments.simulation.JudgeModel``,
noise 0.5: the default judge), priced and sized like a small real judge model (the
constants below, printed by the run). Each seeded field (qualities N(0, 1)) is judged by:

- ``free-for-all``: every pair once, in a random order (no swapped twins);
- ``adaptive``: the product's adaptive design (``simulate_session``, strategy
  ``information``, rounds of n/2), run to the free-for-all's number of comparisons,
  scored after every round, exactly as ``bench/adaptive.py`` runs it.

"Comparisons to reach the free-for-all's tau": the first point where the seed-averaged
Kendall tau of the adaptive curve reaches the seed-averaged tau of the free-for-all
(interpolated between rounds). Dollars are comparisons x the price of one call from the
product's own price function (``ModelPricing.cost``: input, output, cached input), with:

- ``live``: list prices;
- ``batch``: the same calls through a provider's batch API, priced as the batch transport
  prices them (``judging.pipeline.at_batch_price`` with the model's default
  ``batch_discount``: OpenAI's and Anthropic's published 50% off);
- ``batch + caching``: the shared prefix of every prompt (system prompt, rubric,
  instructions) read from the provider's prompt cache at the model's cached-input price,
  priced as the product prices it, the batch discount on top (the product's one cost
  function, discounted). OpenAI caches a prefix only from 1,024 tokens, in steps of 128:
  the run shows the default judge prompt (700 shared tokens: nothing is cached) and a
  judge with a longer rubric (1,400 shared tokens). Every call is assumed to find the
  prefix cached (the first of a session does not: one call in thousands).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see bench/adaptive.py

import argparse  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
from adaptive import ffa_run, mean_curve, reach, session_run  # noqa: E402

from llmjudge.core.tournaments.adaptive import StopRule, free_for_all_comparisons  # noqa: E402
from llmjudge.judging.pipeline import at_batch_price  # noqa: E402
from llmjudge.providers.base import ModelPricing  # noqa: E402
from llmjudge.providers.models import BATCH_DISCOUNT  # noqa: E402

# A GPT-4o-mini-class judge (OpenAI list prices, USD per million tokens).
INPUT_PRICE = 0.15
OUTPUT_PRICE = 0.60
PRICING = ModelPricing.of("openai", INPUT_PRICE, OUTPUT_PRICE)  # cached input: the default
OUTPUT_TOKENS = 150  # a short JSON verdict with its reasoning
CACHE_MIN_TOKENS = 1024  # OpenAI caches a prompt prefix from 1,024 tokens...
CACHE_STEP_TOKENS = 128  # ...in steps of 128


@dataclass(frozen=True)
class Prompt:
    name: str
    tokens: int  # the whole prompt: shared part and the two threads
    shared: int  # system prompt, rubric, instructions: the same for every call


PROMPTS = (
    Prompt("default judge prompt", 1_100, 700),
    Prompt("long rubric", 1_800, 1_400),
)


def cached_tokens(shared: int) -> int:
    """Prompt tokens OpenAI reads from its cache when ``shared`` leading tokens repeat."""
    return 0 if shared < CACHE_MIN_TOKENS else shared // CACHE_STEP_TOKENS * CACHE_STEP_TOKENS


def per_call(prompt: Prompt, *, batch: bool, caching: bool) -> float:
    cost = at_batch_price(PRICING.cost, BATCH_DISCOUNT) if batch else PRICING.cost
    return cost(prompt.tokens, OUTPUT_TOKENS, cached_tokens(prompt.shared) if caching else 0, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args()
    n = args.threads
    ffa_count = free_for_all_comparisons(n)
    print(
        f"judge (simulated verdicts, noise 0.5): ${INPUT_PRICE}/M input, ${OUTPUT_PRICE}/M "
        f"output, cached input ${PRICING.cached_input_per_million:.3f}/M (the OpenAI default), "
        f"{OUTPUT_TOKENS} output tokens per call; batch {BATCH_DISCOUNT:.0%} off; "
        f"prompt cache from {CACHE_MIN_TOKENS} tokens in steps of {CACHE_STEP_TOKENS}"
    )
    started = time.perf_counter()
    ffa, adaptive = [], []
    per_seed: list[float | None] = []
    for seed in range(args.seeds):
        quality = np.random.default_rng([n, seed]).standard_normal(n)
        ffa.append(ffa_run(quality, np.random.default_rng([n, seed, 1])))
        adaptive.append(session_run(quality, 1000 * n + seed, ffa_count, StopRule(), "information"))
        x, values = mean_curve([adaptive[-1]])
        per_seed.append(reach(x, values[:, 0], ffa[-1][ffa_count][0]))
    ffa_tau = float(mean_curve(ffa)[1][0][0])
    x, values = mean_curve(adaptive)
    needed = reach(x, values[:, 0], ffa_tau)
    print(
        f"\n{n} threads, {args.seeds} seeds: free-for-all {ffa_count:,} comparisons, "
        f"tau {ffa_tau:.3f}; adaptive reaches it after "
        + ("(not reached)" if needed is None else f"{needed:,.0f} ({needed / ffa_count:.1%})")
    )
    shares = [f"{r / ffa_count:.0%}" if r is not None else "not reached" for r in per_seed]
    print(f"per seed (each against its own free-for-all's tau): {', '.join(shares)}")
    for prompt in PROMPTS:
        live = ffa_count * per_call(prompt, batch=False, caching=False)
        print(
            f"\n## {prompt.name}: {prompt.tokens:,} prompt tokens, {prompt.shared:,} shared "
            f"({cached_tokens(prompt.shared):,} cached)"
        )
        print(f"{'method':<32} {'calls':>7} {'$ / call':>10} {'dollars':>9} {'share':>7}")
        rows = [
            ("free-for-all, live", ffa_count, per_call(prompt, batch=False, caching=False)),
            # OpenAI caches live calls by itself too: the baseline as a user would pay it
            (
                "free-for-all, live + caching",
                ffa_count,
                per_call(prompt, batch=False, caching=True),
            ),
            ("adaptive, live", needed, per_call(prompt, batch=False, caching=False)),
            ("adaptive, batch", needed, per_call(prompt, batch=True, caching=False)),
            ("adaptive, batch + caching", needed, per_call(prompt, batch=True, caching=True)),
        ]
        for name, calls, price in rows:
            if calls is None:
                print(f"{name:<32} {'-':>7} {price * 1e6:>9.1f}u {'-':>9} {'-':>7}")
                continue
            dollars = calls * price
            print(
                f"{name:<32} {calls:>7,.0f} {price * 1e6:>9.1f}u {dollars:>9.4f} "
                f"{dollars / live:>7.1%}"
            )
    print("\n(u: micro-dollars per call; share: of the free-for-all's live dollars)")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
