"""core/text/replies: the one scanner for JSON objects in a model's reply."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llmjudge.core.text.replies import MAX_JSON_ATTEMPTS, json_objects, whole_object

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


_LEAVES = (
    st.none() | st.booleans() | st.integers() | st.sampled_from(["{", "}", "a{b", "[[A]]", ""])
)
_JSON = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["winner", "a", "b", "{"]), inner, max_size=3)
    ),
    max_leaves=12,
)


def _answers() -> st.SearchStrategy[str]:
    """One object (nested objects, braces in strings, a key given twice, a list on top), or
    an object among prose."""
    obj = st.dictionaries(st.sampled_from(["winner", "a", "scores"]), _JSON, max_size=4)
    one = st.builds(lambda o, pad: pad + json.dumps(o) + pad, obj, st.sampled_from(["", " \n"]))
    twice = st.builds(lambda o: json.dumps(o)[:-1] + ', "a": {"b": 1}, "a": 2}', obj)
    prose = st.builds(lambda o, p: p + json.dumps(o) + p, obj, st.sampled_from(["x ", "{} "]))
    listed = st.builds(json.dumps, st.lists(obj, max_size=2))
    return one | twice | prose | listed


@settings(max_examples=400, deadline=None)
@given(_answers())
def test_a_whole_object_is_what_the_nested_scan_finds(text: str) -> None:
    """When ``whole_object`` reads the text, the nested scan yields its inner objects and
    then it, and nothing else; texts it declines are read by the scan alone."""
    whole = whole_object(text)
    if whole is None:
        return
    found, inner = whole
    scan = list(json_objects(text, nested=True))
    assert scan[-1] == found
    assert sorted(map(json.dumps, (f.value for f in scan[:-1]))) == sorted(map(json.dumps, inner))


def test_whole_object_declines_what_is_not_one_object_alone() -> None:
    assert whole_object('{"a": {"b": 1}} ')[0].end == 15  # type: ignore[index]
    assert whole_object('{"a": "{"}') is None  # a brace in a string
    assert whole_object('{"a": {"b": 1}, "a": 2}') is None  # an object lost to a repeated key
    assert whole_object('{"a": 1} and {"b": 2}') is None
    assert whole_object('x {"a": 1}') is None
    assert whole_object("[{}]") is None
    assert whole_object("{" * (MAX_JSON_ATTEMPTS + 1) + "}" * (MAX_JSON_ATTEMPTS + 1)) is None
