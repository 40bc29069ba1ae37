"""Catalog pages: pillars, import, thread browser and thread view."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, File, HTTPException, Query, Request, UploadFile
from fastapi.responses import HTMLResponse

from llmjudge.catalog import service
from llmjudge.catalog.deps import parse_upload
from llmjudge.infra.rowfiles import rejection
from llmjudge.infra.web import DbSession, ImportSlot, is_htmx, render

router = APIRouter(include_in_schema=False)


@router.get("/pillars", response_class=HTMLResponse)
async def pillars_page(request: Request, db: DbSession):
    return render(request, "catalog/pillars.html", pillars=await service.list_pillars(db=db))


@router.get("/import", response_class=HTMLResponse)
async def import_page(request: Request):
    return render(request, "catalog/import.html")


@router.post("/import", response_class=HTMLResponse, dependencies=[ImportSlot])
async def import_submit(request: Request, db: DbSession, file: Annotated[UploadFile, File()]):
    try:
        parsed = await parse_upload(file, request.app.state.settings)
    except HTTPException as e:
        return render(
            request, "catalog/_import_result.html", status_code=e.status_code, fatal=e.detail
        )
    await service.check_stored_prompts(db=db, parsed=parsed)
    if parsed.errors:
        rejected = rejection(parsed.errors, "nothing was imported")
        return render(request, "catalog/_import_result.html", status_code=422, rejected=rejected)
    result = await service.store_import(db=db, parsed=parsed)
    return render(request, "catalog/_import_result.html", result=result)


def _optional_int(value: str | None) -> int | None:
    """A select's "All" option sends an empty value: that means no filter, not a 422."""
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        return None


@router.get("/threads", response_class=HTMLResponse)
async def threads_page(
    request: Request,
    db: DbSession,
    pillar_id: str | None = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    prompt_key: Annotated[str | None, Query(max_length=300)] = None,
    meta_key: Annotated[str | None, Query(max_length=100)] = None,
    meta_value: Annotated[str | None, Query(max_length=200)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
):
    pillar = _optional_int(pillar_id)
    filters = {
        "pillar_id": "" if pillar is None else str(pillar),
        "q": (q or "").strip(),
        "prompt_key": (prompt_key or "").strip(),
        "meta_key": (meta_key or "").strip(),
        "meta_value": (meta_value or "").strip(),
    }
    page = await service.list_threads(
        db=db,
        pillar_id=pillar,
        q=filters["q"] or None,
        prompt_key=filters["prompt_key"] or None,
        meta_key=filters["meta_key"] or None,
        meta_value=filters["meta_value"] or None,
        limit=50,
        offset=offset,
    )
    # pagination links keep every filter; empty ones are left out of the URL
    query = urlencode({k: v for k, v in filters.items() if v})
    ctx = dict(
        page=page,
        pillars=await service.list_pillars(db=db),
        meta_keys=await service.metadata_keys(db=db),
        pillar_id=pillar,
        q=filters["q"],
        filters=filters,
        filter_query=query,
    )
    if is_htmx(request):
        return render(request, "catalog/_thread_rows.html", **ctx)
    return render(request, "catalog/threads.html", **ctx)


@router.get("/threads/{thread_id}", response_class=HTMLResponse)
async def thread_page(request: Request, thread_id: int, db: DbSession):
    thread = await service.get_thread(db=db, thread_id=thread_id)
    return render(request, "catalog/thread.html", thread=thread)
