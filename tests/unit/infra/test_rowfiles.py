"""Hostile uploads: every one is a per-line error naming the field, never a 500 or a
silently stored row; and a raw U+2028 inside a JSON string is accepted."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from llmjudge.catalog.importing import MAX_METADATA_CHARS, parse_thread_file
from llmjudge.catalog.schemas import PillarIn, PillarPatch
from llmjudge.infra.rowfiles import (
    MAX_ERRORS,
    MAX_JSON_DEPTH,
    RowError,
    csv_records,
    jsonl_objects,
    read_upload,
    rejection,
    unstorable_value,
)
from llmjudge.personas.pairs import parse_pairs_csv


def _jsonl(*lines: str) -> bytes:
    return "\n".join(lines).encode("utf-8", "surrogatepass")


def _parse(name: str, data: bytes):
    return parse_thread_file(name, data, max_rows=100, max_chars=1_000_000)


def _one_error(parsed) -> tuple[int, str, str]:
    assert not parsed.rows or parsed.errors
    assert parsed.errors, "expected a row error"
    e = parsed.errors[0]
    return e.line, e.field, e.message


GOOD = json.dumps({"pillar": "p", "content": "fine"})


@pytest.mark.parametrize(
    ("line", "field", "words"),
    [
        ('{"pillar": "p", "content": "a\\ud800b"}', "content", "surrogate"),
        ('{"pillar": "p", "content": "a\\u0000b"}', "content", "NUL"),
        ('{"pillar": "p", "content": "x", "metadata": {"k\\u0000": 1}}', "metadata", "NUL"),
        ('{"pillar": "p", "content": "x", "metadata": {"n": ' + "9" * 5000 + "}}", "json", "4300"),
        ('{"pillar": "p", "content": "x", "pillar": "q"}', "json", "duplicate key"),
        (
            '{"pillar": "p", "content": "x", "metadata": {"a": ' + "[" * 1000 + "]" * 1000 + "}}",
            "json",
            "nested",
        ),
        (
            '{"pillar": "p", "content": "x", "metadata": {"a": ' + "[" * 70 + "]" * 70 + "}}",
            "metadata.a",
            "nested deeper",
        ),
    ],
)
def test_jsonl_hostile_line_is_a_located_error(line: str, field: str, words: str) -> None:
    parsed = _parse("t.jsonl", _jsonl(GOOD, line))
    ln, f, msg = _one_error(parsed)
    assert ln == 2
    assert f.startswith(field), (f, msg)
    assert words.lower() in msg.lower()


def test_jsonl_accepts_raw_line_separators_inside_strings() -> None:
    text = "a\u2028b\u2029c\x85d"
    parsed = _parse(
        "t.jsonl", _jsonl(json.dumps({"pillar": "p", "content": text}, ensure_ascii=False))
    )
    assert parsed.errors == []
    assert [r.content for r in parsed.rows] == [text]
    assert parsed.lines == [1]


def test_jsonl_crlf_lines_are_counted_once() -> None:
    parsed = _parse("t.jsonl", (GOOD + "\r\n" + GOOD.replace("fine", "ok") + "\r\n").encode())
    assert parsed.errors == [] and parsed.lines == [1, 2]


def test_huge_metadata_value_is_refused() -> None:
    big = json.dumps({"pillar": "p", "content": "x", "metadata": {"blob": "z" * 10_000_000}})
    ln, f, msg = _one_error(_parse("t.jsonl", big.encode()))
    assert (ln, f) == (1, "metadata")
    assert f"{MAX_METADATA_CHARS:,}" in msg


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        ("pillar,content,content\np,a,b\n", 1, "header", "duplicate"),
        ('pillar,content\np,"never closed\nq,x\n', 2, "file", "unexpected end"),
        ("pillar,content\np,a\x00b\n", 2, "content", "NUL"),
        ('pillar,content,metadata\np,a,"{""k"": 1, ""k"": 2}"\n', 2, "metadata", "duplicate"),
    ],
)
def test_csv_hostile_file_is_refused(text: str, line: int, field: str, words: str) -> None:
    ln, f, msg = _one_error(_parse("t.csv", text.encode()))
    assert (ln, f) == (line, field), msg
    assert words.lower() in msg.lower()


def test_pair_preview_and_upload_share_the_row_checks() -> None:
    # parse_pairs_csv is the one parser both the preview and the upload call.
    parsed = parse_pairs_csv(b"input,correct_output\nq\x00,a\nq,a\n", max_rows=10, max_chars=1000)
    assert [(e.line, e.field) for e in parsed.errors] == [(2, "input")]
    dup = parse_pairs_csv(b"input,input,correct_output\nq,q,a\n", max_rows=10, max_chars=1000)
    assert dup.errors and dup.errors[0].field == "header"


@pytest.mark.parametrize("name", ["", "   ", "\t\n", "\u00a0", "\u2028"])
def test_blank_pillar_names_are_refused_on_patch_and_create(name: str) -> None:
    with pytest.raises(ValidationError):
        PillarPatch(name=name)
    with pytest.raises(ValidationError):
        PillarIn(name=name)


def test_whitespace_variants_of_a_pillar_name_are_one_name() -> None:
    variants = [" Math", "Math ", "Math\u00a0", "\tMath"]
    assert {PillarPatch(name=v).name for v in variants} == {"Math"}
    assert PillarPatch(name="Hard  \t math").name == "Hard math"
    with pytest.raises(ValidationError):
        PillarPatch(name="a\x00b")
    assert PillarPatch(description="d").name is None


def test_unstorable_value_walk_is_bounded_and_iterative() -> None:
    deep: list = []
    cur = deep
    for _ in range(5000):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    assert unstorable_value(deep) is not None
    assert unstorable_value({"a": [1, "ok", {"b": None}]}) is None
    assert unstorable_value(["x"] * 3, max_depth=MAX_JSON_DEPTH) is None


def test_read_upload_kind_by_suffix_and_errors_on_line_one() -> None:
    errors: list[RowError] = []
    assert read_upload("Threads.JSONL", b'{"a": 1}', errors) == ("jsonl", '{"a": 1}')
    assert read_upload("t.ndjson", b"", errors) == ("jsonl", "")
    assert read_upload("t.txt", "\ufeffa,b".encode(), errors) == ("csv", "a,b")  # BOM dropped
    assert read_upload(None, b"x", errors, ("csv",)) == ("csv", "x")  # no name: the only kind
    assert errors == []
    assert read_upload("t.xlsx", b"x", errors) is None
    assert read_upload("t.csv", b"\xff\xfe", errors) is None
    assert read_upload("t.csv", b"x", errors, ("jsonl",)) is None
    assert [(e.line, e.field) for e in errors] == [(1, "file")] * 3
    assert "upload .csv or .jsonl" in errors[0].message
    assert "not UTF-8" in errors[1].message
    assert errors[2].message.endswith("upload .jsonl")


def test_readers_count_every_problem_and_the_rejection_says_the_list_is_cut() -> None:
    # #27 item 6: "200 problem(s)" was shown for a file of 3,195
    errors: list[RowError] = []
    good = list(
        jsonl_objects("".join(f"bad {i}\n{{}}\n" for i in range(500)), errors, max_rows=10**4)
    )
    assert len(good) == 500 and len(errors) == 500
    assert errors[-1].line == 999
    csv_errors: list[RowError] = []
    text = "a\n" + "".join("x,y\n" for _ in range(3195))
    rows = list(
        csv_records(text, csv_errors, required={"a"}, allowed={"a"}, max_rows=10**4, max_chars=9)
    )
    assert rows == [] and len(csv_errors) == 3195
    cut = rejection(csv_errors)
    assert cut.message == "3,195 problems; the first 200 are listed; nothing was stored"
    assert cut.total == 3195 and cut.errors == csv_errors[:MAX_ERRORS]
    assert cut.detail()["total"] == 3195 and len(cut.detail()["errors"]) == MAX_ERRORS
    whole = rejection(csv_errors[:MAX_ERRORS], "nothing was imported")
    assert whole.message == "200 problem(s) found; nothing was imported"
    assert whole.errors == csv_errors[:MAX_ERRORS]
