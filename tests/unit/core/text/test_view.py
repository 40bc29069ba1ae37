"""Untrusted text shown safely (Markdown + sanitiser, word diff) and the small issue-20
helpers: the side-by-side split, the framed sign-in banner, judge-capable models, rounded
numbers in the simulator's prose."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.auth.service import login_banner
from llmjudge.core.text.view import render_markdown, word_diff, word_diff_html
from llmjudge.providers.schemas import ModelOut
from llmjudge.providers.simulated_personas import simulate_prompt_engineer
from llmjudge.providers.simulator import _pairwise_reasoning
from llmjudge.providers.simulator_params import SimulatorParams
from llmjudge.sessions.pages.comparisons import Message, messages_of, side_by_side
from llmjudge.sessions.pages.new import judge_capable

# -- Markdown ----------------------------------------------------------------------------


def test_markdown_renders_code_lists_and_tables() -> None:
    html = render_markdown("# T\n\n- a\n- b\n\n```py\nx = 1\n```\n\n| h |\n|---|\n| c |\n")
    assert "<h1>T</h1>" in html and "<li>a</li>" in html
    assert '<pre><code class="language-py">x = 1\n</code></pre>' in html
    assert "<table>" in html and "<td>c</td>" in html
    assert render_markdown("") == "" and render_markdown(None) == ""


@pytest.mark.parametrize(
    "evil",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](  javascript:alert(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "[x](vbscript:msgbox)",
        '<a href="javascript:alert(1)">x</a>',
        "<iframe src=//evil></iframe>",
        '<div style="background:url(javascript:x)">x</div>',
        "![x](javascript:alert(1))",
        "<svg onload=alert(1)>",
        "[x](&#106;avascript:alert(1))",
    ],
)
def test_markdown_lets_no_markup_or_script_through(evil: str) -> None:
    html = render_markdown(f"before {evil} after")
    tags = re.findall(r"<([a-z0-9]+)([^>]*)>", html)
    assert {t for t, _ in tags} <= {"p", "a", "code", "em", "strong"}
    for _, attrs in tags:  # real tags only: escaped text may spell anything
        assert not re.search(r"\son[a-z]+=|style=|src=", attrs)
        for href in re.findall(r'href="([^"]*)"', attrs):
            assert href.startswith(("http://", "https://", "mailto:")), href


def test_markdown_links_are_kept_and_marked_nofollow() -> None:
    html = render_markdown("[site](https://example.org/a?b=1)")
    assert 'href="https://example.org/a?b=1"' in html and "nofollow" in html


@given(st.text(max_size=300))
def test_markdown_never_emits_a_script_or_handler(text: str) -> None:
    html = render_markdown(text).lower()
    assert "<script" not in html and "<img" not in html and "<iframe" not in html
    assert not re.search(r"<[a-z][^>]*\son[a-z]+\s*=", html)


# -- word diff ---------------------------------------------------------------------------


def test_word_diff_marks_the_changed_words() -> None:
    spans = word_diff("the cat sat on the mat", "the dog sat on the mat")
    assert [(s.kind, s.text) for s in spans] == [
        ("same", "the "),
        ("removed", "cat"),
        ("added", "dog"),
        ("same", " sat on the mat"),
    ]
    html = word_diff_html("a <b> c", "a <b> d")
    assert "<b>" not in html and "&lt;b&gt;" in html and '<ins class="diff-add">' in html


words = st.lists(st.sampled_from(["a", "b", "cat", "dog", " ", "\n", ".", "<x>", "é"]), max_size=40)


@given(words, words)
def test_word_diff_gives_back_both_texts(x: list[str], y: list[str]) -> None:
    expected, actual = "".join(x), "".join(y)
    spans = word_diff(expected, actual)
    assert "".join(s.text for s in spans if s.kind != "added") == expected
    assert "".join(s.text for s in spans if s.kind != "removed") == actual
    assert all(s.text for s in spans)
    assert all(p.kind != q.kind for p, q in zip(spans, spans[1:], strict=False))
    if expected == actual:
        assert all(s.kind == "same" for s in spans)


def test_word_diff_of_huge_texts_stays_cheap() -> None:
    a, b = "word " * 5000, "word " * 4999 + "other "
    spans = word_diff(a, b)
    assert [s.kind for s in spans] == ["removed", "added"]


# -- side by side --------------------------------------------------------------------------


def test_side_by_side_shows_the_shared_prompt_once() -> None:
    q = {"role": "user", "content": "Q?"}
    view = side_by_side(
        [q, {"role": "assistant", "content": "A1"}], [q, {"role": "assistant", "content": "A2"}]
    )
    assert view.shared == [Message("user", "Q?")]
    assert view.answer_a == [Message("assistant", "A1")] and view.answer_b == [
        Message("assistant", "A2")
    ]
    # identical threads keep an answer on each side
    same = side_by_side([q], [q])
    assert same.answer_a == [Message("user", "Q?")] and same.shared == []
    # plain text answers with a stored prompt
    text = side_by_side("one", "two", prompt="The prompt")
    assert text.shared == [Message("user", "The prompt")]
    assert text.answer_a == [Message("assistant", "one")]
    assert messages_of([{"role": "user"}, "junk"]) == [Message("user", "")]


# -- sign-in banner, judges, simulator prose -------------------------------------------


def test_login_banner_is_framed_and_holds_the_whole_link() -> None:
    url = "http://127.0.0.1:8000/login/one-time?token=" + "x" * 43
    lines = login_banner(url).strip("\n").splitlines()
    assert lines[0] == lines[-1] and set(lines[0]) == {"+", "-"}
    assert all(len(line) == len(lines[0]) for line in lines)
    assert any(url in line for line in lines)


def _model(model: str, simulated: bool) -> ModelOut:
    return ModelOut(
        id=1,
        name=f"m-{model}",
        model=model,
        provider_id=1,
        provider_name="p",
        provider_kind="simulator" if simulated else "openai",
        simulated=simulated,
        input_price_per_million=0,
        output_price_per_million=0,
        cached_input_price_per_million=None,
        cache_write_price_per_million=None,
        cached_input_price_in_use=0,
        cache_write_price_in_use=0,
        context_window=None,
        default_temperature=None,
        observed_latency_s=None,
        created_at=datetime.now(UTC),
    )


def test_judge_dropdown_leaves_out_the_task_and_engineer_simulators() -> None:
    assert judge_capable(_model("judge", True))
    assert not judge_capable(_model("task", True))
    assert not judge_capable(_model("engineer", True))
    assert judge_capable(_model("task", False))  # a real model called "task" is a judge


def test_simulator_prose_rounds_its_numbers() -> None:
    out = simulate_prompt_engineer(
        SimulatorParams(), {"judge_prompt": "", "failures": [], "metrics": {"f1": 2 / 3}}
    )
    assert "(F1 was 0.67)." in out["rationale"]
    text = _pairwise_reasoning("A", {"A": {"q": 4.333333}, "B": {"q": 2}}, ["q"])
    assert "(4.3 vs 2)" in text
