"""Issue #27 items 10-12, the parts a template or a file answers without a browser: a panel
named in full wherever a session's judge is shown, "Beats it?" only with comparisons behind
it, the import page's columns and its example files, the adaptive total explained, and the
leaderboard chart drawn in the table's order."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

from llmjudge.catalog.importing import CSV_COLUMNS, parse_thread_file
from llmjudge.infra.web import templates
from llmjudge.sessions.pages import result_charts
from tests.conftest import REPO

PANEL = {
    "rule": "majority",
    "members": [
        {"label": "judge-one", "model_id": 1, "weight": None},
        {"label": "judge-two", "model_id": 4, "weight": None},
        {"label": "judge-three", "model_id": 5, "weight": None},
    ],
}
SIMULATED = SimpleNamespace(name="judge-one", simulated=True)


def _macro(name: str) -> Any:
    return getattr(templates.env.get_template("sessions/_macros.html").module, name)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", str(html))).strip()


def test_a_panel_is_named_in_full_in_headers_and_lists() -> None:
    judged_by, judges = _macro("judged_by"), _macro("judges")
    line = _text(judged_by(SIMULATED, PANEL))
    assert line.startswith("judged by a panel of 3 (majority): judge-one simulated")
    assert "judge-two" in line and "judge-three" in line
    # A single judge reads as before.
    assert _text(judged_by(SIMULATED, None)) == "judge judge-one simulated"
    assert _text(judges(SIMULATED, {"members": [PANEL["members"][0]]})) == "judge-one simulated"


def _session(**kw: Any) -> SimpleNamespace:
    from datetime import UTC, datetime

    base = dict(
        id=7,
        name="Panel run",
        status="completed",
        completed=3,
        failed=0,
        total=3,
        cost_usd=0.0,
        judge_model=SIMULATED,
        comparison_mode="free_for_all",
        created_at=datetime(2026, 12, 2, tzinfo=UTC),
    )
    return SimpleNamespace(**(base | kw))


def test_the_sessions_list_names_every_panel_member() -> None:
    html = templates.env.get_template("sessions/_rows.html").render(
        sessions=[_session(), _session(id=8, name="Single")], panels={7: PANEL}, limit=200
    )
    row7 = _text(html.split('id="session-7"')[1].split("</tr>")[0])
    row8 = _text(html.split('id="session-8"')[1].split("</tr>")[0])
    assert "panel of 3 (majority): judge-one simulated , judge-two, judge-three" in row7
    assert "panel of" not in row8 and "judge-one" in row8


def _figure(value: float | None, n: int) -> SimpleNamespace:
    return SimpleNamespace(value=value, low=value, high=value, n=n)


def _panel_report(n: int, beats: bool) -> SimpleNamespace:
    value = None if n == 0 else 0.1
    versus = SimpleNamespace(
        label="judge-one",
        n=n,
        beats=beats,
        panel_accuracy=_figure(value, n),
        member_accuracy=_figure(value, n),
        difference=_figure(value, n),
        member_cost_usd=0.0,
    )
    none = _figure(None, 0)
    return SimpleNamespace(
        members=[],
        rule="majority",
        vs_best=versus,
        vs_cheapest=None,
        verdict="No reference labels for these comparisons: the panel cannot be scored.",
        comparisons=3,
        labelled=n,
        panel=SimpleNamespace(accuracy=none, consistency=none, cost_usd=0.0),
        n_eff=SimpleNamespace(value=None, n=0, members=3, explanation=""),
        cascade=None,
        cascade_calibration=None,
    )


def _beats_cell(report: SimpleNamespace) -> str:
    html = templates.env.get_template("sessions/tabs/panel.html").render(
        panel=report, kappa_chart=""
    )
    table = html.split('id="panel-versus"')[1].split("</table>")[0]
    return _text(table.split('class="beats"')[1].split("</td>")[0].split(">", 1)[1])


def test_beats_it_claims_nothing_without_comparisons() -> None:
    assert _beats_cell(_panel_report(0, beats=False)) == "– not enough comparisons"
    assert _beats_cell(_panel_report(40, beats=False)) == "no"
    assert _beats_cell(_panel_report(40, beats=True)) == "yes"


def test_the_panel_form_says_a_panel_needs_two_models() -> None:
    source = (REPO / "templates/sessions/new.html").read_text()
    section = source.split('id="panel-fields"')[1].split("</details>")[0]
    assert "A panel needs at least two judge models." in section
    assert 'href="/settings/providers"' in section  # where to add one, when fewer exist


EXAMPLES = REPO / "static" / "examples"


def test_the_import_page_lists_every_accepted_column_and_offers_examples() -> None:
    html = (REPO / "templates/catalog/import.html").read_text()
    table = html.split('id="import-columns"')[1].split("</table>")[0]
    listed = set(re.findall(r"<td><code>(\w+)</code></td>", table))
    assert listed == CSV_COLUMNS
    for name in ("threads.jsonl", "threads.csv"):
        assert f'href="/static/examples/{name}"' in html
        assert (EXAMPLES / name).is_file()


def test_the_example_files_import_cleanly_with_every_column() -> None:
    for path in (EXAMPLES / "threads.jsonl", EXAMPLES / "threads.csv"):
        out = parse_thread_file(path.name, path.read_bytes(), max_rows=100, max_chars=10_000)
        assert out.errors == [], (path.name, out.errors)
        assert len(out.rows) == 4
        assert all(r.prompt and r.prompt_key and r.title and r.metadata for r in out.rows)
    header = (EXAMPLES / "threads.csv").read_text().splitlines()[0].split(",")
    assert set(header) == CSV_COLUMNS


def test_the_adaptive_total_says_it_grows_each_round() -> None:
    s = SimpleNamespace(
        status="running",
        total=120,
        counts=SimpleNamespace(completed=90, failed=0, running=0, pending=30, cancelled=0),
        worker_count=4,
        cost_usd=0.0,
        judge_model=SIMULATED,
        input_tokens=0,
        output_tokens=0,
        error=None,
        id=3,
    )
    template = templates.env.get_template("sessions/_progress.html")
    common = dict(s=s, done=90, eta=None, elapsed=None, can=lambda *a: False, needs=lambda *a: "")
    adaptive = _text(template.render(**common, adaptive_round=3, adaptive_cap=1770))
    assert "round 3: 120 queued so far, up to 1,770; the total grows each round" in adaptive
    planned = _text(template.render(**common, adaptive_round=None, adaptive_cap=None))
    assert "grows each round" not in planned


def _row(rank: int, bt: float, title: str) -> Any:
    return SimpleNamespace(
        rank=rank,
        bt_score=bt,
        bt_ci_low=bt - 50,
        bt_ci_high=bt + 50,
        thread_title=title,
        thread_external_id=None,
        thread_id=rank * 10,
        pillar=SimpleNamespace(name="p"),
    )


def _bar_labels(chart: str) -> list[str]:
    return re.findall(r'<rect class="bar"[^>]*><title>([^<:]+):', chart)


def test_the_leaderboard_chart_draws_the_tables_rows_in_its_order() -> None:
    # Rank 1 with a wide interval and a lower score than rank 2's: the table's order.
    rows = [_row(1, 1550.0, "wide"), _row(2, 1600.0, "narrow"), _row(3, 1400.0, "last")]
    board = SimpleNamespace(method=SimpleNamespace(base=1500.0, level=0.95, comparisons=30))
    chart = str(result_charts.leaderboard_chart(rows, board, "rank", False))  # type: ignore[arg-type]
    assert _bar_labels(chart) == ["#1 p · wide", "#2 p · narrow", "#3 p · last"]
    assert "First 3 rows of the table (by rank, best first" in chart
    by_score = sorted(rows, key=lambda r: r.bt_score)
    chart = str(result_charts.leaderboard_chart(by_score, board, "bt", False))  # type: ignore[arg-type]
    assert _bar_labels(chart) == ["#3 p · last", "#1 p · wide", "#2 p · narrow"]
    assert "by Bradley-Terry score, ascending" in chart
