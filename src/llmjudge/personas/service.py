"""Persona operations: CRUD, training pairs, judge prompt versions, review, reports.

The loop itself lives in ``training.py``; these functions change what it reads (settings,
pairs, prompts, human reviews, status) and read what it wrote.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import Select, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog.schemas import RowError
from llmjudge.csvsafe import write_csv
from llmjudge.errors import Conflict, Invalid, NotFound
from llmjudge.personas.metrics import split_holdout
from llmjudge.personas.models import (
    JudgePromptVersion,
    Persona,
    PersonaDecision,
    PersonaIteration,
    PersonaPair,
    TaskOutput,
)
from llmjudge.personas.schemas import (
    BulkFeedbackIn,
    BulkFeedbackOut,
    CallEstimate,
    DecisionOut,
    DiffOpcode,
    EstimateOut,
    FeedbackIn,
    FromTemplateIn,
    IterationOut,
    MetricsOut,
    MetricsRow,
    PairOut,
    PairRow,
    PairUploadResult,
    PersonaIn,
    PersonaOut,
    PersonaPatch,
    PromptDiffOut,
    PromptVersionOut,
    ReportDecision,
    ReportOut,
    TrainingStatusOut,
)
from llmjudge.personas.templates import (
    get_template,
    render_judge_prompt,
    render_task_prompt,
)
from llmjudge.personas.training import (
    ENGINEER_SYSTEM,
    MAX_ENGINEER_FAILURES,
    human_label,
    input_hash,
    missing_placeholders,
    prompt_hash,
    task_input,
)
from llmjudge.providers.base import estimate_tokens
from llmjudge.providers.models import LLMModel
from llmjudge.providers.service import (
    BUILTIN_SIMULATED_MODELS,
    LLMService,
    ensure_builtin_simulator,
    totals,
)
from llmjudge.rowfiles import csv_records, decode_text

CSV_COLUMNS = {"input", "correct_output", "input_b"}
PREVIEW_ROWS = 10
FEW_PAIRS = 20
# Estimates: tokens of a judge reply, of the engineer's rationale, and the share of
# optimisation pairs assumed to be disagreements shown to the engineer.
JUDGE_OUTPUT_TOKENS = 80
RATIONALE_TOKENS = 100
FAILURE_SHARE = 0.3
EDITABLE_WHILE_TRAINING = {"name", "description", "budget_usd", "target_f1", "max_iterations"}


# -- pure helpers ----------------------------------------------------------------------------


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


def prompt_diff(a: int, a_text: str, b: int, b_text: str) -> PromptDiffOut:
    a_lines, b_lines = a_text.splitlines(), b_text.splitlines()
    unified = "\n".join(
        difflib.unified_diff(
            a_lines, b_lines, fromfile=f"version {a}", tofile=f"version {b}", lineterm=""
        )
    )
    matcher = difflib.SequenceMatcher(a=a_lines, b=b_lines, autojunk=False)
    opcodes = [
        DiffOpcode(
            tag=tag,  # type: ignore[arg-type]  # difflib's four tags
            a_start=i1,
            a_end=i2,
            b_start=j1,
            b_end=j2,
            a_lines=a_lines[i1:i2],
            b_lines=b_lines[j1:j2],
        )
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
    return PromptDiffOut(a=a, b=b, unified=unified, opcodes=opcodes)


def _check_judge_prompt(text: str) -> None:
    missing = missing_placeholders(text)
    if missing:
        raise Invalid(
            "the judge prompt must contain the placeholder(s) "
            + ", ".join("{" + m + "}" for m in missing)
        )


# -- personas --------------------------------------------------------------------------------


async def _persona(db: AsyncSession, persona_id: int, *, lock: bool = False) -> Persona:
    stmt = select(Persona).where(Persona.id == persona_id)
    if lock:
        stmt = stmt.with_for_update()
    p = await db.scalar(stmt)
    if p is None:
        raise NotFound(f"persona {persona_id} not found")
    return p


def _persona_query() -> Select[tuple[Persona, str | None, int, int | None]]:
    """Personas with their current judge prompt, pair count and latest iteration number."""
    pairs = (
        select(PersonaPair.persona_id, func.count().label("n"))
        .group_by(PersonaPair.persona_id)
        .subquery()
    )
    iterations = (
        select(PersonaIteration.persona_id, func.max(PersonaIteration.number).label("last"))
        .group_by(PersonaIteration.persona_id)
        .subquery()
    )
    return (
        select(Persona, JudgePromptVersion.text, func.coalesce(pairs.c.n, 0), iterations.c.last)
        .outerjoin(
            JudgePromptVersion,
            (JudgePromptVersion.persona_id == Persona.id)
            & (JudgePromptVersion.version == Persona.current_version),
        )
        .outerjoin(pairs, pairs.c.persona_id == Persona.id)
        .outerjoin(iterations, iterations.c.persona_id == Persona.id)
    )


def _persona_out(p: Persona, judge_prompt: str | None, pairs: int, last: int | None) -> PersonaOut:
    return PersonaOut(
        id=p.id,
        name=p.name,
        description=p.description,
        task_prompt=p.task_prompt,
        judge_prompt=judge_prompt or "",
        current_version=p.current_version,
        task_model_id=p.task_model_id,
        judge_model_id=p.judge_model_id,
        engineer_model_id=p.engineer_model_id,
        target_f1=p.target_f1,
        max_iterations=p.max_iterations,
        holdout_fraction=p.holdout_fraction,
        split_seed=p.split_seed,
        budget_usd=p.budget_usd,
        iteration_timeout_s=p.iteration_timeout_s,
        status=p.status,  # type: ignore[arg-type]  # the table's CHECK keeps it valid
        status_reason=p.status_reason,
        template_key=p.template_key,
        pair_count=pairs,
        current_iteration=last,
        created_at=p.created_at,
        updated_at=p.updated_at,
    )


async def list_personas(*, db: AsyncSession) -> list[PersonaOut]:
    rows = await db.execute(_persona_query().order_by(Persona.name))
    return [_persona_out(*row) for row in rows.all()]


async def get_persona(*, db: AsyncSession, persona_id: int) -> PersonaOut:
    row = (await db.execute(_persona_query().where(Persona.id == persona_id))).first()
    if row is None:
        raise NotFound(f"persona {persona_id} not found")
    return _persona_out(*row)


async def _check_name(db: AsyncSession, name: str, exclude_id: int | None = None) -> None:
    stmt = select(Persona.id).where(Persona.name == name)
    if exclude_id is not None:
        stmt = stmt.where(Persona.id != exclude_id)
    if await db.scalar(stmt):
        raise Conflict(f"a persona named {name!r} already exists")


async def _check_models(db: AsyncSession, ids: Sequence[int | None]) -> None:
    wanted = {i for i in ids if i is not None}
    found = set(await db.scalars(select(LLMModel.id).where(LLMModel.id.in_(wanted))))
    missing = sorted(wanted - found)
    if missing:
        raise Invalid(f"model(s) not found: {', '.join(map(str, missing))}")


async def _free_name(db: AsyncSession, base: str) -> str:
    taken = set(await db.scalars(select(Persona.name).where(Persona.name.startswith(base))))
    if base not in taken:
        return base
    n = 2
    while f"{base} ({n})" in taken:
        n += 1
    return f"{base} ({n})"


async def _add_with_first_version(
    db: AsyncSession, persona: Persona, judge_prompt: str, rationale: str
) -> None:
    """Store a new persona with its judge prompt as human version 1 (not yet committed)."""
    db.add(persona)
    await db.flush()
    db.add(
        JudgePromptVersion(
            persona_id=persona.id,
            version=1,
            text=judge_prompt,
            created_by="human",
            rationale=rationale,
        )
    )


async def create_persona(
    *, db: AsyncSession, data: PersonaIn, template_key: str | None = None
) -> PersonaOut:
    _check_judge_prompt(data.judge_prompt)
    await _check_name(db, data.name)
    await _check_models(db, [data.task_model_id, data.judge_model_id, data.engineer_model_id])
    p = Persona(
        **data.model_dump(exclude={"judge_prompt"}), current_version=1, template_key=template_key
    )
    await _add_with_first_version(
        db,
        p,
        data.judge_prompt,
        "initial prompt" + (f" (template {template_key})" if template_key else ""),
    )
    await db.commit()
    return await get_persona(db=db, persona_id=p.id)


async def _simulated_model_ids(db: AsyncSession) -> dict[str, int]:
    names = [name for name, _ in BUILTIN_SIMULATED_MODELS]
    query = select(LLMModel.name, LLMModel.id).where(LLMModel.name.in_(names))
    found = dict((await db.execute(query)).all())
    if len(found) < len(names):  # deleted by hand: bring them back
        await ensure_builtin_simulator(db=db)
        found = dict((await db.execute(query)).all())
    return found


async def create_from_template(
    *, db: AsyncSession, key: str, overrides: FromTemplateIn
) -> PersonaOut:
    """A persona with the template's prompts and pairs; models default to the simulator's."""
    try:
        template = get_template(key)
    except KeyError as e:
        raise NotFound(str(e.args[0])) from None
    sim = await _simulated_model_ids(db)
    data = PersonaIn(
        name=overrides.name or await _free_name(db, template.name),
        description=template.description,
        task_prompt=template.task_prompt,
        judge_prompt=template.judge_prompt,
        task_model_id=overrides.task_model_id or sim["simulated-task"],
        judge_model_id=overrides.judge_model_id or sim["simulated-judge"],
        engineer_model_id=overrides.engineer_model_id or sim["simulated-engineer"],
        target_f1=template.target_f1,
    )
    out = await create_persona(db=db, data=data, template_key=key)
    rows = [PairRow(input=t.input, correct_output=t.correct_output) for t in template.pairs]
    await store_pairs(db=db, persona_id=out.id, rows=rows)
    return await get_persona(db=db, persona_id=out.id)


async def update_persona(*, db: AsyncSession, persona_id: int, patch: PersonaPatch) -> PersonaOut:
    p = await _persona(db, persona_id, lock=True)
    changes = patch.model_dump(exclude_unset=True)
    for required in set(changes) - {"budget_usd"}:
        if changes[required] is None:
            raise Invalid(f"{required} cannot be null")
    if p.status == "training" and set(changes) - EDITABLE_WHILE_TRAINING:
        blocked = sorted(set(changes) - EDITABLE_WHILE_TRAINING)
        raise Conflict(f"pause training before changing {', '.join(blocked)}")
    if "name" in changes and changes["name"] != p.name:
        await _check_name(db, changes["name"], exclude_id=p.id)
    task = changes.get("task_model_id", p.task_model_id)
    judge = changes.get("judge_model_id", p.judge_model_id)
    if task is not None and task == judge:
        raise Invalid("the judge model must differ from the task model")
    await _check_models(
        db, [changes.get(k) for k in ("task_model_id", "judge_model_id", "engineer_model_id")]
    )
    resplit = "holdout_fraction" in changes and changes["holdout_fraction"] != p.holdout_fraction
    if resplit and await _has_iterations(db, persona_id):
        raise Conflict(
            "the held-out split cannot change once training has started; clone the persona"
        )
    for name, value in changes.items():
        setattr(p, name, value)
    await db.flush()
    if resplit:
        await _assign_splits(db, p, only=None)
    await db.commit()
    return await get_persona(db=db, persona_id=persona_id)


async def _has_iterations(db: AsyncSession, persona_id: int) -> bool:
    return bool(
        await db.scalar(select(func.count()).where(PersonaIteration.persona_id == persona_id))
    )


async def delete_persona(*, db: AsyncSession, persona_id: int) -> None:
    p = await _persona(db, persona_id, lock=True)
    if p.status == "training":
        raise Conflict("pause training before deleting the persona")
    await db.delete(p)
    await db.commit()


async def clone_persona(
    *, db: AsyncSession, persona_id: int, name: str | None = None
) -> PersonaOut:
    """A draft copy: settings, the current judge prompt as version 1, and the pairs with
    their split sides (so held-out pairs stay held out)."""
    src = await _persona(db, persona_id)
    src_out = await get_persona(db=db, persona_id=persona_id)
    new_name = name.strip() if name else await _free_name(db, f"{src.name} (copy)")
    await _check_name(db, new_name)
    copy = Persona(
        name=new_name,
        description=src.description,
        task_prompt=src.task_prompt,
        current_version=1,
        task_model_id=src.task_model_id,
        judge_model_id=src.judge_model_id,
        engineer_model_id=src.engineer_model_id,
        target_f1=src.target_f1,
        max_iterations=src.max_iterations,
        holdout_fraction=src.holdout_fraction,
        split_seed=src.split_seed,
        budget_usd=src.budget_usd,
        iteration_timeout_s=src.iteration_timeout_s,
        template_key=src.template_key,
    )
    await _add_with_first_version(
        db,
        copy,
        src_out.judge_prompt,
        f"cloned from {src.name!r} version {src.current_version}",
    )
    pairs = (
        await db.scalars(
            select(PersonaPair)
            .where(PersonaPair.persona_id == persona_id)
            .order_by(PersonaPair.position)
        )
    ).all()
    if pairs:
        await db.execute(
            insert(PersonaPair),
            [
                {
                    "persona_id": copy.id,
                    "position": p.position,
                    "input": p.input,
                    "input_b": p.input_b,
                    "correct_output": p.correct_output,
                    "input_hash": p.input_hash,
                    "split": p.split,
                }
                for p in pairs
            ],
        )
    await db.commit()
    return await get_persona(db=db, persona_id=copy.id)


# -- training pairs --------------------------------------------------------------------------


async def _assign_splits(db: AsyncSession, p: Persona, *, only: set[int] | None) -> None:
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
    p = await _persona(db, persona_id, lock=not preview)
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
        await _assign_splits(db, p, only=new_ids)
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
    await _persona(db, persona_id)
    stmt = select(PersonaPair).where(PersonaPair.persona_id == persona_id)
    if split is not None:
        stmt = stmt.where(PersonaPair.split == split)
    rows = await db.scalars(stmt.order_by(PersonaPair.position).limit(limit).offset(offset))
    return [PairOut.model_validate(r) for r in rows]


# -- judge prompt versions -------------------------------------------------------------------


async def list_versions(*, db: AsyncSession, persona_id: int) -> list[PromptVersionOut]:
    await _persona(db, persona_id)
    rows = await db.scalars(
        select(JudgePromptVersion)
        .where(JudgePromptVersion.persona_id == persona_id)
        .order_by(JudgePromptVersion.version)
    )
    return [PromptVersionOut.model_validate(r) for r in rows]


async def _version_text(db: AsyncSession, persona_id: int, version: int) -> str:
    text = await db.scalar(
        select(JudgePromptVersion.text).where(
            JudgePromptVersion.persona_id == persona_id, JudgePromptVersion.version == version
        )
    )
    if text is None:
        raise NotFound(f"persona {persona_id} has no judge prompt version {version}")
    return text


async def diff_versions(*, db: AsyncSession, persona_id: int, a: int, b: int) -> PromptDiffOut:
    await _persona(db, persona_id)
    return prompt_diff(
        a, await _version_text(db, persona_id, a), b, await _version_text(db, persona_id, b)
    )


async def add_version(
    *, db: AsyncSession, persona_id: int, text: str, rationale: str
) -> PromptVersionOut:
    """A new human version, used from the next iteration on."""
    _check_judge_prompt(text)
    p = await _persona(db, persona_id, lock=True)
    latest = await db.scalar(
        select(func.max(JudgePromptVersion.version)).where(
            JudgePromptVersion.persona_id == persona_id
        )
    )
    v = JudgePromptVersion(
        persona_id=persona_id,
        version=(latest or 0) + 1,
        text=text,
        created_by="human",
        rationale=rationale,
    )
    db.add(v)
    p.current_version = v.version
    await db.commit()
    await db.refresh(v)
    return PromptVersionOut.model_validate(v)


async def rollback_version(*, db: AsyncSession, persona_id: int, version: int) -> PromptVersionOut:
    text = await _version_text(db, persona_id, version)
    return await add_version(
        db=db, persona_id=persona_id, text=text, rationale=f"rolled back to version {version}"
    )


# -- training control ------------------------------------------------------------------------


async def _transition(
    db: AsyncSession, persona_id: int, allowed: set[str], to: str, reason: str | None
) -> Persona:
    p = await _persona(db, persona_id, lock=True)
    if p.status not in allowed:
        raise Conflict(
            f"persona {persona_id} is {p.status}; this needs status {' or '.join(sorted(allowed))}"
        )
    p.status = to
    p.status_reason = reason
    await db.commit()
    return p


async def _check_startable(db: AsyncSession, p: Persona) -> None:
    for role in ("task", "judge", "engineer"):
        if getattr(p, f"{role}_model_id") is None:
            raise Invalid(f"choose a {role} model first")
    opt = await db.scalar(
        select(func.count()).where(
            PersonaPair.persona_id == p.id, PersonaPair.split == "optimisation"
        )
    )
    if not opt:
        raise Invalid("upload training pairs first")


async def start_training(*, db: AsyncSession, persona_id: int) -> PersonaOut:
    await _check_startable(db, await _persona(db, persona_id))
    await _transition(db, persona_id, {"draft"}, "training", None)
    return await get_persona(db=db, persona_id=persona_id)


async def pause_training(*, db: AsyncSession, persona_id: int) -> PersonaOut:
    await _transition(db, persona_id, {"training"}, "paused", "paused by a user")
    return await get_persona(db=db, persona_id=persona_id)


async def resume_training(*, db: AsyncSession, persona_id: int) -> PersonaOut:
    await _check_startable(db, await _persona(db, persona_id))
    await _transition(db, persona_id, {"paused"}, "training", None)
    return await get_persona(db=db, persona_id=persona_id)


def _metrics_out(m: dict[str, Any] | None) -> MetricsOut | None:
    return None if m is None else MetricsOut.model_validate(m)


async def _review_counts(db: AsyncSession, iteration_ids: Sequence[int]) -> dict[int, Any]:
    """iteration id -> (decisions, pending review), in one query."""
    rows = await db.execute(
        select(
            PersonaDecision.iteration_id,
            func.count(),
            func.count().filter(PersonaDecision.human_agrees.is_(None)),
        )
        .where(PersonaDecision.iteration_id.in_(list(iteration_ids)))
        .group_by(PersonaDecision.iteration_id)
    )
    return {iteration_id: (total, pending) for iteration_id, total, pending in rows.all()}


def _iteration_out(it: PersonaIteration, counts: tuple[int, int]) -> IterationOut:
    return IterationOut(
        number=it.number,
        status=it.status,  # type: ignore[arg-type]
        prompt_version=it.prompt_version,
        outcome=it.outcome,  # type: ignore[arg-type]
        metrics_optimisation=_metrics_out(it.metrics_optimisation),
        metrics_holdout=_metrics_out(it.metrics_holdout),
        cost_usd=it.cost_usd,
        timings=dict(it.timings or {}),
        note=it.note,
        decisions=counts[0],
        pending_review=counts[1],
        started_at=it.started_at,
        finished_at=it.finished_at,
    )


async def _iteration(db: AsyncSession, persona_id: int, number: int) -> PersonaIteration:
    it = await db.scalar(
        select(PersonaIteration).where(
            PersonaIteration.persona_id == persona_id, PersonaIteration.number == number
        )
    )
    if it is None:
        raise NotFound(f"persona {persona_id} has no iteration {number}")
    return it


async def list_iterations(*, db: AsyncSession, persona_id: int) -> list[IterationOut]:
    await _persona(db, persona_id)
    rows = await db.scalars(
        select(PersonaIteration)
        .where(PersonaIteration.persona_id == persona_id)
        .order_by(PersonaIteration.number)
    )
    iterations = rows.all()
    counts = await _review_counts(db, [it.id for it in iterations])
    return [_iteration_out(it, counts.get(it.id, (0, 0))) for it in iterations]


async def spent_usd(*, db: AsyncSession, persona_id: int) -> float:
    return float((await totals(db=db, persona_id=persona_id))["cost_usd"])


async def training_status(
    *, db: AsyncSession, persona_id: int, running_here: bool = False
) -> TrainingStatusOut:
    p = await _persona(db, persona_id)
    it = await db.scalar(
        select(PersonaIteration)
        .where(PersonaIteration.persona_id == persona_id)
        .order_by(PersonaIteration.number.desc())
        .limit(1)
    )
    return TrainingStatusOut(
        persona_id=persona_id,
        status=p.status,  # type: ignore[arg-type]
        status_reason=p.status_reason,
        iteration=None
        if it is None
        else _iteration_out(it, (await _review_counts(db, [it.id])).get(it.id, (0, 0))),
        spent_usd=await spent_usd(db=db, persona_id=persona_id),
        budget_usd=p.budget_usd,
        running_here=running_here,
    )


# -- review ----------------------------------------------------------------------------------


def _decision_out(d: PersonaDecision, pair: PersonaPair, answer: str) -> DecisionOut:
    return DecisionOut(
        id=d.id,
        iteration=d.iteration,
        pair_id=d.pair_id,
        split=d.split,  # type: ignore[arg-type]
        input=pair.input,
        input_b=pair.input_b,
        correct_output=pair.correct_output,
        answer=answer,
        judge_label=d.judge_label,  # type: ignore[arg-type]
        judge_reasoning=d.judge_reasoning,
        judge_confidence=d.judge_confidence,
        parse_error=d.parse_error,
        prompt_version=d.prompt_version,
        human_agrees=d.human_agrees,
        human_notes=d.human_notes,
        reviewed_at=d.reviewed_at,
        reviewed_by=d.reviewed_by,
        carried_forward=d.carried_forward,
    )


async def list_decisions(
    *,
    db: AsyncSession,
    persona_id: int,
    number: int,
    pending_only: bool = False,
    split: Literal["optimisation", "holdout"] | None = None,
) -> list[DecisionOut]:
    """Decisions of iteration ``number`` in review order: unreviewed first, then the least
    confident (when the judge gives a confidence), then optimisation before held-out, in pair
    order."""
    await _persona(db, persona_id)
    it = await _iteration(db, persona_id, number)
    stmt = (
        select(PersonaDecision, PersonaPair, TaskOutput.output)
        .join(PersonaPair, PersonaPair.id == PersonaDecision.pair_id)
        .join(TaskOutput, TaskOutput.id == PersonaDecision.output_id)
        .where(PersonaDecision.iteration_id == it.id)
    )
    if pending_only:
        stmt = stmt.where(PersonaDecision.human_agrees.is_(None))
    if split is not None:
        stmt = stmt.where(PersonaDecision.split == split)
    rows = await db.execute(
        stmt.order_by(
            PersonaDecision.human_agrees.is_not(None),
            PersonaDecision.judge_confidence.asc().nulls_last(),
            PersonaDecision.split.desc(),  # descending: "optimisation" before "holdout"
            PersonaPair.position,
        )
    )
    return [_decision_out(d, pair, answer) for d, pair, answer in rows.all()]


async def _apply_feedback(
    db: AsyncSession,
    persona_id: int,
    decision_ids: Sequence[int],
    agrees: bool,
    notes: str | None,
    number: int | None = None,
    reviewer: str | None = None,
) -> tuple[int, int, int]:
    """(updated, pending left, iteration number). Reviews are accepted only while the
    decision's iteration awaits review: later they would change metrics already used."""
    # Locks the iteration row, as scoring does: a review either counts or is refused.
    rows = (
        await db.execute(
            select(PersonaDecision.id, PersonaIteration.status, PersonaIteration.number)
            .join(PersonaIteration, PersonaIteration.id == PersonaDecision.iteration_id)
            .where(PersonaDecision.persona_id == persona_id, PersonaDecision.id.in_(decision_ids))
            .with_for_update(of=PersonaIteration)
        )
    ).all()
    found = {r.id for r in rows}
    missing = sorted(set(decision_ids) - found)
    if missing:
        raise NotFound(
            f"decision(s) {', '.join(map(str, missing[:20]))} not found in persona {persona_id}"
        )
    numbers = {r.number for r in rows}
    if number is not None and numbers != {number}:
        raise Invalid(f"all decisions must belong to iteration {number}")
    if len(numbers) != 1:
        raise Invalid("all decisions must belong to one iteration")
    if any(r.status != "awaiting_review" for r in rows):
        raise Conflict("this iteration is not awaiting review; its metrics are final")
    iteration = numbers.pop()
    await db.execute(
        update(PersonaDecision)
        .where(PersonaDecision.id.in_(found))
        .values(
            human_agrees=agrees,
            human_notes=notes.strip() if notes and notes.strip() else None,
            reviewed_at=func.now(),
            reviewed_by=reviewer,
            carried_forward=False,
        )
    )
    pending = await db.scalar(
        select(func.count())
        .select_from(PersonaDecision)
        .join(PersonaIteration, PersonaIteration.id == PersonaDecision.iteration_id)
        .where(
            PersonaIteration.persona_id == persona_id,
            PersonaIteration.number == iteration,
            PersonaDecision.human_agrees.is_(None),
        )
    )
    await db.commit()
    return len(found), pending or 0, iteration


