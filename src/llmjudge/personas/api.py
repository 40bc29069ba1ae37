"""Personas JSON API: CRUD, training pairs, the calibration loop, review, reports; the
twin of every persona page that shows data."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Body, File, HTTPException, Query, Request, UploadFile, status
from fastapi.responses import Response
from sse_starlette import EventSourceResponse

from llmjudge.auth import CurrentPrincipal
from llmjudge.catalog import RowError
from llmjudge.infra.errors import ID_MAX
from llmjudge.infra.events.sse import sse_response
from llmjudge.infra.rowfiles import rejection
from llmjudge.infra.web import IMPORT_BUSY, DbSession, ImportSlot, Number, Offset
from llmjudge.personas import annotators as agreement_service
from llmjudge.personas import deps, prompt_versions, reports, review, service
from llmjudge.personas import estimate as estimates
from llmjudge.personas import execution as persona_execution
from llmjudge.personas import iterations as iteration_service
from llmjudge.personas import pairs as pair_service
from llmjudge.personas.annotators import AgreementOut
from llmjudge.personas.execution import TrainingIn
from llmjudge.personas.schemas import (
    SPLIT_QUERY_HELP,
    BulkFeedbackIn,
    BulkFeedbackOut,
    CloneIn,
    DecisionOut,
    EstimateOut,
    FeedbackIn,
    FeedbackOut,
    FromTemplateIn,
    IterationOut,
    MetricsRow,
    PairOut,
    PairUploadResult,
    PersonaIn,
    PersonaOut,
    PersonaPatch,
    PersonaStatus,
    PromptDiffOut,
    PromptEditIn,
    PromptVersionOut,
    ReportOut,
    ReviewQueueOut,
    SplitQuery,
    TemplateOut,
    TrainingStatusOut,
    canonical_split,
)
from llmjudge.personas.starters import TEMPLATES
from llmjudge.personas.summaries import PersonaSummary, matching, summaries
from llmjudge.sessions import BatchOut

router = APIRouter(prefix="/api/personas", tags=["personas"])


class RowsRejected(HTTPException):
    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=rejection(errors).detail(),
        )


_ROW_ERRORS = {
    422: {"description": "Row errors: `detail.errors` is a list of {line, field, message}"}
}


@router.get("", response_model=list[PersonaOut])
async def list_personas(db: DbSession) -> list[PersonaOut]:
    """All personas."""
    return await service.list_personas(db=db)


@router.post("", response_model=PersonaOut, status_code=status.HTTP_201_CREATED)
async def create_persona(data: PersonaIn, db: DbSession) -> PersonaOut:
    """A draft persona. The judge model must differ from the task model; target F1 is
    0.70-0.95; the judge prompt must use {input}, {correct_output} and {answer}."""
    return await service.create_persona(db=db, data=data)


@router.get("/summaries", response_model=list[PersonaSummary])
async def list_summaries(
    db: DbSession,
    status: PersonaStatus | None = None,
    q: Annotated[str | None, Query(max_length=200, description="part of the name")] = None,
) -> list[PersonaSummary]:
    """Personas with their latest metrics, iteration count and training cost, by name,
    filtered by status and a case-insensitive part of the name (the personas page)."""
    return matching(await summaries(db=db), status=status, q=q)


@router.get("/templates", response_model=list[TemplateOut])
async def list_templates() -> list[TemplateOut]:
    """Starter templates for `POST /api/personas/from-template/{key}`."""
    return [
        TemplateOut(key=t.key, name=t.name, description=t.description, pairs=len(t.pairs))
        for t in TEMPLATES.values()
    ]


@router.post("/from-template/{key}", response_model=PersonaOut, status_code=status.HTTP_201_CREATED)
async def create_from_template(
    key: str, db: DbSession, overrides: Annotated[FromTemplateIn | None, Body()] = None
) -> PersonaOut:
    """A draft persona with a template's prompts and pairs; models default to the built-in
    simulated ones (`simulated-task`, `simulated-judge`, `simulated-engineer`)."""
    return await service.create_from_template(
        db=db, key=key, overrides=overrides or FromTemplateIn()
    )


@router.get("/{persona_id}", response_model=PersonaOut)
async def get_persona(persona_id: int, db: DbSession) -> PersonaOut:
    """A persona with its current judge prompt, pair count and latest iteration."""
    return await service.get_persona(db=db, persona_id=persona_id)


@router.patch("/{persona_id}", response_model=PersonaOut)
async def update_persona(persona_id: int, patch: PersonaPatch, db: DbSession) -> PersonaOut:
    """Change settings. While training only the name, description, budget, target F1 and
    max iterations can change; the held-out fraction only before the first iteration."""
    return await service.update_persona(db=db, persona_id=persona_id, patch=patch)


@router.delete("/{persona_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_persona(persona_id: int, request: Request, db: DbSession) -> None:
    """Delete a persona that is not training, with its pairs, prompts and history (its
    judge's batch jobs still at the provider are cancelled there)."""
    await deps.delete_persona(request, db, persona_id)


@router.post("/{persona_id}/clone", response_model=PersonaOut, status_code=201)
async def clone_persona(
    persona_id: int, db: DbSession, data: Annotated[CloneIn | None, Body()] = None
) -> PersonaOut:
    """A draft copy with the current judge prompt as version 1 and the same pairs."""
    return await service.clone_persona(
        db=db, persona_id=persona_id, name=data.name if data else None
    )


@router.get(
    "/{persona_id}/events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def persona_events(persona_id: int, request: Request, db: DbSession) -> EventSourceResponse:
    """Server-sent events of topic `persona:{id}`: `ready`, `iteration_started`,
    `outputs_generated` {n, total}, `judged` {n, total}, `awaiting_review`, `metrics`,
    `prompt_version`, `converged`, `incomplete`, `paused`, `batch_status` {batches: the
    judge's batch jobs and their states, execution batch}."""
    await service.get_persona(db=db, persona_id=persona_id)  # 404 for an unknown persona
    await db.close()  # hold no connection for the life of the stream
    return sse_response(request, request.app.state.events, f"persona:{persona_id}")


# -- training pairs --------------------------------------------------------------------------


@router.post(
    "/{persona_id}/training-pairs/upload",
    response_model=PairUploadResult,
    responses=_ROW_ERRORS | IMPORT_BUSY,
    dependencies=[ImportSlot],
)
async def upload_pairs(
    persona_id: int,
    request: Request,
    db: DbSession,
    file: Annotated[UploadFile, File(description="CSV: input, correct_output[, input_b]")],
    preview: bool = False,
) -> PairUploadResult:
    """Add training pairs from a CSV, all or nothing. `?preview=true` validates and returns
    the first rows without storing. Rows identical to stored pairs are skipped; new pairs
    join the three splits (stratified by uploaded label, the answers to one input together)
    while stored pairs keep theirs. Optional columns: `answer` (no task model is then
    called), `system` (whose answer: one input may have several answers, one pair each),
    `human_label`, `annotator`. Only an exact repeat (the same input and answer, or input
    and system) is refused, naming both lines."""
    parsed = await pair_service.parse_pairs_upload(file, request.app.state.settings)
    if parsed.errors:
        raise RowsRejected(parsed.errors)
    try:
        return await pair_service.store_pairs(
            db=db, persona_id=persona_id, rows=parsed.rows, lines=parsed.lines, preview=preview
        )
    except pair_service.RowsRejected as e:
        raise RowsRejected(e.errors) from None


@router.get("/{persona_id}/training-pairs", response_model=list[PairOut])
async def list_pairs(
    persona_id: int,
    db: DbSession,
    split: Annotated[SplitQuery | None, Query(description=SPLIT_QUERY_HELP)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    offset: Offset = 0,
) -> list[PairOut]:
    """Pairs in upload order, each with its split, answer and uploaded labels."""
    return await pair_service.list_pairs(
        db=db, persona_id=persona_id, split=canonical_split(split), limit=limit, offset=offset
    )


# -- training --------------------------------------------------------------------------------


@router.post("/{persona_id}/training/start", response_model=PersonaOut)
async def start_training(
    persona_id: int, request: Request, db: DbSession, body: TrainingIn | None = None
) -> PersonaOut:
    """Start the loop of a draft persona (409 otherwise); the body chooses live or batch
    judge labels (422 for batch with a judge whose provider has no batch API, unless
    `batch_fallback` is live)."""
    return await deps.begin_training(request, db, persona_id, resume=False, choice=body)


@router.post("/{persona_id}/training/pause", response_model=PersonaOut)
async def pause_training(persona_id: int, request: Request, db: DbSession) -> PersonaOut:
    """Pause: calls in flight finish and are stored; nothing new starts."""
    return await deps.pause_training(request, db, persona_id)


@router.post("/{persona_id}/training/resume", response_model=PersonaOut)
async def resume_training(
    persona_id: int, request: Request, db: DbSession, body: TrainingIn | None = None
) -> PersonaOut:
    """Resume a paused persona from its last stored step (a body changes live or batch;
    without one, as it was)."""
    return await deps.begin_training(request, db, persona_id, resume=True, choice=body)


@router.get("/{persona_id}/batches", response_model=list[BatchOut])
async def persona_batches(persona_id: int, db: DbSession) -> list[BatchOut]:
    """The provider batch jobs of a persona trained in batch mode (its judge's labels),
    with their states. Page twin: the training page's batch jobs panel."""
    return await persona_execution.persona_batches_out(db=db, persona_id=persona_id)


@router.get("/{persona_id}/training/status", response_model=TrainingStatusOut)
async def training_status(persona_id: int, request: Request, db: DbSession) -> TrainingStatusOut:
    """Status (and why: paused, budget, timeout), the latest iteration with its review
    progress, and the money spent so far."""
    return await iteration_service.training_status(
        db=db, persona_id=persona_id, running_here=deps.running_here(request, persona_id)
    )


@router.get("/{persona_id}/estimate", response_model=EstimateOut)
async def estimate(persona_id: int, request: Request, db: DbSession) -> EstimateOut:
    """Calls, tokens and cost of one iteration and of `max_iterations`, before training."""
    return await estimates.estimate(db=db, llm=request.app.state.llm, persona_id=persona_id)


# -- judge prompt versions -------------------------------------------------------------------


@router.get("/{persona_id}/prompts", response_model=list[PromptVersionOut])
async def list_prompts(persona_id: int, db: DbSession) -> list[PromptVersionOut]:
    """Judge prompt versions, oldest first, each by `ai` or `human` with a rationale."""
    return await prompt_versions.list_versions(db=db, persona_id=persona_id)


@router.post("/{persona_id}/prompts", response_model=PromptVersionOut, status_code=201)
async def edit_prompt(
    persona_id: int, data: PromptEditIn, request: Request, db: DbSession
) -> PromptVersionOut:
    """A hand-edited judge prompt: a new human version, used from the next iteration."""
    out = await prompt_versions.add_version(
        db=db, persona_id=persona_id, text=data.text, rationale=data.rationale
    )
    await deps.announce_prompt_version(request, persona_id, out)
    return out


@router.get("/{persona_id}/prompts/diff", response_model=PromptDiffOut)
async def diff_prompts(persona_id: int, db: DbSession, a: Number, b: Number) -> PromptDiffOut:
    """Unified diff of version a -> b, and line opcodes for a side-by-side view."""
    return await prompt_versions.diff_versions(db=db, persona_id=persona_id, a=a, b=b)


@router.post(
    "/{persona_id}/prompts/{version}/rollback", response_model=PromptVersionOut, status_code=201
)
async def rollback_prompt(
    persona_id: int, version: int, request: Request, db: DbSession
) -> PromptVersionOut:
    """A new human version with the text of `version`."""
    out = await prompt_versions.rollback_version(db=db, persona_id=persona_id, version=version)
    await deps.announce_prompt_version(request, persona_id, out)
    return out


# -- iterations and review -------------------------------------------------------------------


@router.get("/{persona_id}/iterations", response_model=list[IterationOut])
async def list_iterations(persona_id: int, db: DbSession) -> list[IterationOut]:
    """Iterations with status, metrics of both parts, timings, cost and review progress."""
    return await iteration_service.list_iterations(db=db, persona_id=persona_id)


@router.get("/{persona_id}/iterations/{number}/decisions", response_model=list[DecisionOut])
async def list_decisions(
    persona_id: int,
    number: int,
    db: DbSession,
    pending: bool = False,
    split: Annotated[SplitQuery | None, Query(description=SPLIT_QUERY_HELP)] = None,
    order: Annotated[
        review.ReviewOrder,
        Query(
            description="`pending_first`: unreviewed first (a work queue); `stable`: the "
            "review page's order, carried-forward decisions last, none moving once reviewed"
        ),
    ] = "pending_first",
) -> list[DecisionOut]:
    """The judge's decisions of an iteration in review order: least confident first,
    optimisation before the others, then by pair; unreviewed first unless `order=stable`.
    Carried-forward decisions come pre-labelled."""
    return await review.list_decisions(
        db=db,
        persona_id=persona_id,
        number=number,
        pending_only=pending,
        split=canonical_split(split),
        order=order,
    )


@router.get("/{persona_id}/iterations/{number}/review", response_model=ReviewQueueOut)
async def review_queue(
    persona_id: int,
    number: int,
    db: DbSession,
    decision: Annotated[
        int | None, Query(ge=1, le=ID_MAX, description="the decision to show")
    ] = None,
) -> ReviewQueueOut:
    """The review page's data: the iteration's decisions in the stable review order, the
    current one (`decision`, else the first undecided, else the first), its neighbours,
    the next undecided one, and how many are reviewed and agreed."""
    return await review.review_queue(
        db=db, persona_id=persona_id, number=number, decision_id=decision
    )


async def _after_review(request: Request, persona_id: int, pending: int) -> None:
    if pending == 0:
        deps.wake_runner(request)


@router.post("/{persona_id}/decisions/{decision_id}/feedback", response_model=FeedbackOut)
async def feedback(
    persona_id: int,
    decision_id: int,
    data: FeedbackIn,
    request: Request,
    db: DbSession,
    principal: CurrentPrincipal,
) -> FeedbackOut:
    """Agree or disagree with one judge decision (optional notes for the prompt engineer).
    When the last decision of the iteration is reviewed, the loop goes on."""
    decision, pending = await review.feedback(
        db=db,
        persona_id=persona_id,
        decision_id=decision_id,
        data=data,
        reviewer=principal.username,
    )
    await _after_review(request, persona_id, pending)
    return FeedbackOut(decision=decision, pending_review=pending)


@router.post("/{persona_id}/iterations/{number}/feedback", response_model=BulkFeedbackOut)
async def bulk_feedback(
    persona_id: int,
    number: int,
    data: BulkFeedbackIn,
    request: Request,
    db: DbSession,
    principal: CurrentPrincipal,
) -> BulkFeedbackOut:
    """The same review for many decisions of one iteration ("Agree with all")."""
    out = await review.bulk_feedback(
        db=db, persona_id=persona_id, number=number, data=data, reviewer=principal.username
    )
    await _after_review(request, persona_id, out.pending_review)
    return out


# -- results ---------------------------------------------------------------------------------


@router.get("/{persona_id}/metrics", response_model=list[MetricsRow])
async def metrics(persona_id: int, db: DbSession) -> list[MetricsRow]:
    """Agreement with the human per scored iteration and split, with counts and intervals."""
    return await reports.metrics(db=db, persona_id=persona_id)


@router.get("/{persona_id}/agreement", response_model=AgreementOut)
async def annotator_agreement(persona_id: int, db: DbSession) -> AgreementOut:
    """Inter-annotator agreement of the uploaded labels (Cohen's kappa per pair of
    annotators, Fleiss' kappa), beside the judge's kappa: the humans' agreement is its
    ceiling."""
    return await agreement_service.agreement(db=db, persona_id=persona_id)


@router.get("/{persona_id}/report", response_model=ReportOut)
async def report(persona_id: int, db: DbSession) -> ReportOut:
    """Final metrics, iterations to convergence, prompt evolution, and the judge's most
    confident decisions that the human confirmed (best) or rejected (worst)."""
    return await reports.report(db=db, persona_id=persona_id)


@router.get(
    "/{persona_id}/export",
    responses={200: {"content": {"text/csv": {}, "application/json": {}}}},
)
async def export(
    persona_id: int, db: DbSession, format: Literal["csv", "json"] = "json"
) -> Response:
    """Pairs, answers, decisions, human labels and metrics. CSV: one row per decision (and
    per pair never judged); cells starting with = + - @ are prefixed with ' so spreadsheets
    do not run them as formulas."""
    data = await reports.export_data(db=db, persona_id=persona_id)
    filename = f"persona-{persona_id}.{format}"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    if format == "csv":
        body = await asyncio.to_thread(reports.export_csv, data)
        return Response(body, media_type="text/csv", headers=headers)
    body = await asyncio.to_thread(reports.export_json, data)
    return Response(body, media_type="application/json", headers=headers)
