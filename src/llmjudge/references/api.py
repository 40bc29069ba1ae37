"""Reference labels JSON API (import, list, export, delete) and a session's agreement report."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal, NamedTuple

from fastapi import APIRouter, Depends, Query, Request, status
from fastapi.responses import Response

from llmjudge.infra.rowfiles import ROW_ERRORS, RowFile
from llmjudge.infra.web import (
    IMPORT_BUSY,
    DbSession,
    ImportRejected,
    ImportSlot,
    Offset,
    QueryId,
    read_upload,
)
from llmjudge.references import agreement_report, service
from llmjudge.references.schemas import (
    DeletedOut,
    ReferenceImportOut,
    ReferencePage,
    SessionAgreementOut,
    Source,
)

router = APIRouter(prefix="/api/references", tags=["references"])
agreement_router = APIRouter(prefix="/api/sessions", tags=["references"])

Annotator = Annotated[str | None, Query(max_length=200)]


def _label_filter(
    session_id: QueryId = None,
    thread_id: QueryId = None,
    source: Source | None = None,
    annotator: Annotator = None,
) -> service.LabelFilter:
    """The label filters as query parameters, for the list, the export and the delete."""
    return service.LabelFilter(session_id, thread_id, source, annotator)


Filters = Annotated[service.LabelFilter, Depends(_label_filter)]


class _Page(NamedTuple):
    limit: int
    offset: int


def _page(
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> _Page:
    # A dependency as well: FastAPI lists a route's own parameters before its dependencies',
    # and the list's page parameters come after its filters.
    return _Page(limit, offset)


@router.post(
    "/import",
    response_model=ReferenceImportOut,
    responses=ROW_ERRORS | IMPORT_BUSY,
    dependencies=[ImportSlot],
)
async def import_references(request: Request, db: DbSession, file: RowFile) -> ReferenceImportOut:
    """Import reference labels, all or nothing. Each row names its threads by id
    (`thread_a`, `thread_b`) or by `pillar_a, external_id_a, pillar_b, external_id_b`, and
    gives `label` (A, B or TIE relative to the pair as written), optional `annotator`,
    `source` (gold unless it says human), `note`, `both_bad`. A label for a (pair, source,
    annotator) already stored replaces it."""
    settings = request.app.state.settings
    data = await read_upload(file, settings)
    # Parsing a large file is CPU work: off the event loop.
    parsed = await asyncio.to_thread(
        service.parse_reference_file,
        file.filename or "",
        data,
        max_rows=settings.max_import_rows,
        max_chars=settings.max_field_chars,
    )
    try:
        return await service.import_references(db=db, parsed=parsed)
    except service.ReferencesRejected as exc:
        raise ImportRejected(exc.errors) from None


@router.get("", response_model=ReferencePage)
async def list_references(
    db: DbSession,
    filters: Filters,
    page: Annotated[_Page, Depends(_page)],
) -> ReferencePage:
    """Labels, filtered by the pairs a session compares, a thread, source or annotator."""
    return await service.list_references(
        db=db,
        filters=filters,
        limit=page.limit,
        offset=page.offset,
    )


@router.get(
    "/export",
    response_class=Response,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-ndjson": {}},
            "description": "the labels, one per row or line (columns as the import reads them)",
        }
    },
)
async def export_references(
    db: DbSession,
    filters: Filters,
    format: Literal["csv", "jsonl"] = "jsonl",
) -> Response:
    """The filtered labels as a file that imports again (threads by pillar, external id)."""
    body = await service.export_references(
        db=db,
        fmt=format,
        filters=filters,
    )
    media = "text/csv" if format == "csv" else "application/x-ndjson"
    return Response(
        body,
        media_type=f"{media}; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="references.{format}"'},
    )


@router.delete("", response_model=DeletedOut)
async def delete_matching(
    db: DbSession,
    filters: Filters,
) -> DeletedOut:
    """Delete the labels matching every filter given (at least one is required)."""
    deleted = await service.delete_references(db=db, filters=filters)
    return DeletedOut(deleted=deleted)


@router.delete("/{reference_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_reference(reference_id: int, db: DbSession) -> None:
    await service.delete_reference(db=db, reference_id=reference_id)


@agreement_router.get("/{session_id}/agreement", response_model=SessionAgreementOut)
async def session_agreement(
    session_id: int,
    db: DbSession,
    reference: Annotated[
        str,
        Query(
            max_length=220,
            description="gold, human (annotators unanimous), majority, or annotator:<name>",
        ),
    ] = "gold",
    group_by: Annotated[
        str | None, Query(max_length=100, description="a thread metadata key, e.g. category")
    ] = None,
) -> SessionAgreementOut:
    """The session's completed comparisons scored against reference labels: accuracy (ties
    as a class and without), swap-aware pair scores, Cohen's kappa, confusion matrix, macro
    P/R/F1, by pillar pair and by a metadata key, human-human agreement, disagreements.
    Every figure has its count and 95 % interval."""
    return await agreement_report.session_agreement(
        db=db, session_id=session_id, reference=reference, group_by=group_by or None
    )
