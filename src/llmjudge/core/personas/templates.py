"""Persona templates and the safe rendering of persona prompts (pure).

A template gives a first-time user a task prompt, an initial judge prompt and example
(input, correct_output) pairs to try the calibration loop with; the starter templates
are data files read by :mod:`llmjudge.personas.starters`. Judge prompts use three
placeholders, ``{input}``, ``{correct_output}`` and ``{answer}``, in the one template
language of :mod:`llmjudge.core.text.templates` (``{{`` for a literal brace), and fence
each value between ``<<<NAME>>>`` and ``<<<END NAME>>>`` markers
(:data:`llmjudge.core.text.fences.MARKERS`) so the judge can tell data from instructions.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmjudge.core.text.fences import MARKERS
from llmjudge.core.text.templates import render

__all__ = [
    "DEFAULT_HOLDOUT_FRACTION",
    "DEFAULT_TARGET_F1",
    "JUDGE_PLACEHOLDERS",
    "PersonaTemplate",
    "TemplatePair",
    "pairs_csv",
    "render_judge_prompt",
    "render_task_prompt",
    "template_from_dict",
]

DEFAULT_TARGET_F1 = 0.8
DEFAULT_HOLDOUT_FRACTION = 0.25
JUDGE_PLACEHOLDERS = ("input", "correct_output", "answer")

# Fence labels used by the templates and by the blocks appended for missing placeholders.
_FENCE_LABELS = {
    "input": "INPUT",
    "correct_output": "REFERENCE ANSWER",
    "answer": "ANSWER TO JUDGE",
}


@dataclass(frozen=True)
class TemplatePair:
    input: str
    correct_output: str


@dataclass(frozen=True)
class PersonaTemplate:
    key: str
    name: str
    description: str
    task_prompt: str
    judge_prompt: str
    target_f1: float
    pairs: tuple[TemplatePair, ...]
    # Share of the pairs held out (half for selection, half for calibration): a template
    # sets it with its pair count so both held-out splits get enough of each human class.
    holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION


def template_from_dict(data: Mapping[str, Any]) -> PersonaTemplate:
    """A template from its data file's object (keys as the dataclass's fields)."""
    return PersonaTemplate(
        key=str(data["key"]),
        name=str(data["name"]),
        description=str(data["description"]),
        task_prompt=str(data["task_prompt"]),
        judge_prompt=str(data["judge_prompt"]),
        target_f1=float(data.get("target_f1", DEFAULT_TARGET_F1)),
        holdout_fraction=float(data.get("holdout_fraction", DEFAULT_HOLDOUT_FRACTION)),
        pairs=tuple(
            TemplatePair(input=str(p["input"]), correct_output=str(p["correct_output"]))
            for p in data["pairs"]
        ),
    )


def render_judge_prompt(template: str, *, input: str, correct_output: str, answer: str) -> str:
    """Fill a judge prompt's placeholders with fence-neutralised content.

    Equals ``template.format(...)`` for a well-formed template and values without fence
    markers, but never raises on stray braces. A placeholder missing from the template (a
    rewritten prompt may drop one) is appended as a fenced block, so the judge always sees
    the input, the reference and the answer.
    """
    values = {
        "input": MARKERS.neutralise(input),
        "correct_output": MARKERS.neutralise(correct_output),
        "answer": MARKERS.neutralise(answer),
    }
    rendered, seen = render(template, values)
    missing = [
        MARKERS.wrap(_FENCE_LABELS[name], value)
        for name, value in values.items()
        if name not in seen
    ]
    if missing:
        rendered = rendered.rstrip() + "\n\n" + "\n\n".join(missing)
    return rendered


def render_task_prompt(template: str, *, input: str) -> str:
    """Fill a task prompt's ``{input}`` (appended when the template lacks it)."""
    rendered, seen = render(template, {"input": input})
    return rendered if seen else f"{rendered.rstrip()}\n\n{input}"


def pairs_csv(template: PersonaTemplate) -> str:
    """The template's pairs as CSV text with header ``input,correct_output``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["input", "correct_output"])
    writer.writerows((pair.input, pair.correct_output) for pair in template.pairs)
    return buffer.getvalue()
