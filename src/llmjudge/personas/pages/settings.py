"""The settings tab: the persona's settings form."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from llmjudge.infra.web import PAGE_ERRORS, DbSession, refusal, render
from llmjudge.personas import service
from llmjudge.personas.pages.common import (
    SETTINGS_FIELDS,
    detail_ctx,
    form_fields,
    see,
)
from llmjudge.personas.schemas import PersonaOut, PersonaPatch

router = APIRouter(include_in_schema=False)


def settings_changes(current: PersonaOut, submitted: Mapping[str, Any]) -> dict[str, Any]:
    """Only the fields whose value differs, so an unchanged box never trips the rule that
    some settings cannot change while training."""
    patch = PersonaPatch.model_validate(submitted)
    changes = patch.model_dump(exclude_unset=True)
    return {k: v for k, v in changes.items() if getattr(current, k) != v}


@router.get("/personas/{persona_id}/settings", response_class=HTMLResponse)
async def settings_page(request: Request, persona_id: int, db: DbSession):
    ctx = await detail_ctx(request, db, persona_id, "settings")
    return render(request, "personas/settings.html", errors=[], values=None, **ctx)


@router.post("/personas/{persona_id}/settings", response_class=HTMLResponse)
async def settings_submit(request: Request, persona_id: int, db: DbSession):
    form = await request.form()
    values = form_fields(form, SETTINGS_FIELDS)
    current = await service.get_persona(db=db, persona_id=persona_id)
    try:
        changes = settings_changes(current, values)
        if changes:
            await service.update_persona(
                db=db, persona_id=persona_id, patch=PersonaPatch.model_validate(changes)
            )
    except PAGE_ERRORS as e:
        await db.rollback()
        found = refusal(e)
        ctx = await detail_ctx(request, db, persona_id, "settings")
        return render(
            request,
            "personas/settings.html",
            status_code=found.status,
            errors=found.messages,
            values=values,
            **ctx,
        )
    return see(f"/personas/{persona_id}/settings?saved=1")
