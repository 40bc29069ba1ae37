"""Per-category views of a session for any thread metadata key (MT-Bench's `category`).

A pillar ranking per category and the category x pillar win-rate matrix. Pure: no I/O.

A comparison belongs to a category when both its threads carry that value under the key
(MT-Bench pairs answers to one question, so both share it); comparisons across categories
or with a thread lacking the key are left out, and counted. Pillar ratings per category
use the session's rating options (thread pairs as clusters); a win rate carries a Wilson
interval at the same level (it treats verdicts as independent, so it is a floor on the
honest width).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from llmjudge.core.analysis.leaderboard import pillar_ratings
from llmjudge.core.analysis.outcomes import OutcomeTable, map_ids
from llmjudge.core.fields import build_from
from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR
from llmjudge.core.ratings.report import RatingOptions
from llmjudge.core.stats import wilson_bounds as wilson

MAX_CATEGORIES = 24


@dataclass(frozen=True)
class CategoryPillar:
    pillar_id: int
    name: str
    score: float | None  # Bradley-Terry on the Elo scale within the category; None: unrated
    ci_low: float | None
    ci_high: float | None
    rank: int | None
    matches: int  # cross-pillar verdicts of this pillar in the category
    win_rate: float | None  # (wins + ties/2) / matches
    win_low: float | None  # Wilson interval at the level
    win_high: float | None


@dataclass(frozen=True)
class CategoryView:
    value: str
    threads: int
    comparisons: int  # cross-pillar comparisons within the category
    pillars: list[CategoryPillar]  # by rank, then score; unrated last


@dataclass(frozen=True)
class CategoryColumn:
    pillar_id: int
    name: str


@dataclass(frozen=True)
class CategoryReport:
    key: str
    categories: list[CategoryView]  # most comparisons first
    pillars: list[CategoryColumn]  # matrix columns: overall best first
    matrix: list[list[float | None]]  # [category][pillar] win rate; None: no match there
    counts: list[list[int]]  # [category][pillar] matches
    comparisons_left_out: int  # across categories, without the key, or within one pillar
    categories_left_out: int  # beyond MAX_CATEGORIES
    level: float


def metadata_keys(thread_meta: Mapping[int, Mapping[str, object]]) -> list[str]:
    """Every scalar metadata key some thread carries, sorted."""
    return sorted({k for meta in thread_meta.values() for k in meta})


def _label(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def category_report(
    table: OutcomeTable,
    thread_pillar: Mapping[int, int],
    pillar_names: Mapping[int, str],
    thread_meta: Mapping[int, Mapping[str, object]],
    key: str,
    options: RatingOptions,
    *,
    pillar_order: list[int] | None = None,
    prior: float = DEFAULT_PRIOR,
) -> CategoryReport:
    """Ranking and win rates per value of metadata `key`; `pillar_order` orders the matrix
    columns (e.g. the overall pillar ranking), else pillars by id. Scores anchor on the
    mean pillar of each category (a baseline may not play in every category)."""
    options = dataclasses.replace(options, baseline_thread=None, baseline_pillar=None)
    labels = [_label(thread_meta.get(t, {}).get(key)) for t in table.players.tolist()]
    values = sorted({v for v in labels if v is not None})
    code = {v: i for i, v in enumerate(values)}
    thread_cat = np.array([-1 if v is None else code[v] for v in labels], dtype=np.int64)
    pillars = map_ids(table.players, thread_pillar)
    ca = thread_cat[table.a] if len(table) else np.zeros(0, np.int64)
    cb = thread_cat[table.b] if len(table) else np.zeros(0, np.int64)
    inside = (ca >= 0) & (ca == cb) & (pillars[table.a] != pillars[table.b])
    row_cat = np.where(inside, ca, -1)
    per_cat = np.bincount(row_cat[inside], minlength=len(values))
    shown = [c for c in np.argsort(-per_cat, kind="stable").tolist() if per_cat[c] > 0]
    left_out_cats = max(0, len(shown) - MAX_CATEGORIES)
    shown = shown[:MAX_CATEGORIES]
    all_pillars = sorted(set(pillars.tolist()))
    order = [p for p in (pillar_order or []) if p in set(all_pillars)]
    order += [p for p in all_pillars if p not in set(order)]
    column = {p: j for j, p in enumerate(order)}
    # each verdict counts for both sides: A's pillar scores score_a, B's 1 - score_a
    side_pillar = np.concatenate([pillars[table.a], pillars[table.b]])
    side_score = np.concatenate([table.score_a, 1.0 - table.score_a])
    side_cat = np.concatenate([row_cat, row_cat])
    k = len(order)
    col = np.array([column[p] for p in side_pillar.tolist()], dtype=np.int64)
    cells = np.where(side_cat >= 0, side_cat * k + col, -1)
    valid = cells >= 0
    size = max(len(values), 1) * max(k, 1)
    matches = np.bincount(cells[valid], minlength=size).reshape(-1, max(k, 1))
    points = np.bincount(cells[valid], side_score[valid], minlength=size).reshape(-1, max(k, 1))
    win_low, win_high = wilson(points, matches, options.level)
    views, matrix, counts = [], [], []
    for c in shown:
        rows = np.flatnonzero(row_cat == c)
        sub = table.take(rows)
        report, _ = pillar_ratings(sub, thread_pillar, options, prior=prior)
        rated = {p.player_id: p for p in report.players}
        position = {p.player_id: i for i, p in enumerate(report.players)}
        cat_pillars = []
        for p in sorted(order, key=lambda p: (position.get(p, len(position)), p)):
            j = column[p]
            n = int(matches[c, j])
            if n == 0 and p not in rated:
                continue
            r = rated.get(p)
            cat_pillars.append(
                CategoryPillar(
                    pillar_id=p,
                    name=pillar_names.get(p, f"pillar {p}"),
                    score=None if r is None else r.score,
                    ci_low=None if r is None else r.ci_low,
                    ci_high=None if r is None else r.ci_high,
                    rank=None if r is None else r.rank,
                    matches=n,
                    win_rate=float(points[c, j] / n) if n else None,
                    win_low=float(win_low[c, j]) if n else None,
                    win_high=float(win_high[c, j]) if n else None,
                )
            )
        threads = np.unique(np.concatenate([sub.a, sub.b])).size
        views.append(
            CategoryView(
                value=values[c],
                threads=int(threads),
                comparisons=int(per_cat[c]),
                pillars=cat_pillars,
            )
        )
        matrix.append(
            [float(points[c, j] / matches[c, j]) if matches[c, j] else None for j in range(k)]
        )
        counts.append([int(matches[c, j]) for j in range(k)])
    return build_from(
        CategoryReport,
        options,  # level
        key=key,
        categories=views,
        pillars=[CategoryColumn(p, pillar_names.get(p, f"pillar {p}")) for p in order],
        matrix=matrix,
        counts=counts,
        comparisons_left_out=int(len(table) - inside.sum())
        + int(sum(per_cat[c] for c in range(len(values)) if c not in set(shown))),
        categories_left_out=left_out_cats,
    )
