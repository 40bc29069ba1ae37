"""The Panel tab of a panel of graders, rendered from the report's schema: escaped labels,
counts and intervals beside every figure, a dash for an undefined one, and an empty state
before any item has a panel grade."""

from __future__ import annotations

from typing import Any

from llmjudge.infra.web import templates
from llmjudge.sessions.panels.schemas import GradersPanelReportOut


def _figure(value: float | None, n: int) -> dict[str, Any]:
    if value is None:
        return {"value": None, "n": n, "low": None, "high": None}
    return {"value": value, "n": n, "low": value - 0.1, "high": value + 0.1}


def _agreement(n: int, qwk: float | None) -> dict[str, Any]:
    return {
        "n": n,
        "spearman": _figure(0.81 if n else None, n),
        "pearson": _figure(0.79 if n else None, n),
        "mean_abs_difference": _figure(0.6 if n else None, n),
        "qwk": _figure(qwk, n),
    }


def _report(items: int) -> GradersPanelReportOut:
    mean = {"n": items, "mean": 6.2, "sd": 1.0, "low": 5.9, "high": 6.5}
    member = {
        "model_id": 1,
        "grades": items,
        "missing": 0,
        "mean_grade": mean
        if items
        else {"n": 0, "mean": None, "sd": None, "low": None, "high": None},
        "cost_usd": 0.0,
        "mean_latency_s": None,
    }
    return GradersPanelReportOut.model_validate(
        {
            "kind": "grades",
            "session_id": 3,
            "rule": "median",
            "scale_min": 1,
            "scale_max": 10,
            "comparisons": items,
            "items": items,
            "members": [
                member
                | {
                    "index": 0,
                    "label": "<b>judge</b>",
                    "items": items,
                    "agreement_with_panel": _agreement(items, 0.7 if items else None),
                    "offset": {"n": items, "mean": 0.45, "sd": 0.5, "low": 0.2, "high": 0.7}
                    if items
                    else None,
                },
                member
                | {
                    "index": 1,
                    "label": "other",
                    "items": items,
                    "agreement_with_panel": _agreement(items, None),
                    "offset": None,
                },
            ],
            "pairs": [
                {
                    "first": 0,
                    "second": 1,
                    "first_label": "<b>judge</b>",
                    "second_label": "other",
                    "agreement": _agreement(items, None),
                }
            ],
            "alpha": _figure(0.64 if items else None, items),
            "panel": {"mean_grade": mean, "cost_usd": 0.0},
            "deviation": {
                "member": None,
                "label": None,
                "offset": None,
                "statement": "Not enough evidence <here>.",
                "min_items": 20,
            },
        }
    )


def _render(report: GradersPanelReportOut) -> str:
    return templates.env.get_template("sessions/tabs/panel.html").render(
        panel=report, kappa_chart=""
    )


def test_the_tab_shows_each_figure_with_its_count_and_interval_escaped() -> None:
    html = _render(_report(40))
    assert "&lt;b&gt;judge&lt;/b&gt;" in html and "<b>judge</b>" not in html
    assert "Not enough evidence &lt;here&gt;." in html
    assert "0.640 <span" in html and "[0.540 to 0.740] n=40" in html  # alpha
    assert "+0.45" in html and "[+0.20 to +0.70] n=40" in html  # offset
    assert "0.81" in html and 'id="graders-pairs"' in html
    members = html.split('id="graders-members"')[1].split("</table>")[0]
    assert members.count("<tr>") == 3  # the header and two members
    assert '<span class="muted">–</span> <span class="muted small">n=40</span>' in members


def test_before_any_panel_grade_the_tab_says_so() -> None:
    html = _render(_report(0))
    assert 'id="graders-empty"' in html and 'id="graders-members"' not in html
