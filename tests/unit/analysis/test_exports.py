"""Pure parts of the session exports: rounding and the CSV provenance block."""

from __future__ import annotations

import csv
import io
import json
import math

from hypothesis import given
from hypothesis import strategies as st

from llmjudge.analysis.exports import _csv_lines, _header_line, provenance_lines, rounded


def test_rounding_follows_the_quantity() -> None:
    row = {
        "bt_score": 1523.456789,
        "win_rate": 0.123456789,
        "confidence": 0.87654,
        "cost_usd": 0.1 + 0.2,
        "score_a_clarity": 3.33333333,
        "likert_clarity": 4.66666666,
        "other": 123.456789123,
        "tiny": 1.23456789e-7,
        "count": 3,
        "nan": math.nan,
        "nested": {"bt_ci_low": [1400.04, 1600.06]},
    }
    assert rounded(row) == {
        "bt_score": 1523.5,
        "win_rate": 0.1235,
        "confidence": 0.877,
        "cost_usd": 0.3,
        "score_a_clarity": 3.333,
        "likert_clarity": 4.667,
        "other": 123.457,
        "tiny": 1.23457e-7,
        "count": 3,
        "nan": None,
        "nested": {"bt_ci_low": [1400.0, 1600.1]},
    }


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12))
def test_default_rounding_keeps_six_significant_digits(x: float) -> None:
    y = rounded(x)
    assert y == 0.0 if x == 0 else math.isclose(x, y, rel_tol=5e-6)


def test_csv_block_then_header_then_quoted_text() -> None:
    columns = ["comparison_id", "reasoning", "confidence", "cache_hit", "parse_error"]
    provenance = {"version": "0.1.0", "options": {"note": "line one\nline two"}}
    text = (
        provenance_lines(provenance)
        + _header_line(columns)
        + _csv_lines(
            [
                (1, "# heading\nsecond line #2", 0.87654, True, None),
                (2, "=SUM(A1)", None, False, "why"),
            ],
            columns,
        )
    )
    lines = text.split("\r\n")
    assert lines[0].startswith("# llmjudge export.")
    assert lines[1] == '# version: "0.1.0"'
    assert json.loads(lines[2].removeprefix("# options: ")) == provenance["options"]
    assert lines[3] == ",".join(columns)
    body = "\r\n".join(lines[3:])
    # No data line starts with "#", even where a value's own line does.
    assert not any(line.startswith("#") for line in body.split("\r\n"))
    rows = list(csv.DictReader(io.StringIO(body)))
    assert rows[0]["reasoning"] == "# heading\nsecond line #2"
    assert rows[0]["confidence"] == "0.877" and rows[0]["cache_hit"] == "True"
    assert rows[1]["reasoning"] == "'=SUM(A1)"  # still neutralised
    # Any text is neutralised, in whatever column (the leaderboard's titles, say).
    other = _csv_lines([("=HYPERLINK(1)", "+x", 1.5)], ["thread_title", "pillar_name", "n"])
    assert other == '"\'=HYPERLINK(1)","\'+x",1.5\r\n'
    assert rows[1]["confidence"] == "" and rows[1]["parse_error"] == "why"
    # Text is quoted, numbers and booleans bare: a "#" in a value never starts a comment.
    assert '1,"# heading' in body and ',0.877,True,""' in body