async def feedback(
    *,
    db: AsyncSession,
    persona_id: int,
    decision_id: int,
    data: FeedbackIn,
    reviewer: str | None = None,
) -> tuple[DecisionOut, int]:
    """Record one review; returns the decision and how many of its iteration still wait."""
    _, pending, _ = await _apply_feedback(
        db, persona_id, [decision_id], data.agrees, data.notes, reviewer=reviewer
    )
    d, pair, answer = (
        await db.execute(
            select(PersonaDecision, PersonaPair, TaskOutput.output)
            .join(PersonaPair, PersonaPair.id == PersonaDecision.pair_id)
            .join(TaskOutput, TaskOutput.id == PersonaDecision.output_id)
            .where(PersonaDecision.id == decision_id)
        )
    ).one()
    return _decision_out(d, pair, answer), pending


async def bulk_feedback(
    *,
    db: AsyncSession,
    persona_id: int,
    number: int,
    data: BulkFeedbackIn,
    reviewer: str | None = None,
) -> BulkFeedbackOut:
    await _iteration(db, persona_id, number)
    updated, pending, _ = await _apply_feedback(
        db, persona_id, data.decision_ids, data.agrees, data.notes, number, reviewer
    )
    return BulkFeedbackOut(updated=updated, pending_review=pending)


