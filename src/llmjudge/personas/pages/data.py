"""The data tab: training pairs and their CSV upload."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, HTTPException, Request, UploadFile
from fastapi.responses import HTMLResponse

from llmjudge.catalog import RowError
from llmjudge.infra.errors import DOMAIN_ERRORS
from llmjudge.infra.rowfiles import rejection
from llmjudge.infra.web import DbSession, ImportSlot, refusal, render
from llmjudge.personas import pairs as pair_service
from llmjudge.personas import service
from llmjudge.personas.pages.common import detail_ctx

router = APIRouter(include_in_schema=False)


PREVIEW_PAIRS = 100


@router.get("/personas/{persona_id}/data", response_class=HTMLResponse)
async def data_page(request: Request, persona_id: int, db: DbSession):
    ctx = await detail_ctx(request, db, persona_id, "data")
    pairs = await pair_service.list_pairs(db=db, persona_id=persona_id, limit=PREVIEW_PAIRS)
    return render(request, "personas/data.html", pairs=pairs, **ctx)


@router.post(
    "/personas/{persona_id}/data/upload",
    response_class=HTMLResponse,
    dependencies=[ImportSlot],
)
async def upload_pairs(
    request: Request, persona_id: int, db: DbSession, file: Annotated[UploadFile, File()]
):
    settings = request.app.state.settings
    await service.get_persona(db=db, persona_id=persona_id)
    errors: list[RowError] = []
    try:
        parsed = await pair_service.parse_pairs_upload(file, settings)
        errors = parsed.errors
        if not errors:
            result = await pair_service.store_pairs(
                db=db, persona_id=persona_id, rows=parsed.rows, lines=parsed.lines
            )
    except HTTPException as e:
        return render(
            request, "personas/_upload_result.html", status_code=e.status_code, fatal=e.detail
        )
    except pair_service.RowsRejected as e:
        errors = e.errors
    except DOMAIN_ERRORS as e:
        found = refusal(e)
        return render(
            request, "personas/_upload_result.html", status_code=found.status, fatal=found.message
        )
    if errors:
        return render(
            request, "personas/_upload_result.html", status_code=422, rejected=rejection(errors)
        )
    pairs = await pair_service.list_pairs(db=db, persona_id=persona_id, limit=PREVIEW_PAIRS)
    persona = await service.get_persona(db=db, persona_id=persona_id)
    return render(
        request, "personas/_upload_result.html", result=result, pairs=pairs, persona=persona
    )
