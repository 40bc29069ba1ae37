"""The prompts tab: judge prompt versions, a side-by-side diff, hand edits and rollback."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from llmjudge.infra.errors import DOMAIN_ERRORS
from llmjudge.infra.web import DbSession, is_htmx, refusal, render
from llmjudge.personas import prompt_versions
from llmjudge.personas.deps import announce_prompt_version
from llmjudge.personas.pages.common import detail_ctx, see
from llmjudge.personas.schemas import PromptDiffOut, PromptVersionOut

router = APIRouter(include_in_schema=False)


# Unchanged lines shown around each change in a prompt diff.
DIFF_CONTEXT = 3


@dataclass(frozen=True)
class DiffRow:
    """One line of a side-by-side diff: ``kind`` is equal, replace, delete, insert, or fold
    (unchanged lines left out, counted in ``a_text``); a side without a line has number
    None."""

    kind: str
    a_no: int | None
    a_text: str
    b_no: int | None
    b_text: str


def diff_rows(diff: PromptDiffOut, *, context: int = DIFF_CONTEXT) -> list[DiffRow]:
    """The service's line opcodes as side-by-side rows: a replaced block pairs its lines
    up (the longer side's rest facing blanks), and a long unchanged run keeps ``context``
    lines next to each change, the rest folded into one ``fold`` row."""
    rows: list[DiffRow] = []
    last = len(diff.opcodes) - 1
    for i, op in enumerate(diff.opcodes):
        pairs = list(enumerate(zip_longest(op.a_lines, op.b_lines)))
        if op.tag == "equal" and last > 0:
            head = context if i > 0 else 0
            tail = context if i < last else 0
            if len(pairs) > head + tail + 1:
                hidden = len(pairs) - head - tail
                fold = DiffRow("fold", None, f"{hidden} unchanged lines", None, "")
                pairs = [*pairs[:head], (-1, (None, None)), *pairs[len(pairs) - tail :]]
                rows.extend(
                    fold
                    if k < 0
                    else DiffRow("equal", op.a_start + k + 1, a or "", op.b_start + k + 1, b or "")
                    for k, (a, b) in pairs
                )
                continue
        for k, (a, b) in pairs:
            rows.append(
                DiffRow(
                    kind=op.tag,
                    a_no=None if a is None else op.a_start + k + 1,
                    a_text=a or "",
                    b_no=None if b is None else op.b_start + k + 1,
                    b_text=b or "",
                )
            )
    return rows


async def _prompts_ctx(
    db: DbSession, persona_id: int, a: int | None, b: int | None
) -> dict[str, Any]:
    versions = await prompt_versions.list_versions(db=db, persona_id=persona_id)
    numbers = [v.version for v in versions]
    b = b if b in numbers else (numbers[-1] if numbers else None)
    a = a if a in numbers else (numbers[-2] if len(numbers) > 1 else b)
    diff = None
    if a is not None and b is not None:
        diff = await prompt_versions.diff_versions(db=db, persona_id=persona_id, a=a, b=b)
    rows = [] if diff is None else diff_rows(diff)
    return {"versions": versions, "a": a, "b": b, "diff": diff, "rows": rows}


@router.get("/personas/{persona_id}/prompts", response_class=HTMLResponse)
async def prompts_page(
    request: Request, persona_id: int, db: DbSession, a: int | None = None, b: int | None = None
):
    ctx = await detail_ctx(request, db, persona_id, "prompts")
    ctx.update(await _prompts_ctx(db, persona_id, a, b))
    return render(request, "personas/prompts.html", **ctx)


@router.get("/personas/{persona_id}/prompts/diff", response_class=HTMLResponse)
async def prompt_diff(
    request: Request, persona_id: int, db: DbSession, a: int | None = None, b: int | None = None
):
    ctx = await _prompts_ctx(db, persona_id, a, b)
    if not is_htmx(request):
        return see(f"/personas/{persona_id}/prompts?a={ctx['a']}&b={ctx['b']}")
    return render(request, "personas/_diff.html", **ctx)


@router.post("/personas/{persona_id}/prompts", response_class=HTMLResponse)
async def edit_prompt(request: Request, persona_id: int, db: DbSession):
    form = await request.form()
    text = str(form.get("text", "")).replace("\r\n", "\n")
    rationale = str(form.get("rationale", "")).strip()
    try:
        out = await prompt_versions.add_version(
            db=db, persona_id=persona_id, text=text, rationale=rationale or "edited by hand"
        )
    except DOMAIN_ERRORS as e:
        await db.rollback()
        found = refusal(e)
        ctx = await detail_ctx(request, db, persona_id, "prompts")
        ctx.update(await _prompts_ctx(db, persona_id, None, None))
        return render(
            request,
            "personas/prompts.html",
            status_code=found.status,
            error=found.message,
            draft=text,
            draft_rationale=rationale,
            **ctx,
        )
    return await _announced(request, persona_id, out)


@router.post("/personas/{persona_id}/prompts/{version}/rollback")
async def rollback_prompt(request: Request, persona_id: int, version: int, db: DbSession):
    out = await prompt_versions.rollback_version(db=db, persona_id=persona_id, version=version)
    return await _announced(request, persona_id, out)


async def _announced(request: Request, persona_id: int, out: PromptVersionOut) -> Response:
    """Tell the persona's watchers about a version a person made, and show the prompts."""
    await announce_prompt_version(request, persona_id, out)
    return see(f"/personas/{persona_id}/prompts")
