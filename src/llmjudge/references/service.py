"""Reference labels: import, list, export, delete; and a session's agreement report.

Labels are stored per thread pair in canonical order (``thread_a_id < thread_b_id``, the
label flipped to match), so one annotator has one label per pair however it was written,
and every session that compares the pair is scored against it. The agreement figures are
computed by the pure :mod:`llmjudge.analysis.agreement`; this module only loads and maps.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    ARRAY,
    Integer,
    String,
    and_,
    any_,
    cast,
    delete,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.analysis import agreement as core
from llmjudge.catalog.models import Pillar, Thread
from llmjudge.csvsafe import write_csv
from llmjudge.errors import Invalid, NotFound
from llmjudge.references.models import ReferenceLabel
from llmjudge.references.schemas import (
    AgreementOut,
    AnnotatorPairOut,
    DisagreementOut,
    EstimateOut,
    GroupAgreementOut,
    HumanAgreementOut,
    JudgeAgreementOut,
    ReferenceImportOut,
    ReferenceOut,
    ReferencePage,
    ReferenceRowIn,
    RowError,
)
from llmjudge.rowfiles import csv_records, decode_text, jsonl_objects
from llmjudge.sessions.models import Comparison, JudgeSession

__all__ = [
    "CSV_COLUMNS",
    "EXPORT_COLUMNS",
    "LabelRow",
    "ParsedReferences",
    "ReferencesRejected",
    "delete_reference",
    "delete_references",
    "export_references",
    "import_references",
    "list_references",
    "parse_reference_file",
    "resolve_threads",
    "session_agreement",
    "session_annotators",
    "store_labels",
]

CSV_COLUMNS = frozenset(ReferenceRowIn.model_fields)
EXPORT_COLUMNS = (
    "pillar_a",
    "external_id_a",
    "pillar_b",
    "external_id_b",
    "label",
    "both_bad",
    "source",
    "annotator",
    "note",
)
DISAGREEMENTS_SHOWN = 200
# Bootstrap rounds per breakdown group: a session may have hundreds of pillar pairs, and a
# group's interval is a guide, not the headline (the whole session's figures use the full
# DEFAULT_ROUNDS). 25k pairs in 496 pillar pairs: 6 s at 1,000 rounds, under 2 s at 200.
GROUP_ROUNDS = 200
# Key of a thread in an import: its id, or (pillar name, external id).
ThreadKey = int | tuple[str, str]


class ReferencesRejected(Invalid):
    """Row errors in a label import; nothing was stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(f"{len(errors)} problem(s) found; nothing was imported")
        self.errors = errors


@dataclass
class ParsedReferences:
    rows: list[ReferenceRowIn] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)


@dataclass(frozen=True)
class LabelRow:
    """A label with its threads resolved to ids, in the order it was written."""

    line: int
    thread_a: int
    thread_b: int
    label: str
    source: str = "gold"
    annotator: str = ""
    note: str = ""
    both_bad: bool = False


# --------------------------------------------------------------------------- import


def _validate(raw: dict[str, Any], line: int, out: ParsedReferences) -> None:
    try:
        row = ReferenceRowIn.model_validate(raw)
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "row"
            message = err["msg"].removeprefix("Value error, ")
            if loc == "label":
                message = f"unknown label {raw.get('label')!r}: use A, B or TIE"
            out.errors.append(RowError(line=line, field=loc, message=message))
        return
    out.rows.append(row)
    out.lines.append(line)


def _csv_cell(name: str, value: str) -> Any:
    if name in ("thread_a", "thread_b"):
        try:
            return int(value)
        except ValueError:
            return value  # refused by validation with the column named
    if name == "both_bad":
        return value.strip().lower() in ("1", "true", "yes")
    return value