# -- estimate --------------------------------------------------------------------------------


def _estimate(calls: int, inp: int, out: int, price_in: float, price_out: float) -> CallEstimate:
    return CallEstimate(
        calls=calls,
        input_tokens=inp,
        output_tokens=out,
        cost_usd=(inp * price_in + out * price_out) / 1_000_000,
    )


def _sum(items: Sequence[CallEstimate]) -> CallEstimate:
    return CallEstimate(
        calls=sum(e.calls for e in items),
        input_tokens=sum(e.input_tokens for e in items),
        output_tokens=sum(e.output_tokens for e in items),
        cost_usd=sum(e.cost_usd for e in items),
    )


def _scale(e: CallEstimate, k: int) -> CallEstimate:
    return CallEstimate(
        calls=e.calls * k,
        input_tokens=e.input_tokens * k,
        output_tokens=e.output_tokens * k,
        cost_usd=e.cost_usd * k,
    )


async def estimate(*, db: AsyncSession, llm: LLMService, persona_id: int) -> EstimateOut:
    """Calls, tokens (4 characters per token) and cost of one iteration and of all
    ``max_iterations``, from the rendered prompts and the models' prices."""
    p = await _persona(db, persona_id)
    out = await get_persona(db=db, persona_id=persona_id)
    pairs = (
        await db.scalars(select(PersonaPair).where(PersonaPair.persona_id == persona_id))
    ).all()
    models = {}
    for role in ("task", "judge", "engineer"):
        model_id = getattr(p, f"{role}_model_id")
        if model_id is None:
            raise Invalid(f"choose a {role} model first")
        models[role] = await llm.model_info(model_id)
    phash = prompt_hash(p.task_model_id, p.task_prompt)
    stored = set(
        await db.scalars(
            select(TaskOutput.pair_id).where(
                TaskOutput.persona_id == persona_id, TaskOutput.prompt_hash == phash
            )
        )
    )
    task_in = task_out = judge_in = 0
    todo = 0
    for pair in pairs:
        text = task_input(pair.input, pair.input_b)
        # Answers are assumed about as long as the reference answer.
        answer_tokens = estimate_tokens(pair.correct_output)
        if pair.id not in stored:
            todo += 1
            task_in += estimate_tokens(render_task_prompt(p.task_prompt, input=text))
            task_out += answer_tokens
        judge_in += estimate_tokens(
            render_judge_prompt(
                out.judge_prompt,
                input=text,
                correct_output=pair.correct_output,
                answer=pair.correct_output,
            )
        )
    n = len(pairs)
    opt = sum(1 for pair in pairs if pair.split == "optimisation")
    failures = min(MAX_ENGINEER_FAILURES, round(FAILURE_SHARE * opt))
    case_tokens = (
        sum(
            estimate_tokens(pair.input) + 2 * estimate_tokens(pair.correct_output) for pair in pairs
        )
        // max(n, 1)
        + JUDGE_OUTPUT_TOKENS
    )
    prompt_tokens = estimate_tokens(out.judge_prompt)
    eng_in = estimate_tokens(ENGINEER_SYSTEM) + prompt_tokens + failures * case_tokens
    eng_out = prompt_tokens + RATIONALE_TOKENS

    def priced(role: str, calls: int, inp: int, outp: int) -> CallEstimate:
        m = models[role]
        return _estimate(calls, inp, outp, m.input_price_per_million, m.output_price_per_million)

    task = priced("task", todo, task_in, task_out)
    judge = priced("judge", n, judge_in, n * JUDGE_OUTPUT_TOKENS)
    engineer = priced("engineer", 1, eng_in, eng_out)
    k = p.max_iterations
    notes = [
        "tokens are estimated at 4 characters per token; answers as long as the references",
        "task answers are generated once and reused while the task prompt, the task model "
        "and the inputs are unchanged",
        "the judge prompt grows as it is rewritten, so later iterations cost somewhat more",
    ]
    if any(m.simulated for m in models.values()):
        notes.append("simulated models cost nothing")
    return EstimateOut(
        pairs=n,
        one_iteration=_sum([task, judge, engineer]),
        max_iterations=_sum([task, _scale(judge, k), _scale(engineer, max(k - 1, 0))]),
        per_model={"task": task, "judge": judge, "engineer": engineer},
        spent_usd=await spent_usd(db=db, persona_id=persona_id),
        budget_usd=p.budget_usd,
        notes=notes,
    )


