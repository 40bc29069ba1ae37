"""The starter persona templates, read from the data files in ``templates/`` beside this
module (package data: one JSON object per template, in file-name order).

The files are read once, when this module is imported; their shape and the rendering live in the pure
:mod:`llmjudge.core.personas.templates`.
"""

from __future__ import annotations

import json
from importlib import resources

from llmjudge.core.personas.templates import PersonaTemplate, pairs_csv, template_from_dict

__all__ = ["TEMPLATES", "get_template", "template_pairs_csv"]


def _load() -> dict[str, PersonaTemplate]:
    folder = resources.files("llmjudge.personas") / "templates"
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".json")), key=lambda f: f.name)
    loaded = [template_from_dict(json.loads(f.read_text(encoding="utf-8"))) for f in files]
    return {template.key: template for template in loaded}


TEMPLATES: dict[str, PersonaTemplate] = _load()


def get_template(key: str) -> PersonaTemplate:
    try:
        return TEMPLATES[key]
    except KeyError:
        raise KeyError(f"unknown template {key!r}; available: {', '.join(TEMPLATES)}") from None


def template_pairs_csv(key: str) -> str:
    """The template's pairs as CSV text with header ``input,correct_output``."""
    return pairs_csv(get_template(key))
