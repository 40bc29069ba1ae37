"""Offline panels: matching several judges' lines into comparisons (sessions.importing),
and the panel options of a new session (sessions.schemas.PanelIn)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from llmjudge.sessions.imports.parsing import (
    KnownThread,
    ParsedJudgment,
    group_panel,
    panel_judges,
    resolve_judgments,
)
from llmjudge.sessions.schemas import PanelIn

THREADS = {i: KnownThread(id=i, pillar_id=i % 2) for i in range(1, 6)}


def _row(line: int, a: int, b: int, judge: str | None, winner: str | None = "A") -> ParsedJudgment:
    fields: dict[str, Any] = {
        "winner": winner,
        "parse_error": None if winner else "unreadable",
        "raw_response": None,
        "reasoning": None,
        "confidence": None,
        "scores_a": {},
        "scores_b": {},
        "repetition": 0,
        "swap_label": None,
        "group": None,
        "judge": judge,
    }
    return ParsedJudgment(line=line, thread_a=a, thread_b=b, **fields)


def _group(rows: list[ParsedJudgment]):  # type: ignore[no-untyped-def]
    judges, errors = panel_judges(rows)
    assert errors == []
    resolved = {}
    for j in judges:
        res, errs = resolve_judgments([r for r in rows if r.judge == j], THREADS)
        assert errs == []
        resolved[j] = res
    return group_panel(judges, resolved)


def test_lines_of_several_judges_become_one_comparison_each() -> None:
    rows = [
        _row(1, 1, 2, "x"),
        _row(2, 2, 1, "x", "B"),
        _row(3, 2, 1, "y", "A"),  # y judged the swap first: same comparisons, any order
        _row(4, 1, 2, "y", "B"),
        _row(5, 3, 4, "y"),  # only y judged (3, 4)
        _row(6, 1, 2, "x", None),  # x's second (1, 2): a repetition of the pair, unreadable
    ]
    panel, errors = _group(rows)
    assert errors == [] and panel.judges == ["x", "y"]
    pairs = [(c.thread_a.id, c.thread_b.id) for c in panel.comparisons]
    assert pairs == [(1, 2), (2, 1), (1, 2), (3, 4)]
    lines = [[None if j is None else j.line for j in row] for row in panel.votes]
    assert lines == [[1, 4], [2, 3], [6, None], [None, 5]]
    # Swap groups are made over the comparisons, not per judge: (1,2)/(2,1) pair up.
    assert [(c.swap_group, c.is_swap) for c in panel.comparisons] == [
        (0, False),
        (0, True),
        (1, False),
        (2, False),
    ]


def test_a_file_names_the_judge_on_every_line_or_none() -> None:
    judges, errors = panel_judges([_row(1, 1, 2, "x"), _row(2, 2, 1, None)])
    assert judges == ["x"] and [(e.line, e.field) for e in errors] == [(2, "judge")]
    assert panel_judges([_row(1, 1, 2, None)]) == ([], [])


def test_panel_options_are_validated() -> None:
    two = [{"model_id": 1}, {"model_id": 2}]
    assert PanelIn.model_validate({"members": two}).rule == "majority"
    with pytest.raises(ValidationError, match="at least 2"):
        PanelIn.model_validate({"members": two[:1]})
    with pytest.raises(ValidationError, match="weight on every member"):
        PanelIn.model_validate({"members": two, "rule": "weighted"})
    ok = PanelIn.model_validate(
        {
            "members": [{"model_id": 1, "weight": 2}, {"model_id": 2, "weight": 1}],
            "rule": "weighted",
        }
    )
    assert [m.weight for m in ok.members] == [2, 1]
    with pytest.raises(ValidationError, match="calibration_session_id"):
        PanelIn.model_validate({"members": two, "rule": "calibrated"})
    cascade = PanelIn.model_validate({"members": two, "rule": "cascade"})
    assert cascade.cascade is not None and cascade.cascade.threshold == 0.8
    with pytest.raises(ValidationError, match="summing to 1"):
        PanelIn.model_validate(
            {"members": two, "rule": "cascade", "cascade": {"expected_stop_share": [0.5, 0.4]}}
        )


def test_the_form_makes_a_panel_of_two_or_more_ticked_models() -> None:
    from llmjudge.sessions.pages.forms import session_form

    base = {"session_name": ["t"], "pillar_ids": ["1"], "judge_model_id": ["9"]}
    got = session_form(base | {"panel_model_ids": ["3", "4"], "panel_rule": ["cascade"]})
    assert got["panel"] == {"members": [{"model_id": "3"}, {"model_id": "4"}], "rule": "cascade"}
    assert "judge_model_id" not in got
    assert SessionIn_ok(got)
    one = session_form(base | {"panel_model_ids": ["3"]})
    assert "panel" not in one and one["judge_model_id"] == "3"
    assert "panel" not in session_form(base)


def SessionIn_ok(fields: dict[str, Any]) -> bool:  # noqa: N802
    from llmjudge.sessions.schemas import SessionIn

    s = SessionIn.model_validate(fields)
    return s.panel is not None and [m.model_id for m in s.panel.members] == [3, 4]
