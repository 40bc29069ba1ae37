"""The comparisons of one thread, a partial of the catalog's thread page. Twin:
`GET /api/threads/{id}/comparisons`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from llmjudge.infra.web import DbSession, render
from llmjudge.sessions import reads

router = APIRouter(include_in_schema=False)

THREAD_COMPARISONS = 50


@router.get("/threads/{thread_id}/comparisons", response_class=HTMLResponse)
async def thread_comparisons_partial(request: Request, thread_id: int, db: DbSession):
    """The comparisons a thread took part in, with the judge's reasoning (thread page)."""
    found = await reads.thread_comparisons(db=db, thread_id=thread_id, limit=THREAD_COMPARISONS)
    return render(
        request,
        "sessions/_thread_comparisons.html",
        items=found.items,
        totals=found.totals,
        shown=THREAD_COMPARISONS,
    )
