"""Reference labels: import, list, export, delete.

Labels are stored per thread pair in canonical order (``thread_a_id < thread_b_id``, the
label flipped to match), so one annotator has one label per pair however it was written,
and every session that compares the pair is scored against it (``agreement_report``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
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
from sqlalchemy.dialects.postgresql import Insert, insert
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import Pillar, Thread
from llmjudge.core.agreement import judges as core
from llmjudge.core.text.csvsafe import write_csv
from llmjudge.infra.db.rows import get_or_not_found
from llmjudge.infra.errors import Invalid
from llmjudge.infra.rowfiles import compared_with_itself, file_rows, rejection
from llmjudge.references.models import ReferenceLabel
from llmjudge.references.schemas import (
    ReferenceImportOut,
    ReferenceOut,
    ReferencePage,
    ReferenceRowIn,
    RowError,
)
from llmjudge.sessions import Comparison

__all__ = [
    "CSV_COLUMNS",
    "EXPORT_COLUMNS",
    "LabelFilter",
    "LabelRow",
    "ParsedReferences",
    "ReferencesRejected",
    "check_labels",
    "delete_reference",
    "delete_references",
    "export_references",
    "import_references",
    "list_references",
    "parse_reference_file",
    "resolve_threads",
    "session_annotators",
    "session_pairs",
    "store_labels",
    "thread_pillars",
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
# Key of a thread in an import: its id, or (pillar name, external id).
ThreadKey = int | tuple[str, str]


class ReferencesRejected(Invalid):
    """Row errors in a label import; nothing was stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(rejection(errors, "nothing was imported").message)
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


# What a label row keeps as written (its threads are resolved to ids).
LABEL_FIELDS = {"label", "source", "annotator", "note", "both_bad"}


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
    rows = file_rows(
        filename,
        data,
        out.errors,
        required={"label"},
        allowed=CSV_COLUMNS,
        max_rows=max_rows,
        max_chars=max_chars,
        jsonl_max_chars=max_chars,
    )
    if rows is not None:
        kind, records = rows
        for line, raw in records:
            if kind == "csv":
                raw = {k: _csv_cell(k, v) for k, v in raw.items() if v not in (None, "")}
            _validate(raw, line, out)
    if not out.rows and not out.errors:
        out.errors.append(RowError(line=1, field="file", message="the file has no rows"))
    return out


def _key(row: ReferenceRowIn, side: str) -> ThreadKey:
    by_id = getattr(row, f"thread_{side}")
    if by_id is not None:
        return int(by_id)
    return (str(getattr(row, f"pillar_{side}")), str(getattr(row, f"external_id_{side}")))


async def thread_pillars(
    db: AsyncSession, keys: Iterable[ThreadKey]
) -> dict[ThreadKey, tuple[int, int]]:
    """(thread id, pillar id) of the keys that exist (ids, or (pillar, external id)), two
    queries at most whatever the number of keys (one array parameter each)."""
    keys = set(keys)
    ids = sorted(k for k in keys if isinstance(k, int))
    refs = sorted(k for k in keys if isinstance(k, tuple))
    found: dict[ThreadKey, tuple[int, int]] = {}
    if ids:
        rows = await db.execute(
            select(Thread.id, Thread.pillar_id).where(Thread.id == any_(cast(ids, ARRAY(Integer))))
        )
        found.update({t: (t, p) for t, p in rows.all()})
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
        found.update({(name, ext): (t, p) for name, ext, t, p in rows.all()})
    return found


async def resolve_threads(db: AsyncSession, keys: Iterable[ThreadKey]) -> dict[ThreadKey, int]:
    """Thread ids of the keys that exist (ids, or (pillar, external id))."""
    return {k: t for k, (t, _) in (await thread_pillars(db, keys)).items()}


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
            errors.append(compared_with_itself(row.line, row.thread_a))
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


def upsert_labels(values: dict[str, Any] | Sequence[dict[str, Any]]) -> Insert:
    """Labels inserted, or replacing the label one annotator of one source gave the pair."""
    stmt = insert(ReferenceLabel).values(values)
    return stmt.on_conflict_do_update(
        index_elements=["thread_a_id", "thread_b_id", "source", "annotator"],
        set_={
            "label": stmt.excluded.label,
            "both_bad": stmt.excluded.both_bad,
            "note": stmt.excluded.note,
            "session_id": stmt.excluded.session_id,
            "created_at": func.now(),
        },
    )


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
        stmt = upsert_labels(values[start : start + 2000])
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
                **row.model_dump(include=LABEL_FIELDS),
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


def session_pairs(session_id: int) -> Any:
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


@dataclass(frozen=True)
class LabelFilter:
    """Which labels a list, export or delete reads: every filter given must match."""

    session_id: int | None = None
    thread_id: int | None = None
    source: str | None = None
    annotator: str | None = None

    def where(self) -> list[Any]:
        where: list[Any] = []
        if self.session_id is not None:
            pairs = session_pairs(self.session_id)
            where.append(
                select(pairs.c.a)
                .where(
                    and_(
                        pairs.c.a == ReferenceLabel.thread_a_id,
                        pairs.c.b == ReferenceLabel.thread_b_id,
                    )
                )
                .exists()
            )
        if self.thread_id is not None:
            where.append(
                or_(
                    ReferenceLabel.thread_a_id == self.thread_id,
                    ReferenceLabel.thread_b_id == self.thread_id,
                )
            )
        if self.source is not None:
            where.append(ReferenceLabel.source == self.source)
        if self.annotator is not None:
            where.append(ReferenceLabel.annotator == self.annotator)
        return where


async def list_references(
    *,
    db: AsyncSession,
    filters: LabelFilter,
    limit: int = 100,
    offset: int = 0,
) -> ReferencePage:
    where = filters.where()
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
    filters: LabelFilter,
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
        .where(*filters.where())
        .order_by(ReferenceLabel.id)
    )
    records = [dict(zip(EXPORT_COLUMNS, row, strict=True)) for row in (await db.execute(stmt))]
    if fmt == "csv":
        return write_csv(records, EXPORT_COLUMNS)
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


async def session_annotators(*, db: AsyncSession, session_id: int) -> list[str]:
    """Names of the human annotators who labelled pairs this session compares."""
    pairs = session_pairs(session_id)
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


async def session_label_sources(*, db: AsyncSession, session_id: int) -> set[str]:
    """The sources ("gold", "human") of the labels on pairs this session compares."""
    pairs = session_pairs(session_id)
    rows = await db.scalars(
        select(ReferenceLabel.source)
        .join(
            pairs,
            and_(pairs.c.a == ReferenceLabel.thread_a_id, pairs.c.b == ReferenceLabel.thread_b_id),
        )
        .distinct()
    )
    return set(rows)


async def delete_reference(*, db: AsyncSession, reference_id: int) -> None:
    label = await get_or_not_found(db, ReferenceLabel, reference_id, "reference label")
    await db.delete(label)
    await db.commit()


async def delete_references(
    *,
    db: AsyncSession,
    filters: LabelFilter,
) -> int:
    """Delete the labels matching every filter given; at least one filter is required, so
    a bare DELETE cannot wipe every label."""
    where = filters.where()
    if not where:
        raise Invalid("name at least one filter (session_id, thread_id, source, annotator)")
    result = await db.execute(delete(ReferenceLabel).where(*where))
    await db.commit()
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
