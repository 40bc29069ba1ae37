"""Per-thread performance and Likert consistency, and sampling coverage per pillar.

Definitions:
- win_rate = (wins + ties/2) / usage; performance_score = (wins - losses) / usage, in [-1, 1].
- consistent winner / loser: at least 70% wins / losses over at least 3 comparisons.
- Likert: per criterion, mean and sample standard deviation (ddof=1; None below 2
  scores) of the thread's scores over all its verdicts; a criterion is consistent when
  std < 0.5. likert_consistency_score = share of the thread's evaluable criteria that are
  consistent (None when none is evaluable); a thread is inconsistent below 0.5.
- Sampling: over-sampled above 1.5x the mean usage, under-sampled below 0.5x.
- Pillar goals: sample coverage (share of the pillar's threads used at least once)
  > 50% for pillars of at most 50 threads, > 20% for larger ones; repetition overlap
  (share of used threads that appear in more than one repetition) < 30%; variance
  across repetitions of the pillar's win rate (all its threads' verdicts, ties half) < 0.05.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from llmjudge.core.analysis.outcomes import (
    Outcome,
    OutcomeTable,
    PlayerStats,
    as_table,
    map_ids,
    opt_float,
)

CONSISTENT_SHARE = 0.7
CONSISTENT_MIN_MATCHES = 3
LIKERT_CONSISTENT_STD = 0.5
OVER_SAMPLED = 1.5
UNDER_SAMPLED = 0.5
SMALL_PILLAR = 50
COVERAGE_GOAL_SMALL = 0.5
COVERAGE_GOAL_LARGE = 0.2
OVERLAP_GOAL = 0.3
VARIANCE_GOAL = 0.05


@dataclass(frozen=True)
class CriterionStats:
    mean: float | None
    std: float | None
    count: int
    is_consistent: bool | None  # std < 0.5; None below 2 scores


@dataclass(frozen=True)
class ThreadStats:
    thread_id: int
    pillar_id: int
    usage_count: int
    unique_opponents: int
    wins: int
    losses: int
    ties: int
    win_rate: float
    performance_score: float
    consistent_winner: bool
    consistent_loser: bool
    likert: dict[str, CriterionStats]
    likert_consistency_score: float | None


@dataclass(frozen=True)
class LikertSummary:
    criterion: str
    mean: float | None  # over every score given
    std: float | None
    count: int
    consistent_threads: int  # threads whose std on this criterion is < 0.5
    evaluable_threads: int  # threads with at least 2 scores on it


@dataclass(frozen=True)
class CoverageStats:
    thread_count: int
    mean_usage: float | None
    over_sampled: list[int]
    under_sampled: list[int]
    evenly_sampled: list[int]
    consistent_winners: list[int]
    consistent_losers: list[int]
    inconsistent_threads: list[int]  # likert_consistency_score < 0.5
    likert: list[LikertSummary]


@dataclass(frozen=True)
class PillarCoverage:
    pillar_id: int
    name: str
    thread_count: int  # all threads of the pillar (pillar_sizes)
    threads_used: int
    sample_coverage: float | None
    coverage_goal: float
    meets_coverage_goal: bool
    repetition_overlap: float | None  # None with a single repetition
    meets_overlap_goal: bool | None
    win_rate_variance: float | None  # None with fewer than 2 repetitions
    meets_variance_goal: bool | None
    flags: list[str]  # one sentence per missed goal


@dataclass(frozen=True)
class ThreadPerformance:
    threads: list[ThreadStats]  # by performance_score, best first
    coverage: CoverageStats
    pillars: list[PillarCoverage]  # by pillar id


def thread_performance(
    outcomes: OutcomeTable | Iterable[Outcome],
    thread_pillar: Mapping[int, int],
    pillar_sizes: Mapping[int, int],
    pillar_names: Mapping[int, str] | None = None,
    *,
    planned_repetitions: bool = True,
) -> ThreadPerformance:
    """``planned_repetitions``: the session planned its repetitions (pillar sample, round
    robin, free for all), so overlap and variance across them mean something. An adaptive
    session's repetition number only counts a pair asked again: no goal applies to it."""
    table = as_table(outcomes)
    names = pillar_names or {}
    stats = PlayerStats.of(table)
    pillars = map_ids(table.players, thread_pillar)
    usage = stats.matches
    denominator = np.maximum(usage, 1)
    performance = (stats.wins - stats.losses) / denominator
    enough = usage >= CONSISTENT_MIN_MATCHES
    winners = enough & (stats.wins / denominator >= CONSISTENT_SHARE)
    losers = enough & (stats.losses / denominator >= CONSISTENT_SHARE)
    evaluable = ~np.isnan(stats.likert_std)
    consistent = evaluable & (np.nan_to_num(stats.likert_std, nan=np.inf) < LIKERT_CONSISTENT_STD)
    n_evaluable = evaluable.sum(axis=1)
    consistency = np.where(
        n_evaluable > 0, consistent.sum(axis=1) / np.maximum(n_evaluable, 1), np.nan
    )
    threads = [
        ThreadStats(
            thread_id=int(table.players[i]),
            pillar_id=int(pillars[i]),
            usage_count=int(usage[i]),
            unique_opponents=int(stats.opponents[i]),
            wins=int(stats.wins[i]),
            losses=int(stats.losses[i]),
            ties=int(stats.ties[i]),
            win_rate=float(stats.win_rate[i]),
            performance_score=float(performance[i]),
            consistent_winner=bool(winners[i]),
            consistent_loser=bool(losers[i]),
            likert={
                c: CriterionStats(
                    mean=opt_float(stats.likert_mean[i, k]),
                    std=opt_float(stats.likert_std[i, k]),
                    count=int(stats.likert_count[i, k]),
                    is_consistent=bool(consistent[i, k]) if evaluable[i, k] else None,
                )
                for k, c in enumerate(table.criteria)
            },
            likert_consistency_score=opt_float(consistency[i]),
        )
        for i in np.lexsort((table.players, -performance)).tolist()
    ]
    ids = table.players
    mean_usage = float(usage.mean()) if usage.size else None
    over = usage > OVER_SAMPLED * (mean_usage or 0.0)
    under = usage < UNDER_SAMPLED * (mean_usage or 0.0)
    coverage = CoverageStats(
        thread_count=int(ids.size),
        mean_usage=mean_usage,
        over_sampled=ids[over].tolist(),
        under_sampled=ids[under].tolist(),
        evenly_sampled=ids[~over & ~under].tolist(),
        consistent_winners=ids[winners].tolist(),
        consistent_losers=ids[losers].tolist(),
        inconsistent_threads=ids[np.nan_to_num(consistency, nan=1.0) < 0.5].tolist(),
        likert=_likert_summary(table, evaluable, consistent),
    )
    return ThreadPerformance(
        threads=threads,
        coverage=coverage,
        pillars=_pillar_coverage(table, pillars, pillar_sizes, names, planned_repetitions),
    )


