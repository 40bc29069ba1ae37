"""The review page of a session, ``/sessions/{id}/review``: two threads side by side, keys
1/2/3/4 to label, n/p to move (static/review.js), htmx fragments for the next pair.

Twins: ``GET /api/sessions/{id}/review/next``, ``POST /api/sessions/{id}/review``,
``POST .../review/skip``, ``GET .../review/mine`` and ``PUT .../review/settings``.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.auth import CurrentPrincipal, Principal, RowId
from llmjudge.core import review as rules
from llmjudge.core.access import Role
from llmjudge.infra.errors import Invalid, NotFound
from llmjudge.infra.web import DbSession, is_htmx, refusal, render
from llmjudge.references import review
from llmjudge.references.review_schemas import ReviewLabelIn, ReviewNext, ReviewSettings

router = APIRouter(include_in_schema=False)

_PAIR = re.compile(r"^(\d{1,10})-(\d{1,10})$")
# Key 4: neither answer is acceptable, stored as a TIE with both_bad.
_FORM_LABELS = {"A": ("A", False), "B": ("B", False), "TIE": ("TIE", False)}
_FORM_LABELS["BOTH_BAD"] = ("TIE", True)


def _parse_pair(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    m = _PAIR.match(value)
    if not m or m[1] == m[2]:
        raise Invalid("pair must read '<thread id>-<thread id>' with two threads")
    return rules.canonical(int(m[1]), int(m[2]))


def _key(pair: tuple[int, int]) -> str:
    return f"{pair[0]}-{pair[1]}"


async def _context(
    db: AsyncSession,
    session_id: int,
    principal: Principal,
    state: ReviewNext,
    *,
    viewing: tuple[int, int] | None,
    full_page: bool = False,
) -> dict[str, Any]:
    """The page's context: the pair shown, and where p / n lead from it."""
    can_configure = principal.role.covers(Role.researcher)
    # The settings form (full page, researchers) counts the session's pairs: a query more.
    settings: Any = await review.queue_settings(db=db, session_id=session_id)
    if can_configure and full_page:
        settings = await review.get_settings(
            db=db, session_id=session_id, reviewer=principal.username
        )
    mine = await review.my_labels(db=db, session_id=session_id, reviewer=principal.username)
    history = [(m.thread_a_id, m.thread_b_id) for m in mine]
    base = f"/sessions/{session_id}/review"
    prev_url = next_url = None
    if viewing is not None and viewing in history:
        i = history.index(viewing)
        prev_url = f"{base}?pair={_key(history[i - 1])}" if i > 0 else None
        next_url = f"{base}?pair={_key(history[i + 1])}" if i + 1 < len(history) else base
    else:
        shown = (state.pair.thread_a_id, state.pair.thread_b_id) if state.pair else None
        earlier = [p for p in history if p != shown]
        prev_url = f"{base}?pair={_key(earlier[-1])}" if earlier else None
    return {
        "session_id": session_id,
        "session_name": await review.session_name(db=db, session_id=session_id),
        "state": state,
        "pair": state.pair,
        "progress": state.progress,
        "viewing": viewing is not None,
        "prev_url": prev_url,
        "next_url": next_url,
        "base": base,
        "can_configure": can_configure,
        "settings": settings,
    }


async def _current(
    db: AsyncSession, session_id: int, principal: Principal, viewing: tuple[int, int] | None
) -> ReviewNext:
    if viewing is None:
        return await review.next_pair(db=db, session_id=session_id, reviewer=principal.username)
    if not await review.pair_in_session(db=db, session_id=session_id, pair=viewing):
        raise NotFound(f"threads {viewing[0]} and {viewing[1]} are not a pair of this session")
    pair = await review.show_pair(
        db=db, session_id=session_id, lo=viewing[0], hi=viewing[1], reviewer=principal.username
    )
    progress = await review.progress(db=db, session_id=session_id, reviewer=principal.username)
    return ReviewNext(pair=pair, progress=progress)


