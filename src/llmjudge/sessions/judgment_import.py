"""Storing judgments made elsewhere as a finished session (the parsing and resolution rules
live in `sessions.importing`). The comparisons are written by `plans.insert_plan`, the
same COPY path a new session's plan takes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import ARRAY, Integer, String, any_, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog.models import Pillar, Thread
from llmjudge.catalog.schemas import RowError
from llmjudge.errors import Invalid
from llmjudge.references import service as references
from llmjudge.sessions.importing import (
    KnownThread,
    ParsedJudgments,
    ResolvedJudgment,
    ThreadKey,
    resolve_judgments,
)
from llmjudge.sessions.models import JudgeSession
from llmjudge.sessions.pairing import PlanArrays
from llmjudge.sessions.plans import StoredResult, insert_plan
from llmjudge.sessions.schemas import JudgmentImportOut

__all__ = ["IMPORTED_MODE", "JudgmentsRejected", "import_judgments"]

# How an imported session is recorded (options["source"] == "import" says the same).
IMPORTED_MODE = "imported"
PARSE_FAILURES_SHOWN = 200


class JudgmentsRejected(Invalid):
    """Row errors in an import; nothing was stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(f"{len(errors)} problem(s) found; nothing was imported")
        self.errors = errors


async def _known_threads(
    db: AsyncSession, keys: Iterable[ThreadKey]
) -> dict[ThreadKey, KnownThread]:
    ids = sorted({k for k in keys if isinstance(k, int)})
    refs = sorted({k for k in keys if isinstance(k, tuple)})
    found: dict[ThreadKey, KnownThread] = {}
    if ids:
        rows = await db.execute(  # one array parameter, however many ids
            select(Thread.id, Thread.pillar_id).where(Thread.id == any_(cast(ids, ARRAY(Integer))))
        )
        found.update({t: KnownThread(id=t, pillar_id=p) for t, p in rows.all()})
    if refs:
        wanted = select(
            func.unnest(cast([r[0] for r in refs], ARRAY(String))).label("pillar"),
            func.unnest(cast([r[1] for r in refs], ARRAY(String))).label("external_id"),
        ).subquery()
        rows = await db.execute(
            select(Pillar.name, Thread.external_id, Thread.id, Thread.pillar_id)
            .join(Pillar, Pillar.id == Thread.pillar_id)
            .join(
                wanted,
                (wanted.c.pillar == Pillar.name) & (wanted.c.external_id == Thread.external_id),
            )
        )
        found.update(
            {(name, ext): KnownThread(id=t, pillar_id=p) for name, ext, t, p in rows.all()}
        )
    return found


def judged_plan(resolved: Sequence[ResolvedJudgment]) -> PlanArrays:
    """The imported comparisons as a plan, in file order."""

    def ints(values: Iterable[int]) -> np.ndarray:
        return np.fromiter(values, dtype=np.int64, count=len(resolved))

    return PlanArrays(
        thread_a=ints(r.thread_a.id for r in resolved),
        thread_b=ints(r.thread_b.id for r in resolved),
        pillar_a=ints(r.thread_a.pillar_id for r in resolved),
        pillar_b=ints(r.thread_b.pillar_id for r in resolved),
        repetition=ints(r.judgment.repetition for r in resolved),
        swap_group=ints(r.swap_group for r in resolved),
        is_swap=np.fromiter((r.is_swap for r in resolved), dtype=bool, count=len(resolved)),
    )


def stored_results(resolved: Sequence[ResolvedJudgment], at: datetime) -> list[StoredResult]:
    """One finished result per judgment: "failed" where the judgment could not be read."""
    return [
        StoredResult(
            status="completed" if j.winner is not None else "failed",
            attempts=1,
            completed_at=at,
            winner=j.winner,
            confidence=j.confidence,
            scores_a=json.dumps(j.scores_a) if j.scores_a else None,
            scores_b=json.dumps(j.scores_b) if j.scores_b else None,
            reasoning=j.reasoning,
            raw_response=j.raw_response,
            parse_error=j.parse_error,
            strength=j.strength,
        )
        for j in (r.judgment for r in resolved)
    ]


