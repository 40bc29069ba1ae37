"""Names: emoji sequences are kept, anything else invisible is refused by its code point."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from llmjudge.catalog.schemas import PillarIn
from llmjudge.core.text.names import SPACING_CONTROLS, clean_name, is_sequence_part

VISIBLE = st.characters(categories=("L", "M", "N", "P", "S")).filter(str.isprintable)
JOINERS = st.sampled_from(["\u200c", "\u200d", "\ufe0e", "\ufe0f", "\U000e0100", "\U000e007f"])
# A visible character, then maybe invisible parts of its sequence.
CLUSTER = st.tuples(VISIBLE, st.lists(JOINERS, max_size=3)).map(lambda t: t[0] + "".join(t[1]))
NAME = st.lists(CLUSTER, min_size=1, max_size=8).map("".join)
REFUSED = st.characters(categories=("Cc", "Cf", "Co")).filter(
    lambda c: not is_sequence_part(c) and c not in SPACING_CONTROLS
)


@pytest.mark.parametrize(
    "name",
    [
        "\U0001f469\u200d\U0001f52c lab",  # woman scientist: ZWJ
        "\u2714\ufe0f done",  # heavy check mark, emoji presentation
        "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",  # England
        "\u0646\u0627\u200c\u0645\u0647",  # Persian: ZWNJ inside a word
        "\u845b\U000e0100",  # an ideographic variation sequence
    ],
)
def test_emoji_and_joined_scripts_are_accepted(name: str) -> None:
    assert clean_name(name) == name
    assert PillarIn(name=f"  {name}\t").name == name


@given(st.lists(NAME, min_size=1, max_size=3), st.sampled_from([" ", "\t", "\u00a0", "  "]))
def test_visible_clusters_are_kept_and_spacing_is_one_spelling(words: list[str], gap: str) -> None:
    name = clean_name(f"{gap}{gap.join(words)}{gap}")
    assert name == " ".join(words)
    assert clean_name(name) == name


@pytest.mark.parametrize("gap", sorted(SPACING_CONTROLS))
def test_spacing_controls_become_one_space(gap: str) -> None:
    assert clean_name(f"{gap}a{gap}{gap}b{gap}") == "a b"


@given(NAME, REFUSED, NAME)
def test_other_invisible_code_points_are_refused_by_name(a: str, bad: str, b: str) -> None:
    with pytest.raises(ValueError) as caught:
        clean_name(a + bad + b)
    message = str(caught.value)
    assert f"contains U+{ord(bad):04X} (" in message
    if unicodedata.category(bad) == "Cc":
        assert "(a control character)" in message


@given(JOINERS, NAME)
def test_a_joiner_with_nothing_visible_before_it_is_refused(joiner: str, rest: str) -> None:
    for name in (joiner + rest, f"{rest} {joiner}{rest}"):
        with pytest.raises(ValueError, match=f"U\\+{ord(joiner):04X} .*no visible character"):
            clean_name(name)


def test_the_pillar_schema_names_the_code_point() -> None:
    with pytest.raises(ValidationError, match=r"name contains U\+0007 \(a control character\)"):
        PillarIn(name="bell\u0007")
    with pytest.raises(ValidationError, match=r"U\+202E \(an invisible format character\)"):
        PillarIn(name="abc\u202edef")  # right-to-left override: spoofs the name's order
    with pytest.raises(ValidationError, match="must not be blank"):
        PillarIn(name=" \u2028 ")
