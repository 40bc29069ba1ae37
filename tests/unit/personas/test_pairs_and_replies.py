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

from llmjudge.core.personas.convergence import NEEDS_MORE, ConvergenceRule, decide, split_metrics
from llmjudge.core.personas.replies import (
    MAX_JSON_ATTEMPTS,
    addressed_cases,
    missing_placeholders,
    parse_engineer_rewrite,
    parse_judge_reply,
)
from llmjudge.core.text.csvsafe import safe_cell
from llmjudge.personas.loop import Stopped, run_bounded
from llmjudge.personas.pairs import parse_pairs_csv
from llmjudge.personas.prompt_versions import prompt_diff
from llmjudge.personas.starters import TEMPLATES
from llmjudge.personas.summaries import PersonaSummary, matching

# NUL included: PostgreSQL text cannot hold it, so the upload refuses it, naming the line and
# field (one validation path with the thread import).
text = st.text(st.characters(blacklist_categories=("Cs",)))
cell = text.filter(lambda s: s.replace("\x00", "").strip() != "")


def _csv(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()


@given(
    st.lists(
        st.tuples(cell, cell),
        min_size=1,
        max_size=20,
        unique_by=lambda r: r[0].replace("\x00", ""),
    )
)
def test_csv_round_trip(rows: list[tuple[str, str]]) -> None:
    parsed = parse_pairs_csv(
        _csv([["input", "correct_output"], *map(list, rows)]), max_rows=100, max_chars=10_000
    )
    # One error per refused row, naming a field that holds NUL (line numbers are physical
    # lines, which quoted newlines shift, so rows are counted rather than matched by line).
    nul_rows = [row for row in rows if any("\x00" in value for value in row)]
    if nul_rows:
        assert len({e.line for e in parsed.errors}) == len(nul_rows)
        assert all("NUL" in e.message for e in parsed.errors)
        assert {e.field for e in parsed.errors} <= {"input", "correct_output"}
        return
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
        (4, "correct_output"),  # one input, one correct answer
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


def test_split_metrics_cover_three_splits_with_intervals() -> None:
    rows = [
        ("optimisation", "correct", True),
        ("optimisation", "incorrect", True),
        ("selection", "correct", False),
        ("selection", "incorrect", True),
        ("calibration", "correct", True),
    ]
    metrics = split_metrics(rows, rounds=200)
    assert metrics["optimisation"]["f1"] == 1.0 and metrics["selection"]["f1"] == 0.0
    assert metrics["calibration"]["n"] == 1
    for side in ("optimisation", "selection", "calibration"):
        for key in ("precision", "recall", "f1", "kappa", "accuracy"):
            ci = metrics[side]["intervals"][key]
            assert ci["low"] <= metrics[side][key] <= ci["high"]
            assert ci["high"] > ci["low"]  # never zero-width on so few pairs
    assert metrics["optimisation"]["intervals"]["recall"]["n"] == 1  # one human-correct pair
    assert split_metrics(rows[:2], rounds=50)["selection"] is None


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


def _selection(right_pos: int, wrong_pos: int, right_neg: int, wrong_neg: int) -> list:
    """(human correct, judge correct, bulk) rows."""
    return (
        [(True, True, False)] * right_pos
        + [(True, False, False)] * wrong_pos
        + [(False, False, False)] * right_neg
        + [(False, True, False)] * wrong_neg
    )


@pytest.mark.parametrize(
    ("rows", "number", "outcome"),
    [
        (_selection(30, 0, 30, 0), 1, "converged"),  # F1 lower bound clears 0.8
        (_selection(5, 0, 2, 0), 1, None),  # perfect but too few: go on, never converge
        (_selection(5, 0, 2, 0), 3, "incomplete"),
        (_selection(12, 4, 12, 4), 1, None),  # enough pairs, F1 0.75
        (_selection(12, 4, 12, 4), 3, "incomplete"),
    ],
)
def test_decide(rows: list, number: int, outcome: str | None) -> None:
    status, got, note = decide(rows, rule=ConvergenceRule(), number=number, max_iterations=3)
    assert got == outcome
    assert (note is None) == (outcome is None)
    if len(rows) < 20:
        assert status.status == NEEDS_MORE and "Needs more labelled pairs" in status.message
        assert status.more_negatives == 8 and status.more_positives == 5


def test_point_basis_converges_where_the_lower_bound_does_not() -> None:
    rows = _selection(10, 1, 10, 1)  # F1 0.909 on 22 pairs
    lower = decide(rows, rule=ConvergenceRule(target_f1=0.85), number=1, max_iterations=3)
    point = decide(
        rows, rule=ConvergenceRule(target_f1=0.85, basis="point"), number=1, max_iterations=3
    )
    assert lower[1] is None and point[1] == "converged"


def test_judge_reply_takes_the_last_object() -> None:
    echoed = (
        'The prompt says reply like {"label": "correct", "reasoning": "..."}. '
        'My answer: {"label": "incorrect", "reasoning": "wrong number", "confidence": 0.9}'
    )
    verdict = parse_judge_reply(echoed)
    assert verdict is not None and verdict.label == "incorrect" and verdict.confidence == 0.9
    nested = '{"label": "correct", "reasoning": "r", "extra": {"label": "incorrect"}}'
    assert parse_judge_reply(nested).label == "correct"  # type: ignore[union-attr]
    assert parse_judge_reply('{"label": "cor\x00rect", "reasoning": ""}') is not None


def test_json_attempts_are_capped() -> None:
    # Many unreadable braces before the real object: parsing stops after the cap.
    hostile = "{" * (MAX_JSON_ATTEMPTS + 10) + '{"label": "correct", "reasoning": "r"}'
    assert parse_judge_reply(hostile) is None
    short = "{" * 5 + ' {"label": "correct", "reasoning": "r"}'
    assert parse_judge_reply(short) is not None


def test_engineer_rewrite_says_what_it_addressed() -> None:
    reply = json.dumps({"prompt": "P {input}", "rationale": "why", "addressed": [2, 2, 9, 1]})
    parsed = parse_engineer_rewrite(reply, cases=3)
    assert parsed is not None and parsed.addressed == (2, 1)
    failures = [{"pair_id": 10, "notes": None}, {"pair_id": 11, "notes": "units matter"}]
    assert addressed_cases(parsed.addressed, failures + [{"pair_id": 12}]) == [
        {"case": 2, "pair_id": 11, "note": "units matter"},
        {"case": 1, "pair_id": 10, "note": None},
    ]


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
        selection=None,
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


def test_csv_answers_and_several_annotators() -> None:
    data = _csv(
        [
            ["input", "correct_output", "answer", "human_label", "annotator"],
            ["q1", "4", "4", "correct", "ann"],
            ["q1", "4", "4", "incorrect", "bob"],  # another annotator of the same pair
            ["q2", "5", "6", "0", ""],  # 0/1 accepted; no annotator: "uploaded"
            ["q3", "7", "", "", ""],  # no answer, no label: the task model answers
        ]
    )
    parsed = parse_pairs_csv(data, max_rows=10, max_chars=100)
    assert parsed.errors == []
    assert [(r.input, r.answer, r.labels) for r in parsed.rows] == [
        ("q1", "4", {"ann": "correct", "bob": "incorrect"}),
        ("q2", "6", {"uploaded": "incorrect"}),
        ("q3", None, {}),
    ]
    bad = _csv(
        [
            ["input", "correct_output", "answer", "human_label", "annotator"],
            ["q1", "4", "4", "maybe", "ann"],  # not a label
            ["q2", "4", "", "correct", "ann"],  # a label needs its answer
            ["q3", "4", "4", "correct", "ann"],
            ["q3", "4", "4", "incorrect", "ann"],  # the same annotator twice
            ["q3", "5", "5", "correct", "bob"],  # another truth for the same input
        ]
    )
    errors = parse_pairs_csv(bad, max_rows=10, max_chars=100).errors
    assert [(e.line, e.field) for e in errors] == [
        (2, "human_label"),
        (3, "answer"),
        (5, "input"),
        (6, "correct_output"),
    ]
    assert errors[2].message == "duplicate of line 4: the same input and answer"


def test_csv_several_answers_to_one_input_are_several_pairs() -> None:
    # 3 systems x 40 questions, as a calibration set holds them (#27 item 6)
    rows = [["input", "correct_output", "answer", "system", "human_label"]]
    rows += [
        [f"q{q}", f"ref {q}", f"{system} says {q % 4}", system, "correct" if q % 2 else "0"]
        for q in range(40)
        for system in ("alpha", "beta", "gamma")
    ]
    parsed = parse_pairs_csv(_csv(rows), max_rows=1000, max_chars=100)
    assert parsed.errors == []
    assert len(parsed.rows) == 120
    assert [(r.input, r.system) for r in parsed.rows[:3]] == [
        ("q0", "alpha"),
        ("q0", "beta"),
        ("q0", "gamma"),
    ]
    # Without a system column, the answer's text tells the pairs apart.
    plain = _csv([["input", "correct_output", "answer"], ["q", "4", "4"], ["q", "4", "5"]])
    assert [r.answer for r in parse_pairs_csv(plain, max_rows=10, max_chars=100).rows] == [
        "4",
        "5",
    ]


def test_csv_exact_duplicates_name_both_lines() -> None:
    data = _csv(
        [
            ["input", "correct_output", "answer", "system"],
            ["q", "4", "4", "alpha"],
            ["q", "4", "4", "beta"],  # two systems may give the same answer
            ["q", "4", "5", ""],
            ["q", "4", "5", ""],  # the same input and answer again
            ["q", "4", "6", "alpha"],  # alpha answers q twice
            ["q", "4", "", "gamma"],  # a system without its answer
            ["r", "1", "", ""],
            ["r", "1", "", ""],  # the task model's answer, asked for twice
        ]
    )
    errors = parse_pairs_csv(data, max_rows=10, max_chars=100).errors
    assert [(e.line, e.field, e.message) for e in errors] == [
        (5, "input", "duplicate of line 4: the same input and answer"),
        (6, "answer", "system 'alpha' answers this input on line 2 with another answer"),
        (7, "answer", "a system names whose answer the row holds: give the answer too"),
        (9, "input", "duplicate of line 8: the same input and answer"),
    ]


reply_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40).filter(
    lambda t: "{" not in t and "}" not in t
)


@given(reply_text, reply_text, st.sampled_from(["correct", "incorrect"]), st.floats(0, 1))
def test_the_last_json_object_is_the_verdict(
    before: str, between: str, label: str, confidence: float
) -> None:
    example = '{"label": "correct", "reasoning": "...", "confidence": 0.5}'
    verdict = {"label": label, "reasoning": "r", "confidence": confidence}
    parsed = parse_judge_reply(f"{before}{example}{between}{json.dumps(verdict)}")
    assert parsed is not None and parsed.label == label
    assert parsed.confidence == pytest.approx(confidence)