def parse_reference_file(
    filename: str, data: bytes, *, max_rows: int, max_chars: int
) -> ParsedReferences:
    """Validate a CSV or JSONL label file without touching the database."""
    out = ParsedReferences()
    try:
        text = decode_text(data)
    except ValueError as e:
        out.errors.append(RowError(line=1, field="file", message=str(e)))
        return out
    name = filename.lower()
    if name.endswith((".jsonl", ".ndjson", ".json")):
        for line, raw in jsonl_objects(text, out.errors, max_rows=max_rows, max_chars=max_chars):
            _validate(raw, line, out)
    elif name.endswith((".csv", ".txt")):
        records = csv_records(
            text,
            out.errors,
            required={"label"},
            allowed=CSV_COLUMNS,
            max_rows=max_rows,
            max_chars=max_chars,
        )
        for line, rec in records:
            raw = {k: _csv_cell(k, v) for k, v in rec.items() if v not in (None, "")}
            _validate(raw, line, out)
    else:
        out.errors.append(
            RowError(line=1, field="file", message="unsupported file type: upload .csv or .jsonl")
        )
        return out
    if not out.rows and not out.errors:
        out.errors.append(RowError(line=1, field="file", message="the file has no rows"))
    return out


def _key(row: ReferenceRowIn, side: str) -> ThreadKey:
    by_id = getattr(row, f"thread_{side}")
    if by_id is not None:
        return int(by_id)
    return (str(getattr(row, f"pillar_{side}")), str(getattr(row, f"external_id_{side}")))


async def resolve_threads(db: AsyncSession, keys: Iterable[ThreadKey]) -> dict[ThreadKey, int]:
    """Thread ids of the keys that exist (ids, or (pillar, external id)), two queries at most."""
    keys = set(keys)
    ids = sorted(k for k in keys if isinstance(k, int))
    refs = sorted(k for k in keys if isinstance(k, tuple))
    found: dict[ThreadKey, int] = {}
    if ids:
        rows = await db.execute(
            select(Thread.id).where(Thread.id == any_(cast(ids, ARRAY(Integer))))
        )
        found.update({t: t for (t,) in rows.all()})
    if refs:
        wanted = select(
            func.unnest(cast([r[0] for r in refs], ARRAY(String))).label("pillar"),
            func.unnest(cast([r[1] for r in refs], ARRAY(String))).label("external_id"),
        ).subquery()
        rows = await db.execute(
            select(Pillar.name, Thread.external_id, Thread.id)
            .join(Pillar, Pillar.id == Thread.pillar_id)
            .join(
                wanted,
                (wanted.c.pillar == Pillar.name) & (wanted.c.external_id == Thread.external_id),
            )
        )
        found.update({(name, ext): t for name, ext, t in rows.all()})
    return found


def _describe(key: ThreadKey) -> str:
    if isinstance(key, int):
        return f"no thread with id {key}"
    return f"no thread with external_id {key[1]!r} in pillar {key[0]!r}"


def _canonical(row: LabelRow) -> dict[str, Any]:
    a, b, label = row.thread_a, row.thread_b, row.label
    if a > b:
        a, b, label = b, a, core.flip(label)  # type: ignore[arg-type]
    return {
        "thread_a_id": a,
        "thread_b_id": b,
        "label": label,
        "both_bad": row.both_bad,
        "source": row.source,
        "annotator": row.annotator,
        "note": row.note,
    }


def check_labels(rows: Sequence[LabelRow]) -> list[RowError]:
    """Self-pairs, and two labels of one annotator for one pair in one file."""
    errors: list[RowError] = []
    seen: dict[tuple[int, int, str, str], int] = {}
    for row in rows:
        if row.thread_a == row.thread_b:
            errors.append(
                RowError(
                    line=row.line,
                    field="thread_b",
                    message=f"thread {row.thread_a} is compared with itself",
                )
            )
            continue
        key = (min(row.thread_a, row.thread_b), max(row.thread_a, row.thread_b))
        full = (*key, row.source, row.annotator)
        if full in seen:
            errors.append(
                RowError(
                    line=row.line,
                    field="label",
                    message=f"a second {row.source} label by {row.annotator or '(no annotator)'!r}"
                    f" for this pair (first on line {seen[full]})",
                )
            )
        else:
            seen[full] = row.line
    return errors


