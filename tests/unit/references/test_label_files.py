"""Reading reference label files (no database): both ways of naming threads, CSV and JSONL,
and every row error located by line and field."""

from __future__ import annotations

import json

from llmjudge.references.service import LabelRow, check_labels, parse_reference_file


def parse(name: str, body: str):
    return parse_reference_file(name, body.encode(), max_rows=100, max_chars=10_000)


def test_jsonl_rows_by_id_and_by_pillar() -> None:
    rows = [
        {"thread_a": 1, "thread_b": 2, "label": " tie ", "both_bad": True, "source": "Human"},
        {"pillar_a": "p", "external_id_a": 7, "pillar_b": "q", "external_id_b": "7", "label": "b"},
    ]
    out = parse("l.jsonl", "\n".join(json.dumps(r) for r in rows))
    assert out.errors == []
    first, second = out.rows
    assert (first.label, first.both_bad, first.source) == ("TIE", True, "human")
    assert (second.label, second.source, second.external_id_a) == ("B", "gold", "7")
    assert out.lines == [1, 2]


def test_csv_rows_and_header() -> None:
    out = parse("l.csv", "thread_a,thread_b,label,both_bad,note\n1,2,A,,hi\n3,x,B,no,\n")
    assert [(e.line, e.field) for e in out.errors] == [(3, "thread_b")]
    assert out.rows[0].note == "hi" and out.rows[0].both_bad is False
    header = parse("l.csv", "thread_a,thread_b,winner\n1,2,A\n")
    assert [(e.line, e.field) for e in header.errors] == [(1, "header")]
    assert "missing column(s): label" in header.errors[0].message


def test_row_errors() -> None:
    rows = [
        {"thread_a": 1, "thread_b": 2, "label": "C"},
        {"thread_a": 1, "label": "A"},
        {"thread_a": 1, "pillar_a": "p", "external_id_a": "x", "thread_b": 2, "label": "A"},
        {"thread_a": 1, "thread_b": 2, "label": "A", "both_bad": True},
        {"thread_a": 1, "thread_b": 2, "label": "A", "winner": "A"},
    ]
    out = parse("l.jsonl", "\n".join(json.dumps(r) for r in rows))
    found = {(e.line, e.field): e.message for e in out.errors}
    assert set(found) == {(1, "label"), (2, "row"), (3, "row"), (4, "row"), (5, "winner")}
    assert found[1, "label"] == "unknown label 'C': use A, B or TIE"
    assert "not both" in found[3, "row"] and "must be TIE" in found[4, "row"]
    assert out.rows == []


def test_files_refused_whole() -> None:
    assert parse("l.xlsx", "x").errors[0].field == "file"
    assert parse("l.jsonl", "\n\n").errors[0].message == "the file has no rows"


def test_check_labels_self_pairs_and_repeats() -> None:
    rows = [
        LabelRow(line=1, thread_a=5, thread_b=5, label="A"),
        LabelRow(line=2, thread_a=1, thread_b=2, label="A", annotator="ann"),
        LabelRow(line=3, thread_a=2, thread_b=1, label="B", annotator="ann"),  # same pair
        LabelRow(line=4, thread_a=2, thread_b=1, label="B", annotator="bob"),
    ]
    errors = check_labels(rows)
    assert [(e.line, e.field) for e in errors] == [(1, "thread_b"), (3, "label")]
    assert "compared with itself" in errors[0].message and "line 2" in errors[1].message
