"""Persona CRUD: list, get, create (blank or from a template), update settings, clone,
delete. Pairs, prompt versions, training control, review, estimates and reports live in
their own modules next to this one; the loop itself in ``loop.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Select, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.db.rows import columns
from llmjudge.infra.errors import Conflict, Invalid, NotFound
from llmjudge.personas.lookup import persona_row, rows_in_order
from llmjudge.personas.models import (
    JudgePromptVersion,
    Persona,
    PersonaIteration,
    PersonaPair,
    PersonaPairLabel,
)
from llmjudge.personas.pairs import assign_splits, pair_labels, store_pairs
from llmjudge.personas.prompt_versions import check_judge_prompt
from llmjudge.personas.schemas import FromTemplateIn, PairRow, PersonaIn, PersonaOut, PersonaPatch
from llmjudge.personas.starters import get_template
from llmjudge.providers import BUILTIN_SIMULATED_MODELS, LLMModel, ensure_builtin_simulator

# What a persona made from a starter template takes from it (the models are this install's).
_FROM_TEMPLATE = ("description", "task_prompt", "judge_prompt", "target_f1", "holdout_fraction")
# The settings a person chooses when creating a persona, besides its name and judge prompt
# (the create page's boxes).
CHOSEN_SETTINGS = (
    "description",
    "task_prompt",
    "task_model_id",
    "judge_model_id",
    "engineer_model_id",
    "target_f1",
    "max_iterations",
    "holdout_fraction",
    "budget_usd",
    "iteration_timeout_s",
    "min_per_class",
    "convergence_basis",
    "judge_kind",
)
# What a clone keeps of its source (not its name, status, version or timestamps).
CLONED_SETTINGS = (
    *CHOSEN_SETTINGS,
    "split_seed",
    "template_key",
    "embedding_model_id",
    "metrics_annotator",
)
# A cloned pair keeps its split side, so held-out pairs stay held out.
CLONED_PAIR = (
    "position",
    "input",
    "input_b",
    "correct_output",
    "answer",
    "system",
    "input_hash",
    "pair_hash",
    "split",
)
EDITABLE_WHILE_TRAINING = {
    "name",
    "description",
    "budget_usd",
    "target_f1",
    "max_iterations",
    "min_per_class",
    "convergence_basis",
}


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
    return PersonaOut.model_validate(
        columns(p)
        | {"judge_prompt": judge_prompt or "", "pair_count": pairs, "current_iteration": last}
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
    check_judge_prompt(data.judge_prompt)
    await _check_name(db, data.name)
    await _check_models(
        db,
        [
            data.task_model_id,
            data.judge_model_id,
            data.engineer_model_id,
            data.embedding_model_id,
        ],
    )
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
        **{k: getattr(template, k) for k in _FROM_TEMPLATE},
        task_model_id=overrides.task_model_id or sim["simulated-task"],
        judge_model_id=overrides.judge_model_id or sim["simulated-judge"],
        engineer_model_id=overrides.engineer_model_id or sim["simulated-engineer"],
    )
    out = await create_persona(db=db, data=data, template_key=key)
    rows = [PairRow(input=t.input, correct_output=t.correct_output) for t in template.pairs]
    await store_pairs(db=db, persona_id=out.id, rows=rows)
    return await get_persona(db=db, persona_id=out.id)


async def update_persona(*, db: AsyncSession, persona_id: int, patch: PersonaPatch) -> PersonaOut:
    p = await persona_row(db, persona_id, lock=True)
    changes = patch.model_dump(exclude_unset=True)
    nullable = {"budget_usd", "metrics_annotator", "embedding_model_id", "task_model_id"}
    for required in set(changes) - nullable:
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
        db,
        [
            changes.get(k)
            for k in ("task_model_id", "judge_model_id", "engineer_model_id", "embedding_model_id")
        ],
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
        await assign_splits(db, p, only=None)
    await db.commit()
    return await get_persona(db=db, persona_id=persona_id)


async def _has_iterations(db: AsyncSession, persona_id: int) -> bool:
    return bool(
        await db.scalar(select(func.count()).where(PersonaIteration.persona_id == persona_id))
    )


async def delete_persona(*, db: AsyncSession, persona_id: int) -> None:
    p = await persona_row(db, persona_id, lock=True)
    if p.status == "training":
        raise Conflict("pause training before deleting the persona")
    await db.delete(p)
    await db.commit()


async def pairs_in_order(db: AsyncSession, persona_id: int) -> Sequence[PersonaPair]:
    """The persona's pairs in upload order."""
    return await rows_in_order(db, PersonaPair, persona_id, PersonaPair.position)


async def clone_persona(
    *, db: AsyncSession, persona_id: int, name: str | None = None
) -> PersonaOut:
    """A draft copy: settings, the current judge prompt as version 1, and the pairs with
    their split sides (so held-out pairs stay held out)."""
    src = await persona_row(db, persona_id)
    src_out = await get_persona(db=db, persona_id=persona_id)
    new_name = name.strip() if name else await _free_name(db, f"{src.name} (copy)")
    await _check_name(db, new_name)
    copy = Persona(
        name=new_name, current_version=1, **{k: getattr(src, k) for k in CLONED_SETTINGS}
    )
    await _add_with_first_version(
        db,
        copy,
        src_out.judge_prompt,
        f"cloned from {src.name!r} version {src.current_version}",
    )
    pairs = await pairs_in_order(db, persona_id)
    if pairs:
        new_ids = list(
            await db.scalars(
                insert(PersonaPair).returning(PersonaPair.id, sort_by_parameter_order=True),
                [{"persona_id": copy.id, **{k: getattr(p, k) for k in CLONED_PAIR}} for p in pairs],
            )
        )
        labels = await pair_labels(db, persona_id)
        rows = [
            {"persona_id": copy.id, "pair_id": new, "annotator": who, "label": label}
            for old, new in zip((p.id for p in pairs), new_ids, strict=True)
            for who, label in (
                (w, "correct" if v else "incorrect") for w, v in labels.get(old, {}).items()
            )
        ]
        if rows:
            await db.execute(insert(PersonaPairLabel), rows)
    await db.commit()
    return await get_persona(db=db, persona_id=copy.id)
