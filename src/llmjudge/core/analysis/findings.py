"""Surprise findings: results worth a second look, each with a one-sentence message.

Kinds:
- `overperformer` / `underperformer`: a thread whose win rate (ties half) is at least
  `margin` (default 0.25, i.e. 25 percentage points) above / below the mean win rate of
  its pillar's threads, over at least `min_matches` comparisons.
- `most_consistent`: among threads with at least `min_matches` comparisons and Likert
  scores, the one whose scores vary least (lowest mean standard deviation over criteria).
- `cross_pillar_upset`: a thread that beat (head-to-head win rate above 50%) more than
  half of the - at least `min_opponents` - threads it met from a pillar ranked above its own.
- `pillar_upset`: a pillar that wins more than half of its at least `min_matches`
  head-to-head matches against a pillar ranked above it (the ranking disagrees with the
  matrix, i.e. results are not transitive).
Pillar ranking: `pillar_scores` (e.g. pillar Bradley-Terry scores), computed if not given.

Findings worth reading: a thread is named by its title (`thread_names`), never "Thread 45";
a claim of a difference carries its evidence (a Wilson interval at `level` for a win rate,
an exact sign test for an upset), and an over/underperformer is claimed only when its
interval excludes its pillar's average; a thread whose Likert scores cannot vary (all at
the scale's floor or ceiling) or whose record cannot (it won or lost every match) is never
called the most consistent: its consistency is an artefact of the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.stats import binomtest

from llmjudge.core.analysis.leaderboard import PillarMatrix, pillar_matrix
from llmjudge.core.analysis.outcomes import Outcome, OutcomeTable, PlayerStats, as_table, map_ids
from llmjudge.core.ratings.estimators import pillar_bradley_terry
from llmjudge.core.stats import wilson_bounds as wilson

LIKERT_FLOOR, LIKERT_CEILING = 1.0, 5.0

FindingKind = Literal[
    "overperformer", "underperformer", "most_consistent", "cross_pillar_upset", "pillar_upset"
]


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    message: str
    thread_id: int | None = None
    pillar_id: int | None = None
    other_pillar_id: int | None = None  # the pillar upset
    numbers: dict[str, float] = field(default_factory=dict)


def surprise_findings(
    outcomes: OutcomeTable | Iterable[Outcome],
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    *,
    pillar_scores: Mapping[int, float] | None = None,
    margin: float = 0.25,
    min_matches: int = 3,
    min_opponents: int = 3,
    limit: int = 10,
    thread_names: Mapping[int, str] | None = None,
    level: float = 0.95,
) -> list[Finding]:
    """Findings of every kind, strongest first within a kind, at most `limit` per kind.
    `thread_names`: thread id -> how a message names it (its title, quoted); "Thread <id>"
    else."""
    table = as_table(outcomes)
    if len(table) == 0:
        return []
    if pillar_scores is None:
        pillar_scores = {
            r.player_id: r.score
            for r in pillar_bradley_terry(table, thread_pillar, bootstrap_rounds=0).ratings
        }

    def name(pillar: int) -> str:
        return pillar_names.get(pillar, f"pillar {pillar}")

    names = thread_names or {}

    def thread(t: int) -> str:
        # quoted: a title is free text, often cut with an ellipsis, and the sentence goes on
        title = names.get(t)
        return f"\u201c{title}\u201d" if title else f"Thread {t}"  # none: it left the catalog

    stats = PlayerStats.of(table)
    pillars = map_ids(table.players, thread_pillar)
    matrix = pillar_matrix(table, thread_pillar, pillar_names)
    return [
        *_pillar_deviations(table, stats, pillars, name, thread, margin, min_matches, limit, level),
        *_most_consistent(table, stats, pillars, thread, min_matches),
        *_cross_pillar_upsets(table, pillars, pillar_scores, name, thread, min_opponents)[:limit],
        *_pillar_upsets(matrix, pillar_scores, name, min_matches, level)[:limit],
    ]


def _pillar_deviations(
    table: OutcomeTable,
    stats: PlayerStats,
    pillars: np.ndarray,
    name: Callable[[int], str],
    thread_name: Callable[[int], str],
    margin: float,
    min_matches: int,
    limit: int,
    level: float,
) -> list[Finding]:
    win_rate = stats.win_rate
    _, pillar_index = np.unique(pillars, return_inverse=True)
    pillar_mean = (np.bincount(pillar_index, weights=win_rate) / np.bincount(pillar_index))[
        pillar_index
    ]
    deviation = win_rate - pillar_mean
    low, high = wilson(stats.wins + 0.5 * stats.ties, stats.matches, level)
    # claimed only when the thread's interval excludes its pillar's average
    evident = (low > pillar_mean) | (high < pillar_mean)
    flagged = np.flatnonzero(
        (stats.matches >= min_matches) & (np.abs(deviation) >= margin) & evident
    )
    over: list[Finding] = []
    under: list[Finding] = []
    for i in flagged[np.lexsort((table.players[flagged], -np.abs(deviation[flagged])))].tolist():
        thread, pillar = int(table.players[i]), int(pillars[i])
        above = bool(deviation[i] > 0)
        (over if above else under).append(
            Finding(
                kind="overperformer" if above else "underperformer",
                message=(
                    f"{thread_name(thread)} wins {win_rate[i]:.0%} of its {stats.matches[i]}"
                    f" matches ({level:.0%} interval {low[i]:.0%}–{high[i]:.0%}),"
                    f" {abs(deviation[i]) * 100:.0f} percentage points"
                    f" {'above' if above else 'below'} {name(pillar)}'s average thread"
                    f" ({pillar_mean[i]:.0%})."
                ),
                thread_id=thread,
                pillar_id=pillar,
                numbers={
                    "win_rate": float(win_rate[i]),
                    "pillar_avg_win_rate": float(pillar_mean[i]),
                    "deviation": float(deviation[i]),
                    "matches": float(stats.matches[i]),
                    "win_rate_low": float(low[i]),
                    "win_rate_high": float(high[i]),
                },
            )
        )
    return over[:limit] + under[:limit]


def _most_consistent(
    table: OutcomeTable,
    stats: PlayerStats,
    pillars: np.ndarray,
    thread_name: Callable[[int], str],
    min_matches: int,
) -> list[Finding]:
    evaluable = ~np.isnan(stats.likert_std)
    criteria = evaluable.sum(axis=1)
    # a bound makes zero spread trivial: every score at the floor or the ceiling, or a
    # record of all wins or all losses (no verdict could have gone otherwise)
    mean = np.where(evaluable, stats.likert_mean, np.nan)
    bounded = evaluable & ((mean <= LIKERT_FLOOR) | (mean >= LIKERT_CEILING))
    pinned = (criteria > 0) & (bounded.sum(axis=1) == criteria)
    one_sided = (stats.wins == stats.matches) | (stats.losses == stats.matches)
    eligible = np.flatnonzero(
        (stats.matches >= min_matches) & (criteria > 0) & ~pinned & ~one_sided
    )
    if eligible.size == 0:
        return []
    spread = np.nanmean(stats.likert_std[eligible], axis=1)
    best = eligible[np.lexsort((table.players[eligible], -stats.matches[eligible], spread))[0]]
    mean_std = float(np.nanmean(stats.likert_std[best]))
    thread = int(table.players[best])
    return [
        Finding(
            kind="most_consistent",
            message=(
                f"{thread_name(thread)} is the most consistent: its Likert scores vary by"
                f" {mean_std:.2f} points (standard deviation) on average over"
                f" {criteria[best]} criteria in {stats.matches[best]} comparisons."
            ),
            thread_id=thread,
            pillar_id=int(pillars[best]),
            numbers={
                "mean_likert_std": mean_std,
                "criteria": float(criteria[best]),
                "matches": float(stats.matches[best]),
            },
        )
    ]


def _cross_pillar_upsets(
    table: OutcomeTable,
    pillars: np.ndarray,
    pillar_scores: Mapping[int, float],
    name: Callable[[int], str],
    thread_name: Callable[[int], str],
    min_opponents: int,
) -> list[Finding]:
    n = table.n_players
    who = np.concatenate([table.a, table.b])
    opponent = np.concatenate([table.b, table.a])
    result = np.concatenate([table.score_a, 1.0 - table.score_a])
    keys, pair = np.unique(who * n + opponent, return_inverse=True)
    beat = np.bincount(pair, weights=result) / np.bincount(pair) > 0.5
    thread, rival = keys // n, keys % n
    score = np.array([pillar_scores.get(p, np.nan) for p in pillars.tolist()])
    upward = score[rival] > score[thread]  # NaN (unrated pillar) compares False
    pillar_ids, rival_pillar = np.unique(pillars[rival[upward]], return_inverse=True)
    group_keys, group = np.unique(
        thread[upward] * max(pillar_ids.size, 1) + rival_pillar, return_inverse=True
    )
    met = np.bincount(group, minlength=group_keys.size)
    beaten = np.bincount(group, weights=beat[upward], minlength=group_keys.size)
    flagged = np.flatnonzero((met >= min_opponents) & (2 * beaten > met))
    share = beaten[flagged] / met[flagged]
    out = []
    for g in flagged[np.lexsort((group_keys[flagged], -met[flagged], -share))].tolist():
        t = int(group_keys[g] // max(pillar_ids.size, 1))
        own, other = int(pillars[t]), int(pillar_ids[group_keys[g] % max(pillar_ids.size, 1)])
        thread_id = int(table.players[t])
        # one-sided exact sign test: beating more than half by chance, if evenly matched
        p = float(binomtest(int(beaten[g]), int(met[g]), 0.5, alternative="greater").pvalue)
        out.append(
            Finding(
                kind="cross_pillar_upset",
                message=(
                    f"{thread_name(thread_id)} of {name(own)} beat {beaten[g]:.0f} of the"
                    f" {met[g]} threads it met from higher-ranked {name(other)}"
                    f" (one-sided sign test p = {p:.2g})."
                ),
                thread_id=thread_id,
                pillar_id=own,
                other_pillar_id=other,
                numbers={
                    "opponents_met": float(met[g]),
                    "opponents_beaten": float(beaten[g]),
                    "share_beaten": float(beaten[g] / met[g]),
                    "pillar_score": float(pillar_scores[own]),
                    "other_pillar_score": float(pillar_scores[other]),
                    "sign_test_p": p,
                },
            )
        )
    return out


def _pillar_upsets(
    matrix: PillarMatrix,
    pillar_scores: Mapping[int, float],
    name: Callable[[int], str],
    min_matches: int,
    level: float,
) -> list[Finding]:
    found = []
    for row in matrix.cells:
        for cell in row:
            if cell is None or cell.win_rate is None or cell.n < min_matches:
                continue
            mine = pillar_scores.get(cell.row_pillar)
            theirs = pillar_scores.get(cell.col_pillar)
            if mine is None or theirs is None or not (mine < theirs and cell.win_rate > 0.5):
                continue
            lo, hi = (
                float(v[0])
                for v in wilson(np.array([cell.wins + 0.5 * cell.ties]), np.array([cell.n]), level)
            )
            found.append(
                Finding(
                    kind="pillar_upset",
                    message=(
                        f"{name(cell.row_pillar)} wins {cell.win_rate:.0%} of its {cell.n}"
                        f" matches ({level:.0%} interval {lo:.0%}–{hi:.0%}) against"
                        f" {name(cell.col_pillar)}, which is ranked higher."
                    ),
                    pillar_id=cell.row_pillar,
                    other_pillar_id=cell.col_pillar,
                    numbers={
                        "win_rate": cell.win_rate,
                        "matches": float(cell.n),
                        "pillar_score": float(mine),
                        "other_pillar_score": float(theirs),
                        "win_rate_low": lo,
                        "win_rate_high": hi,
                    },
                )
            )
    return sorted(found, key=lambda f: (-f.numbers["win_rate"], -f.numbers["matches"]))
