"""The pure parts of the personas backend (no database): CSV validation, reply parsing,
placeholders, diffs, CSV-injection guard, bounded concurrency."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.csvsafe import safe_cell
from llmjudge.personas.convergence import decide, deciding_f1, split_metrics
from llmjudge.personas.loop import Stopped, run_bounded
from llmjudge.personas.pairs import parse_pairs_csv
from llmjudge.personas.prompt_versions import prompt_diff
from llmjudge.personas.replies import (
    missing_placeholders,
    parse_engineer_reply,
    parse_judge_reply,
)
from llmjudge.personas.summaries import PersonaSummary, matching
from llmjudge.personas.templates import TEMPLATES

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
cell = text.filter(lambda s: s.strip() != "")


def _csv(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()


@given(st.lists(st.tuples(cell, cell), min_size=1, max_size=20, unique_by=lambda r: r[0]))
def test_csv_round_trip(rows: list[tuple[str, str]]) -> None:
    parsed = parse_pairs_csv(
        _csv([["input", "correct_output"], *map(list, rows)]), max_rows=100, max_chars=10_000
    )
    assert parsed.errors == []
    assert [(r.input, r.correct_output) for r in parsed.rows] == rows


def test_csv_errors_name_line_and_field() -> None:
    data = _csv(
        [
            ["correct_output", "input", "input_b"],
            ["4", "2+2", ""],
            ["", "3+3", ""],
            ["5", "2+2", ""],
            ["9", "x" * 20, ""],
        ]
    )
    parsed = parse_pairs_csv(data, max_rows=100, max_chars=10)
    assert [(e.line, e.field) for e in parsed.errors] == [
        (3, "correct_output"),
        (4, "input"),
        (5, "input"),
    ]
    assert "line 2" in parsed.errors[1].message
    # Same input with a different second input is a different pair.
    ok = _csv([["input", "input_b", "correct_output"], ["a", "b", "1"], ["a", "c", "2"]])
    assert len(parse_pairs_csv(ok, max_rows=100, max_chars=100).rows) == 2
    too_many = _csv([["input", "correct_output"], ["a", "1"], ["b", "2"], ["c", "3"]])
    errors = parse_pairs_csv(too_many, max_rows=2, max_chars=100).errors
    assert errors[0].message == "more than 2 rows"
    assert parse_pairs_csv(b"input,correct_output\n", max_rows=5, max_chars=5).errors[0].field == (
        "file"
    )


@given(text)
def test_neutralised_cells_never_start_a_formula(value: str) -> None:
    out = safe_cell(value)
    assert out[:1] not in ("=", "+", "-", "@", "\t", "\r")
    assert out in (value, "'" + value)


@given(
    st.lists(st.sampled_from("abcde"), max_size=12), st.lists(st.sampled_from("abcde"), max_size=12)
)
def test_diff_opcodes_rebuild_both_sides(a: list[str], b: list[str]) -> None:
    diff = prompt_diff(1, "\n".join(a), 2, "\n".join(b))
    a_lines, b_lines = "\n".join(a).splitlines(), "\n".join(b).splitlines()
    assert [line for op in diff.opcodes for line in op.a_lines] == a_lines
    assert [line for op in diff.opcodes for line in op.b_lines] == b_lines
    assert (diff.unified == "") == (a_lines == b_lines)


def test_placeholders() -> None:
    for template in TEMPLATES.values():
        assert missing_placeholders(template.judge_prompt) == []
    assert missing_placeholders("{input} {{correct_output}} {answer}") == ["correct_output"]
    assert missing_placeholders('{"label": "x"} {input}') == ["correct_output", "answer"]


@pytest.mark.parametrize(
    ("reply", "label", "confidence"),
    [
        ('{"label": "correct", "reasoning": "same"}', "correct", None),
        ('```json\n{"label": "Incorrect", "reasoning": "r"}\n```', "incorrect", None),
        ('Sure! {"note": 1} then {"label": "pass", "confidence": 85}', "correct", 0.85),
        ('{"label": "incorrect", "confidence": 0.2}', "incorrect", 0.2),
        ('{"label": "incorrect", "confidence": 700}', "incorrect", None),
    ],
)
def test_judge_replies(reply: str, label: str, confidence: float | None) -> None:
    verdict = parse_judge_reply(reply)
    assert verdict is not None and verdict.label == label
    assert verdict.confidence == confidence


@pytest.mark.parametrize("reply", ['{"label": "maybe"}', '{"label": "corr', "no json", "[1]"])
def test_unreadable_judge_replies(reply: str) -> None:
    assert parse_judge_reply(reply) is None


def test_engineer_reply() -> None:
    reply = "Here it is:\n" + json.dumps({"prompt": "P {input}", "rationale": "why"})
    assert parse_engineer_reply(reply) == ("P {input}", "why")
    assert parse_engineer_reply('{"prompt": "  "}') is None


def test_held_out_f1_decides_when_present() -> None:
    rows = [
        ("optimisation", "correct", True),
        ("optimisation", "incorrect", True),
        ("holdout", "correct", False),
        ("holdout", "incorrect", True),
    ]
    metrics = split_metrics(rows)
    assert metrics["optimisation"]["f1"] == 1.0 and metrics["holdout"]["f1"] == 0.0
    assert deciding_f1(metrics) == (0.0, "holdout")
    only_opt = split_metrics(rows[:2])
    assert only_opt["holdout"] is None and deciding_f1(only_opt) == (1.0, "optimisation")


async def test_run_bounded_limits_concurrency_and_stops() -> None:
    active = peak = 0
    done: list[int] = []

    async def work(i: int) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        done.append(i)

    stop = asyncio.Event()
    await run_bounded(list(range(20)), work, concurrency=3, stop=stop)
    assert peak == 3 and sorted(done) == list(range(20))

    done.clear()

    async def stopping(i: int) -> None:
        await work(i)
        if i == 4:
            stop.set()

    with pytest.raises(Stopped):
        await run_bounded(list(range(20)), stopping, concurrency=2, stop=stop)
    assert 5 <= len(done) <= 6  # the call in flight at the stop still finishes

    async def failing(i: int) -> None:
        if i == 2:
            raise ValueError("boom")
        await work(i)

    done.clear()
    with pytest.raises(ValueError, match="boom"):
        await run_bounded(list(range(20)), failing, concurrency=2, stop=asyncio.Event())
    assert len(done) < 20


@pytest.mark.parametrize(
    ("f1", "number", "outcome"),
    [(0.8, 1, "converged"), (0.79, 1, None), (0.79, 3, "incomplete"), (0.9, 3, "converged")],
)
def test_decide(f1: float, number: int, outcome: str | None) -> None:
    metrics = {"optimisation": {"f1": 1.0, "n": 5}, "holdout": {"f1": f1, "n": 2}}
    got = decide(metrics, target_f1=0.8, number=number, max_iterations=3)
    assert got[:3] == (f1, "holdout", outcome)
    assert (got[3] is None) == (outcome is None)


def _summary(i: int, name: str, status: str) -> PersonaSummary:
    return PersonaSummary(
        id=i,
        name=name,
        description="",
        status=status,
        target_f1=0.8,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        iterations=0,
        scored_iteration=None,
        prompt_version=1,
        optimisation=None,
        holdout=None,
        cost_usd=0.0,
    )


statuses = st.sampled_from(["draft", "training", "paused", "trained", "incomplete"])


@given(
    st.lists(st.tuples(st.text(max_size=12), statuses), max_size=15),
    st.one_of(st.none(), statuses),
    st.one_of(st.none(), st.text(max_size=4)),
)
def test_list_filter_keeps_exactly_the_matching_rows_in_order(
    rows: list[tuple[str, str]], status: str | None, q: str | None
) -> None:
    summaries = [_summary(i, name, s) for i, (name, s) in enumerate(rows)]
    got = matching(summaries, status=status, q=q)
    needle = (q or "").strip().casefold()
    expected = [
        r.id
        for r in summaries
        if (status is None or r.status == status) and needle in r.name.casefold()
    ]
    assert [r.id for r in got] == expected
    assert matching(summaries) == summaries  # no filter: everyone


def test_list_filter_ignores_case_and_outer_spaces() -> None:
    rows = [_summary(1, "Draft <persona>", "draft"), _summary(2, "Trained one", "trained")]
    assert [r.id for r in matching(rows, q="  dRAFT ")] == [1]
    assert [r.id for r in matching(rows, status="trained", q="ONE")] == [2]
    assert matching(rows, status="draft", q="one") == []
