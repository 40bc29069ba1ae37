"""Names people type (pillars): one spelling, and only characters that show.

Emoji sequences carry invisible code points that belong to the visible character before them
(a zero-width joiner in "👩‍🔬", a variation selector in "✔️", tag characters in a
subdivision flag); those are kept. Anything else that does not show is refused by code point.
"""

from __future__ import annotations

import unicodedata

# Invisible parts of a character sequence: ZWNJ and ZWJ, the variation selectors (and their
# supplement), and the emoji tag characters (U+E0020..U+E007F, as in England's flag).
_SEQUENCE_PARTS: tuple[tuple[int, int], ...] = (
    (0x200C, 0x200D),
    (0xFE00, 0xFE0F),
    (0xE0020, 0xE007F),
    (0xE0100, 0xE01EF),
)
_KINDS = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Cs": "a lone surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def is_sequence_part(c: str) -> bool:
    """Whether ``c`` is an invisible joiner, variation selector or emoji tag."""
    cp = ord(c)
    return any(lo <= cp <= hi for lo, hi in _SEQUENCE_PARTS)


def describe(c: str) -> str:
    """``U+0007 (a control character)``: how a refusal names one code point."""
    kind = _KINDS.get(unicodedata.category(c), "a character that does not show")
    return f"U+{ord(c):04X} ({kind})"


# The control characters that are spacing (tab, line breaks, NEL): they become one space.
SPACING_CONTROLS = frozenset("\t\n\r\x0b\x0c\x85")


def clean_name(value: str, *, what: str = "name") -> str:
    """``value`` with runs of whitespace as one space and the ends trimmed; ValueError naming
    the first code point that does not show, unless it is part of the sequence before it."""
    # str.split() also splits on the control characters U+001C..U+001F: refuse them here, or
    # they would quietly become spaces
    for c in value:
        if unicodedata.category(c) == "Cc" and c not in SPACING_CONTROLS:
            raise ValueError(
                f"{what} contains {describe(c)}: use visible characters and spaces "
                "(emoji sequences are fine)"
            )
    name = " ".join(value.split())
    if not name:
        raise ValueError(f"{what} must not be blank")
    for i, c in enumerate(name):
        # Sequence parts first: variation selectors count as printable, yet show nothing alone.
        if is_sequence_part(c):
            if i > 0 and name[i - 1] != " ":
                continue
            raise ValueError(
                f"{what} contains {describe(c)} with no visible character before it; "
                "joiners, variation selectors and emoji tags may only follow one"
            )
        if c.isprintable():
            continue
        raise ValueError(
            f"{what} contains {describe(c)}: use visible characters and spaces "
            "(emoji sequences are fine)"
        )
    return name
