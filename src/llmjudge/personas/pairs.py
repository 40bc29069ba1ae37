"""Training pairs: CSV parsing and validation (pure), storage all or nothing, the held-out
split, listing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog.schemas import RowError
from llmjudge.errors import Conflict
from llmjudge.personas.keys import input_hash
from llmjudge.personas.lookup import persona_row
from llmjudge.personas.metrics import split_holdout
from llmjudge.personas.models import Persona, PersonaPair
from llmjudge.personas.schemas import PairOut, PairRow, PairUploadResult
from llmjudge.rowfiles import csv_records, decode_text

CSV_COLUMNS = {"input", "correct_output", "input_b"}
PREVIEW_ROWS = 10
FEW_PAIRS = 20


@dataclass
class ParsedPairs:
    rows: list[PairRow] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)


def parse_pairs_csv(data: bytes, *, max_rows: int, max_chars: int) -> ParsedPairs:
    """Validate a CSV of ``input, correct_output[, input_b]`` without touching the database.

    All or nothing: the caller stores rows only when ``errors`` is empty. Line numbers count
    the header as line 1; a duplicate input (with the same ``input_b``) is an error.
    """
    out = ParsedPairs()
    try:
        text = decode_text(data)
    except ValueError as e:
        out.errors.append(RowError(line=1, field="file", message=str(e)))
        return out
    seen: dict[str, int] = {}
    records = csv_records(
        text,
        out.errors,
        required={"input", "correct_output"},
        allowed=CSV_COLUMNS,
        max_rows=max_rows,
        max_chars=max_chars,
    )
    for line, rec in records:
        _validate_row(rec, line, out, max_chars, seen)
    if not out.rows and not out.errors:
        out.errors.append(RowError(line=1, field="file", message="the file has no rows"))
    return out


def _validate_row(
    rec: dict[str, Any], line: int, out: ParsedPairs, max_chars: int, seen: dict[str, int]
) -> None:
    raw = {k: v for k, v in rec.items() if v not in (None, "")}
    for name in ("input", "correct_output"):
        if not str(raw.get(name, "")).strip():
            out.errors.append(RowError(line=line, field=name, message=f"{name} is empty"))
            return
    for name, value in raw.items():
        if len(value) > max_chars:
            out.errors.append(
                RowError(
                    line=line,
                    field=name,
                    message=f"{name} has {len(value):,} characters; the limit is {max_chars:,}",
                )
            )
            return
    row = PairRow(
        input=raw["input"], correct_output=raw["correct_output"], input_b=raw.get("input_b")
    )
    key = input_hash(row.input, row.input_b)
    if key in seen:
        out.errors.append(
            RowError(
                line=line,
                field="input",
                message=f"duplicate input (first seen on line {seen[key]})",
            )
        )
        return
    seen[key] = line
    out.rows.append(row)
    out.lines.append(line)


async def assign_splits(db: AsyncSession, p: Persona, *, only: set[int] | None) -> None:
    """Held-out sides from the seeded hash split, for the pairs in ``only`` (all when None).

    New pairs take their side while existing pairs keep theirs, so the reviews and metrics
    of earlier iterations stay comparable.
    """
    ids = list(
        await db.scalars(
            select(PersonaPair.id)
            .where(PersonaPair.persona_id == p.id)
            .order_by(PersonaPair.position)
        )
    )
    _, holdout = split_holdout(ids, p.holdout_fraction, p.split_seed)
    held = set(holdout)
    targets = ids if only is None else [i for i in ids if i in only]
    for side, chosen in (
        ("holdout", [i for i in targets if i in held]),
        ("optimisation", [i for i in targets if i not in held]),
    ):
        if chosen:
            await db.execute(
                update(PersonaPair).where(PersonaPair.id.in_(chosen)).values(split=side)
            )


async def store_pairs(
    *,
    db: AsyncSession,
    persona_id: int,
    rows: Sequence[PairRow],
    lines: Sequence[int] | None = None,
    preview: bool = False,
) -> PairUploadResult:
    """Store validated rows in one transaction (all or none).

    A row identical to a stored pair is skipped; the same input with another correct output
    is refused (raises ``RowsRejected``), as changing the truth would silently invalidate
    earlier reviews.
    """
    p = await persona_row(db, persona_id, lock=not preview)
    if p.status == "training" and not preview:
        raise Conflict("pause training before adding pairs")
    existing = dict(
        (
            await db.execute(
                select(PersonaPair.input_hash, PersonaPair.correct_output).where(
                    PersonaPair.persona_id == persona_id
                )
            )
        ).all()
    )
    fresh: list[tuple[PairRow, str]] = []
    errors: list[RowError] = []
    skipped = 0
    for line, row in zip(lines or range(2, len(rows) + 2), rows, strict=True):
        key = input_hash(row.input, row.input_b)
        if key in existing:
            if existing[key] == row.correct_output:
                skipped += 1
            else:
                errors.append(
                    RowError(
                        line=line,
                        field="correct_output",
                        message="this input is already stored with a different correct_output",
                    )
                )
            continue
        fresh.append((row, key))
    if errors:
        raise RowsRejected(errors)
    total = len(existing) + len(fresh)
    warnings = []
    if total < FEW_PAIRS:
        warnings.append(
            f"only {total} pair(s): F1 on so few is noisy; {FEW_PAIRS} or more are "
            "recommended, more with a held-out split"
        )
    if preview:
        return PairUploadResult(
            preview=True,
            created=0,
            skipped=skipped,
            total_pairs=len(existing),
            rows=list(rows[:PREVIEW_ROWS]),
            warnings=warnings,
        )
    if fresh:
        start = (
            await db.scalar(
                select(func.coalesce(func.max(PersonaPair.position), 0)).where(
                    PersonaPair.persona_id == persona_id
                )
            )
            or 0
        )
        values = [
            {
                "persona_id": persona_id,
                "position": start + i,
                "input": row.input,
                "input_b": row.input_b,
                "correct_output": row.correct_output,
                "input_hash": key,
                "split": "optimisation",
            }
            for i, (row, key) in enumerate(fresh, start=1)
        ]
        new_ids: set[int] = set()
        for chunk in range(0, len(values), 2000):
            new_ids.update(
                await db.scalars(
                    insert(PersonaPair).returning(PersonaPair.id), values[chunk : chunk + 2000]
                )
            )
        await assign_splits(db, p, only=new_ids)
    await db.commit()
    return PairUploadResult(
        preview=False,
        created=len(fresh),
        skipped=skipped,
        total_pairs=total,
        rows=[],
        warnings=warnings,
    )


class RowsRejected(Exception):
    """Rows that cannot be stored; the API answers 422 with the list and stores nothing."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(f"{len(errors)} problem(s) found; nothing was stored")
        self.errors = errors


async def list_pairs(
    *,
    db: AsyncSession,
    persona_id: int,
    split: Literal["optimisation", "holdout"] | None = None,
    limit: int = 500,
    offset: int = 0,
) -> list[PairOut]:
    await persona_row(db, persona_id)
    stmt = select(PersonaPair).where(PersonaPair.persona_id == persona_id)
    if split is not None:
        stmt = stmt.where(PersonaPair.split == split)
    rows = await db.scalars(stmt.order_by(PersonaPair.position).limit(limit).offset(offset))
    return [PairOut.model_validate(r) for r in rows]
