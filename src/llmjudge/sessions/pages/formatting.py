"""Formatting for the tournament templates: durations and the ETA, percentages, numbers,
intervals, Elo points, Likert dots, thread names, and the leaderboard's column sorting.
Pure: no I/O. Importing it registers the template filters and globals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from llmjudge.analysis import LeaderboardRow
from llmjudge.core.analysis.position import HEADLINES
from llmjudge.core.judging.prompts import criterion_label
from llmjudge.core.ratings.bradley_terry import DEFAULT_PRIOR
from llmjudge.core.ratings.elo import ELO_BASE, ELO_SCALE
from llmjudge.infra.web import templates
from llmjudge.sessions.reads import thread_name

__all__ = [
    "SORT_FIRST_DESC",
    "SORT_KEYS",
    "SortKey",
    "avg_score",
    "duration_text",
    "elo_points",
    "eta_seconds",
    "interval",
    "likert_dots",
    "number",
    "percent",
    "points_meaning",
    "prior_text",
    "sort_rows",
    "thread_name",
]


def eta_seconds(done: int, total: int, started_at: datetime | None, now: datetime) -> float | None:
    """Seconds left at the rate so far; None before the first result or when finished."""
    if started_at is None or done <= 0 or done >= total:
        return None
    elapsed = (now - started_at).total_seconds()
    return elapsed / done * (total - done) if elapsed > 0 else None


def duration_text(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


SortKey = Literal[
    "rank", "thread", "pillar", "bt", "elo", "record", "win_rate", "confidence", "score"
]
SORT_KEYS: tuple[SortKey, ...] = (
    "rank",
    "thread",
    "pillar",
    "bt",
    "elo",
    "record",
    "win_rate",
    "confidence",
    "score",
)
# Direction a header sorts in on the first click: text ascending, numbers best first.
SORT_FIRST_DESC = frozenset({"bt", "elo", "record", "win_rate", "confidence", "score"})


def avg_score(row: LeaderboardRow) -> float | None:
    """The mean of a thread's average Likert scores over the criteria it was scored on."""
    present = [v for v in row.avg_likert_scores.values() if v is not None and math.isfinite(v)]
    return sum(present) / len(present) if present else None


def sort_rows(rows: Sequence[LeaderboardRow], key: SortKey, desc: bool) -> list[LeaderboardRow]:
    """Rows ordered by a column; missing values (no Elo, no scores) always sort last."""
    getters: dict[SortKey, Callable[[LeaderboardRow], Any]] = {
        "rank": lambda r: (r.rank, -r.bt_score),
        "thread": lambda r: (r.thread_title or r.thread_external_id or "").lower(),
        "pillar": lambda r: r.pillar.name.lower(),
        "bt": lambda r: r.bt_score,
        "elo": lambda r: r.elo_score,
        "record": lambda r: (r.wins, -r.losses),
        "win_rate": lambda r: r.win_rate,
        "confidence": lambda r: r.avg_confidence,
        "score": avg_score,
    }
    get = getters[key]
    present = [r for r in rows if get(r) is not None]
    missing = [r for r in rows if get(r) is None]
    return sorted(present, key=get, reverse=desc) + missing


def likert_dots(score: float | None, scale: int = 5) -> str:
    """●●●○○ for 3 of 5; an empty string without a score."""
    if score is None or not math.isfinite(score):
        return ""
    filled = max(0, min(scale, round(score)))
    return "●" * filled + "○" * (scale - filled)


def percent(value: float | None, digits: int = 0) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value * 100:.{digits}f}%"


def number(value: float | None, fmt: str = "{:.0f}") -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return fmt.format(value)


def interval(low: float | None, high: float | None, fmt: str = "{:.0f}") -> str:
    """An interval as "-513 to -272": a dash between two numbers that may be negative
    read as "-513--272" (issue 27). "–" when either end is missing."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return "–"
    return f"{fmt.format(low)} to {fmt.format(high)}"


def elo_points(theta: float, base: float = ELO_BASE) -> float:
    """A centred log-strength (natural logit) in Elo points: the leaderboard's scale, so a
    page shows one scale (issue 27)."""
    return base + ELO_SCALE * theta


def points_meaning(points: float = 100.0) -> str:
    """What a gap of `points` Elo points means, computed from the scale."""
    rate = 1.0 / (1.0 + math.exp(-points / ELO_SCALE))
    return f"{points:.0f} points = {rate:.0%} expected win rate"


def prior_text(what: str = "threads", prior: float = DEFAULT_PRIOR) -> str:
    """The Bradley-Terry prior in the page's words (bradley_terry's docstring says why):
    each drawn game against the mean adds 1/4 to the prior's precision."""
    return (
        f"a weak prior worth {4 * prior:g} drawn games against an average one (normal, with a"
        f" standard deviation of {ELO_SCALE / math.sqrt(prior):.0f} points) keeps unbeaten"
        f" {what} finite"
    )


templates.env.filters["likert_dots"] = likert_dots
templates.env.filters["percent"] = percent
templates.env.filters["number"] = number
templates.env.filters["duration"] = duration_text
templates.env.filters["elo_points"] = elo_points
templates.env.globals["interval"] = interval
templates.env.globals["points_meaning"] = points_meaning
templates.env.globals["prior_text"] = prior_text
templates.env.globals["criterion_label"] = criterion_label
templates.env.globals["consistency_headline"] = HEADLINES
