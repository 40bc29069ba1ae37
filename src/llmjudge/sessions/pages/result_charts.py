"""The results page's charts: Bradley-Terry bars with their intervals (pillars and the
leaderboard's rows, in the table's order), the reliability diagram and a panel of
graders' correlations, drawn by
``core.charts``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from llmjudge.analysis import LeaderboardRow, ThreadLeaderboardOut
from llmjudge.core import charts
from llmjudge.references import StatedConfidenceOut
from llmjudge.sessions.pages.formatting import SortKey, thread_name

CHART_TOP = 20  # threads in the leaderboard chart


def bt_chart(
    labels: Sequence[str],
    scores: Sequence[float],
    intervals: Sequence[tuple[float | None, float | None]],
    title: str,
    width: int = 640,
    base: float = 1500.0,
) -> Markup:
    """Bradley-Terry scores as bars around the anchor (`base`), with their intervals."""
    errors = [(lo - base, hi - base) for lo, hi in intervals if lo is not None and hi is not None]
    return charts.bar_chart(
        list(labels),
        [v - base for v in scores],
        title=title,
        value_format="{:+.0f}",
        errors=errors if len(errors) == len(scores) else None,
        width=width,
    )


def thread_label(title: str | None, external_id: str | None, thread_id: int, pillar: str) -> str:
    """Pillar first: bar labels are cut short, and threads of different pillars often share
    a title (the same prompt answered by several models)."""
    return f"{pillar} · {thread_name(title, external_id, thread_id)}"


def interval_words(level: float, has: bool) -> str:
    return f"{level:.0%} interval" if has else "no interval"


# What the table's order is called in the chart's title.
_SORT_WORDS: dict[str, str] = {
    "rank": "rank",
    "thread": "thread",
    "pillar": "pillar",
    "bt": "Bradley-Terry score",
    "elo": "Elo",
    "record": "record",
    "win_rate": "win rate",
    "confidence": "average confidence",
    "score": "average score",
}


def leaderboard_chart(
    rows: Sequence[LeaderboardRow], board: ThreadLeaderboardOut, sort: SortKey, desc: bool
) -> Markup:
    """The table's first rows, in the table's order, each labelled with its rank. Bars drawn
    in rank order alone looked unsorted: a thread with a wide interval can hold rank 1 with a
    lower score than rank 2's, and a table sorted by another column disagreed with the chart."""
    top, method = rows[:CHART_TOP], board.method
    has = any(e.bt_ci_low is not None for e in top)
    if sort == "rank":
        order = "rank, " + ("worst first" if desc else "best first") + "; within a rank by score"
    else:
        order = _SORT_WORDS[sort] + (", descending" if desc else ", ascending")
    return bt_chart(
        [
            f"#{e.rank} "
            + thread_label(e.thread_title, e.thread_external_id, e.thread_id, e.pillar.name)
            for e in top
        ],
        [e.bt_score for e in top],
        [(e.bt_ci_low, e.bt_ci_high) for e in top],
        f"First {len(top)} rows of the table (by {order}): Bradley-Terry score in Elo"
        f" points − {method.base:.0f} ({interval_words(method.level, has)}),"
        f" {method.comparisons:,} verdicts",
        width=880,
        base=method.base,
    )


def reliability_chart(cal: StatedConfidenceOut, whose: str = "stated") -> Markup:
    """Observed share of A against the stated (or the judge's own) P(A), per bin, beside
    the diagonal a calibrated judge would follow (empty bins leave gaps)."""
    return charts.line_chart(
        [round((b.low + b.high) / 2, 2) for b in cal.bins],
        {
            "observed share of A": [b.observed.value for b in cal.bins],
            f"calibrated (= {whose})": [b.mean_probability for b in cal.bins],
        },
        title="Reliability of the stated confidence"
        if whose == "stated"
        else "Reliability of the judge's probability",
        x_label=f"{whose} P(A is better), bin centre",
        y_label="share",
    )


def graders_chart(report: Mapping[str, Any], labels: Sequence[str]) -> Markup:
    """Spearman's correlation between every two graders, with its count per cell."""
    m = len(labels)
    rho: list[list[float | None]] = [[None] * m for _ in range(m)]
    n = [[0] * m for _ in range(m)]
    for p in report["pairs"]:
        i, j, a = p["first"], p["second"], p["agreement"]
        rho[i][j] = rho[j][i] = a["spearman"]["value"]
        n[i][j] = n[j][i] = a["n"]
    return charts.heatmap_chart(
        labels,
        labels,
        rho,
        n,
        title="Spearman correlation between members' grades",
        legend_label="Spearman (1 = same order, 0 = unrelated)",
        value_range=(-1.0, 1.0),
        value_format="{:.2f}",
        missing_label="undefined",
    )
