"""What every persona page shares: who may write, form parsing, the header of the detail
tabs (persona, training status, models), redirects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import RedirectResponse

from llmjudge.core.access import Role
from llmjudge.infra.web import DbSession
from llmjudge.personas import iterations as iteration_service
from llmjudge.personas import service
from llmjudge.personas.deps import running_here
from llmjudge.providers import list_models

METRICS = ("f1", "precision", "recall", "kappa", "accuracy")
METRIC_LABELS = {
    "f1": "F1",
    "precision": "Precision",
    "recall": "Recall",
    "kappa": "Cohen's kappa",
    "accuracy": "Accuracy",
}
STEP_WORDS = {
    "generating": "generating answers",
    "judging": "judging answers",
    "awaiting_review": "waiting for human review",
    "optimising": "rewriting the judge prompt",
    "done": "finished",
}
CREATE_FIELDS = ("name", "judge_prompt", *service.CHOSEN_SETTINGS)
SETTINGS_FIELDS = tuple(f for f in CREATE_FIELDS if f not in ("judge_prompt", "judge_kind"))
# Empty boxes of these mean "none" rather than "invalid".
_OPTIONAL = {"budget_usd", "task_model_id", "judge_model_id", "engineer_model_id"}


def can_write(request: Request) -> bool:
    """Whether the signed-in user may change personas (researchers and admins)."""
    principal = getattr(request.state, "principal", None)
    return principal is not None and principal.role.covers(Role.researcher)


def form_fields(form: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """Submitted fields (stripped of outer whitespace only for one-line values); an empty
    optional box is None."""
    out: dict[str, Any] = {}
    for name in names:
        if name not in form:
            continue
        value = str(form[name])
        if name in _OPTIONAL and not value.strip():
            out[name] = None
        elif name in ("task_prompt", "judge_prompt", "description"):
            out[name] = value.replace("\r\n", "\n")
        else:
            out[name] = value.strip()
    return out


async def models_by_id(db: DbSession) -> dict[int, Any]:
    return {m.id: m for m in await list_models(db=db)}


async def detail_ctx(request: Request, db: DbSession, persona_id: int, tab: str) -> dict:
    persona = await service.get_persona(db=db, persona_id=persona_id)
    status = await iteration_service.training_status(
        db=db, persona_id=persona_id, running_here=running_here(request, persona_id)
    )
    return {
        "persona": persona,
        "status": status,
        "models": await models_by_id(db),
        "tab": tab,
        "can_write": can_write(request),
        "step_words": STEP_WORDS,
    }


def see(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)
