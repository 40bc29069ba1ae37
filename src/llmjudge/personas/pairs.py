"""Training pairs: CSV parsing and validation (pure), storage all or nothing, the three
splits, listing.

A pair may bring its own output to judge (``answer``: no task model is then called) and
human labels of it (``human_label``: correct/incorrect, ``annotator``): the same pair on
several rows, one per annotator, gives several labels. Labels pre-fill the review; the
metrics use their majority (or one chosen annotator).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import UploadFile
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog import RowError
from llmjudge.core.personas.keys import input_hash, pair_hash
from llmjudge.core.personas.metrics import majority_label
from llmjudge.core.personas.splits import SplitFractions
from llmjudge.core.personas.splits import assign_splits as plan_splits
from llmjudge.infra import web
from llmjudge.infra.config import Settings
from llmjudge.infra.errors import Conflict
from llmjudge.infra.rowfiles import file_rows, rejection
from llmjudge.personas.lookup import persona_row
from llmjudge.personas.models import Persona, PersonaPair, PersonaPairLabel
from llmjudge.personas.schemas import PairOut, PairRow, PairUploadResult

CSV_COLUMNS = {
    "input",
    "correct_output",
    "input_b",
    "answer",
    "system",
    "human_label",
    "annotator",
}
HUMAN_LABELS = {"correct": "correct", "incorrect": "incorrect", "1": "correct", "0": "incorrect"}
DEFAULT_ANNOTATOR = "uploaded"
PREVIEW_ROWS = 10
FEW_PAIRS = 20


@dataclass
class ParsedPairs:
    rows: list[PairRow] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)


def parse_pairs_csv(data: bytes, *, max_rows: int, max_chars: int) -> ParsedPairs:
    """Validate a CSV of ``input, correct_output[, input_b, answer, system, human_label,
    annotator]`` without touching the database.

    All or nothing: the caller stores rows only when ``errors`` is empty. Line numbers count
    the header as line 1. A pair is an input (with its ``input_b``) and whose answer: the
    same input may come with several answers, or several systems' answers (``system``), one pair
    each; a row repeating one (the same input and answer, or the same input and system) is
    an error naming both lines, unless it adds another annotator's label. One input has
    one ``correct_output``.
    """
    out = ParsedPairs()
    read = file_rows(
        None,
        data,
        out.errors,
        required={"input", "correct_output"},
        allowed=CSV_COLUMNS,
        max_rows=max_rows,
        max_chars=max_chars,
        kinds=("csv",),
    )
    if read is None:
        return out
    seen = _Seen(out.rows)
    for line, rec in read[1]:
        _validate_row(rec, line, out, max_chars, seen)
    if not out.rows and not out.errors:
        out.errors.append(RowError(line=1, field="file", message="the file has no rows"))
    return out


async def parse_pairs_upload(file: UploadFile, settings: Settings) -> ParsedPairs:
    """Read an uploaded pairs CSV within the size limit (413 past it) and parse it; a large
    file takes a while to parse, so off the event loop. The API and the page both call it."""
    data = await web.read_upload(file, settings)
    return await asyncio.to_thread(
        parse_pairs_csv,
        data,
        max_rows=settings.max_import_rows,
        max_chars=settings.max_field_chars,
    )


def _validate_row(
    rec: dict[str, Any],
    line: int,
    out: ParsedPairs,
    max_chars: int,
    seen: _Seen,
) -> None:
    # NUL cannot be stored in PostgreSQL text; it never carries meaning in a pair.
    raw = {k: v.replace("\x00", "") for k, v in rec.items() if v not in (None, "")}
    raw = {k: v for k, v in raw.items() if v != ""}
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
    labels: dict[str, str] = {}
    if "human_label" in raw:
        label = HUMAN_LABELS.get(raw["human_label"].strip().lower())
        if label is None:
            out.errors.append(
                RowError(
                    line=line,
                    field="human_label",
                    message=f"human_label must be correct or incorrect, got {raw['human_label']!r}",
                )
            )
            return
        if "answer" not in raw:
            out.errors.append(
                RowError(
                    line=line,
                    field="answer",
                    message="a human_label labels an answer: give the answer too",
                )
            )
            return
        labels[raw.get("annotator", DEFAULT_ANNOTATOR).strip() or DEFAULT_ANNOTATOR] = label
    system = raw.get("system", "").strip() or None
    if system is not None and "answer" not in raw:
        out.errors.append(
            RowError(
                line=line,
                field="answer",
                message="a system names whose answer the row holds: give the answer too",
            )
        )
        return
    row = PairRow(
        input=raw["input"],
        correct_output=raw["correct_output"],
        input_b=raw.get("input_b"),
        answer=raw.get("answer"),
        system=system,
        labels=labels,
    )
    error = seen.add(row, line, len(out.rows))
    if error == "merged":
        return
    if error is not None:
        out.errors.append(error)
        return
    out.rows.append(row)
    out.lines.append(line)


@dataclass
class _Seen:
    """The rows of a file so far: by pair (input and whose answer) and by input."""

    rows: list[PairRow]
    pairs: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (line, index)
    truths: dict[str, tuple[int, str]] = field(default_factory=dict)  # input -> (line, truth)

    def add(self, row: PairRow, line: int, index: int) -> RowError | Literal["merged"] | None:
        """None for a new pair (now seen), "merged" for another annotator's labels of a
        pair seen before (added to it), else why the row is refused."""
        ih = input_hash(row.input, row.input_b)
        first_truth = self.truths.setdefault(ih, (line, row.correct_output))
        if first_truth[1] != row.correct_output:  # one question, one correct answer
            return RowError(
                line=line,
                field="correct_output",
                message=f"this input has another correct_output on line {first_truth[0]}",
            )
        key = pair_hash(row.input, row.input_b, row.system, row.answer)
        if key not in self.pairs:
            self.pairs[key] = (line, index)
            return None
        first_line, first_index = self.pairs[key]
        first = self.rows[first_index]
        if first.answer != row.answer:  # the same system, another answer
            return RowError(
                line=line,
                field="answer",
                message=f"system {row.system!r} answers this input on line {first_line} "
                "with another answer",
            )
        if row.labels and not set(row.labels) & set(first.labels):
            first.labels.update(row.labels)  # another annotator's label of the same pair
            return "merged"
        whose = "input, system and answer" if row.system is not None else "input and answer"
        return RowError(
            line=line,
            field="input",
            message=f"duplicate of line {first_line}: the same {whose}",
        )


def fractions_of(p: Persona) -> SplitFractions:
    """The persona's held-out share, halved into selection and calibration."""
    held = p.holdout_fraction
    return SplitFractions(1.0 - held, held / 2.0, held / 2.0)


