"""Elo ratings and the Elo scale.

Sequential Elo over the canonical outcome order, and log-strengths (Bradley-Terry logits)
shown as Elo points (400 / ln 10 per logit)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable, as_table

ELO_BASE = 1500.0
ELO_K = 32.0
ELO_SCALE = 400.0 / math.log(10.0)  # Elo points per logit


def elo_array(table: OutcomeTable, *, initial: float = ELO_BASE, k: float = ELO_K) -> np.ndarray:
    """Sequential Elo over the table's canonical (completed_order, comparison_id) order;
    a verdict with the judge's probability p scores p for A (`rating_score`)."""
    ratings = [initial] * table.n_players
    # a plain loop over Python lists: Elo is sequential, and list indexing is far
    # cheaper than numpy scalar access
    for i, j, s in zip(
        table.a.tolist(), table.b.tolist(), table.rating_score.tolist(), strict=True
    ):
        ri, rj = ratings[i], ratings[j]
        delta = k * (s - 1.0 / (1.0 + 10.0 ** ((rj - ri) / 400.0)))
        ratings[i] = ri + delta
        ratings[j] = rj - delta
    return np.asarray(ratings)


def elo(
    outcomes: OutcomeTable | Iterable[Outcome], *, initial: float = ELO_BASE, k: float = ELO_K
) -> dict[int, float]:
    """Elo per thread: start 1500, K=32, ties 0.5 (a probability p: p), replayed by
    (completed_order, id)."""
    table = as_table(outcomes)
    return dict(
        zip(table.players.tolist(), elo_array(table, initial=initial, k=k).tolist(), strict=True)
    )


def elo_scale(
    theta: np.ndarray, *, base: float = ELO_BASE, baseline: int | None = None
) -> np.ndarray:
    """Log-strengths (..., players) on the Elo scale, 400/ln 10 points per logit,
    anchored so the mean player (baseline None) or player index `baseline` scores
    `base` (1000 or 1500 are the usual choices). Works row-wise on bootstrap samples, so
    intervals transform with their estimate; a baseline's own interval is then zero
    wide, as it is the reference."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape[-1] == 0:  # no players: nothing to anchor
        return theta + base
    anchor = theta.mean(axis=-1, keepdims=True) if baseline is None else theta[..., baseline, None]
    return base + ELO_SCALE * (theta - anchor)
