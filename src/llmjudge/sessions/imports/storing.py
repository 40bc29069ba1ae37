"""Storing judgments made elsewhere as a finished session (the parsing and resolution rules
live in `sessions.importing`). The comparisons are written by `plans.insert_plan`, the
same COPY path a new session's plan takes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import RowError
from llmjudge.core.judging.panel_report import codes
from llmjudge.core.judging.panels import (
    AGGREGATIONS,
    Aggregate,
    Vote,
    aggregate,
    calibrated_weights,
    panel_probability,
    panel_strength,
)
from llmjudge.core.tournaments.pairing import PlanArrays
from llmjudge.infra.errors import Invalid
from llmjudge.infra.rowfiles import rejection
from llmjudge.references import LabelRow, store_labels, thread_pillars
from llmjudge.sessions.imports.parsing import (
    KnownThread,
    ParsedJudgment,
    ParsedJudgments,
    ResolvedJudgment,
    ThreadKey,
    group_panel,
    panel_judges,
    resolve_judgments,
)
from llmjudge.sessions.models import Comparison, ComparisonVote, JudgeSession
from llmjudge.sessions.panels.report import canonical_references, reference_codes
from llmjudge.sessions.plans import StoredResult, insert_plan
from llmjudge.sessions.run.votes import store_solo_votes
from llmjudge.sessions.schemas import JudgmentImportOut

__all__ = ["IMPORTED_MODE", "JudgmentsRejected", "import_judgments"]

# How an imported session is recorded (options["source"] == "import" says the same).
IMPORTED_MODE = "imported"
PARSE_FAILURES_SHOWN = 200


class JudgmentsRejected(Invalid):
    """Row errors in an import; nothing was stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(rejection(errors, "nothing was imported").message)
        self.errors = errors


async def _known_threads(
    db: AsyncSession, keys: Iterable[ThreadKey]
) -> dict[ThreadKey, KnownThread]:
    found = await thread_pillars(db, keys)
    return {k: KnownThread(id=t, pillar_id=p) for k, (t, p) in found.items()}


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
            **{name: getattr(j, name) for name in _JUDGMENT_RESULT}
            | {
                "status": "completed" if j.winner is not None else "failed",
                "attempts": 1,
                "completed_at": at,
                "scores_a": json.dumps(j.scores_a) if j.scores_a else None,
                "scores_b": json.dumps(j.scores_b) if j.scores_b else None,
            }
        )
        for j in (r.judgment for r in resolved)
    ]


# What a stored result takes from its judgment as it is.
_JUDGMENT_RESULT = (
    "winner",
    "confidence",
    "reasoning",
    "raw_response",
    "parse_error",
    "strength",
    "prob_a",
)


def row_labels(
    resolved: Sequence[ResolvedJudgment],
) -> tuple[list[LabelRow], list[RowError]]:
    """The reference labels the rows carry, one per (pair, source, annotator): rows of one
    pair repeating a label (an original and its swap) give it once; disagreeing ones are an
    error on the later line."""
    first: dict[tuple[int, int, str, str], tuple[str, int]] = {}
    out: list[LabelRow] = []
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
                # The row's label in the pair's canonical order, with its provenance.
                LabelRow(
                    line=r.judgment.line, thread_a=a, thread_b=b, **asdict(ref) | {"label": label}
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
    aggregation: str = "majority",
    weights: Sequence[float] | None = None,
) -> JudgmentImportOut:
    """Store a parsed judgment file as a finished session, in one transaction; raises
    JudgmentsRejected (nothing stored) for unknown threads, self-pairs or bad swap groups.

    Every comparison gets the same completion time, so Elo replays them in file order. Like
    a live session, one with no readable judgment at all ends as "failed"."""
    if parsed.errors:
        raise JudgmentsRejected(parsed.errors)
    judges, judge_errors = panel_judges(parsed.rows)
    if judge_errors:
        raise JudgmentsRejected(judge_errors)
    if len(judges) > 1:
        return await _import_panel(
            db=db,
            parsed=parsed,
            judges=judges,
            session_name=session_name,
            aggregation=aggregation,
            weights=weights,
        )
    if judges and judge_label is None:
        judge_label = judges[0]
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
    session = _finished_session(
        session_name, resolved, judge_label, criteria, len(resolved), completed, now
    )
    db.add(session)
    await db.flush()
    await insert_plan(db, session.id, judged_plan(resolved), results=stored_results(resolved, now))
    # each judgment is also the judge's vote, as when a session runs
    stored = await db.scalars(select(Comparison.id).where(Comparison.session_id == session.id))
    await store_solo_votes(db, list(stored))
    # Labels belong to the pair, not to the session: not tied to it (session_id stays None).
    await store_labels(db, labels)
    await db.commit()
    return _import_out(
        session,
        resolved,
        completed=completed,
        labels=len(labels),
        criteria=criteria,
        unread=[
            (r.judgment.line, r.judgment.parse_error or "")
            for r in resolved
            if r.judgment.winner is None
        ],
    )