def _likert_summary(
    table: OutcomeTable, evaluable: np.ndarray, consistent: np.ndarray
) -> list[LikertSummary]:
    out = []
    for k, criterion in enumerate(table.criteria):
        values = np.concatenate([table.scores_a[:, k], table.scores_b[:, k]])
        values = values[~np.isnan(values)]
        out.append(
            LikertSummary(
                criterion=criterion,
                mean=opt_float(values.mean()) if values.size else None,
                std=opt_float(values.std(ddof=1)) if values.size > 1 else None,
                count=int(values.size),
                consistent_threads=int(consistent[:, k].sum()),
                evaluable_threads=int(evaluable[:, k].sum()),
            )
        )
    return out


def _pillar_coverage(
    table: OutcomeTable,
    pillars: np.ndarray,
    pillar_sizes: Mapping[int, int],
    names: Mapping[int, str],
    planned_repetitions: bool,
) -> list[PillarCoverage]:
    n = table.n_players
    repetition = table.repetition if planned_repetitions else np.zeros_like(table.repetition)
    reps, rep_index = np.unique(repetition, return_inverse=True)
    # distinct repetitions each thread appears in
    thread_reps = np.unique(np.concatenate([table.a, table.b]) * reps.size + np.tile(rep_index, 2))
    reps_per_thread = np.bincount(thread_reps // max(reps.size, 1), minlength=n)
    # pillar win rate per repetition: every verdict of its threads, ties half
    who = pillars[np.concatenate([table.a, table.b])] if n else np.zeros(0, dtype=np.int64)
    result = np.concatenate([table.score_a, 1.0 - table.score_a])
    rep_of = np.tile(rep_index, 2)
    out = []
    for pillar in sorted(set(pillar_sizes) | set(pillars.tolist())):
        size = int(pillar_sizes.get(pillar, 0))
        members = pillars == pillar
        used = int(members.sum())
        share = used / size if size else None
        goal = COVERAGE_GOAL_SMALL if size <= SMALL_PILLAR else COVERAGE_GOAL_LARGE
        meets_coverage = share is not None and share > goal
        overlap = float(np.mean(reps_per_thread[members] > 1)) if reps.size > 1 and used else None
        mine = who == pillar
        games = np.bincount(rep_of[mine], minlength=reps.size)
        points = np.bincount(rep_of[mine], weights=result[mine], minlength=reps.size)
        played = games > 0
        variance = float(np.var(points[played] / games[played])) if played.sum() > 1 else None
        name = names.get(pillar, f"pillar {pillar}")
        flags = []
        if not meets_coverage:
            flags.append(
                f"{name}: {used} of {size} threads used"
                f" ({0.0 if share is None else share:.0%}), goal above {goal:.0%}."
            )
        if overlap is not None and overlap >= OVERLAP_GOAL:
            flags.append(
                f"{name}: {overlap:.0%} of used threads recur across repetitions,"
                f" goal below {OVERLAP_GOAL:.0%}."
            )
        if variance is not None and variance >= VARIANCE_GOAL:
            flags.append(
                f"{name}: win rate varies across repetitions (variance {variance:.3f}),"
                f" goal below {VARIANCE_GOAL}."
            )
        out.append(
            PillarCoverage(
                pillar_id=pillar,
                name=name,
                thread_count=size,
                threads_used=used,
                sample_coverage=share,
                coverage_goal=goal,
                meets_coverage_goal=meets_coverage,
                repetition_overlap=overlap,
                meets_overlap_goal=None if overlap is None else overlap < OVERLAP_GOAL,
                win_rate_variance=variance,
                meets_variance_goal=None if variance is None else variance < VARIANCE_GOAL,
                flags=flags,
            )
        )
    return out