# -- metrics, report, export -----------------------------------------------------------------


async def metrics(*, db: AsyncSession, persona_id: int) -> list[MetricsRow]:
    await _persona(db, persona_id)
    rows = await db.scalars(
        select(PersonaIteration)
        .where(PersonaIteration.persona_id == persona_id)
        .order_by(PersonaIteration.number)
    )
    return [
        MetricsRow(
            iteration=it.number,
            prompt_version=it.prompt_version,
            optimisation=_metrics_out(it.metrics_optimisation),
            holdout=_metrics_out(it.metrics_holdout),
        )
        for it in rows.all()
        if it.metrics_optimisation is not None or it.metrics_holdout is not None
    ]


async def _report_decisions(
    db: AsyncSession, iteration_id: int, agrees: bool, limit: int = 5
) -> list[ReportDecision]:
    rows = await db.execute(
        select(PersonaDecision, PersonaPair.input, TaskOutput.output)
        .join(PersonaPair, PersonaPair.id == PersonaDecision.pair_id)
        .join(TaskOutput, TaskOutput.id == PersonaDecision.output_id)
        .where(
            PersonaDecision.iteration_id == iteration_id,
            PersonaDecision.human_agrees.is_(agrees),
        )
        .order_by(PersonaDecision.judge_confidence.desc().nulls_last(), PersonaPair.position)
        .limit(limit)
    )
    return [
        ReportDecision(
            decision_id=d.id,
            iteration=d.iteration,
            input=inp,
            answer=answer,
            judge_label=d.judge_label,  # type: ignore[arg-type]
            judge_reasoning=d.judge_reasoning,
            judge_confidence=d.judge_confidence,
            human_agrees=agrees,
            human_notes=d.human_notes,
        )
        for d, inp, answer in rows.all()
    ]


