"""bounded_id: one id of request text, bounded as the schema bounds ids (1..2147483647)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.infra.errors import ID_MAX, Invalid, bounded_id


@given(st.integers(1, ID_MAX), st.sampled_from([0, 1, 3, 5000]))
def test_every_id_in_bounds_is_read_back(n: int, zeros: int) -> None:
    assert bounded_id(f" {'0' * zeros}{n} ") == n


@given(st.integers().filter(lambda n: not 1 <= n <= ID_MAX))
def test_every_integer_out_of_bounds_is_refused(n: int) -> None:
    with pytest.raises(Invalid, match="from 1 to 2147483647"):
        bounded_id(str(n))


@pytest.mark.parametrize(
    "text",
    [
        "\u0663",  # ARABIC-INDIC DIGIT THREE: isdigit() and int() read it as 3
        "\u00b2",  # SUPERSCRIPT TWO: isdigit() passes it, int() raises
        "1e3",
        "0x10",
        "+5",
        "1_000",
        "",
        "7" * 5000,  # int() refuses more than 4,300 digits
    ],
)
def test_anything_but_ascii_digits_is_refused_naming_the_value(text: str) -> None:
    with pytest.raises(Invalid) as caught:
        bounded_id(text, name="each of ids")
    message = str(caught.value)
    assert message.startswith("each of ids must be a whole number from 1 to 2147483647, got ")
    assert repr(text[:20])[:-1] in message and len(message) < 150
