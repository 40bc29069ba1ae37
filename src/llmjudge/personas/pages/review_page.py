"""The review screen: one decision at a time in the stable review order (``review.py``
holds the rule), agree / disagree, agree with all."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from llmjudge.auth import CurrentPrincipal
from llmjudge.infra.errors import DOMAIN_ERRORS, Invalid, NotFound
from llmjudge.infra.web import DbSession, is_htmx, refusal, render
from llmjudge.personas import iterations as iteration_service
from llmjudge.personas import review, service
from llmjudge.personas.deps import wake_runner
from llmjudge.personas.pages.common import see
from llmjudge.personas.schemas import BulkFeedbackIn, FeedbackIn

router = APIRouter(include_in_schema=False)


async def _review_ctx(
    db: DbSession, persona_id: int, number: int, decision_id: int | None
) -> dict[str, Any]:
    persona = await service.get_persona(db=db, persona_id=persona_id)
    iterations = await iteration_service.list_iterations(db=db, persona_id=persona_id)
    iteration = next((it for it in iterations if it.number == number), None)
    if iteration is None:
        raise NotFound(f"persona {persona_id} has no iteration {number}")
    state = await review.review_position(
        db=db, persona_id=persona_id, number=number, decision_id=decision_id
    )
    return {
        "persona": persona,
        "iteration": iteration,
        "review": state,
        # The summary once all are reviewed, unless a decision was asked for by name.
        "show_done": state.done and decision_id is None,
        "open": iteration.status == "awaiting_review",
        "base": f"/personas/{persona_id}/review/{number}",
    }


@router.get("/personas/{persona_id}/review/{number}", response_class=HTMLResponse)
async def review_page(
    request: Request, persona_id: int, number: int, db: DbSession, decision: int | None = None
):
    ctx = await _review_ctx(db, persona_id, number, decision)
    if is_htmx(request):
        return render(request, "personas/_review_panel.html", **ctx)
    return render(request, "personas/review.html", **ctx)


async def _after_review(
    request: Request,
    db: DbSession,
    persona_id: int,
    number: int,
    pending: int,
    current: int | None,
) -> Response:
    if pending == 0:
        wake_runner(request)
    if not is_htmx(request):
        return see(f"/personas/{persona_id}/review/{number}")
    ctx = await _review_ctx(db, persona_id, number, current)
    following = ctx["review"].next_pending
    # The next undecided one, or (None) the summary when none is left.
    ctx = await _review_ctx(db, persona_id, number, None if following is None else following.id)
    return render(request, "personas/_review_panel.html", **ctx)


@router.post("/personas/{persona_id}/review/{number}/decisions/{decision_id}")
async def review_decide(
    request: Request,
    persona_id: int,
    number: int,
    decision_id: int,
    db: DbSession,
    principal: CurrentPrincipal,
):
    form = await request.form()
    agrees = str(form.get("agrees", "")).lower()
    if agrees not in ("true", "false"):
        raise Invalid("agrees must be true or false")
    notes = str(form.get("notes") or "").strip() or None
    try:
        _, pending = await review.feedback(
            db=db,
            persona_id=persona_id,
            decision_id=decision_id,
            data=FeedbackIn(agrees=agrees == "true", notes=notes),
            reviewer=principal.username,
        )
    except DOMAIN_ERRORS as e:
        return await _refused(request, db, persona_id, number, decision_id, e)
    return await _after_review(request, db, persona_id, number, pending, decision_id)


async def _refused(
    request: Request,
    db: DbSession,
    persona_id: int,
    number: int,
    decision_id: int | None,
    exc: Exception,
) -> Response:
    """The review panel again, with why the feedback was refused."""
    await db.rollback()
    found = refusal(exc)
    ctx = await _review_ctx(db, persona_id, number, decision_id)
    return render(
        request, "personas/_review_panel.html", status_code=found.status, error=found.message, **ctx
    )


@router.post("/personas/{persona_id}/review/{number}/agree-all")
async def review_agree_all(
    request: Request, persona_id: int, number: int, db: DbSession, principal: CurrentPrincipal
):
    pending = await review.list_decisions(
        db=db, persona_id=persona_id, number=number, pending_only=True
    )
    left = 0
    if pending:
        try:
            out = await review.bulk_feedback(
                db=db,
                persona_id=persona_id,
                number=number,
                data=BulkFeedbackIn(decision_ids=[d.id for d in pending], agrees=True),
                reviewer=principal.username,
            )
        except DOMAIN_ERRORS as e:
            return await _refused(request, db, persona_id, number, None, e)
        left = out.pending_review
    return await _after_review(request, db, persona_id, number, left, None)
