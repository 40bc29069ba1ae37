"""Fences: how untrusted text is put inside a prompt's delimiters so it cannot close them.

A prompt places data written by someone else (threads, answers, reviewers' notes) between
an opening and a closing delimiter and tells the model that fenced text is data. A
:class:`Fence` is one delimiter style: what opens and closes a block named ``name``, and
how text that could pass for a delimiter is neutralised before it goes in. Two styles are
in use, each pinned by published prompts and stored prompt versions:

- :data:`THREAD_TAGS` (pairwise judging): ``<thread_a>`` ... ``</thread_a>``; any spelling
  of such a tag inside the data is HTML-escaped;
- :data:`MARKERS` (persona judges): ``<<<NAME>>>`` ... ``<<<END NAME>>>``; runs of three or
  more angle brackets are broken up with spaces.

Both neutralisers run in linear time on hostile input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MARKERS", "THREAD_TAGS", "Fence"]


@dataclass(frozen=True)
class Fence:
    """One delimiter style: ``opening``/``closing`` are formats of ``{name}``."""

    opening: str
    closing: str
    pattern: re.Pattern[str]  # what in the data could pass for a delimiter
    defuse: Callable[[re.Match[str]], str]  # its harmless replacement

    def neutralise(self, text: str) -> str:
        """``text`` with everything that looks like a delimiter defused."""
        return self.pattern.sub(self.defuse, text)

    def wrap(self, name: str, body: str) -> str:
        """``body`` (already neutralised) between the opening and closing of ``name``."""
        return f"{self.opening.format(name=name)}\n{body}\n{self.closing.format(name=name)}"


# Any spelling of a thread tag: <thread_a>, </Thread-B >, < / thread a>, full-width brackets.
# Linear time: no two quantifiers can share a character (the old ``\s*/?\s*`` split a run
# of spaces every possible way: 115 s on "<" + 60,000 spaces), and each quantifier is
# possessive because the token after it can never start with what it repeats.
THREAD_TAGS = Fence(
    opening="<thread_{name}>",
    closing="</thread_{name}>",
    pattern=re.compile(
        r"[<＜﹤]\s*+(?:/\s*+)?thread[\s_\-]*+[ab]\b[^<>＜＞﹤﹥]*+[>＞﹥]", re.IGNORECASE
    ),
    defuse=lambda m: f"&lt;{m.group(0)[1:-1]}&gt;",
)

MARKERS = Fence(
    opening="<<<{name}>>>",
    closing="<<<END {name}>>>",
    pattern=re.compile(r"<{3,}|>{3,}"),
    defuse=lambda m: " ".join(m.group()),
)
