"""core/text/templates: the one ``{placeholder}`` renderer of judge and persona prompts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.text.templates import placeholders, render

NAMES = ("input", "answer", "thread_a")
_PIECES = st.lists(
    st.sampled_from(["{input}", "{answer}", "{thread_a}", "{{", "}}", "{{input}}"])
    | st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=8),
    max_size=12,
).map("".join)
_VALUES = st.fixed_dictionaries({name: st.text(max_size=10) for name in NAMES})


@given(_PIECES, _VALUES)
def test_render_equals_str_format_on_well_formed_templates(
    template: str, values: dict[str, str]
) -> None:
    rendered, seen = render(template, values)
    assert rendered == template.format(**values)
    assert seen == placeholders(template, NAMES)


def test_values_are_not_rescanned_and_stray_braces_are_kept() -> None:
    out, seen = render('{input} and {"label": 1} {other}', {"input": "{answer}", "answer": "x"})
    assert out == '{answer} and {"label": 1} {other}'
    assert seen == {"input"}


def test_escaped_placeholders_do_not_count() -> None:
    assert placeholders("{{input}} {answer}", NAMES) == {"answer"}
    assert render("{{input}}", {"input": "x"}) == ("{input}", set())
