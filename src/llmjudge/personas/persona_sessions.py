"""Trained personas as tournament judges: ``create_persona_session`` starts a session
judged by the persona. Its judge prompt, written for one answer at a time, becomes the
guidance of a pairwise prompt template (``pairwise_template``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.infra.errors import Conflict, Invalid
from llmjudge.infra.events.hub import EventHub
from llmjudge.personas import service
from llmjudge.personas.evaluate_schemas import _JUDGE_FIELDS, PersonaSessionIn
from llmjudge.personas.models import Persona
from llmjudge.personas.schemas import PersonaOut
from llmjudge.sessions import SessionIn, SessionOut, create_session

MAX_TEMPLATE_CHARS = 20_000  # SessionIn.prompt_template's limit


_FENCED_BLOCK = re.compile(
    r"^<<<(?P<name>[A-Z][A-Z _]*)>>>[ \t]*\n.*?^<<<END (?P=name)>>>[ \t]*(?:\n|\Z)",
    re.DOTALL | re.MULTILINE,
)
_SINGLE_TOKEN = re.compile(r"\{\{|\}\}|\{(input|correct_output|answer)\}")
_WORDS = {"input": "the input", "correct_output": "the reference answer", "answer": "the answer"}
_BLANK_LINES = re.compile(r"\n{3,}")


def judging_guidance(judge_prompt: str) -> str:
    """The persona's judge prompt as plain guidance: fenced data blocks dropped, placeholders
    named in words, ``{{``/``}}`` unescaped."""
    text = _FENCED_BLOCK.sub("", judge_prompt)
    text = _SINGLE_TOKEN.sub(lambda m: _WORDS[m.group(1)] if m.group(1) else m.group()[0], text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def pairwise_template(judge_prompt: str, criteria: Sequence[str]) -> str:
    """A ``judging/prompts.py`` template (``{thread_a}``, ``{thread_b}``, ``{criteria}``) that
    asks for the pairwise JSON verdict, guided by the persona's judge prompt.

    The persona's prompt was written to label one answer against a reference; the template
    says so and asks the judge to apply its standards to both threads, ignoring its reply
    format. All its braces are escaped, so it can never add a placeholder.
    """
    scores = ", ".join(f'"{name}": 1-5' for name in criteria)
    answer = (
        '{"winner": "A" | "B" | "TIE", "confidence": 0-1, '
        f'"scores": {{"A": {{{scores}}}, "B": {{{scores}}}}}, "reasoning": "..."}}'
    )
    return (
        "You judge with the standards of a calibrated judge persona. Its guidance below was "
        "written for labelling one answer as correct or incorrect against a reference "
        "answer. Here there is no reference: apply the same standards to both threads, and "
        "prefer the thread that meets them more fully. Ignore the reply format the guidance "
        "asks for; use the one at the end.\n\n"
        "<<<PERSONA GUIDANCE>>>\n"
        + _braces(judging_guidance(judge_prompt))
        + "\n<<<END PERSONA GUIDANCE>>>\n\n"
        "Also score each thread from 1 (very poor) to 5 (excellent) on these criteria:\n"
        "{criteria}\n\n{thread_a}\n\n{thread_b}\n\n"
        'Decide which thread is better overall: "A", "B", or "TIE" if they are equally '
        "good. Give your confidence from 0 to 1 and a short reasoning (at most three "
        "sentences).\n\nAnswer with only this JSON object, no other text:\n" + _braces(answer)
    )


async def usable_persona(
    db: AsyncSession, persona_id: int, allow_untrained: bool
) -> tuple[Persona, PersonaOut]:
    out = await service.get_persona(db=db, persona_id=persona_id)  # 404 first
    persona = await db.get(Persona, persona_id)
    assert persona is not None
    if persona.status != "trained" and not allow_untrained:
        raise Conflict(
            f"persona {persona.name!r} is {persona.status}, not trained; train it until it "
            "converges, or pass allow_untrained=true to use it anyway"
        )
    if persona.judge_kind == "llm" and persona.judge_model_id is None:
        raise Invalid(f"persona {persona.name!r} has no judge model; choose one in its settings")
    return persona, out


async def create_persona_session(
    *,
    db: AsyncSession,
    persona_id: int,
    data: PersonaSessionIn,
    hub: EventHub | None = None,
    allow_untrained: bool = False,
) -> SessionOut:
    """A tournament session with the persona's judge model and a pairwise template built
    from its current judge prompt (``pairwise_template``)."""
    persona, out = await usable_persona(db, persona_id, allow_untrained)
    template = pairwise_template(out.judge_prompt, data.criteria)
    if len(template) > MAX_TEMPLATE_CHARS:
        raise Invalid(
            f"persona {persona.name!r}'s judge prompt makes a {len(template):,}-character "
            f"pairwise prompt; sessions take at most {MAX_TEMPLATE_CHARS:,}: shorten the "
            "judge prompt (a new version) first"
        )
    fields = data.model_dump(exclude=set(_JUDGE_FIELDS))
    session_in = SessionIn(
        **fields, judge_model_id=persona.judge_model_id, prompt_template=template
    )
    return await create_session(db=db, data=session_in, hub=hub)