async def store_labels(
    db: AsyncSession, rows: Sequence[LabelRow], *, session_id: int | None = None
) -> tuple[int, int]:
    """Upsert labels on (pair, source, annotator) in the caller's transaction (no commit);
    returns (created, updated). Rows must have passed :func:`check_labels`."""
    if not rows:
        return 0, 0
    values = [_canonical(r) | {"session_id": session_id} for r in rows]
    created = 0
    for start in range(0, len(values), 2000):
        stmt = insert(ReferenceLabel).values(values[start : start + 2000])
        stmt = stmt.on_conflict_do_update(
            index_elements=["thread_a_id", "thread_b_id", "source", "annotator"],
            set_={
                "label": stmt.excluded.label,
                "both_bad": stmt.excluded.both_bad,
                "note": stmt.excluded.note,
                "session_id": stmt.excluded.session_id,
                "created_at": func.now(),
            },
        )
        # xmax = 0 only on freshly inserted rows: counts created vs updated in one statement.
        result = await db.execute(stmt.returning(literal_column("(xmax = 0)")))
        created += sum(1 for (fresh,) in result.all() if fresh)
    return created, len(values) - created


async def import_references(*, db: AsyncSession, parsed: ParsedReferences) -> ReferenceImportOut:
    """Store a parsed label file in one transaction, or raise ReferencesRejected (nothing
    stored) for row errors, unknown threads and self-pairs."""
    if parsed.errors:
        raise ReferencesRejected(parsed.errors)
    keys = [(_key(r, "a"), _key(r, "b")) for r in parsed.rows]
    known = await resolve_threads(db, (k for pair in keys for k in pair))
    errors: list[RowError] = []
    rows: list[LabelRow] = []
    for row, line, (ka, kb) in zip(parsed.rows, parsed.lines, keys, strict=True):
        missing = [(side, k) for side, k in (("a", ka), ("b", kb)) if k not in known]
        for side, k in missing:
            field_name = f"thread_{side}" if isinstance(k, int) else f"external_id_{side}"
            errors.append(RowError(line=line, field=field_name, message=_describe(k)))
        if missing:
            continue
        rows.append(
            LabelRow(
                line=line,
                thread_a=known[ka],
                thread_b=known[kb],
                label=row.label,
                source=row.source,
                annotator=row.annotator,
                note=row.note,
                both_bad=row.both_bad,
            )
        )
    errors += check_labels(rows)
    if errors:
        errors.sort(key=lambda e: e.line)
        raise ReferencesRejected(errors)
    created, updated = await store_labels(db, rows)
    await db.commit()
    return ReferenceImportOut(created=created, updated=updated, total=len(rows))


# --------------------------------------------------------------------------- list, export, delete


def _session_pairs(session_id: int) -> Any:
    """Canonical pairs a session compares, as a subquery."""
    return (
        select(
            func.least(Comparison.thread_a_id, Comparison.thread_b_id).label("a"),
            func.greatest(Comparison.thread_a_id, Comparison.thread_b_id).label("b"),
        )
        .where(Comparison.session_id == session_id)
        .distinct()
        .subquery()
    )


def _filters(
    session_id: int | None, thread_id: int | None, source: str | None, annotator: str | None
) -> list[Any]:
    where: list[Any] = []
    if session_id is not None:
        pairs = _session_pairs(session_id)
        where.append(
            select(pairs.c.a)
            .where(
                and_(
                    pairs.c.a == ReferenceLabel.thread_a_id, pairs.c.b == ReferenceLabel.thread_b_id
                )
            )
            .exists()
        )
    if thread_id is not None:
        where.append(
            or_(ReferenceLabel.thread_a_id == thread_id, ReferenceLabel.thread_b_id == thread_id)
        )
    if source is not None:
        where.append(ReferenceLabel.source == source)
    if annotator is not None:
        where.append(ReferenceLabel.annotator == annotator)
    return where