def _import_out(
    session: JudgeSession,
    comparisons: Sequence[ResolvedJudgment],
    *,
    completed: int,
    labels: int,
    criteria: list[str],
    unread: Sequence[tuple[int, str]],
    judges: list[str] | None = None,
    aggregation: str | None = None,
) -> JudgmentImportOut:
    """What an import answers, solo or panel: the counts, and the first unread judgments
    as (file line, why)."""
    return JudgmentImportOut(
        session_id=session.id,
        session_name=session.name,
        total=len(comparisons),
        completed=completed,
        failed=len(unread),
        swap_pairs=sum(r.is_swap for r in comparisons),
        labels=labels,
        criteria=criteria,
        parse_failures=[
            RowError(line=line, field="judgment", message=message)
            for line, message in unread[:PARSE_FAILURES_SHOWN]
        ],
        judges=judges or [],
        aggregation=aggregation,
    )


def _vote(j: ParsedJudgment | None) -> Vote:
    if j is None or j.winner is None:
        return Vote(None)
    return Vote(j.winner, j.confidence, j.scores_a or None, j.scores_b or None)


async def _panel_weights(
    db: AsyncSession,
    rule: str,
    judges: Sequence[str],
    comparisons: Sequence[ResolvedJudgment],
    votes: Sequence[Sequence[Vote]],
    weights: Sequence[float] | None,
) -> tuple[list[float] | None, int]:
    """The members' weights for ``weighted`` (given) and ``calibrated`` (learned from the
    reference labels of these pairs), and how many labelled comparisons they rest on."""
    if rule == "weighted":
        if weights is None or len(weights) != len(judges):
            raise Invalid(f"weighted needs one weight per judge ({len(judges)}: {judges})")
        return [float(w) for w in weights], 0
    if rule != "calibrated":
        return None, 0
    pairs = [(r.thread_a.id, r.thread_b.id) for r in comparisons]
    ref = reference_codes(pairs, await canonical_references(db, pairs))
    v = np.array([codes([x.winner for x in row]) for row in votes], dtype=np.int64)
    labelled = (v >= 0) & (ref[:, None] >= 0)
    learned = calibrated_weights(v == ref[:, None], labelled)
    return [float(w) for w in learned], int((ref >= 0).sum())