async def report(*, db: AsyncSession, persona_id: int) -> ReportOut:
    """Final metrics, iterations to convergence, prompt evolution, and the judge's most
    confident decisions of the last scored iteration that the human confirmed or rejected."""
    p = await _persona(db, persona_id)
    iterations = (
        await db.scalars(
            select(PersonaIteration)
            .where(PersonaIteration.persona_id == persona_id)
            .order_by(PersonaIteration.number)
        )
    ).all()
    scored = [it for it in iterations if it.metrics_optimisation or it.metrics_holdout]
    last = scored[-1] if scored else None
    versions = await list_versions(db=db, persona_id=persona_id)
    evolution = []
    for v in versions:
        used = [it for it in scored if it.prompt_version == v.version]
        evolution.append(
            {
                "version": v.version,
                "created_by": v.created_by,
                "rationale": v.rationale,
                "created_at": v.created_at.isoformat(),
                "iterations": [it.number for it in used],
                "optimisation_f1": used[-1].metrics_optimisation["f1"]
                if used and used[-1].metrics_optimisation
                else None,
                "holdout_f1": used[-1].metrics_holdout["f1"]
                if used and used[-1].metrics_holdout
                else None,
            }
        )
    converged = next((it.number for it in iterations if it.outcome == "converged"), None)
    return ReportOut(
        persona_id=persona_id,
        status=p.status,  # type: ignore[arg-type]
        target_f1=p.target_f1,
        iterations=len(iterations),
        converged_at=converged,
        final=None
        if last is None
        else MetricsRow(
            iteration=last.number,
            prompt_version=last.prompt_version,
            optimisation=_metrics_out(last.metrics_optimisation),
            holdout=_metrics_out(last.metrics_holdout),
        ),
        prompt_evolution=evolution,
        best_decisions=[] if last is None else await _report_decisions(db, last.id, True),
        worst_decisions=[] if last is None else await _report_decisions(db, last.id, False),
        spent_usd=await spent_usd(db=db, persona_id=persona_id),
    )


