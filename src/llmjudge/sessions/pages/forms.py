"""The configuration form: reading its fields into SessionIn's shape, naming validation
errors by field, its starting values. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from llmjudge.catalog import PillarOut
from llmjudge.core.judging.prompts import CRITERIA_SETS
from llmjudge.sessions.schemas import AdaptiveIn, CreateMode, SessionIn

MODES: tuple[tuple[CreateMode, str, str], ...] = (
    ("pillar_sample", "Pillar sample", "each pair of pillars: a sample of threads from each"),
    ("round_robin", "Round robin", "every thread against every thread of the other pillars"),
    ("free_for_all", "Free for all", "every thread against every other thread"),
    (
        "single",
        "Single-answer grading",
        "each thread graded alone on a scale (MT-Bench's 1-10 [[rating]] by default; a "
        "likert or custom score rule as the verdict format), against a reference answer "
        "where its metadata has one; models are ranked by their grades",
    ),
    (
        "adaptive",
        "Adaptive",
        "rounds of pairs chosen where the ranking is still uncertain, until a rule or a "
        "budget stops it",
    ),
)
# The adaptive options, as form fields named "adaptive_<option>".
ADAPTIVE_FIELDS = tuple(AdaptiveIn.model_fields)
FIELD_LABELS = {
    "session_name": "Tournament name",
    "pillar_ids": "Pillars",
    "comparison_mode": "Comparison mode",
    "samples_per_pillar": "Samples per pillar",
    "repetitions_per_pair": "Repetitions",
    "max_threads_per_pillar": "Max threads per pillar",
    "position_swap": "Position swap",
    "sampling": "Sampling",
    "worker_count": "Workers",
    "calculate_elo": "Elo",
    "judge_model_id": "Judge model",
    "baseline_pillar_id": "Baseline pillar",
    "match_by_prompt_key": "Match by prompt",
    "criteria": "Criteria",
    "prompt_template": "Prompt template",
    "system_prompt": "System prompt",
    "verdict_format": "Verdict format",
    "seed": "Seed",
    "execution": "Execution",
    "batch_fallback": "Batch fallback",
    "panel": "Panel",
    "adaptive": "Adaptive",
    "form": "Form",
}
# Rules the form offers (weighted and calibrated need weights or a labelled run: the API).
FORM_PANEL_RULES = ("majority", "mean", "cascade")
_INT_FIELDS = (
    "samples_per_pillar",
    "repetitions_per_pair",
    "max_threads_per_pillar",
    "worker_count",
    "judge_model_id",
    "baseline_pillar_id",
    "seed",
)
_TEXT_FIELDS = (
    "session_name",
    "comparison_mode",
    "sampling",
    "prompt_template",
    "system_prompt",
    "execution",
)
_CHECKBOXES = ("position_swap", "calculate_elo", "match_by_prompt_key")
Errors = dict[str, list[str]]


def session_form(form: Any) -> dict[str, Any]:
    """SessionIn fields from the configuration form (a starlette ``FormData`` or a dict of
    lists): an unticked box is False, an empty box is the field's default, criteria are
    comma separated; the baseline is dropped in free-for-all, where the form disables it."""

    def values(name: str) -> list[str]:
        got = form.getlist(name) if hasattr(form, "getlist") else form.get(name, [])
        return [str(v).strip() for v in (got if isinstance(got, list) else [got])]

    def first(name: str) -> str:
        found = values(name)
        return found[0] if found else ""

    out: dict[str, Any] = {"pillar_ids": [v for v in values("pillar_ids") if v]}
    for name in (*_TEXT_FIELDS, *_INT_FIELDS):
        if value := first(name):
            out[name] = value
    if "session_name" not in out:
        out["session_name"] = ""
    for name in _CHECKBOXES:
        out[name] = bool(first(name))
    if first("batch_fallback") == "live":
        out["batch_fallback"] = "live"
    if verdict_format := first("verdict_format"):
        # JSON ({"kind": "labels", "rules": [...]}) or a bare kind ("tags"); what is neither
        # is left as text for SessionIn to refuse with a message.
        try:
            out["verdict_format"] = json.loads(verdict_format)
        except json.JSONDecodeError:
            out["verdict_format"] = verdict_format
    # a named set wins over the text box, which holds the user's own list ("custom")
    if (chosen_set := first("criteria_set")) in CRITERIA_SETS:
        out["criteria"] = list(CRITERIA_SETS[chosen_set].criteria)
    elif criteria := first("criteria"):
        out["criteria"] = [c.strip() for c in criteria.split(",") if c.strip()]
    if out.get("comparison_mode") in ("free_for_all", "adaptive", "single"):
        out.pop("baseline_pillar_id", None)
    # Two or more ticked panel members make a panel (in the listed order: a cascade asks
    # the first first); one ticked member is just that judge.
    members = [v for v in values("panel_model_ids") if v]
    if len(members) >= 2:
        rule = first("panel_rule") or "majority"
        out["panel"] = {"members": [{"model_id": m} for m in members], "rule": rule}
        out.pop("judge_model_id", None)
    elif len(members) == 1:
        out["judge_model_id"] = members[0]
    if out.get("comparison_mode") == "adaptive":
        out["adaptive"] = {
            name: value for name in ADAPTIVE_FIELDS if (value := first(f"adaptive_{name}"))
        }
    return out


def field_errors(exc: ValidationError) -> Errors:
    """Messages by form field ("form" for whole-form checks), without echoing the input."""
    errors: Errors = {}
    for e in exc.errors(include_input=False, include_url=False):
        loc = e["loc"]
        name = str(loc[0]) if loc and str(loc[0]) in FIELD_LABELS else "form"
        message = e["msg"].removeprefix("Value error, ")
        if name == "pillar_ids" and e["type"] == "too_short":
            message = "choose at least one pillar"
        errors.setdefault(name, []).append(message)
    return errors


def default_values(pillars: Sequence[PillarOut], now: datetime) -> dict[str, Any]:
    """The form's starting values: SessionIn's defaults, every non-empty pillar chosen."""
    fields = SessionIn.model_fields
    return {
        "session_name": f"Tournament {now:%Y-%m-%d %H:%M}",
        "pillar_ids": [p.id for p in pillars if p.thread_count > 0],
        "criteria": list(fields["criteria"].default_factory()),  # type: ignore[misc]
        **{
            name: fields[name].default
            for name in (
                *_INT_FIELDS,
                *_CHECKBOXES,
                "comparison_mode",
                "sampling",
                "execution",
                "batch_fallback",
            )
        },
    }
