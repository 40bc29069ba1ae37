"""Reading sessions and comparisons: the session list, one session with its counts per
status, pages of its comparisons, one comparison, the comparisons one thread took part in,
and thread labels for the live page. Reads only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Select, case, func, or_, select, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from llmjudge.catalog import Pillar, Thread
from llmjudge.infra.errors import Invalid, NotFound
from llmjudge.providers import LLMCall, LLMModel, Provider
from llmjudge.references import ReferenceLabel
from llmjudge.sessions.comparison_schemas import (
    ComparisonDetail,
    ComparisonOut,
    ComparisonPage,
    ThreadComparison,
    ThreadComparisons,
    ThreadLabelOut,
    VoteOut,
)
from llmjudge.sessions.models import Comparison, ComparisonVote, JudgeSession
from llmjudge.sessions.schemas import (
    Counts,
    JudgeModelOut,
    PromptCacheOut,
    SessionOut,
    SessionSummary,
)

__all__ = [
    "BUILTIN_JUDGE",
    "COMPARISON_FLAGS",
    "LOW_CONFIDENCE",
    "SUMMARY_CACHE",
    "SummaryCache",
    "reference_labels",
    "get_comparison",
    "get_session",
    "judge_model",
    "list_comparisons",
    "list_sessions",
    "model_out",
    "session_panels",
    "session_row",
    "thread_comparisons",
    "thread_labels",
    "thread_name",
]

LABELS_MAX = 500
BUILTIN_JUDGE = "simulated-judge"  # the judge of a session that names none


def model_out(m: LLMModel, p: Provider) -> JudgeModelOut:
    return JudgeModelOut(
        id=m.id, name=m.name, provider_kind=p.kind, simulated=p.kind == "simulator"
    )


async def session_row(db: AsyncSession, session_id: int, *, lock: bool = False) -> JudgeSession:
    """The stored session (locked FOR UPDATE with ``lock``); NotFound for an unknown id."""
    stmt = select(JudgeSession).where(JudgeSession.id == session_id)
    if lock:
        stmt = stmt.with_for_update()
    s = (await db.scalars(stmt.execution_options(populate_existing=True))).first()
    if s is None:
        raise NotFound(f"session {session_id} not found")
    return s


def _attributes(obj: Any, schema: type[BaseModel]) -> dict[str, Any]:
    """The attributes of ``obj`` that ``schema`` has fields of the same name for."""
    return {k: getattr(obj, k) for k in schema.model_fields if hasattr(obj, k)}


def _summary_fields(
    s: JudgeSession, model: JudgeModelOut | None, schema: type[BaseModel] = SessionSummary
) -> dict[str, Any]:
    return _attributes(s, schema) | {
        "pillar_ids": list(s.pillar_ids),
        "judge_model": model,
        "progress": (s.completed + s.failed) / s.total if s.total else 0.0,
    }


def _sessions_query() -> Select[Any]:
    return (
        select(JudgeSession, LLMModel, Provider)
        .outerjoin(LLMModel, LLMModel.id == JudgeSession.judge_model_id)
        .outerjoin(Provider, Provider.id == LLMModel.provider_id)
    )


async def list_sessions(
    *, db: AsyncSession, status: str | None = None, limit: int = 100, offset: int = 0
) -> list[SessionSummary]:
    """Newest first, with progress from the session counters."""
    stmt = _sessions_query().order_by(JudgeSession.id.desc()).limit(limit).offset(offset)
    if status is not None:
        stmt = stmt.where(JudgeSession.status == status)
    rows = (await db.execute(stmt)).all()
    return [
        SessionSummary(**_summary_fields(s, model_out(m, p) if m is not None else None))
        for s, m, p in rows
    ]


async def session_panels(
    *, db: AsyncSession, session_ids: Sequence[int]
) -> dict[int, dict[str, Any]]:
    """The stored panel (members with labels, rule) of each of these sessions judged by a
    panel; the session lists name every member, not the first one alone."""
    if not session_ids:
        return {}
    rows = await db.execute(
        select(JudgeSession.id, JudgeSession.panel).where(
            JudgeSession.id.in_(list(session_ids)), JudgeSession.panel.is_not(None)
        )
    )
    return {sid: panel for sid, panel in rows.all() if panel}


async def get_session(*, db: AsyncSession, session_id: int) -> SessionOut:
    """The session with counts per status computed from its comparison rows.

    Counters and row counts come from ONE statement, hence one snapshot: read separately,
    a result committed in between would make them disagree."""
    per_status = (
        select(Comparison.status, func.count().label("n"))
        .where(Comparison.session_id == session_id)
        .group_by(Comparison.status)
        .subquery()
    )
    counts_json = select(
        func.coalesce(
            func.jsonb_object_agg(per_status.c.status, per_status.c.n), text("'{}'::jsonb")
        )
    ).scalar_subquery()
    row = (
        await db.execute(
            _sessions_query()
            .add_columns(counts_json, _prompt_cache(session_id))
            .where(JudgeSession.id == session_id)
            .execution_options(populate_existing=True)
        )
    ).first()
    if row is None:
        raise NotFound(f"session {session_id} not found")
    s, m, p, counts, cache = row
    fields = _summary_fields(s, model_out(m, p) if m is not None else None, SessionOut)
    calls, read, written, saving = cache
    cached = PromptCacheOut(
        calls=calls,
        cached_input_tokens=read,
        cache_write_tokens=written,
        saving_usd=saving,
        input_tokens=s.input_tokens,
        cached_share=read / s.input_tokens if s.input_tokens else None,
    )
    return SessionOut(
        **fields
        | {
            "criteria": list(s.criteria),
            "counts": Counts(total=sum(counts.values()), **counts),
            "prompt_cache": cached,
        }
    )


def _prompt_cache(session_id: int) -> Any:
    """The session's prompt-cache sums as one array [calls, read, written, saving]: an
    index-only scan of the calls that touched the cache (a partial index, migration 0017),
    so a session without caching costs nothing to poll."""
    touched = or_(LLMCall.cached_input_tokens > 0, LLMCall.cache_write_tokens > 0)
    return (
        select(
            func.jsonb_build_array(
                func.count(),
                func.coalesce(func.sum(LLMCall.cached_input_tokens), 0),
                func.coalesce(func.sum(LLMCall.cache_write_tokens), 0),
                func.coalesce(func.sum(LLMCall.cache_saving_usd), 0.0),
                type_=JSONB,
            )
        )
        .where(LLMCall.session_id == session_id, touched)
        .scalar_subquery()
    )


class SummaryCache:
    """Single-flight, short-lived copies of ``get_session`` for concurrent pollers.

    200 clients polling one running session each ran the counting query (measured:
    bench/events.py, load mix); now the requests that arrive while one is in flight share
    its answer, and an answer that was shared (there are concurrent pollers) serves for
    ``ttl_s`` more. A lone client never gets a kept answer, so it reads its own writes and
    the workers' at once; a session changed through this process's API is invalidated.
    """

    def __init__(self, ttl_s: float = 0.25, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.queries = 0
        self._clock = clock
        self._done: dict[int, tuple[float, SessionOut]] = {}
        self._flying: dict[int, asyncio.Future[SessionOut]] = {}
        self._joined: dict[int, int] = {}  # followers of the query in flight

    def invalidate(self, session_id: int) -> None:
        self._done.pop(session_id, None)
        # A query already in flight may predate the change: later callers start afresh.
        self._flying.pop(session_id, None)

    async def get(self, session_id: int, load: Callable[[], Awaitable[SessionOut]]) -> SessionOut:
        hit = self._done.get(session_id)
        if hit is not None and self._clock() - hit[0] < self.ttl_s:
            return hit[1]
        flying = self._flying.get(session_id)
        if flying is not None:
            self._joined[session_id] = self._joined.get(session_id, 0) + 1
            try:
                return await asyncio.shield(flying)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not flying.cancelled() or (task is not None and task.cancelling()):
                    raise
            except Exception:
                pass  # the leader's failure is its own: query for ourselves
        future: asyncio.Future[SessionOut] = asyncio.get_running_loop().create_future()
        self._flying[session_id] = future
        self._joined[session_id] = 0
        try:
            self.queries += 1
            out = await load()
        except BaseException as exc:
            if self._flying.get(session_id) is future:
                del self._flying[session_id]
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved here: waiters re-query, none must log it
            raise
        if self._flying.get(session_id) is future:
            del self._flying[session_id]
            if self._joined.pop(session_id, 0) > 0:
                self._done[session_id] = (self._clock(), out)
            if len(self._done) > 1000:  # sessions polled once stay no longer than needed
                self._done.pop(next(iter(self._done)))
        future.set_result(out)
        return out


SUMMARY_CACHE = SummaryCache()


def _comparison_query(session_id: int) -> Select[Any]:
    ta, tb = aliased(Thread), aliased(Thread)
    pa, pb = aliased(Pillar), aliased(Pillar)
    return (
        select(Comparison, ta.title, tb.title, pa.name, pb.name)
        .outerjoin(ta, ta.id == Comparison.thread_a_id)
        .outerjoin(tb, tb.id == Comparison.thread_b_id)
        .outerjoin(pa, pa.id == Comparison.pillar_a_id)
        .outerjoin(pb, pb.id == Comparison.pillar_b_id)
        .where(Comparison.session_id == session_id)
    )


def _comparison_fields(row: Sequence[Any]) -> dict[str, Any]:
    c, title_a, title_b, name_a, name_b = row
    return _attributes(c, ComparisonDetail) | {
        "thread_a_title": title_a,
        "thread_b_title": title_b,
        "pillar_a_name": name_a,
        "pillar_b_name": name_b,
    }


COMPARISON_FLAGS = ("disagree", "swap_flip", "low_confidence", "failed")
LOW_CONFIDENCE = 0.6  # below this a verdict is listed as low confidence


def _winning_thread(c: Any) -> Any:
    """The id of the thread the verdict favours, 0 for a tie (NULL when there is none)."""
    return case(
        (c.winner == "A", c.thread_a_id), (c.winner == "B", c.thread_b_id), (c.winner == "TIE", 0)
    )


def _flag_clause(flag: str, low_confidence: float) -> Any:
    """SQL for one list filter over ``Comparison``.

    - ``failed``: the comparison failed.
    - ``low_confidence``: a verdict with confidence below ``low_confidence``.
    - ``swap_flip``: a verdict whose swapped twin (same swap group) favours another thread.
    - ``disagree``: a verdict that differs from a reference label of the pair. Labels are
      stored in canonical order (thread_a_id < thread_b_id): flipped here to this order.
    """
    done = Comparison.status == "completed"
    if flag == "failed":
        return Comparison.status == "failed"
    if flag == "low_confidence":
        return done & (Comparison.confidence < low_confidence)
    if flag == "swap_flip":
        twin = aliased(Comparison)
        return done & (
            select(twin.id)
            .where(
                twin.session_id == Comparison.session_id,
                twin.swap_group == Comparison.swap_group,
                twin.id != Comparison.id,
                twin.status == "completed",
                _winning_thread(twin).is_distinct_from(_winning_thread(Comparison)),
            )
            .exists()
        )
    if flag == "disagree":
        canonical = Comparison.thread_a_id < Comparison.thread_b_id
        in_order = case(
            (canonical, ReferenceLabel.label),
            (ReferenceLabel.label == "A", "B"),
            (ReferenceLabel.label == "B", "A"),
            else_="TIE",
        )
        return done & (
            select(ReferenceLabel.id)
            .where(
                ReferenceLabel.thread_a_id
                == func.least(Comparison.thread_a_id, Comparison.thread_b_id),
                ReferenceLabel.thread_b_id
                == func.greatest(Comparison.thread_a_id, Comparison.thread_b_id),
                in_order != Comparison.winner,
            )
            .exists()
        )
    raise ValueError(f"unknown comparison filter {flag!r}")


async def list_comparisons(
    *,
    db: AsyncSession,
    session_id: int,
    status: str | None = None,
    limit: int = 50,
    offset: int = 0,
    flag: str | None = None,
    low_confidence: float = LOW_CONFIDENCE,
) -> ComparisonPage:
    """A page of comparisons in queue order, with thread titles and pillar names; ``flag``
    keeps one kind of comparison worth a look (see ``_flag_clause``)."""
    await session_row(db, session_id)
    count = select(func.count()).select_from(Comparison).where(Comparison.session_id == session_id)
    stmt = _comparison_query(session_id)
    if status is not None:
        count = count.where(Comparison.status == status)
        stmt = stmt.where(Comparison.status == status)
    if flag is not None:
        clause = _flag_clause(flag, low_confidence)
        count = count.where(clause)
        stmt = stmt.where(clause)
    total = await db.scalar(count)
    rows = (
        await db.execute(stmt.order_by(Comparison.queue_position).limit(limit).offset(offset))
    ).all()
    return ComparisonPage(
        total=total or 0,
        limit=limit,
        offset=offset,
        items=[ComparisonOut(**_comparison_fields(r)) for r in rows],
    )


async def get_comparison(
    *, db: AsyncSession, session_id: int, comparison_id: int
) -> ComparisonDetail:
    row = (
        await db.execute(_comparison_query(session_id).where(Comparison.id == comparison_id))
    ).first()
    if row is None:
        raise NotFound(f"comparison {comparison_id} of session {session_id} not found")
    # Every judge's answer is a vote row (a single judge's is member 0), but the detail
    # lists a panel's members only: a single judge's answer is the comparison itself.
    votes = (
        []
        if row[0].votes_asked is None
        else (
            await db.scalars(
                select(ComparisonVote)
                .where(ComparisonVote.comparison_id == comparison_id)
                .order_by(ComparisonVote.member)
            )
        ).all()
    )
    return ComparisonDetail(
        **_comparison_fields(row),
        votes=[VoteOut.model_validate(v) for v in votes],
    )


# -- one thread's comparisons -------------------------------------------------------------


def thread_name(title: str | None, external_id: str | None, thread_id: int) -> str:
    return title or external_id or f"thread {thread_id}"


def outcome_for(side: str, status: str, winner: str | None) -> str:
    """How a finished comparison ended for the thread on ``side``."""
    if status != "completed" or winner is None:
        return "failed"
    if winner == "TIE":
        return "tie"
    return "won" if winner == side else "lost"


async def thread_comparisons(*, db: AsyncSession, thread_id: int, limit: int) -> ThreadComparisons:
    """The thread's latest finished comparisons (newest first), and its won/lost/tie/failed
    totals over all of them."""
    # pairs only: a grade of the thread alone (mode single) has no opponent; grades are
    # on their session's Scores tab
    involved = or_(
        Comparison.thread_a_id == thread_id, Comparison.thread_b_id == thread_id
    ) & Comparison.thread_b_id.is_not(None)
    finished = Comparison.status.in_(("completed", "failed"))
    other = case(
        (Comparison.thread_a_id == thread_id, Comparison.thread_b_id),
        else_=Comparison.thread_a_id,
    )
    rows = (
        await db.execute(
            select(Comparison, JudgeSession.name, Thread.title, Thread.external_id, Pillar.name)
            .join(JudgeSession, JudgeSession.id == Comparison.session_id)
            .outerjoin(Thread, Thread.id == other)
            .outerjoin(Pillar, Pillar.id == Thread.pillar_id)
            .where(involved, finished)
            .order_by(Comparison.id.desc())
            .limit(limit)
        )
    ).all()
    items = []
    for c, session_name, title, external_id, pillar in rows:
        side = "A" if c.thread_a_id == thread_id else "B"
        opponent = c.thread_b_id if side == "A" else c.thread_a_id
        own, theirs = (c.scores_a, c.scores_b) if side == "A" else (c.scores_b, c.scores_a)
        items.append(
            ThreadComparison(
                **_attributes(c, ThreadComparison)
                | {
                    "session_name": session_name,
                    "side": side,
                    "opponent_id": opponent,
                    "opponent_name": thread_name(title, external_id, opponent),
                    "opponent_pillar": pillar or "deleted",
                    "outcome": outcome_for(side, c.status, c.winner),
                    "own_scores": own or {},
                    "opponent_scores": theirs or {},
                    "error": c.parse_error or c.error,
                }
            )
        )
    side_won = case(
        (Comparison.winner == "TIE", "tie"),
        (
            ((Comparison.winner == "A") & (Comparison.thread_a_id == thread_id))
            | ((Comparison.winner == "B") & (Comparison.thread_b_id == thread_id)),
            "won",
        ),
        (Comparison.winner.in_(("A", "B")), "lost"),
        else_="failed",
    )
    totals = dict(
        (
            await db.execute(
                select(side_won, func.count()).where(involved, finished).group_by(side_won)
            )
        ).all()
    )
    return ThreadComparisons(
        thread_id=thread_id,
        limit=limit,
        totals={k: int(totals.get(k, 0)) for k in ("won", "lost", "tie", "failed")},
        items=items,
    )


async def thread_labels(*, db: AsyncSession, ids: Sequence[int]) -> dict[int, ThreadLabelOut]:
    """Display names and pillar names of threads (at most LABELS_MAX; unknown ids are left
    out): the live page's worker lanes get only ids from the events."""
    wanted = sorted(set(ids))[:LABELS_MAX]
    if not wanted:
        return {}
    rows = await db.execute(
        select(Thread.id, Thread.title, Thread.external_id, Thread.pillar_id, Pillar.name)
        .outerjoin(Pillar, Pillar.id == Thread.pillar_id)
        .where(Thread.id.in_(wanted))
    )
    return {
        t: ThreadLabelOut(title=thread_name(title, ext, t), pillar=pillar or f"pillar {pillar_id}")
        for t, title, ext, pillar_id, pillar in rows.all()
    }