async def pair_labels(db: AsyncSession, persona_id: int) -> dict[int, dict[str, bool]]:
    """pair id -> {annotator: label is correct} of a persona's uploaded human labels."""
    rows = await db.execute(
        select(PersonaPairLabel.pair_id, PersonaPairLabel.annotator, PersonaPairLabel.label).where(
            PersonaPairLabel.persona_id == persona_id
        )
    )
    out: dict[int, dict[str, bool]] = {}
    for pair_id, who, label in rows.all():
        out.setdefault(pair_id, {})[who] = label == "correct"
    return out


def chosen_label(labels: dict[str, bool], annotator: str | None) -> bool | None:
    """The label the metrics use: the chosen annotator's (None if they gave none), else
    the majority (None on a tie)."""
    if annotator is not None:
        return labels.get(annotator)
    return majority_label(list(labels.values()))


async def assign_splits(db: AsyncSession, p: Persona, *, only: set[int] | None) -> None:
    """Three splits (``splits.assign_splits``: stratified by the human label where one was
    uploaded, the answers to one input together) for the pairs in ``only``, keeping the
    others'; all pairs when None.

    New pairs take their split while existing pairs keep theirs, so the reviews and metrics
    of earlier iterations stay comparable.
    """
    rows = (
        await db.execute(
            select(PersonaPair.id, PersonaPair.split, PersonaPair.input_hash)
            .where(PersonaPair.persona_id == p.id)
            .order_by(PersonaPair.position)
        )
    ).all()
    labels = await pair_labels(db, p.id)
    label_of = {pid: majority_label(list(labels.get(pid, {}).values())) for pid, _, _ in rows}
    targets = {pid for pid, _, _ in rows} if only is None else {pid for pid, _, _ in rows} & only
    existing = {pid: (split, label_of[pid]) for pid, split, _ in rows if pid not in targets}
    plan = plan_splits(
        [(pid, label_of[pid]) for pid in targets],
        existing=existing,
        fractions=fractions_of(p),
        seed=p.split_seed,
        # the answers to one input share its split (splits.py says why)
        groups={pid: ih for pid, _, ih in rows},
    )
    by_split: dict[str, list[int]] = {}
    for pid, split in plan.items():
        by_split.setdefault(split, []).append(pid)
    for split, chosen in by_split.items():
        await db.execute(update(PersonaPair).where(PersonaPair.id.in_(chosen)).values(split=split))


