"""fastjson.dumps reads back as the standard encoder's output does, whatever orjson refuses."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.text import fastjson

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too: orjson refuses those
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(value=values)
def test_reads_back_as_the_standard_encoding(value: object) -> None:
    expected = json.loads(json.dumps(value, ensure_ascii=False))
    assert json.loads(fastjson.dumps(value)) == expected


def test_unknown_objects_go_to_default_as_before() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    when = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
    got = json.loads(fastjson.dumps({"at": when, "p": Point(1), 7: "k"}, str))
    assert got == {"at": str(when), "p": str(Point(1)), "7": "k"}
