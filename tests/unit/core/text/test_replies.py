"""core/text/replies: the one scanner for JSON objects in a model's reply."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.text.replies import MAX_JSON_ATTEMPTS, json_objects

_OBJECTS = st.lists(
    st.dictionaries(st.sampled_from(["a", "b", "label"]), st.integers(), max_size=3),
    min_size=1,
    max_size=5,
)


@given(_OBJECTS, st.sampled_from([" ", " and then ", "\n```\n"]))
def test_objects_in_prose_come_last_first_with_their_spans(
    objects: list[dict[str, int]], glue: str
) -> None:
    text = "Reply:" + glue.join(json.dumps(o) for o in objects) + " done."
    for nested in (True, False):
        found = list(json_objects(text, nested=nested))
        assert [f.value for f in found] == objects[::-1]
        for f in found:
            assert json.loads(text[f.start : f.end]) == f.value


def test_the_two_scopes_of_a_nested_object() -> None:
    text = '{"label": "correct", "extra": {"label": "incorrect"}}'
    inner_first = [f.value for f in json_objects(text, nested=True)]
    assert inner_first == [{"label": "incorrect"}, json.loads(text)]
    assert [f.value for f in json_objects(text, nested=False)] == [json.loads(text)]


def test_attempts_are_capped_and_deep_nesting_is_survived() -> None:
    hostile = "{" * (MAX_JSON_ATTEMPTS + 10) + '{"a": 1}'
    assert list(json_objects(hostile, nested=False)) == []  # read from the front: capped
    assert [f.value for f in json_objects(hostile, nested=True)] == [{"a": 1}]  # from the end
    assert list(json_objects('{"a": ' + "[" * 100_000, nested=True)) == []
    assert list(json_objects('{"a": ' + "[" * 100_000, nested=False)) == []
