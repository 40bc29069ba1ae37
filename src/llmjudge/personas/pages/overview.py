"""The overview tab: estimate, calibration and use as a judge; the start / pause / resume /
clone / delete actions."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from llmjudge.catalog import list_pillars
from llmjudge.core.personas.gate import MIN_CALIBRATION_PER_CLASS
from llmjudge.infra.errors import Invalid, NotFound, bounded_id
from llmjudge.infra.web import PAGE_ERRORS, DbSession, refusal, render
from llmjudge.personas import annotators as agreement_service
from llmjudge.personas import deps, service
from llmjudge.personas import estimate as estimates
from llmjudge.personas import evaluate as ev
from llmjudge.personas.execution import TrainingIn
from llmjudge.personas.pages.common import detail_ctx, see
from llmjudge.personas.schemas import PersonaOut

router = APIRouter(include_in_schema=False)


@router.get("/personas/{persona_id}", response_class=HTMLResponse)
async def overview_page(request: Request, persona_id: int, db: DbSession):
    ctx = await detail_ctx(request, db, persona_id, "overview")
    return await _overview(request, db, ctx)


async def _overview(
    request: Request,
    db: DbSession,
    ctx: dict[str, Any],
    *,
    error: str | None = None,
    code: int = 200,
) -> Response:
    persona: PersonaOut = ctx["persona"]
    try:
        estimate = await estimates.estimate(db=db, llm=request.app.state.llm, persona_id=persona.id)
    except (Invalid, NotFound):  # a model is missing: the page says so already
        estimate = None
    return render(
        request,
        "personas/overview.html",
        status_code=code,
        error=error,
        estimate=estimate,
        calibration=await ev.load_calibration(db=db, persona_id=persona.id),
        agreement=await agreement_service.agreement(db=db, persona_id=persona.id),
        min_calibration=MIN_CALIBRATION_PER_CLASS,
        pillars=await list_pillars(db=db),
        base_url=str(request.base_url).rstrip("/"),
        **ctx,
    )


Action = Literal["start", "pause", "resume", "clone", "delete"]


@router.post("/personas/{persona_id}/actions/{action}")
async def persona_action(request: Request, persona_id: int, action: Action, db: DbSession):
    try:
        if action in ("start", "resume"):
            choice = await _training_choice(request)
            await deps.begin_training(
                request, db, persona_id, resume=action == "resume", choice=choice
            )
            return see(f"/personas/{persona_id}/progress")
        if action == "pause":
            await deps.pause_training(request, db, persona_id)
            return see(f"/personas/{persona_id}/progress")
        if action == "clone":
            copy = await service.clone_persona(db=db, persona_id=persona_id)
            return see(f"/personas/{copy.id}")
        await deps.delete_persona(request, db, persona_id)
        return see("/personas")
    except PAGE_ERRORS as e:
        await db.rollback()
        found = refusal(e)
        ctx = await detail_ctx(request, db, persona_id, "overview")
        return await _overview(request, db, ctx, error=found.message, code=found.status)


async def _training_choice(request: Request) -> TrainingIn | None:
    """Live or batch judge labels from the start/resume form (None: a form without the
    choice, an embedding judge's: as stored)."""
    form = await request.form()
    execution = form.get("execution")
    if execution is None:
        return None
    if execution not in ("live", "batch"):
        raise Invalid("execution must be live or batch")
    fallback = "live" if form.get("batch_fallback") == "live" else "none"
    return TrainingIn(execution=execution, batch_fallback=fallback)


@router.post("/personas/{persona_id}/sessions")
async def use_as_judge(request: Request, persona_id: int, db: DbSession):
    """A tournament session judged by the persona (the twin of the API route)."""
    form = await request.form()
    try:
        values: dict[str, Any] = {
            "session_name": str(form.get("session_name", "")),
            # bounded_id, not isdigit() + int(): "²" or 5,000 digits was a 500, "٣" pillar 3.
            "pillar_ids": [
                bounded_id(str(v), name="each of pillar_ids")
                for v in form.getlist("pillar_ids")
                if str(v).strip()
            ],
            "comparison_mode": str(form.get("comparison_mode") or "pillar_sample"),
            "auto_start": form.get("auto_start") == "on",
        }
        data = ev.PersonaSessionIn.model_validate(values)
        session = await ev.create_persona_session(
            db=db,
            persona_id=persona_id,
            data=data,
            hub=getattr(request.app.state, "events", None),
            allow_untrained=form.get("allow_untrained") == "on",
        )
    except PAGE_ERRORS as e:
        await db.rollback()
        found = refusal(e)
        return render(
            request,
            "personas/_session_created.html",
            status_code=found.status,
            error=found.message,
        )
    return render(request, "personas/_session_created.html", session=session)
