"""Showing untrusted text: Markdown rendered to sanitised HTML, and a word diff. Pure.

Thread content comes from uploads and from models: it may hold raw HTML, ``javascript:``
links or event handlers. Markdown is rendered with markdown-it-py with raw HTML switched off
(tags show as text), then sanitised with nh3 (ammonia) against an allow-list, so even a
renderer bug cannot let a script, a style or a dangerous URL scheme through.
"""

from __future__ import annotations

import difflib
import html
import re
from dataclasses import dataclass
from typing import Literal

import nh3
from markdown_it import MarkdownIt

__all__ = ["DiffSpan", "render_markdown", "word_diff", "word_diff_html"]

# "js-default": raw HTML off, linkify off, typographer off; tables and strikethrough on.
_MD = MarkdownIt("js-default").enable(["table", "strikethrough"])

_TAGS = {
    "a",
    "blockquote",
    "br",
    "code",
    "del",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "li",
    "ol",
    "p",
    "pre",
    "s",
    "strong",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
}
_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},  # language-xxx from fenced code blocks
    "ol": {"start"},
}
_URL_SCHEMES = {"http", "https", "mailto"}


def _attribute_filter(tag: str, attr: str, value: str) -> str | None:
    # No style attributes at all (table alignment included): the CSP forbids inline styles.
    if attr == "class":
        return value if re.fullmatch(r"language-[A-Za-z0-9_+-]{1,40}", value) else None
    return value


def render_markdown(text: str | None) -> str:
    """Markdown as safe HTML: no raw HTML, no scripts or styles, links only to http(s) and
    mailto (opened with ``rel="noopener noreferrer nofollow"``)."""
    if not text:
        return ""
    rendered = _MD.render(text)
    return nh3.clean(
        rendered,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        attribute_filter=_attribute_filter,
        strip_comments=True,
    )


@dataclass(frozen=True)
class DiffSpan:
    kind: Literal["same", "added", "removed"]
    text: str


_TOKEN = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


MAX_DIFF_TOKENS = 4000


def _whole(expected: str, actual: str) -> list[DiffSpan]:
    spans = [DiffSpan("removed", expected)] if expected else []
    return spans + ([DiffSpan("added", actual)] if actual else [])


def word_diff(expected: str, actual: str, max_tokens: int = MAX_DIFF_TOKENS) -> list[DiffSpan]:
    """Where ``actual`` differs from ``expected``, word by word (whitespace kept as written):
    ``removed`` is in expected only, ``added`` in actual only. Adjacent spans of one kind are
    merged. Joining the ``same`` and ``removed`` spans gives back ``expected``; the ``same``
    and ``added`` spans give back ``actual``."""
    a, b = _TOKEN.findall(expected or ""), _TOKEN.findall(actual or "")
    if len(a) > max_tokens or len(b) > max_tokens:
        # SequenceMatcher is quadratic in the worst case: past this, say only "they differ"
        same = a == b
        return [DiffSpan("same", expected)] if same else _whole(expected, actual)
    # autojunk off: repeated words in long answers must not be treated as noise
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    spans: list[DiffSpan] = []

    def push(kind: Literal["same", "added", "removed"], tokens: list[str]) -> None:
        if not tokens:
            return
        text = "".join(tokens)
        if spans and spans[-1].kind == kind:
            spans[-1] = DiffSpan(kind, spans[-1].text + text)
        else:
            spans.append(DiffSpan(kind, text))

    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            push("same", a[i1:i2])
        else:
            push("removed", a[i1:i2])
            push("added", b[j1:j2])
    return spans


def word_diff_html(expected: str, actual: str) -> str:
    """The word diff as escaped HTML: ``<del>`` for words only in the expected text,
    ``<ins>`` for words only in the actual one."""
    out = []
    for span in word_diff(expected, actual):
        text = html.escape(span.text)
        if span.kind == "same":
            out.append(text)
        elif span.kind == "added":
            out.append(f'<ins class="diff-add">{text}</ins>')
        else:
            out.append(f'<del class="diff-del">{text}</del>')
    return "".join(out)
