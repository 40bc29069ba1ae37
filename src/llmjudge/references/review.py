"""The human pairwise review queue of a session: which pair a reviewer sees next, and the
labels they give, stored as reference labels in the pair's canonical order.

The queue rules are pure (``review_rules``); this module loads their inputs and keeps the
claims. A claim (one per reviewer, in the session's options under ``review_claims``, keyed by
a hash of the reviewer) holds a pair for ``CLAIM_S`` seconds so that, when a pair needs one
label, two reviewers are not shown it at once; the claim's pair is also the reviewer's place
in the queue. Every call that reads or changes claims locks the session row first, so two
reviewers asking at the same moment are served one after the other.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import and_, func, literal, or_, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import Thread
from llmjudge.core import review as rules
from llmjudge.infra.db.rows import columns
from llmjudge.infra.errors import Invalid, NotFound
from llmjudge.references.models import ReferenceLabel
from llmjudge.references.review_schemas import (
    MyReviewLabel,
    ReviewLabelIn,
    ReviewLabelOut,
    ReviewNext,
    ReviewPair,
    ReviewProgress,
    ReviewSettings,
    ReviewSettingsOut,
    ShownThread,
    StoredReviewLabel,
)
from llmjudge.references.service import upsert_labels
from llmjudge.sessions import Comparison, JudgeSession

__all__ = [
    "CLAIM_S",
    "get_settings",
    "label_pair",
    "my_labels",
    "next_pair",
    "pair_in_session",
    "progress",
    "queue_settings",
    "session_name",
    "show_pair",
    "skip_pair",
    "update_settings",
]

CLAIM_S = 15 * 60
CLAIMS_KEY = "review_claims"
_LOCK_NS = 0x52455649  # "REVI": this module's advisory lock space (the key is the session id)
# Session option names of the review settings (ReviewSettings field -> options key).
OPTION_KEYS = {
    "labels_per_pair": "review_labels_per_pair",
    "sample_size": "review_sample_size",
    "inconsistent_only": "review_inconsistent_only",
    "seed": "review_seed",
}


# -- loading ----------------------------------------------------------------------------------


async def _session(db: AsyncSession, session_id: int, *, lock: bool = False) -> JudgeSession:
    if lock:
        # Reviewers of one session take turns (until commit). An advisory lock, not the row's:
        # workers keep updating the session's counters meanwhile.
        await db.execute(
            text("SELECT pg_advisory_xact_lock(:ns, :sid)"), {"ns": _LOCK_NS, "sid": session_id}
        )
    s = await db.get(JudgeSession, session_id, populate_existing=True)
    if s is None:
        raise NotFound(f"session {session_id} does not exist")
    return s


def settings_of(s: JudgeSession) -> ReviewSettings:
    o = s.options or {}
    return ReviewSettings(
        labels_per_pair=int(o.get(OPTION_KEYS["labels_per_pair"], 1)),
        sample_size=o.get(OPTION_KEYS["sample_size"]),
        inconsistent_only=bool(o.get(OPTION_KEYS["inconsistent_only"], False)),
        # The session's own seed unless the review has one: the queue is reproducible.
        seed=int(o.get(OPTION_KEYS["seed"], o.get("seed", 0)) or 0) & (2**63 - 1),
    )


# One statement, one row of arrays: a session may compare 100,000 pairs, and row-by-row
# results cost far more than the query (bench/review_queue.py).
_QUEUE_SQL = text(
    """
    WITH g AS (
        SELECT least(thread_a_id, thread_b_id) AS lo, greatest(thread_a_id, thread_b_id) AS hi,
               -- the judge's completed verdicts, mapped to the pair's canonical order
               count(*) FILTER (WHERE status = 'completed' AND (
                   (winner = 'A' AND thread_a_id < thread_b_id)
                   OR (winner = 'B' AND thread_a_id > thread_b_id))) AS lo_wins,
               count(*) FILTER (WHERE status = 'completed' AND (
                   (winner = 'B' AND thread_a_id < thread_b_id)
                   OR (winner = 'A' AND thread_a_id > thread_b_id))) AS hi_wins,
               count(*) FILTER (WHERE status = 'completed' AND winner = 'TIE') AS ties
        FROM comparisons
        WHERE session_id = :sid AND thread_a_id <> thread_b_id
        GROUP BY 1, 2
    ),
    -- human labels from any session or import: they belong to the pair
    l AS (
        SELECT r.thread_a_id AS lo, r.thread_b_id AS hi, count(*) AS n,
               bool_or(r.annotator = :me) AS mine
        FROM reference_labels r JOIN g ON r.thread_a_id = g.lo AND r.thread_b_id = g.hi
        WHERE r.source = 'human'
        GROUP BY 1, 2
    )
    SELECT coalesce(array_agg(g.lo), '{}'), coalesce(array_agg(g.hi), '{}'),
           coalesce(array_agg(g.lo_wins), '{}'), coalesce(array_agg(g.hi_wins), '{}'),
           coalesce(array_agg(g.ties), '{}'), coalesce(array_agg(coalesce(l.n, 0)), '{}'),
           coalesce(array_agg(coalesce(l.mine, false)), '{}')
    FROM g
    -- pairs whose threads were deleted since cannot be labelled
    JOIN threads ta ON ta.id = g.lo
    JOIN threads tb ON tb.id = g.hi
    LEFT JOIN l ON l.lo = g.lo AND l.hi = g.hi
    """
)
_COLUMNS = ("lo", "hi", "lo_wins", "hi_wins", "ties", "labels")


class _Queue:
    """The queue as the pure rules see it, for one reviewer at one moment."""

    def __init__(self, s: JudgeSession, row: Sequence[Any], reviewer: str, now: float) -> None:
        self.settings = settings_of(s)
        cols = {name: np.asarray(v, dtype=np.int64) for name, v in zip(_COLUMNS, row, strict=False)}
        keep = (
            rules.is_inconsistent(cols["lo_wins"], cols["hi_wins"], cols["ties"])
            if self.settings.inconsistent_only
            else None
        )
        self.pairs_in_session = len(cols["lo"])
        idx = rules.pool_order(
            cols["lo"],
            cols["hi"],
            seed=self.settings.seed,
            sample_size=self.settings.sample_size,
            keep=keep,
        )
        self.lo, self.hi = cols["lo"][idx], cols["hi"][idx]
        self.keys = rules.pair_keys(self.lo, self.hi)
        self.labels = cols["labels"][idx]
        self.mine = np.asarray(row[6], dtype=bool)[idx]
        self.me = rules.reviewer_key(reviewer)
        self.claims: dict[str, Any] = dict((s.options or {}).get(CLAIMS_KEY) or {})
        others = [
            rules.pair_keys(np.int64(c["pair"][0]), np.int64(c["pair"][1]))
            for key, c in self.claims.items()
            if key != self.me and float(c.get("until", 0)) > now
        ]
        self.others = rules.count_per_pair(self.keys, np.array(others, dtype=np.int64))
        own = self.claims.get(self.me)
        self.cursor_pair: tuple[int, int] | None = (
            (int(own["pair"][0]), int(own["pair"][1])) if own else None
        )

    def position(self, pair: tuple[int, int] | None) -> int | None:
        if pair is None:
            return None
        key = rules.pair_keys(np.int64(pair[0]), np.int64(pair[1]))
        found = np.flatnonzero(self.keys == key)
        return int(found[0]) if len(found) else None

    def choose(self, *, cursor: tuple[int, int] | None, stay: bool) -> tuple[int, int] | None:
        i = rules.choose_next(
            self.labels,
            self.mine,
            self.others,
            needed=self.settings.labels_per_pair,
            cursor=self.position(cursor),
            stay=stay,
        )
        return None if i is None else (int(self.lo[i]), int(self.hi[i]))

    def progress(self) -> ReviewProgress:
        return ReviewProgress(
            finished=rules.finished_count(self.labels, self.settings.labels_per_pair),
            total=len(self.keys),
            mine=int(np.count_nonzero(self.mine)),
            claimed_by_others=int(np.count_nonzero(self.others)),
            labels_per_pair=self.settings.labels_per_pair,
        )


async def _queue(db: AsyncSession, s: JudgeSession, reviewer: str, now: float) -> _Queue:
    row = (await db.execute(_QUEUE_SQL, {"sid": s.id, "me": reviewer})).one()
    return _Queue(s, row, reviewer, now)


def _set_claim(s: JudgeSession, q: _Queue, pair: tuple[int, int] | None, until: float) -> None:
    claims = dict(q.claims)
    if pair is None:
        claims.pop(q.me, None)
    else:
        claims[q.me] = {"pair": list(pair), "until": until}
    if claims == q.claims:
        return
    # A new dict: JSONB columns are not change-tracked in place.
    s.options = {**(s.options or {}), CLAIMS_KEY: claims}


# -- views ------------------------------------------------------------------------------------


def _is_empty(content: Any) -> bool:
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):
        return all(not str((m or {}).get("content", "")).strip() for m in content)
    return content is None


def _side(thread_id: int, content: Any) -> ShownThread:
    return ShownThread(thread_id=thread_id, content=content, empty=_is_empty(content))


def _without_prompt(content: Any, prompt: str | None) -> Any:
    """A conversation that opens with the shared prompt, without it: shown once above."""
    if prompt is None or not isinstance(content, list) or not content:
        return content
    first = content[0] or {}
    if first.get("role") == "user" and str(first.get("content", "")).strip() == prompt.strip():
        return content[1:]
    return content


async def show_pair(
    *, db: AsyncSession, session_id: int, lo: int, hi: int, reviewer: str
) -> ReviewPair:
    """The pair with its sides as this reviewer sees them, and their own earlier label."""
    threads = {
        t.id: t for t in (await db.execute(select(Thread).where(Thread.id.in_((lo, hi))))).scalars()
    }
    if len(threads) != 2:
        raise NotFound(f"threads {lo} and {hi} do not both exist")
    left, right = rules.shown_sides(reviewer, lo, hi)
    a, b = threads[left], threads[right]
    prompt: str | None = None
    prompt_is_key = False
    if a.prompt_key is not None and a.prompt_key == b.prompt_key:
        prompt = a.prompt or b.prompt
        if prompt is None:
            prompt, prompt_is_key = a.prompt_key, True
    own = (
        await db.execute(
            select(ReferenceLabel).where(
                ReferenceLabel.thread_a_id == lo,
                ReferenceLabel.thread_b_id == hi,
                ReferenceLabel.source == "human",
                ReferenceLabel.annotator == reviewer,
            )
        )
    ).scalar_one_or_none()
    return ReviewPair(
        session_id=session_id,
        thread_a_id=lo,
        thread_b_id=hi,
        shown_a=_side(a.id, _without_prompt(a.content, prompt)),
        shown_b=_side(b.id, _without_prompt(b.content, prompt)),
        prompt=prompt,
        prompt_is_key=prompt_is_key,
        my_label=None if own is None else rules.to_shown(left, right, own.label),  # type: ignore[arg-type]
        my_both_bad=bool(own and own.both_bad),
        my_note="" if own is None else own.note,
    )


async def _next_view(
    db: AsyncSession, s: JudgeSession, q: _Queue, pair: tuple[int, int] | None, reviewer: str
) -> ReviewNext:
    view = None
    if pair is not None:
        view = await show_pair(db=db, session_id=s.id, lo=pair[0], hi=pair[1], reviewer=reviewer)
    return ReviewNext(pair=view, progress=q.progress())


# -- the queue --------------------------------------------------------------------------------


async def next_pair(
    *, db: AsyncSession, session_id: int, reviewer: str, now: float | None = None
) -> ReviewNext:
    """The caller's current pair (claimed for ``CLAIM_S`` seconds), or None when nothing is
    left for them; asking again returns the same pair while it is still theirs to label."""
    now = time.time() if now is None else now
    s = await _session(db, session_id, lock=True)
    q = await _queue(db, s, reviewer, now)
    pair = q.choose(cursor=q.cursor_pair, stay=True)
    _set_claim(s, q, pair if pair is not None else q.cursor_pair, now + CLAIM_S if pair else 0)
    out = await _next_view(db, s, q, pair, reviewer)
    await db.commit()
    return out


async def skip_pair(
    *,
    db: AsyncSession,
    session_id: int,
    reviewer: str,
    pair: tuple[int, int] | None = None,
    now: float | None = None,
) -> ReviewNext:
    """Key ``n`` on the current pair: the next one after it (a skipped pair comes back only
    after every other pair open to the caller)."""
    now = time.time() if now is None else now
    s = await _session(db, session_id, lock=True)
    q = await _queue(db, s, reviewer, now)
    cursor = rules.canonical(*pair) if pair is not None else q.cursor_pair
    chosen = q.choose(cursor=cursor, stay=False)
    _set_claim(s, q, chosen if chosen is not None else cursor, now + CLAIM_S if chosen else 0)
    out = await _next_view(db, s, q, chosen, reviewer)
    await db.commit()
    return out


async def pair_in_session(*, db: AsyncSession, session_id: int, pair: tuple[int, int]) -> bool:
    """Does the session compare these two threads (in either order)?"""
    lo, hi = rules.canonical(*pair)
    c = Comparison
    # Either order, so the thread id indexes serve it.
    stmt = (
        select(literal(1))
        .where(
            c.session_id == session_id,
            or_(
                and_(c.thread_a_id == lo, c.thread_b_id == hi),
                and_(c.thread_a_id == hi, c.thread_b_id == lo),
            ),
        )
        .limit(1)
    )
    return (await db.execute(stmt)).first() is not None


async def label_pair(
    *,
    db: AsyncSession,
    session_id: int,
    reviewer: str,
    data: ReviewLabelIn,
    now: float | None = None,
) -> ReviewLabelOut:
    """Store the caller's label (given for the sides as shown) in the pair's canonical
    order; labelling a pair again replaces the caller's earlier label. Releases the claim."""
    now = time.time() if now is None else now
    s = await _session(db, session_id, lock=True)
    lo, hi, label = rules.to_canonical(data.shown_a, data.shown_b, data.label)
    if not await pair_in_session(db=db, session_id=session_id, pair=(lo, hi)):
        raise Invalid(f"threads {lo} and {hi} are not a pair of session {session_id}")
    n_threads = await db.scalar(select(func.count()).where(Thread.id.in_((lo, hi))))
    if n_threads != 2:
        raise Invalid(f"threads {lo} and {hi} no longer both exist")
    values = {
        "thread_a_id": lo,
        "thread_b_id": hi,
        "label": label,
        "both_bad": data.both_bad,
        "source": "human",
        "annotator": reviewer,
        "note": data.note.strip(),
        "session_id": session_id,
    }
    stmt = upsert_labels(values).returning(ReferenceLabel)
    stored = (await db.execute(stmt)).scalar_one()
    out_label = StoredReviewLabel.model_validate(stored, from_attributes=True)
    q = await _queue(db, s, reviewer, now)
    if q.cursor_pair == (lo, hi):
        # Done with it: keep it as the caller's place in the queue, free it for others.
        _set_claim(s, q, (lo, hi), 0)
    out = ReviewLabelOut(stored=out_label, progress=q.progress())
    await db.commit()
    return out


