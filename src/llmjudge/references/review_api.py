"""/api/sessions/{id}/review: the human pairwise review queue (twin of the review page).

Reviewers (role ``reviewer``) may ask for pairs and label them; changing the queue's
settings is a researcher's (auth/policy.py).
"""

from __future__ import annotations

from fastapi import APIRouter

from llmjudge.auth import CurrentPrincipal, RowId
from llmjudge.infra.errors import Invalid
from llmjudge.infra.web import DbSession
from llmjudge.references import review
from llmjudge.references.review_schemas import (
    MyReviewLabel,
    ReviewLabelIn,
    ReviewLabelOut,
    ReviewNext,
    ReviewProgress,
    ReviewSettings,
    ReviewSettingsOut,
    ReviewSkipIn,
)

router = APIRouter(prefix="/api/sessions", tags=["review"])


@router.get("/{session_id}/review/next", response_model=ReviewNext)
async def next_pair(session_id: RowId, db: DbSession, principal: CurrentPrincipal) -> ReviewNext:
    """The caller's next pair, sides as shown to them (blind: no pillar, no verdict), and the
    queue's progress. The pair is held for the caller for 15 minutes, so that a pair needing
    one label is not shown to two reviewers at once; asking again returns the same pair."""
    return await review.next_pair(db=db, session_id=session_id, reviewer=principal.username)


@router.post("/{session_id}/review", response_model=ReviewLabelOut)
async def label_pair(
    session_id: RowId, data: ReviewLabelIn, db: DbSession, principal: CurrentPrincipal
) -> ReviewLabelOut:
    """Label a pair of the session for the sides as shown (``shown_a`` = left = key 1);
    stored as a human reference label in the pair's canonical order, annotator = caller.
    Labelling the same pair again replaces the caller's label."""
    return await review.label_pair(
        db=db, session_id=session_id, reviewer=principal.username, data=data
    )


@router.post("/{session_id}/review/skip", response_model=ReviewNext)
async def skip_pair(
    session_id: RowId,
    db: DbSession,
    principal: CurrentPrincipal,
    data: ReviewSkipIn | None = None,
) -> ReviewNext:
    """Skip the named pair (or the caller's current one): the next pair after it."""
    pair = None
    if data is not None and data.thread_a_id is not None and data.thread_b_id is not None:
        if data.thread_a_id == data.thread_b_id:
            raise Invalid("a pair needs two different threads")
        pair = (data.thread_a_id, data.thread_b_id)
    return await review.skip_pair(
        db=db, session_id=session_id, reviewer=principal.username, pair=pair
    )


@router.get("/{session_id}/review/progress", response_model=ReviewProgress)
async def progress(session_id: RowId, db: DbSession, principal: CurrentPrincipal) -> ReviewProgress:
    """Progress of the queue ("X of Y" pairs finished), without claiming a pair."""
    return await review.progress(db=db, session_id=session_id, reviewer=principal.username)


@router.get("/{session_id}/review/mine", response_model=list[MyReviewLabel])
async def my_labels(
    session_id: RowId, db: DbSession, principal: CurrentPrincipal
) -> list[MyReviewLabel]:
    """The caller's labels from this session's queue, oldest first."""
    return await review.my_labels(db=db, session_id=session_id, reviewer=principal.username)


@router.get("/{session_id}/review/settings", response_model=ReviewSettingsOut)
async def get_settings(
    session_id: RowId, db: DbSession, principal: CurrentPrincipal
) -> ReviewSettingsOut:
    return await review.get_settings(db=db, session_id=session_id, reviewer=principal.username)


@router.put("/{session_id}/review/settings", response_model=ReviewSettingsOut)
async def put_settings(
    session_id: RowId, data: ReviewSettings, db: DbSession, principal: CurrentPrincipal
) -> ReviewSettingsOut:
    """Labels per pair (N), a seeded sample of K pairs, inconsistent pairs only. Replaces
    all settings: an omitted field takes its default."""
    return await review.update_settings(
        db=db, session_id=session_id, data=data, reviewer=principal.username
    )