EXPORT_COLUMNS = (
    "pair_id",
    "split",
    "input",
    "input_b",
    "correct_output",
    "iteration",
    "decision_id",
    "prompt_version",
    "answer",
    "judge_label",
    "judge_reasoning",
    "judge_confidence",
    "human_agrees",
    "human_label",
    "human_notes",
    "reviewed_by",
    "carried_forward",
    "iteration_f1_optimisation",
    "iteration_f1_holdout",
)


async def export_data(*, db: AsyncSession, persona_id: int) -> dict[str, Any]:
    """Everything about a persona: settings, prompts, pairs, answers, decisions, metrics."""
    persona = await get_persona(db=db, persona_id=persona_id)
    pairs = (
        await db.scalars(
            select(PersonaPair)
            .where(PersonaPair.persona_id == persona_id)
            .order_by(PersonaPair.position)
        )
    ).all()
    outputs = (
        await db.scalars(
            select(TaskOutput).where(TaskOutput.persona_id == persona_id).order_by(TaskOutput.id)
        )
    ).all()
    decisions = (
        await db.scalars(
            select(PersonaDecision)
            .where(PersonaDecision.persona_id == persona_id)
            .order_by(PersonaDecision.iteration, PersonaDecision.pair_id)
        )
    ).all()
    return {
        "persona": persona.model_dump(mode="json"),
        "prompts": [
            v.model_dump(mode="json") for v in await list_versions(db=db, persona_id=persona_id)
        ],
        "pairs": [PairOut.model_validate(pair).model_dump(mode="json") for pair in pairs],
        "outputs": [
            {"id": o.id, "pair_id": o.pair_id, "prompt_hash": o.prompt_hash, "output": o.output}
            for o in outputs
        ],
        "decisions": [
            {
                "id": d.id,
                "iteration": d.iteration,
                "pair_id": d.pair_id,
                "output_id": d.output_id,
                "split": d.split,
                "prompt_version": d.prompt_version,
                "judge_label": d.judge_label,
                "judge_reasoning": d.judge_reasoning,
                "judge_confidence": d.judge_confidence,
                "parse_error": d.parse_error,
                "human_agrees": d.human_agrees,
                "human_label": None
                if d.human_agrees is None
                else human_label(d.judge_label, d.human_agrees),
                "human_notes": d.human_notes,
                "reviewed_by": d.reviewed_by,
                "carried_forward": d.carried_forward,
            }
            for d in decisions
        ],
        "iterations": [
            it.model_dump(mode="json") for it in await list_iterations(db=db, persona_id=persona_id)
        ],
    }


