"""The results tab "Scores" of a grading session (mode single): the figures of
``/api/sessions/{id}/scores`` with a chart of mean grades and one of their distribution."""

from __future__ import annotations

from typing import Any

from llmjudge import analysis
from llmjudge.core import charts
from llmjudge.infra.db.engine import Sessionmaker

__all__ = ["scores_tab"]


async def scores_tab(
    sessionmaker: Sessionmaker, session: analysis.AnalysisSession
) -> dict[str, Any]:
    async with sessionmaker() as db:
        report = await analysis.scores_report(db=db, session=session)
    shown = report.pillars
    means = charts.bar_chart(
        [p.pillar_name for p in shown],
        [p.mean for p in shown],
        errors=[
            (p.mean if p.low is None else p.low, p.mean if p.high is None else p.high)
            for p in shown
        ],
        title=f"Mean grade per pillar (scale {report.scale_min:g} to {report.scale_max:g})",
        value_format="{:.2f}",
    )
    names = {p.pillar_id: p.pillar_name for p in report.pillars}
    bins = report.distribution
    # whole-point bins name their point (low == high): edges half a point either side
    half = 0.5 if bins and bins[0].low == bins[0].high else 0.0
    edges = [b.low - half for b in bins] + ([bins[-1].high + half] if bins else [])
    spread = charts.histogram_chart(
        {name: [b.counts.get(pid, 0) for b in bins] for pid, name in names.items()},
        edges,
        title="Grades per pillar",
        x_label="grade",
        y_label="grades",
    )
    return {"scores": report, "scores_chart": means, "scores_histogram": spread}