async def reference_labels(
    *, db: AsyncSession, thread_a_id: int, thread_b_id: int
) -> list[dict[str, Any]]:
    """The reference labels of a pair, mapped to the order (A, B) given: label, source,
    annotator, note."""
    lo, hi = sorted((thread_a_id, thread_b_id))
    rows = await db.scalars(
        select(ReferenceLabel)
        .where(ReferenceLabel.thread_a_id == lo, ReferenceLabel.thread_b_id == hi)
        .order_by(ReferenceLabel.id)
    )
    flip = thread_a_id > thread_b_id
    swapped = {"A": "B", "B": "A", "TIE": "TIE"}
    return [
        {
            "label": swapped[r.label] if flip else r.label,
            "source": r.source,
            "annotator": r.annotator,
            "note": r.note,
            "both_bad": r.both_bad,
        }
        for r in rows
    ]


async def judge_model(db: AsyncSession, model_id: int | None) -> tuple[LLMModel, Provider]:
    """A session's judge model and its provider (None: the built-in simulated judge)."""
    stmt = select(LLMModel, Provider).join(Provider, Provider.id == LLMModel.provider_id)
    if model_id is None:
        row = (await db.execute(stmt.where(LLMModel.name == BUILTIN_JUDGE))).first()
        if row is None:
            raise Invalid(f"no judge_model_id given and the built-in {BUILTIN_JUDGE} is missing")
    else:
        row = (await db.execute(stmt.where(LLMModel.id == model_id))).first()
        if row is None:
            raise Invalid(f"judge model {model_id} does not exist")
    return row[0], row[1]