async def list_references(
    *,
    db: AsyncSession,
    session_id: int | None = None,
    thread_id: int | None = None,
    source: str | None = None,
    annotator: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> ReferencePage:
    where = _filters(session_id, thread_id, source, annotator)
    total = await db.scalar(select(func.count()).select_from(ReferenceLabel).where(*where))
    rows = await db.scalars(
        select(ReferenceLabel).where(*where).order_by(ReferenceLabel.id).limit(limit).offset(offset)
    )
    return ReferencePage(
        total=total or 0,
        limit=limit,
        offset=offset,
        items=[ReferenceOut.model_validate(r) for r in rows],
    )


async def export_references(
    *,
    db: AsyncSession,
    fmt: str,
    session_id: int | None = None,
    thread_id: int | None = None,
    source: str | None = None,
    annotator: str | None = None,
) -> str:
    """The labels as CSV or JSONL that import again (threads named by pillar and external id,
    so a file moves between installations)."""
    ta, tb = Thread.__table__.alias("ta"), Thread.__table__.alias("tb")
    pa, pb = Pillar.__table__.alias("pa"), Pillar.__table__.alias("pb")
    stmt = (
        select(
            pa.c.name,
            ta.c.external_id,
            pb.c.name,
            tb.c.external_id,
            ReferenceLabel.label,
            ReferenceLabel.both_bad,
            ReferenceLabel.source,
            ReferenceLabel.annotator,
            ReferenceLabel.note,
        )
        .join(ta, ta.c.id == ReferenceLabel.thread_a_id)
        .join(tb, tb.c.id == ReferenceLabel.thread_b_id)
        .join(pa, pa.c.id == ta.c.pillar_id)
        .join(pb, pb.c.id == tb.c.pillar_id)
        .where(*_filters(session_id, thread_id, source, annotator))
        .order_by(ReferenceLabel.id)
    )
    records = [dict(zip(EXPORT_COLUMNS, row, strict=True)) for row in (await db.execute(stmt))]
    if fmt == "csv":
        return write_csv(records, EXPORT_COLUMNS)
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


async def session_annotators(*, db: AsyncSession, session_id: int) -> list[str]:
    """Names of the human annotators who labelled pairs this session compares."""
    pairs = _session_pairs(session_id)
    rows = await db.scalars(
        select(ReferenceLabel.annotator)
        .join(
            pairs,
            and_(pairs.c.a == ReferenceLabel.thread_a_id, pairs.c.b == ReferenceLabel.thread_b_id),
        )
        .where(ReferenceLabel.source == "human", ReferenceLabel.annotator != "")
        .distinct()
        .order_by(ReferenceLabel.annotator)
    )
    return list(rows)


async def delete_reference(*, db: AsyncSession, reference_id: int) -> None:
    label = await db.get(ReferenceLabel, reference_id)
    if label is None:
        raise NotFound(f"reference label {reference_id} not found")
    await db.delete(label)
    await db.commit()


async def delete_references(
    *,
    db: AsyncSession,
    session_id: int | None = None,
    thread_id: int | None = None,
    source: str | None = None,
    annotator: str | None = None,
) -> int:
    """Delete the labels matching every filter given; at least one filter is required, so
    a bare DELETE cannot wipe every label."""
    where = _filters(session_id, thread_id, source, annotator)
    if not where:
        raise Invalid("name at least one filter (session_id, thread_id, source, annotator)")
    result = await db.execute(delete(ReferenceLabel).where(*where))
    await db.commit()
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- agreement


def _estimate(e: core.Estimate) -> EstimateOut:
    return EstimateOut(value=e.value, n=e.n, low=e.low, high=e.high)


def _judge_out(r: core.AgreementReport) -> dict[str, Any]:
    return {
        "judgments": r.judgments,
        "pairs": r.pairs,
        "accuracy": _estimate(r.accuracy),
        "accuracy_without_ties": _estimate(r.accuracy_without_ties),
        "both_orders_correct": _estimate(r.both_orders_correct),
        "net_vote": _estimate(r.net_vote),
        "consistency": _estimate(r.consistency),
        "kappa": _estimate(r.kappa),
        "precision": _estimate(r.precision),
        "recall": _estimate(r.recall),
        "f1": _estimate(r.f1),
        "confusion": [list(row) for row in r.confusion],
    }


def _human_out(h: core.HumanAgreement) -> HumanAgreementOut:
    return HumanAgreementOut(
        items=h.items,
        annotators=list(h.annotators),
        percent_agreement=_estimate(h.percent_agreement),
        fleiss_kappa=_estimate(h.fleiss_kappa),
        krippendorff_alpha=_estimate(h.krippendorff_alpha),
        pairwise=[
            AnnotatorPairOut(
                first=p.first,
                second=p.second,
                kappa=_estimate(p.kappa),
                agreement=_estimate(p.agreement),
            )
            for p in h.pairwise
        ],
    )


@dataclass(frozen=True)
class _Loaded:
    judgments: list[core.Judgment]
    labels: list[core.ReferenceLabel]
    pillar_of: dict[int, str]  # thread id -> pillar name
    meta_of: dict[int, Any]  # thread id -> value of the chosen metadata key


def _groups(
    pairs: Iterable[tuple[int, int]], value_of: Mapping[int, Any]
) -> dict[Hashable, Hashable]:
    out: dict[Hashable, Hashable] = {}
    for a, b in pairs:
        va, vb = value_of.get(a), value_of.get(b)
        if va is None and vb is None:
            continue  # neither thread has the key: the pair belongs to no group
        out[(a, b)] = core.pair_group(
            "(none)" if va is None else va, "(none)" if vb is None else vb
        )
    return out


def _group_list(
    reports: Mapping[Hashable, core.AgreementReport],
) -> list[GroupAgreementOut]:
    return [
        GroupAgreementOut(group=str(key), **_judge_out(report))
        for key, report in sorted(reports.items(), key=lambda kv: str(kv[0]))
        if report.judgments
    ]


def _compute(
    session_id: int,
    loaded: _Loaded,
    reference: str,
    group_by: str | None,
    completed: int,
    rounds: int,
) -> AgreementOut:
    """The whole report from loaded rows: pure and CPU-bound (bootstrap), run in a thread."""
    references = core.select_references(loaded.labels, reference)
    report = core.agreement_report(loaded.judgments, references, rounds=rounds)
    pairs = list(references)
    group_rounds = min(rounds, GROUP_ROUNDS)
    by_pillar = core.agreement_by_group(
        loaded.judgments, references, _groups(pairs, loaded.pillar_of), rounds=group_rounds
    )
    by_meta = (
        core.agreement_by_group(
            loaded.judgments, references, _groups(pairs, loaded.meta_of), rounds=group_rounds
        )
        if group_by
        else {}
    )
    annotations: dict[Hashable, dict[str, str]] = defaultdict(dict)
    for label in loaded.labels:  # time order: a later label replaces an earlier one
        if label.source == "human":
            annotations[label.pair][label.annotator] = label.label
    human = core.human_agreement(annotations, rounds=rounds)
    shown = report.disagreements[:DISAGREEMENTS_SHOWN]
    return AgreementOut(
        session_id=session_id,
        reference=reference,
        group_by=group_by,
        completed=completed,
        unlabelled=report.unlabelled,
        labelled_pairs=report.pairs,
        judge=JudgeAgreementOut(**_judge_out(report)),
        by_pillar_pair=_group_list(by_pillar),
        by_metadata=_group_list(by_meta),
        human=_human_out(human),
        disagreements=[
            DisagreementOut(
                comparison_id=int(d.comparison),  # type: ignore[call-overload]
                thread_a_id=d.pair[0],  # type: ignore[index]
                thread_b_id=d.pair[1],  # type: ignore[index]
                reference=d.reference,
                judge=d.judge,
                swapped=d.swapped,
                thread_a_url=f"/threads/{d.pair[0]}",  # type: ignore[index]
                thread_b_url=f"/threads/{d.pair[1]}",  # type: ignore[index]
                pair_url=f"/sessions/{session_id}/review?pair={d.pair[0]}-{d.pair[1]}",  # type: ignore[index]
            )
            for d in shown
        ],
        disagreements_total=len(report.disagreements),
    )


def _check_reference(reference: str) -> None:
    if reference in ("gold", "human", "majority"):
        return
    if reference.startswith("annotator:") and reference.removeprefix("annotator:"):
        return
    raise Invalid(f"reference must be gold, human, majority or annotator:<name>, got {reference!r}")


async def session_agreement(
    *,
    db: AsyncSession,
    session_id: int,
    reference: str = "gold",
    group_by: str | None = None,
    rounds: int = core.DEFAULT_ROUNDS,
) -> AgreementOut:
    """The judge of a session against reference labels, over its completed comparisons."""
    _check_reference(reference)
    if await db.get(JudgeSession, session_id) is None:
        raise NotFound(f"session {session_id} not found")
    rows = (
        await db.execute(
            select(Comparison.id, Comparison.thread_a_id, Comparison.thread_b_id, Comparison.winner)
            .where(
                Comparison.session_id == session_id,
                Comparison.status == "completed",
                Comparison.winner.is_not(None),
            )
            .order_by(Comparison.id)
        )
    ).all()
    judgments = [
        # The pair is canonical (lower id first): a comparison that showed the higher id
        # first is the pair swapped.
        core.Judgment((min(a, b), max(a, b)), cid, winner, swapped=a > b)
        for cid, a, b, winner in rows
    ]
    pairs = _session_pairs(session_id)
    label_rows = (
        await db.execute(
            select(
                ReferenceLabel.thread_a_id,
                ReferenceLabel.thread_b_id,
                ReferenceLabel.label,
                ReferenceLabel.source,
                ReferenceLabel.annotator,
            )
            .join(
                pairs,
                and_(
                    pairs.c.a == ReferenceLabel.thread_a_id, pairs.c.b == ReferenceLabel.thread_b_id
                ),
            )
            .order_by(ReferenceLabel.created_at, ReferenceLabel.id)
        )
    ).all()
    labels = [
        core.ReferenceLabel((a, b), label, source, annotator)  # type: ignore[arg-type]
        for a, b, label, source, annotator in label_rows
    ]
    thread_ids = sorted({t for lab in labels for t in lab.pair})  # type: ignore[attr-defined]
    pillar_of: dict[int, str] = {}
    meta_of: dict[int, Any] = {}
    if thread_ids:
        meta = Thread.meta[group_by].astext if group_by else None
        columns = [Thread.id, Pillar.name] + ([meta] if meta is not None else [])
        thread_rows = await db.execute(
            select(*columns)
            .join(Pillar, Pillar.id == Thread.pillar_id)
            .where(Thread.id == any_(cast(thread_ids, ARRAY(Integer))))
        )
        for row in thread_rows.all():
            pillar_of[row[0]] = row[1]
            if meta is not None and row[2] is not None:
                meta_of[row[0]] = row[2]
    loaded = _Loaded(judgments, labels, pillar_of, meta_of)
    # The bootstrap is CPU work: keep it off the event loop.
    return await asyncio.to_thread(
        _compute, session_id, loaded, reference, group_by, len(rows), rounds
    )
