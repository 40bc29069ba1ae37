"""Catalog JSON API: pillars, thread import and queries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from llmjudge.catalog import service
from llmjudge.catalog.deps import parse_upload
from llmjudge.catalog.schemas import (
    ImportResult,
    PillarIn,
    PillarOut,
    PillarPatch,
    ThreadOut,
    ThreadPage,
)
from llmjudge.infra.rowfiles import ROW_ERRORS, RowFile
from llmjudge.infra.web import IMPORT_BUSY, DbSession, ImportRejected, ImportSlot, Offset, QueryId

router = APIRouter(prefix="/api", tags=["catalog"])


@router.get("/pillars", response_model=list[PillarOut])
async def list_pillars(db: DbSession) -> list[PillarOut]:
    """All pillars with their thread counts."""
    return await service.list_pillars(db=db)


@router.post("/pillars", response_model=PillarOut, status_code=status.HTTP_201_CREATED)
async def create_pillar(pillar_in: PillarIn, db: DbSession) -> PillarOut:
    return await service.create_pillar(db=db, pillar_in=pillar_in)


@router.get("/pillars/{pillar_id}", response_model=PillarOut)
async def get_pillar(pillar_id: int, db: DbSession) -> PillarOut:
    return await service.get_pillar(db=db, pillar_id=pillar_id)


@router.patch("/pillars/{pillar_id}", response_model=PillarOut)
async def update_pillar(pillar_id: int, patch: PillarPatch, db: DbSession) -> PillarOut:
    return await service.update_pillar(db=db, pillar_id=pillar_id, patch=patch)


@router.delete("/pillars/{pillar_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_pillar(pillar_id: int, db: DbSession) -> None:
    """Delete a pillar and all of its threads."""
    await service.delete_pillar(db=db, pillar_id=pillar_id)


@router.post(
    "/threads/import",
    response_model=ImportResult,
    responses=ROW_ERRORS | IMPORT_BUSY,
    dependencies=[ImportSlot],
)
async def import_threads(request: Request, db: DbSession, file: RowFile) -> ImportResult:
    """Import threads from CSV (columns pillar, content, optional external_id, title,
    prompt_key, prompt, metadata) or JSONL (same fields; content may be a list of {role, content}).
    All or nothing; re-importing (pillar, external_id) updates the thread."""
    parsed = await parse_upload(file, request.app.state.settings)
    await service.check_stored_prompts(db=db, parsed=parsed)
    if parsed.errors:
        raise ImportRejected(parsed.errors)
    return await service.store_import(db=db, parsed=parsed)


@router.get("/threads", response_model=ThreadPage)
async def list_threads(
    db: DbSession,
    pillar_id: QueryId = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
    prompt_key: Annotated[str | None, Query(max_length=300)] = None,
    meta_key: Annotated[str | None, Query(max_length=100)] = None,
    meta_value: Annotated[str | None, Query(max_length=200)] = None,
) -> ThreadPage:
    """Threads, optionally of one pillar, matching a search (`q`), a prompt key, or a
    metadata key (`meta_key`, with `meta_value` for its value as text)."""
    return await service.list_threads(
        db=db,
        pillar_id=pillar_id,
        q=q,
        limit=limit,
        offset=offset,
        prompt_key=prompt_key,
        meta_key=meta_key,
        meta_value=meta_value,
    )


@router.get("/threads/{thread_id}", response_model=ThreadOut)
async def get_thread(thread_id: int, db: DbSession) -> ThreadOut:
    return await service.get_thread(db=db, thread_id=thread_id)
