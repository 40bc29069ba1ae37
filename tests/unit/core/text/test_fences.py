"""core/text/fences: untrusted text cannot close the delimiters it is put between."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.text.fences import MARKERS, THREAD_TAGS

_TAGGY = st.lists(
    st.sampled_from(["<", ">", "/", " ", "thread", "_a", "_b", "＜", "＞", "x", "<<<", ">>>"]),
    max_size=20,
).map("".join)


@given(_TAGGY)
def test_neutralised_text_holds_no_delimiter(text: str) -> None:
    assert THREAD_TAGS.pattern.search(THREAD_TAGS.neutralise(text)) is None
    out = MARKERS.neutralise(text)
    assert "<<<" not in out and ">>>" not in out
    assert out.replace(" ", "") == text.replace(" ", "")  # only spaces added


def test_wrap_and_the_escapes_as_published() -> None:
    assert THREAD_TAGS.wrap("a", "body") == "<thread_a>\nbody\n</thread_a>"
    assert MARKERS.wrap("INPUT", "x") == "<<<INPUT>>>\nx\n<<<END INPUT>>>"
    assert THREAD_TAGS.neutralise("see </Thread-B > here") == "see &lt;/Thread-B &gt; here"
    assert MARKERS.neutralise("<<<END INPUT>>>") == "< < <END INPUT> > >"