async def session_name(*, db: AsyncSession, session_id: int) -> str:
    return (await _session(db, session_id)).name


async def progress(
    *, db: AsyncSession, session_id: int, reviewer: str, now: float | None = None
) -> ReviewProgress:
    s = await _session(db, session_id)
    q = await _queue(db, s, reviewer, time.time() if now is None else now)
    return q.progress()


async def my_labels(*, db: AsyncSession, session_id: int, reviewer: str) -> list[MyReviewLabel]:
    """The caller's labels given in this session's queue, oldest first (key ``p`` walks back
    through them)."""
    await _session(db, session_id)
    r = ReferenceLabel
    rows = (
        await db.execute(
            select(r)
            .where(r.session_id == session_id, r.source == "human", r.annotator == reviewer)
            .order_by(r.created_at, r.id)
        )
    ).scalars()
    out = []
    for row in rows:
        left, right = rules.shown_sides(reviewer, row.thread_a_id, row.thread_b_id)
        out.append(
            MyReviewLabel.model_validate(
                columns(row)
                | {
                    "shown_a": left,
                    "shown_b": right,
                    "shown_label": rules.to_shown(left, right, row.label),
                }
            )
        )
    return out


# -- settings ---------------------------------------------------------------------------------


async def queue_settings(*, db: AsyncSession, session_id: int) -> ReviewSettings:
    """The settings alone (no counts)."""
    return settings_of(await _session(db, session_id))


async def get_settings(
    *, db: AsyncSession, session_id: int, reviewer: str, now: float | None = None
) -> ReviewSettingsOut:
    s = await _session(db, session_id)
    q = await _queue(db, s, reviewer, time.time() if now is None else now)
    return ReviewSettingsOut(
        **q.settings.model_dump(),
        session_id=s.id,
        pairs_in_session=q.pairs_in_session,
        progress=q.progress(),
    )


async def update_settings(
    *, db: AsyncSession, session_id: int, data: ReviewSettings, reviewer: str
) -> ReviewSettingsOut:
    s = await _session(db, session_id, lock=True)
    options = dict(s.options or {})
    for field, key in OPTION_KEYS.items():
        value = getattr(data, field)
        if value is None:
            options.pop(key, None)
        else:
            options[key] = value
    s.options = options
    await db.commit()
    return await get_settings(db=db, session_id=session_id, reviewer=reviewer)
