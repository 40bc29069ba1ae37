"""A session's comparisons, listed with filters, and one comparison side by side.

- `/sessions/{id}/comparisons`: the comparisons in queue order, or only those worth a look
  (`flag`: disagreements with the reference labels, swap flips, low confidence, failed).
  Twin: `GET /api/sessions/{id}/comparisons?flag=...`.
- `/sessions/{id}/comparisons/{cid}`: the two answers side by side (the prompt they share
  once above), rendered Markdown (sanitised: thread content is untrusted), the verdict,
  both sides' scores, the reasoning and the reference labels of the pair. Twin:
  `GET /api/sessions/{id}/comparisons/{cid}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from llmjudge.catalog import threads_by_ids
from llmjudge.infra.web import DbSession, is_htmx, render
from llmjudge.sessions import reads

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50
Flag = Literal["disagree", "swap_flip", "low_confidence", "failed"]
FLAG_LABELS: tuple[tuple[str, str], ...] = (
    ("", "All"),
    ("disagree", "Disagree with reference"),
    ("swap_flip", "Swap flips"),
    ("low_confidence", f"Low confidence (< {reads.LOW_CONFIDENCE:.1f})"),
    ("failed", "Failed"),
)


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class SideBySide:
    """What the view shows: the shared part of two conversations once, then each answer."""

    shared: list[Message]
    answer_a: list[Message]
    answer_b: list[Message]


def messages_of(content: Any) -> list[Message]:
    """A thread's content (plain text or a list of {"role", "content"}) as messages."""
    if isinstance(content, list):
        out = []
        for m in content:
            if isinstance(m, dict):
                out.append(Message(str(m.get("role", "")), str(m.get("content", ""))))
        return out
    return [Message("assistant", "" if content is None else str(content))]


def side_by_side(content_a: Any, content_b: Any, prompt: str | None = None) -> SideBySide:
    """Split two threads into their common opening (the prompt, usually: identical leading
    messages) and what differs. With no common message, a shared ``prompt`` text (threads
    with one prompt key) is shown once instead."""
    a, b = messages_of(content_a), messages_of(content_b)
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    # never swallow a whole answer into the shared part: keep at least one message a side
    n = min(n, max(len(a) - 1, 0), max(len(b) - 1, 0))
    shared = a[:n]
    if not shared and prompt:
        shared = [Message("user", prompt)]
    return SideBySide(shared=shared, answer_a=a[n:], answer_b=b[n:])


def _flag_of(value: str | None) -> str | None:
    return value if value in reads.COMPARISON_FLAGS else None


@router.get("/sessions/{session_id}/comparisons", response_class=HTMLResponse)
async def comparisons_page(
    request: Request,
    session_id: int,
    db: DbSession,
    flag: str | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
):
    chosen = _flag_of(flag)
    session = await reads.get_session(db=db, session_id=session_id)
    page = await reads.list_comparisons(
        db=db, session_id=session_id, flag=chosen, limit=PAGE_SIZE, offset=offset
    )
    ctx = dict(
        session=session,
        page=page,
        flag=chosen or "",
        flags=FLAG_LABELS,
        filter_query=urlencode({"flag": chosen}) if chosen else "",
    )
    if is_htmx(request):
        return render(request, "sessions/_comparison_rows.html", **ctx)
    return render(request, "sessions/comparisons.html", **ctx)


@router.get("/sessions/{session_id}/comparisons/{comparison_id}", response_class=HTMLResponse)
async def comparison_page(request: Request, session_id: int, comparison_id: int, db: DbSession):
    session = await reads.get_session(db=db, session_id=session_id)
    c = await reads.get_comparison(db=db, session_id=session_id, comparison_id=comparison_id)
    ids = [t for t in (c.thread_a_id, c.thread_b_id) if t is not None]
    threads = await threads_by_ids(db=db, ids=ids)
    ta = threads.get(c.thread_a_id)
    tb = None if c.thread_b_id is None else threads.get(c.thread_b_id)
    content_a = ta.content if ta is not None else "(thread deleted)"
    labels: list[dict[str, Any]] = []
    if c.thread_b_id is None:  # one thread graded alone: the whole thread on one side
        view = SideBySide(shared=[], answer_a=messages_of(content_a), answer_b=[])
    else:
        prompt = None
        if ta is not None and tb is not None and ta.prompt and ta.prompt == tb.prompt:
            prompt = ta.prompt
        view = side_by_side(content_a, tb.content if tb is not None else "(thread deleted)", prompt)
        labels = await reads.reference_labels(
            db=db, thread_a_id=c.thread_a_id, thread_b_id=c.thread_b_id
        )
    criteria = sorted(set(c.scores_a or {}) | set(c.scores_b or {}))
    return render(
        request,
        "sessions/comparison.html",
        session=session,
        c=c,
        view=view,
        labels=labels,
        criteria=criteria,
        disagrees=c.winner is not None and any(r["label"] != c.winner for r in labels),
    )
