"""Judge prompt versions: the placeholder check, line diffs (pure), listing, a hand edit,
rollback (a new version with an old text)."""

from __future__ import annotations

import difflib

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.core.personas.replies import missing_placeholders
from llmjudge.infra.errors import Invalid, NotFound
from llmjudge.personas.lookup import persona_row, rows_in_order
from llmjudge.personas.models import JudgePromptVersion
from llmjudge.personas.schemas import DiffOpcode, PromptDiffOut, PromptVersionOut


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


def check_judge_prompt(text: str) -> None:
    missing = missing_placeholders(text)
    if missing:
        raise Invalid(
            "the judge prompt must contain the placeholder(s) "
            + ", ".join("{" + m + "}" for m in missing)
        )


async def list_versions(*, db: AsyncSession, persona_id: int) -> list[PromptVersionOut]:
    await persona_row(db, persona_id)
    rows = await rows_in_order(db, JudgePromptVersion, persona_id, JudgePromptVersion.version)
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
    await persona_row(db, persona_id)
    return prompt_diff(
        a, await _version_text(db, persona_id, a), b, await _version_text(db, persona_id, b)
    )


async def add_version(
    *, db: AsyncSession, persona_id: int, text: str, rationale: str
) -> PromptVersionOut:
    """A new human version, used from the next iteration on."""
    check_judge_prompt(text)
    p = await persona_row(db, persona_id, lock=True)
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
