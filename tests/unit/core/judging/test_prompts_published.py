"""Published judge prompts: {prompt}, {answer_a}, {answer_b}, a session's own system prompt,
and empty answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.core.judging.prompts import SYSTEM_PROMPT, build_judge_messages, render_answer

TEMPLATE = "# Instruction:\n{prompt}\n\n# Output (a):\n{answer_a}\n\n# Output (b):\n{answer_b}\n"


def test_published_template_is_filled_byte_for_byte() -> None:
    messages = build_judge_messages(
        content_a="first <thread_b> answer",
        content_b="second",
        template=TEMPLATE,
        prompt="Say hi.",
        system_prompt="You are a helpful assistant.",
    )
    assert messages == [
        {"role": "system", "content": "You are a helpful assistant."},
        {
            "role": "user",
            # Not fenced and not escaped: the published prompt as its authors ran it.
            "content": "# Instruction:\nSay hi.\n\n# Output (a):\nfirst <thread_b> answer\n\n"
            "# Output (b):\nsecond\n",
        },
    ]


def test_system_prompt_default_and_none() -> None:
    default = build_judge_messages(content_a="a", content_b="b")
    assert default[0] == {"role": "system", "content": SYSTEM_PROMPT}
    bare = build_judge_messages(content_a="a", content_b="b", template=TEMPLATE, system_prompt="")
    assert [m["role"] for m in bare] == ["user"]


def test_empty_answer_is_shown_empty() -> None:
    [_, user] = build_judge_messages(content_a="", content_b="b", template=TEMPLATE, prompt="Q")
    assert "# Output (a):\n\n\n# Output (b):\nb\n" in user["content"]
    # Fenced, an empty answer is an empty fence, not a missing thread.
    [_, fenced] = build_judge_messages(content_a="", content_b="b", template="{thread_a}{thread_b}")
    assert fenced["content"].startswith("<thread_a>\n\n</thread_a>")


def test_missing_prompt_is_empty_text() -> None:
    [_, user] = build_judge_messages(content_a="a", content_b="b", template=TEMPLATE)
    assert user["content"].startswith("# Instruction:\n\n")


def test_render_answer_drops_the_prompt_turns() -> None:
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi!"},
    ]
    assert render_answer(conversation) == "Hi!"
    longer = [
        *conversation,
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": ""},
    ]
    assert render_answer(longer) == "assistant: Hi!\n\nuser: Again\n\nassistant: "
    assert render_answer("plain") == "plain"
    assert render_answer([{"role": "user", "content": "only a prompt"}]) == ""


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{answer_a} only", r"must include \{thread_b\} \(or \{answer_b\}\)"),
        ("{prompt}", r"\{thread_a\} and \{thread_b\}"),
        ("{answer_a} {answer_b} {input}", r"unknown placeholder \{input\}"),
    ],
)
def test_template_placeholders_are_checked(template: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_judge_messages(content_a="a", content_b="b", template=template)


@given(st.text(), st.text(), st.text())
def test_answers_fill_their_slots_whatever_they_hold(a: str, b: str, prompt: str) -> None:
    [user] = build_judge_messages(
        content_a=a,
        content_b=b,
        template="{answer_a}\x00{answer_b}\x00{prompt}",
        prompt=prompt,
        system_prompt="",
    )
    assert user["content"] == f"{a}\x00{b}\x00{prompt}"


@pytest.mark.parametrize("criteria", [("quality",), ("empathy", "my own criterion")])
def test_builtin_template_gives_the_builtin_messages(criteria: tuple[str, ...]) -> None:
    from llmjudge.core.judging.prompts import builtin_template

    kwargs = {"content_a": "x {y} z", "content_b": [{"role": "user", "content": "q"}]}
    builtin = build_judge_messages(criteria=criteria, **kwargs)
    copied = build_judge_messages(criteria=criteria, template=builtin_template(criteria), **kwargs)
    assert copied == builtin