def export_csv(data: dict[str, Any]) -> str:
    """One row per decision (and one per pair never judged), formula-neutralised."""
    pairs = {pair["id"]: pair for pair in data["pairs"]}
    outputs = {o["id"]: o["output"] for o in data["outputs"]}
    f1 = {
        it["number"]: (
            (it["metrics_optimisation"] or {}).get("f1"),
            (it["metrics_holdout"] or {}).get("f1"),
        )
        for it in data["iterations"]
    }
    rows: list[dict[str, Any]] = []
    judged: set[int] = set()
    for d in data["decisions"]:
        pair = pairs[d["pair_id"]]
        judged.add(pair["id"])
        opt_f1, held_f1 = f1.get(d["iteration"], (None, None))
        row = {
            "pair_id": pair["id"],
            "split": d["split"],
            "input": pair["input"],
            "input_b": pair["input_b"],
            "correct_output": pair["correct_output"],
            "iteration": d["iteration"],
            "decision_id": d["id"],
            "prompt_version": d["prompt_version"],
            "answer": outputs.get(d["output_id"], ""),
            "judge_label": d["judge_label"],
            "judge_reasoning": d["judge_reasoning"],
            "judge_confidence": d["judge_confidence"],
            "human_agrees": d["human_agrees"],
            "human_label": d["human_label"],
            "human_notes": d["human_notes"],
            "reviewed_by": d["reviewed_by"],
            "carried_forward": d["carried_forward"],
            "iteration_f1_optimisation": opt_f1,
            "iteration_f1_holdout": held_f1,
        }
        rows.append(row)
    for pair in data["pairs"]:
        if pair["id"] not in judged:
            row = {k: pair.get(k) for k in ("input", "input_b", "correct_output", "split")}
            row["pair_id"] = pair["id"]
            rows.append(row)
    return write_csv(rows, EXPORT_COLUMNS)


def export_json(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)