async def _import_panel(
    *,
    db: AsyncSession,
    parsed: ParsedJudgments,
    judges: list[str],
    session_name: str,
    aggregation: str,
    weights: Sequence[float] | None,
) -> JudgmentImportOut:
    """Several judges' lines as a panel session: one comparison per matched line, each
    judge's verdict a vote, the comparison's verdict their aggregate."""
    if aggregation not in AGGREGATIONS or aggregation == "cascade":
        raise Invalid("an imported panel aggregates by majority, mean, weighted or calibrated")
    keys = [k for r in parsed.rows for k in (r.thread_a, r.thread_b)]
    known = await _known_threads(db, keys)
    by_judge: dict[str, list[ResolvedJudgment]] = {}
    errors: list[RowError] = []
    for judge in judges:
        resolved, errs = resolve_judgments([r for r in parsed.rows if r.judge == judge], known)
        by_judge[judge] = resolved
        errors.extend(errs)
    if errors:
        raise JudgmentsRejected(sorted(errors, key=lambda e: e.line))
    grouped, errors = group_panel(judges, by_judge)
    if errors:
        raise JudgmentsRejected(errors)
    # Every judge's lines may carry the pair's reference label: checked across all of them.
    labels, errors = row_labels(
        sorted((r for rs in by_judge.values() for r in rs), key=lambda r: r.judgment.line)
    )
    if errors:
        raise JudgmentsRejected(errors)
    # Stored first (same transaction, no commit yet) so that `calibrated` learns from the
    # labels this file brings as well as those already stored.
    await store_labels(db, labels)
    await db.flush()
    votes = [[_vote(j) for j in row] for row in grouped.votes]
    member_weights, labelled = await _panel_weights(
        db, aggregation, judges, grouped.comparisons, votes, weights
    )
    aggregates: list[Aggregate] = [
        aggregate(aggregation, row, weights=member_weights) for row in votes
    ]
    now = datetime.now(UTC)
    completed = sum(a.winner is not None for a in aggregates)
    criteria = list(
        dict.fromkeys(
            c for row in grouped.votes for j in row if j for c in (*j.scores_a, *j.scores_b)
        )
    )
    session = _finished_session(
        session_name,
        grouped.comparisons,
        " + ".join(judges),
        criteria,
        len(aggregates),
        completed,
        now,
    )
    session.panel = {
        "rule": aggregation,
        "members": [
            {
                "model_id": None,
                "label": judge,
                "weight": None if member_weights is None else member_weights[k],
            }
            for k, judge in enumerate(judges)
        ],
        "weights_from_labels": labelled if aggregation == "calibrated" else None,
    }
    db.add(session)
    await db.flush()
    results = [
        StoredResult(
            status="completed" if a.winner is not None else "failed",
            attempts=1,
            completed_at=now,
            winner=a.winner,
            confidence=a.confidence,
            scores_a=json.dumps(a.scores_a) if a.scores_a else None,
            scores_b=json.dumps(a.scores_b) if a.scores_b else None,
            reasoning=None,
            raw_response=None,
            parse_error=None if a.winner is not None else "no judge of the panel was read",
            strength=panel_strength(a.winner, [(j.winner, j.strength) if j else None for j in row]),
            prob_a=panel_probability([j.prob_a for j in row if j is not None and j.winner]),
        )
        for a, row in zip(aggregates, grouped.votes, strict=True)
    ]
    await insert_plan(db, session.id, judged_plan(grouped.comparisons), results=results)
    ids = dict(
        (
            await db.execute(
                select(Comparison.queue_position, Comparison.id).where(
                    Comparison.session_id == session.id
                )
            )
        ).all()
    )
    rows = []
    for i, row in enumerate(grouped.votes):
        for k, j in enumerate(row):
            voted = j is not None and j.winner is not None
            rows.append(
                {
                    "comparison_id": ids[i],
                    "session_id": session.id,
                    "member": k,
                    "model_id": None,
                    "judge": judges[k],
                    "status": "voted" if voted else "missing",
                    "winner": j.winner if j else None,
                    "strength": j.strength if j else None,
                    "prob_a": j.prob_a if j else None,
                    "confidence": j.confidence if j else None,
                    "scores_a": (j.scores_a or None) if j else None,
                    "scores_b": (j.scores_b or None) if j else None,
                    "reasoning": j.reasoning if j else None,
                    "raw_response": j.raw_response if j else None,
                    "error": None
                    if voted
                    else (j.parse_error if j else "no recorded judgment for this comparison"),
                }
            )
    if rows:
        await db.execute(insert(ComparisonVote), rows)
    await db.execute(
        update(Comparison)
        .where(Comparison.session_id == session.id)
        .values(votes_asked=len(judges))
    )
    await _set_votes_cast(
        db, [ids[i] for i in range(len(aggregates))], [a.voted for a in aggregates]
    )
    await db.commit()
    return _import_out(
        session,
        grouped.comparisons,
        completed=completed,
        labels=len(labels),
        criteria=criteria,
        unread=[
            (r.judgment.line, "no judge of the panel was read")
            for r, a in zip(grouped.comparisons, aggregates, strict=True)
            if a.winner is None
        ],
        judges=judges,
        aggregation=aggregation,
    )


async def _set_votes_cast(db: AsyncSession, ids: Sequence[int], cast_: Sequence[int]) -> None:
    await db.execute(
        text(
            "UPDATE comparisons c SET votes_cast = v.n "
            "FROM unnest(CAST(:ids AS bigint[]), CAST(:n AS int[])) AS v(id, n) WHERE c.id = v.id"
        ),
        {"ids": list(ids), "n": list(cast_)},
    )


def _finished_session(
    name: str,
    comparisons: Sequence[ResolvedJudgment],
    judge_label: str | None,
    criteria: list[str],
    total: int,
    completed: int,
    now: datetime,
) -> JudgeSession:
    """The session an import becomes: already finished, mode ``imported``, never run."""
    return JudgeSession(
        name=name,
        status="completed" if completed else "failed",
        comparison_mode=IMPORTED_MODE,
        pillar_ids=sorted(
            {p for r in comparisons for p in (r.thread_a.pillar_id, r.thread_b.pillar_id)}
        ),
        options={
            "source": "import",
            "judge_label": judge_label,
            "position_swap": any(r.is_swap for r in comparisons),
            "repetitions_per_pair": 1 + max(r.judgment.repetition for r in comparisons),
            "calculate_elo": True,
            "seed": 0,
        },
        worker_count=1,
        judge_model_id=None,
        criteria=criteria,
        total=total,
        completed=completed,
        failed=total - completed,
        started_at=now,
        finished_at=now,
    )
