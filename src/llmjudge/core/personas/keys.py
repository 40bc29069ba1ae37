"""Content keys of the calibration loop (pure): stored answers and pairs are found by hash,
so a changed prompt, model or input is answered again while an unchanged one is reused."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def sha256(*parts: Any) -> str:
    blob = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def input_hash(input: str, input_b: str | None) -> str:
    return sha256("input", input, input_b)


def pair_hash(input: str, input_b: str | None, system: str | None, answer: str | None) -> str:
    """A pair's identity: its input and whose answer it is. The same question may carry
    several systems' answers (a calibration set of 9 models x 400 questions); a named
    ``system`` identifies its answer, else the answer's text does (None: the task model's)."""
    if system is not None:
        return sha256("pair", input, input_b, "system", system)
    return sha256("pair", input, input_b, "answer", answer)


def prompt_hash(task_model_id: int | None, task_prompt: str) -> str:
    """Key of the task outputs: a new prompt or a new task model answers again."""
    return sha256("task", task_model_id, task_prompt)


def task_input(input: str, input_b: str | None) -> str:
    """The text given to the task prompt's ``{input}``: the second input follows the first."""
    return input if not input_b else f"{input}\n\n{input_b}"