def _panel(request: Request, ctx: dict[str, Any], status_code: int = 200) -> Response:
    name = "references/_review_panel.html" if is_htmx(request) else "references/review.html"
    return render(request, name, status_code=status_code, **ctx)


@router.get("/sessions/{session_id}/review", response_class=HTMLResponse)
async def review_page(
    request: Request,
    session_id: RowId,
    db: DbSession,
    principal: CurrentPrincipal,
    pair: str | None = None,
):
    viewing = _parse_pair(pair)
    state = await _current(db, session_id, principal, viewing)
    ctx = await _context(
        db, session_id, principal, state, viewing=viewing, full_page=not is_htmx(request)
    )
    return _panel(request, ctx)


async def _after(request: Request, db: AsyncSession, session_id: int, principal: Principal):
    if not is_htmx(request):
        return RedirectResponse(f"/sessions/{session_id}/review", status_code=303)
    state = await review.next_pair(db=db, session_id=session_id, reviewer=principal.username)
    return _panel(request, await _context(db, session_id, principal, state, viewing=None))


@router.post("/sessions/{session_id}/review/label")
async def review_label(
    request: Request, session_id: RowId, db: DbSession, principal: CurrentPrincipal
):
    form = await request.form()
    try:
        data = _label_of(form)
        await review.label_pair(
            db=db, session_id=session_id, reviewer=principal.username, data=data
        )
    except (Invalid, NotFound) as e:
        if not is_htmx(request):
            raise  # the error page (infra.web.error_page)
        await db.rollback()
        found = refusal(e)
        state = await review.next_pair(db=db, session_id=session_id, reviewer=principal.username)
        ctx = await _context(db, session_id, principal, state, viewing=None)
        return _panel(request, {**ctx, "error": found.message}, status_code=found.status)
    return await _after(request, db, session_id, principal)


def _label_of(form: Any) -> ReviewLabelIn:
    choice = _FORM_LABELS.get(str(form.get("label", "")).upper())
    if choice is None:
        raise Invalid("label must be A, B, TIE or BOTH_BAD")
    try:
        return ReviewLabelIn(
            shown_a=int(str(form.get("shown_a", ""))),
            shown_b=int(str(form.get("shown_b", ""))),
            label=choice[0],  # type: ignore[arg-type]
            both_bad=choice[1],
            note=str(form.get("note") or ""),
        )
    except (ValueError, ValidationError) as e:
        raise Invalid(f"this label cannot be stored: {e}") from None


@router.post("/sessions/{session_id}/review/skip")
async def review_skip(
    request: Request, session_id: RowId, db: DbSession, principal: CurrentPrincipal
):
    form = await request.form()
    try:
        pair = _parse_pair(f"{form.get('shown_a', '')}-{form.get('shown_b', '')}")
    except Invalid:
        pair = None  # skip whatever the caller holds now
    state = await review.skip_pair(
        db=db, session_id=session_id, reviewer=principal.username, pair=pair
    )
    if not is_htmx(request):
        return RedirectResponse(f"/sessions/{session_id}/review", status_code=303)
    return _panel(request, await _context(db, session_id, principal, state, viewing=None))


@router.post("/sessions/{session_id}/review/settings")
async def review_settings(
    request: Request, session_id: RowId, db: DbSession, principal: CurrentPrincipal
):
    form = await request.form()
    sample = str(form.get("sample_size") or "").strip()
    seed = str(form.get("seed") or "").strip()
    try:
        data = ReviewSettings(
            labels_per_pair=int(str(form.get("labels_per_pair") or "1")),
            sample_size=int(sample) if sample else None,
            inconsistent_only=form.get("inconsistent_only") in ("on", "true", "1"),
            seed=int(seed) if seed else None,
        )
    except (ValueError, ValidationError) as e:
        raise Invalid(f"review settings: {e}") from None
    await review.update_settings(
        db=db, session_id=session_id, data=data, reviewer=principal.username
    )
    return RedirectResponse(f"/sessions/{session_id}/review", status_code=303)
