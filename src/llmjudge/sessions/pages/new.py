"""The configuration page: the form, its live estimate (with each mode's comparison
count), and "Create", which starts the session and goes to its live page. Twins:
`POST /api/sessions/estimate`, `POST /api/sessions/estimate/modes`,
`POST /api/sessions/estimate/adaptive`, `POST /api/sessions`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import list_pillars, prompt_key_coverage
from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.judging.prompts import (
    CRITERIA_SETS,
    DEFAULT_CRITERIA,
    SYSTEM_PROMPT,
    builtin_template,
    criteria_set_of,
)
from llmjudge.infra.errors import Invalid
from llmjudge.infra.web import DbSession, is_htmx, render
from llmjudge.providers import BUILTIN_SIMULATED_MODELS, ModelOut, list_models
from llmjudge.sessions import estimates, reads, service
from llmjudge.sessions.adaptive import state as adaptive
from llmjudge.sessions.deps import get_tester
from llmjudge.sessions.pages.common import hub
from llmjudge.sessions.pages.forms import (
    FIELD_LABELS,
    MODES,
    Errors,
    default_values,
    field_errors,
    session_form,
)
from llmjudge.sessions.schemas import SessionIn

router = APIRouter(include_in_schema=False)


# The built-in simulator's other roles (task model, prompt engineer) are no judges.
_NOT_JUDGES = frozenset(role for _, role in BUILTIN_SIMULATED_MODELS if role != "judge")


def judge_capable(m: ModelOut) -> bool:
    return not (m.simulated and m.model in _NOT_JUDGES)


async def _judge_models(db: AsyncSession) -> list[ModelOut]:
    """Judge choices: the built-in simulated judge first; simulators of other roles left out."""
    models = [m for m in await list_models(db=db) if judge_capable(m)]
    return sorted(models, key=lambda m: (m.name != reads.BUILTIN_JUDGE, m.provider_name, m.name))


async def _estimate_context(db: AsyncSession, values: dict[str, Any]) -> dict[str, Any]:
    """The estimate fragment's context for the form's values. The name is not needed to
    estimate: a blank one is only reported on "Create"."""
    ctx: dict[str, Any] = {"estimate": None, "adaptive": None, "errors": {}, "counts": {}}
    try:
        # the form's own notes (why a default is on) are not session fields
        fields = {k: v for k, v in values.items() if k in SessionIn.model_fields}
        data = SessionIn.model_validate(fields | {"session_name": "estimate"})
    except ValidationError as exc:
        ctx["errors"] = field_errors(exc)
        return ctx
    try:
        if data.comparison_mode == "adaptive":
            ctx["estimate"], ctx["adaptive"] = await adaptive.adaptive_estimates(db=db, data=data)
        else:
            ctx["estimate"] = await estimates.estimate_new(db=db, data=data)
    except Invalid as exc:
        ctx["errors"] = {"form": [str(exc)]}
    chosen = ctx["estimate"].total_comparisons if ctx["estimate"] is not None else None
    counts = await estimates.estimate_modes(db=db, data=data, chosen_total=chosen)
    ctx["counts"] = {mode: (c.comparisons, c.reason) for mode, c in counts.items()}
    if chosen is not None and data.comparison_mode == "adaptive":
        ctx["counts"]["adaptive"] = (chosen, None)  # the estimate's median
    return ctx


async def _form_page(
    request: Request,
    db: AsyncSession,
    values: dict[str, Any],
    *,
    status_code: int = 200,
    create_errors: Errors | None = None,
) -> HTMLResponse:
    pillars = await list_pillars(db=db)
    chosen = {str(v) for v in values.get("pillar_ids", [])}
    return render(
        request,
        "sessions/new.html",
        status_code=status_code,
        pillars=pillars,
        chosen=chosen,
        values=values,
        modes=MODES,
        models=await _judge_models(db),
        create_errors=create_errors or {},
        field_labels=FIELD_LABELS,
        criteria_sets=CRITERIA_SETS,
        criteria_set=values.get("criteria_set") or criteria_set_of(values.get("criteria") or []),
        # What the judge is told when nothing is changed, shown read-only beside the fields.
        builtin_system=SYSTEM_PROMPT,
        builtin_template=builtin_template(values.get("criteria") or DEFAULT_CRITERIA),
        builtin_format=json.dumps(VerdictFormat().model_dump(mode="json"), indent=2),
        **await _estimate_context(db, values),
    )


@router.get("/sessions/new", response_class=HTMLResponse)
async def new_session_page(request: Request, db: DbSession):
    pillars = await list_pillars(db=db)
    values = default_values(pillars, datetime.now(UTC))
    keyed, total = await prompt_key_coverage(db=db, pillar_ids=values["pillar_ids"])
    if total and keyed == total:
        # Answers to prompts (a benchmark, the demo): compare answers to the same question,
        # as every public benchmark does, on answer-quality criteria.
        values |= {
            "match_by_prompt_key": True,
            "prompt_default": True,
            "criteria_set": "answer_quality",
            "criteria": list(CRITERIA_SETS["answer_quality"].criteria),
        }
    return await _form_page(request, db, values)


@router.post("/sessions/new/estimate", response_class=HTMLResponse)
async def estimate_fragment(request: Request, db: DbSession):
    """The summary (threads, comparisons, duration, cost, warnings) and, out of band, each
    mode's comparison count and the duration at the chosen worker count."""
    ctx = await _estimate_context(db, session_form(await request.form()))
    status_code = 422 if ctx["errors"] else 200
    return render(
        request,
        "sessions/_estimate.html",
        status_code=status_code,
        oob=True,
        modes=MODES,
        field_labels=FIELD_LABELS,
        **ctx,
    )


@router.post("/sessions/new")
async def create_session_submit(request: Request, db: DbSession):
    """Create and start; 303 to the live page (HX-Redirect for HTMX). Errors: 422 with the
    error list (HTMX) or the whole form again."""
    values = session_form(await request.form())
    errors: Errors = {}
    try:
        data = SessionIn.model_validate(values | {"auto_start": True})
    except ValidationError as exc:
        errors = field_errors(exc)
    else:
        try:
            created = await service.create_session(
                db=db, data=data, hub=hub(request), llm=get_tester(request)
            )
        except Invalid as exc:
            errors = {"form": [str(exc)]}
        else:
            url = f"/sessions/{created.id}"
            if is_htmx(request):
                return Response(status_code=200, headers={"HX-Redirect": url})
            return RedirectResponse(url, status_code=303)
    if is_htmx(request):
        return render(
            request,
            "sessions/_create_errors.html",
            status_code=422,
            create_errors=errors,
            field_labels=FIELD_LABELS,
        )
    return await _form_page(request, db, values, status_code=422, create_errors=errors)