async def store_pairs(
    *,
    db: AsyncSession,
    persona_id: int,
    rows: Sequence[PairRow],
    lines: Sequence[int] | None = None,
    preview: bool = False,
) -> PairUploadResult:
    """Store validated rows in one transaction (all or none).

    A row identical to a stored pair is skipped (its new annotators' labels are added); a
    new answer to a stored input is a new pair. The same input with another correct output,
    or a named system's other answer, is refused (raises ``RowsRejected``), as changing the
    truth would silently invalidate earlier reviews.
    """
    p = await persona_row(db, persona_id, lock=not preview)
    if p.status == "training" and not preview:
        raise Conflict("pause training before adding pairs")
    stored = (
        await db.execute(
            select(
                PersonaPair.pair_hash,
                PersonaPair.input_hash,
                PersonaPair.id,
                PersonaPair.correct_output,
                PersonaPair.answer,
            ).where(PersonaPair.persona_id == persona_id)
        )
    ).all()
    existing = {key: (pid, ans) for key, _, pid, _, ans in stored}
    truths = {ih: correct for _, ih, _, correct, _ in stored}
    fresh: list[tuple[PairRow, str, str]] = []
    errors: list[RowError] = []
    more_labels: list[tuple[int, PairRow]] = []
    skipped = 0
    for line, row in zip(lines or range(2, len(rows) + 2), rows, strict=True):
        ih = input_hash(row.input, row.input_b)
        key = pair_hash(row.input, row.input_b, row.system, row.answer)
        if truths.get(ih, row.correct_output) != row.correct_output:
            errors.append(
                RowError(
                    line=line,
                    field="correct_output",
                    message="this input is already stored with a different correct_output",
                )
            )
        elif key not in existing:
            fresh.append((row, ih, key))
        elif existing[key][1] == row.answer:
            skipped += 1
            if row.labels:
                more_labels.append((existing[key][0], row))  # new annotators of a stored pair
        else:  # the same system, another answer
            errors.append(
                RowError(
                    line=line,
                    field="answer",
                    message=f"this input's answer from system {row.system!r} is already "
                    "stored with a different one",
                )
            )
    if errors:
        raise RowsRejected(errors)
    total = len(existing) + len(fresh)
    warnings = []
    if total < FEW_PAIRS:
        warnings.append(
            f"only {total} pair(s): F1 on so few is noisy; {FEW_PAIRS} or more are "
            "recommended, and convergence needs 10 of each class in the selection split"
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
                "answer": row.answer,
                "system": row.system,
                "input_hash": ih,
                "pair_hash": key,
                "split": "optimisation",
            }
            for i, (row, ih, key) in enumerate(fresh, start=1)
        ]
        new_ids: set[int] = set()
        for chunk in range(0, len(values), 2000):
            ids = list(
                await db.scalars(
                    insert(PersonaPair).returning(PersonaPair.id, sort_by_parameter_order=True),
                    values[chunk : chunk + 2000],
                )
            )
            new_ids.update(ids)
            more_labels.extend(
                zip(ids, [r for r, _, _ in fresh[chunk : chunk + 2000]], strict=True)
            )
    label_values = [
        {"persona_id": persona_id, "pair_id": pid, "annotator": who, "label": label}
        for pid, row in more_labels
        for who, label in row.labels.items()
    ]
    for chunk in range(0, len(label_values), 5000):
        await db.execute(
            insert(PersonaPairLabel).on_conflict_do_nothing(),
            label_values[chunk : chunk + 5000],
        )
    if fresh:
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
        super().__init__(rejection(errors).message)
        self.errors = errors


async def list_pairs(
    *,
    db: AsyncSession,
    persona_id: int,
    split: Literal["optimisation", "selection", "calibration"] | None = None,
    limit: int = 500,
    offset: int = 0,
) -> list[PairOut]:
    await persona_row(db, persona_id)
    stmt = select(PersonaPair).where(PersonaPair.persona_id == persona_id)
    if split is not None:
        stmt = stmt.where(PersonaPair.split == split)
    rows = list(await db.scalars(stmt.order_by(PersonaPair.position).limit(limit).offset(offset)))
    labels = await pair_labels(db, persona_id) if rows else {}
    out = []
    for r in rows:
        pair = PairOut.model_validate(r)
        given = labels.get(r.id, {})
        pair.labels = {who: "correct" if v else "incorrect" for who, v in sorted(given.items())}
        out.append(pair)
    return out
