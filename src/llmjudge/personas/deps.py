"""Request-bound helpers shared by the persona API and its pages."""

from __future__ import annotations

from fastapi import HTTPException

from llmjudge.personas.summaries import MAX_COMPARE


def parse_ids(raw: list[str]) -> list[int]:
    """Persona ids from `?ids=1,2,3` and/or `?ids=1&ids=2`, in order, without repeats."""
    ids: list[int] = []
    for part in (p.strip() for chunk in raw for p in chunk.split(",")):
        if not part:
            continue
        if not part.isdigit():
            raise HTTPException(422, f"ids must be persona ids (integers), got {part!r}")
        if int(part) not in ids:
            ids.append(int(part))
    if not ids:
        raise HTTPException(422, "give the personas to compare: ?ids=1,2,3")
    if len(ids) > MAX_COMPARE:
        raise HTTPException(422, f"compare at most {MAX_COMPARE} personas at once")
    return ids
