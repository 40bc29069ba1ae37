"""The one ``{placeholder}`` template language of prompts (judge prompts, persona prompts).

A template holds named placeholders ``{name}`` and escaped braces ``{{`` / ``}}``. It is
filled in one pass: substituted values are never rescanned (a value holding ``{answer}``
stays as written), and brace text that is no known placeholder (say a JSON example an
optimiser wrote without doubling its braces) is kept as is. For a template that
``str.format`` accepts whose fields are all known names, the result equals
``template.format(**values)``; a caller that must reject other templates (a user's judge
template) checks it first and then renders it here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

__all__ = ["placeholders", "render"]


@functools.lru_cache(maxsize=64)
def _token(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(name) for name in names)
    return re.compile(r"\{\{|\}\}|\{(" + alternatives + r")\}")


def render(template: str, values: Mapping[str, str]) -> tuple[str, set[str]]:
    """``template`` filled with ``values``, and the names it used."""
    seen: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group()[0]
        seen.add(name)
        return values[name]

    return _token(tuple(values)).sub(replace, template), seen


def placeholders(template: str, names: Iterable[str]) -> set[str]:
    """Which of ``names`` the template uses (an escaped ``{{name}}`` does not count)."""
    return {m.group(1) for m in _token(tuple(names)).finditer(template) if m.group(1)}
