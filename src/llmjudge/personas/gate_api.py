"""Trained personas at work, as JSON: the CI pass/fail gate, tournament judging, comparison.

Included before the personas router in app.py, so `/api/personas/compare` and
`/api/personas/templates/...` are not read as a persona id.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import JSONResponse, Response

from llmjudge.infra.errors import ErrorOut
from llmjudge.infra.web import DbSession
from llmjudge.personas import evaluate as ev
from llmjudge.personas import service
from llmjudge.personas.deps import parse_ids
from llmjudge.personas.starters import get_template, template_pairs_csv
from llmjudge.personas.summaries import PersonaSummary, summaries
from llmjudge.providers import ProviderError
from llmjudge.sessions import SessionOut

router = APIRouter(prefix="/api/personas", tags=["personas"])

AllowUntrained = Annotated[
    bool, Query(description="use a persona that has not converged (status other than trained)")
]


@router.get(
    "/compare",
    response_model=list[PersonaSummary],
    responses={404: {"model": ErrorOut, "description": "a listed persona does not exist"}},
)
async def compare(
    db: DbSession, ids: Annotated[list[str], Query(description="e.g. 1,2,3")]
) -> list[PersonaSummary]:
    """Latest selection and optimisation metrics (with counts and intervals), iterations and training cost of several
    personas, in the order asked."""
    return await summaries(db=db, ids=parse_ids(ids))


@router.get(
    "/templates/{key}/pairs.csv",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}}},
)
async def template_csv(key: str) -> Response:
    """A starter template's example pairs as CSV (`input,correct_output`): the upload format."""
    try:
        get_template(key)
    except KeyError as e:
        raise HTTPException(404, str(e.args[0])) from None
    return Response(
        template_pairs_csv(key),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{key}-pairs.csv"'},
    )


@router.get("/{persona_id}/calibration", response_model=ev.CalibrationOut)
async def calibration(persona_id: int, db: DbSession) -> ev.CalibrationOut:
    """The judge's true-positive and true-negative rates (with Wilson intervals) on the
    calibration pairs of the latest fully reviewed iteration: what `evaluate` corrects with."""
    await service.get_persona(db=db, persona_id=persona_id)
    return await ev.load_calibration(db=db, persona_id=persona_id)


@router.post(
    "/{persona_id}/evaluate",
    response_model=ev.EvaluateOut,
    responses={
        409: {"model": ErrorOut, "description": "the persona is not trained (see allow_untrained)"},
        412: {
            "model": ev.EvaluateOut,
            "description": "with strict=true only: the gate failed; the body is the 200 one",
        },
        422: {"description": "malformed batch (any strict value); no verdict"},
        502: {"model": ErrorOut, "description": "the judge model failed; no verdict"},
    },
)
async def evaluate(
    persona_id: int,
    data: ev.EvaluateIn,
    request: Request,
    db: DbSession,
    allow_untrained: AllowUntrained = False,
    strict: Annotated[
        bool,
        Query(
            description="answer 412 instead of 200 when the gate fails (curl --fail); a "
            "malformed batch is 422 either way"
        ),
    ] = False,
) -> ev.EvaluateOut | JSONResponse:
    """Judge up to 1000 outputs with the persona's current judge prompt and judge model, and
    gate their pass rate.

    Each verdict comes with the judge's reasoning. The observed pass rate is corrected for
    the judge's errors by two estimators, both in `estimates`: Rogan-Gladen with its TPR and
    TNR on the persona's calibration pairs (see `/calibration`; a bootstrap over Jeffreys
    Beta posteriors), and PPI++ when items carry a `human_label`; `estimator` says which
    one the gate used (PPI++ from 30 human labels). With `min_pass_rate`, `passed` is true
    when that estimate's 95% lower bound reaches it. The gate fails closed (`passed` false,
    `reason` says why) below 10 calibration pairs of either class, when the calibration
    was measured on another prompt version, and when TPR + TNR <= 1. `escalation` lets
    embedding similarity decide the clear cases first.

    Status codes, so that CI can tell a failing product from a broken gate: 200 a verdict
    (passed or not); with `strict=true`, 412 Precondition Failed when the verdict is a fail
    (same body); 422 a malformed batch, 409 an untrained persona, 502 the judge failed.
    """
    try:
        out = await ev.evaluate(
            db=db,
            llm=request.app.state.llm,
            persona_id=persona_id,
            data=data,
            allow_untrained=allow_untrained,
        )
    except ProviderError as e:
        raise HTTPException(
            status.HTTP_502_BAD_GATEWAY, f"the judge model failed: {e.cause}; no verdict"
        ) from None
    if strict and out.passed is False:
        return JSONResponse(
            out.model_dump(mode="json"), status_code=status.HTTP_412_PRECONDITION_FAILED
        )
    return out


@router.post(
    "/{persona_id}/sessions",
    response_model=SessionOut,
    status_code=status.HTTP_201_CREATED,
    responses={
        409: {"model": ErrorOut, "description": "the persona is not trained (see allow_untrained)"}
    },
)
async def create_session(
    persona_id: int,
    data: ev.PersonaSessionIn,
    request: Request,
    db: DbSession,
    allow_untrained: AllowUntrained = False,
) -> SessionOut:
    """A tournament session judged by the persona: its judge model, and a pairwise prompt
    whose guidance is the persona's current judge prompt. The body is `POST /api/sessions`'s
    without `judge_model_id` and `prompt_template`; `criteria` defaults to `["quality"]`."""
    return await ev.create_persona_session(
        db=db,
        persona_id=persona_id,
        data=data,
        hub=getattr(request.app.state, "events", None),
        allow_untrained=allow_untrained,
    )
