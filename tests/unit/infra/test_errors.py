"""The JSON edge check: what standard JSON forbids is refused, everything else passes."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from llmjudge.infra.errors import json_body_problem, safe_validation_errors

# Text without lone surrogates (what any client can send as UTF-8).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(JSON, st.booleans())
def test_standard_json_always_passes(value: Any, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only, allow_nan=False).encode()
    assert json_body_problem(body) is None


@given(JSON, st.sampled_from(["NaN", "Infinity", "-Infinity"]))
def test_a_non_finite_constant_anywhere_is_refused(value: Any, constant: str) -> None:
    # Appended, not substituted: a generated number may itself contain the digits replaced.
    body = (json.dumps([value])[:-1] + f', {{"n": {constant}}}]').encode()
    problem = json_body_problem(body)
    assert problem is not None and constant.lstrip("-") in problem["msg"]


@given(JSON, st.integers(0xD800, 0xDFFF), st.booleans())
def test_a_lone_surrogate_in_a_string_or_key_is_refused(value: Any, code: int, in_key: bool):
    lone = chr(code)
    doc = {lone: 1} if in_key else {"k": ["x", f"a{lone}b"]}
    body = json.dumps([value, doc]).encode()  # ensure_ascii writes it as a \\uXXXX escape
    problem = json_body_problem(body)
    assert problem is not None and "surrogate" in problem["msg"]
    json.dumps(problem, ensure_ascii=False).encode("utf-8")  # the answer itself encodes


def test_pairs_and_lookalikes_pass_and_malformed_json_is_left_to_fastapi() -> None:
    assert json_body_problem(b'{"e": "\\ud83d\\ude00", "s": "NaN Infinity \\\\ud800"}') is None
    assert json_body_problem(b'{"broken": "NaN"') is None  # FastAPI's own 422 names the place


def test_validation_errors_drop_inputs_that_cannot_be_sent_or_should_not_be() -> None:
    errors = [
        {"type": "value_error", "loc": ("body", "api_key"), "msg": "bad", "input": "sk-secret"},
        {"type": "float", "loc": ("body", "t"), "msg": "bad", "input": float("nan")},
        {"type": "x", "loc": ("body", "\ud800"), "msg": "bad \udc00", "input": "\udfff"},
        {"type": "int", "loc": ("body", "n"), "msg": "bad", "input": "seven"},
    ]
    safe = safe_validation_errors(errors)
    assert "input" not in safe[0] and "input" not in safe[1] and "input" not in safe[2]
    assert safe[3]["input"] == "seven"  # ordinary inputs still help the caller
    json.dumps(safe, ensure_ascii=False, allow_nan=False).encode("utf-8")


def test_htmx_error_line_is_one_escaped_line_aimed_at_the_flash_region():
    from llmjudge.infra.errors import htmx_error_line

    r = htmx_error_line("this needs the <admin> role")
    body = bytes(r.body).decode()
    assert r.status_code == 403
    assert body == '<p class="notice error" role="alert">this needs the &lt;admin&gt; role</p>'
    assert r.headers["HX-Retarget"] == "#flash" and r.headers["HX-Reswap"] == "innerHTML"