def row_labels(
    resolved: Sequence[ResolvedJudgment],
) -> tuple[list[references.LabelRow], list[RowError]]:
    """The reference labels the rows carry, one per (pair, source, annotator): rows of one
    pair repeating a label (an original and its swap) give it once; disagreeing ones are an
    error on the later line."""
    first: dict[tuple[int, int, str, str], tuple[str, int]] = {}
    out: list[references.LabelRow] = []
    errors: list[RowError] = []
    for r in resolved:
        ref = r.judgment.reference
        if ref is None:
            continue
        a, b, label = r.thread_a.id, r.thread_b.id, ref.label
        if a > b:  # compare in the pair's canonical order
            a, b, label = b, a, {"A": "B", "B": "A"}.get(label, label)
        key = (a, b, ref.source, ref.annotator)
        seen = first.get(key)
        if seen is None:
            first[key] = (label, r.judgment.line)
            out.append(
                references.LabelRow(
                    line=r.judgment.line,
                    thread_a=a,
                    thread_b=b,
                    label=label,
                    source=ref.source,
                    annotator=ref.annotator,
                    note=ref.note,
                )
            )
        elif seen[0] != label:
            errors.append(
                RowError(
                    line=r.judgment.line,
                    field="label",
                    message=f"this pair's {ref.source} label by "
                    f"{ref.annotator or '(no annotator)'!r} differs from line {seen[1]}",
                )
            )
    return out, errors


async def import_judgments(
    *,
    db: AsyncSession,
    parsed: ParsedJudgments,
    session_name: str,
    judge_label: str | None = None,
) -> JudgmentImportOut:
    """Store a parsed judgment file as a finished session, in one transaction; raises
    JudgmentsRejected (nothing stored) for unknown threads, self-pairs or bad swap groups.

    Every comparison gets the same completion time, so Elo replays them in file order. Like
    a live session, one with no readable judgment at all ends as "failed"."""
    if parsed.errors:
        raise JudgmentsRejected(parsed.errors)
    keys = [k for r in parsed.rows for k in (r.thread_a, r.thread_b)]
    resolved, errors = resolve_judgments(parsed.rows, await _known_threads(db, keys))
    if errors:
        raise JudgmentsRejected(errors)
    labels, errors = row_labels(resolved)
    if errors:
        raise JudgmentsRejected(errors)
    criteria = list(
        dict.fromkeys(c for r in resolved for c in (*r.judgment.scores_a, *r.judgment.scores_b))
    )
    completed = sum(r.judgment.winner is not None for r in resolved)
    now = datetime.now(UTC)
    session = JudgeSession(
        name=session_name,
        status="completed" if completed else "failed",
        comparison_mode=IMPORTED_MODE,
        pillar_ids=sorted(
            {p for r in resolved for p in (r.thread_a.pillar_id, r.thread_b.pillar_id)}
        ),
        options={
            "source": "import",
            "judge_label": judge_label,
            "position_swap": any(r.is_swap for r in resolved),
            "repetitions_per_pair": 1 + max(r.judgment.repetition for r in resolved),
            "calculate_elo": True,
            "seed": 0,
        },
        worker_count=1,
        judge_model_id=None,
        criteria=criteria,
        total=len(resolved),
        completed=completed,
        failed=len(resolved) - completed,
        started_at=now,
        finished_at=now,
    )
    db.add(session)
    await db.flush()
    await insert_plan(db, session.id, judged_plan(resolved), results=stored_results(resolved, now))
    # Labels belong to the pair, not to the session: not tied to it (session_id stays None).
    await references.store_labels(db, labels)
    await db.commit()
    failures = [r.judgment for r in resolved if r.judgment.winner is None]
    return JudgmentImportOut(
        session_id=session.id,
        session_name=session_name,
        total=len(resolved),
        completed=completed,
        failed=len(failures),
        swap_pairs=sum(r.is_swap for r in resolved),
        labels=len(labels),
        criteria=criteria,
        parse_failures=[
            RowError(line=j.line, field="judgment", message=j.parse_error or "")
            for j in failures[:PARSE_FAILURES_SHOWN]
        ],
    )
