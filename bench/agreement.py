"""The agreement report's compute (what ``GET /api/sessions/{id}/agreement`` runs off the
event loop) against session size, beside a baseline: Cohen's kappa alone with a 1,000-round
bootstrap the usual way (scikit-learn's ``cohen_kappa_score`` on resampled judgments).

Synthetic sessions: every pair judged in both orders, a gold label and two human
annotators per pair, threads spread over 31 pillars (up to 961 pillar-pair groups)::

    .venv/bin/python bench/agreement.py [--pairs 1000 10000 25000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmjudge.core.agreement import judges as core
from llmjudge.references.agreement_report import _compute, _Loaded

LABELS = np.array(["A", "B", "TIE"])


def session(pairs: int, pillars: int, seed: int = 0) -> _Loaded:
    rng = np.random.default_rng(seed)
    judgments, labels, pillar_of = [], [], {}
    gold = rng.choice(LABELS[:2], pairs)
    human = rng.choice(LABELS, (pairs, 2))
    verdicts = rng.choice(LABELS, (pairs, 2), p=[0.45, 0.45, 0.1])
    homes = rng.integers(0, pillars, (pairs, 2))
    for p in range(pairs):
        a, b = 2 * p, 2 * p + 1
        pillar_of[a], pillar_of[b] = f"p{homes[p, 0]}", f"p{homes[p, 1]}"
        labels.append(core.ReferenceLabel((a, b), str(gold[p]), "gold", "key"))
        for k, who in enumerate(("ann", "bob")):
            labels.append(core.ReferenceLabel((a, b), str(human[p, k]), "human", who))
        for k, swapped in enumerate((False, True)):
            judgments.append(core.Judgment((a, b), 2 * p + k, str(verdicts[p, k]), swapped))
    return _Loaded(judgments, labels, pillar_of, {})


def baseline_kappa(loaded: _Loaded, rounds: int = 1000) -> float:
    from sklearn.metrics import cohen_kappa_score

    gold = {lab.pair: lab.label for lab in loaded.labels if lab.source == "gold"}
    ref = np.array([gold[j.pair] for j in loaded.judgments])
    judge = np.array([j.in_pair_order for j in loaded.judgments])
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    for _ in range(rounds):
        pick = rng.integers(0, len(ref), len(ref))
        cohen_kappa_score(ref[pick], judge[pick])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, nargs="+", default=[1000, 10000, 25000])
    parser.add_argument("--pillars", type=int, default=31)
    args = parser.parse_args()
    print(f"{'pairs':>7} {'judgments':>9} {'report s':>9} {'kappa-only baseline s':>22}")
    for pairs in args.pairs:
        loaded = session(pairs, args.pillars)
        started = time.perf_counter()
        out = _compute(1, loaded, "gold", None, len(loaded.judgments), core.DEFAULT_ROUNDS)
        report_s = time.perf_counter() - started
        assert out.judge.judgments == 2 * pairs and out.human.items == pairs
        base_s = baseline_kappa(loaded)
        print(f"{pairs:>7,} {2 * pairs:>9,} {report_s:>9.2f} {base_s:>22.2f}")


if __name__ == "__main__":
    main()
