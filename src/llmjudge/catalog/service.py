"""Catalog operations: pillars, thread import and queries."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Select, func, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.catalog.importing import ParsedFile, content_hash, row_key, stored_content
from llmjudge.catalog.models import Pillar, Thread
from llmjudge.catalog.schemas import (
    ImportResult,
    PillarIn,
    PillarOut,
    PillarPatch,
    RowError,
    ThreadIn,
    ThreadOut,
    ThreadPage,
    ThreadSummary,
)
from llmjudge.core.ratings.style import stored_features
from llmjudge.infra.db.rows import columns, get_or_not_found
from llmjudge.infra.errors import Conflict, NotFound


async def list_pillars(*, db: AsyncSession) -> list[PillarOut]:
    counts = select(Thread.pillar_id, func.count().label("n")).group_by(Thread.pillar_id).subquery()
    rows = await db.execute(
        select(Pillar, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.pillar_id == Pillar.id)
        .order_by(Pillar.name)
    )
    return [_pillar_out(p, n) for p, n in rows.all()]


def _pillar_out(p: Pillar, n: int) -> PillarOut:
    return PillarOut(
        id=p.id, name=p.name, description=p.description, thread_count=n, created_at=p.created_at
    )


async def get_pillar(*, db: AsyncSession, pillar_id: int) -> PillarOut:
    p = await get_or_not_found(db, Pillar, pillar_id, "pillar")
    n = await db.scalar(select(func.count()).where(Thread.pillar_id == pillar_id))
    return _pillar_out(p, n or 0)


async def create_pillar(*, db: AsyncSession, pillar_in: PillarIn) -> PillarOut:
    if await db.scalar(select(Pillar.id).where(Pillar.name == pillar_in.name)):
        raise Conflict(f"a pillar named {pillar_in.name!r} already exists")
    p = Pillar(name=pillar_in.name, description=pillar_in.description)
    db.add(p)
    await db.commit()
    await db.refresh(p)
    return _pillar_out(p, 0)


async def update_pillar(*, db: AsyncSession, pillar_id: int, patch: PillarPatch) -> PillarOut:
    p = await get_or_not_found(db, Pillar, pillar_id, "pillar")
    if patch.name is not None and patch.name != p.name:
        if await db.scalar(select(Pillar.id).where(Pillar.name == patch.name)):
            raise Conflict(f"a pillar named {patch.name!r} already exists")
        p.name = patch.name
    if patch.description is not None:
        p.description = patch.description
    await db.commit()
    return await get_pillar(db=db, pillar_id=pillar_id)


async def delete_pillar(*, db: AsyncSession, pillar_id: int) -> None:
    p = await get_or_not_found(db, Pillar, pillar_id, "pillar")
    await db.delete(p)
    await db.commit()


async def check_stored_prompts(*, db: AsyncSession, parsed: ParsedFile) -> None:
    """Line errors for rows whose prompt text differs from the one already stored for their
    prompt key (threads with one prompt key share one prompt), other than rows the file
    itself replaces."""
    keys = sorted(parsed.prompts)
    if not keys:
        return
    rows = await db.execute(
        select(Thread.prompt_key, Thread.prompt, Pillar.name, Thread.external_id)
        .join(Pillar, Pillar.id == Thread.pillar_id)
        .where(Thread.prompt_key.in_(keys), Thread.prompt.is_not(None))
    )
    stored: dict[str, str] = {}
    for key, prompt, pillar, external_id in rows.all():
        if row_key(pillar, external_id) not in parsed.keys:
            stored.setdefault(key, prompt)
    for key, (prompt, lines) in parsed.prompts.items():
        known = stored.get(key)
        if known is not None and known != prompt:
            parsed.errors.extend(
                RowError(
                    line=line,
                    field="prompt",
                    message=f"prompt_key {key!r} already has another prompt text; "
                    "threads with one prompt key must share one prompt",
                )
                for line in lines
            )
    parsed.errors.sort(key=lambda e: e.line)


# Rows read from the file at a time: bounds what an import holds besides its spooled file.
STORE_BATCH = 5000
# Rows per INSERT: SQLAlchemy encodes a statement's parameters on the event loop (about
# 60 microseconds a thread), so one statement must not hold the loop for long.
INSERT_ROWS = 500


def _thread_values(
    rows: Iterator[tuple[int, ThreadIn]], pillar_ids: dict[str, int]
) -> list[dict[str, Any]]:
    """The next batch of rows' values (empty at the end)."""
    values: list[dict[str, Any]] = []
    for _, r in rows:
        content = stored_content(r)
        values.append(
            {
                "pillar_id": pillar_ids[r.pillar],
                "external_id": r.external_id,
                "title": r.title,
                "prompt_key": r.prompt_key,
                "prompt": r.prompt,
                "content": content,
                "content_hash": content_hash(content),
                "meta": r.metadata,
                # style control reads these per thread; computed once, here
                "style_features": stored_features(content),
            }
        )
        if len(values) >= STORE_BATCH:
            break
    return values


async def store_import(*, db: AsyncSession, parsed: ParsedFile) -> ImportResult:
    """Upsert validated rows in one transaction: all rows or none."""
    assert not parsed.errors, "store_import takes a file without errors"
    names = sorted(parsed.pillars)
    existing = dict(
        (await db.execute(select(Pillar.name, Pillar.id).where(Pillar.name.in_(names)))).all()
    )
    created_pillars = [n for n in names if n not in existing]
    if created_pillars:
        res = await db.execute(
            insert(Pillar)
            .values([{"name": n, "description": ""} for n in created_pillars])
            .on_conflict_do_nothing(index_elements=["name"])
            .returning(Pillar.name, Pillar.id)
        )
        existing.update(dict(res.all()))
        # A concurrent import may have created some of them meanwhile.
        missing = [n for n in names if n not in existing]
        if missing:
            existing.update(
                dict(
                    (
                        await db.execute(
                            select(Pillar.name, Pillar.id).where(Pillar.name.in_(missing))
                        )
                    ).all()
                )
            )
    before = await db.scalar(
        select(func.count()).select_from(Thread).where(Thread.pillar_id.in_(existing.values()))
    )
    stmt = insert(Thread)
    stmt = stmt.on_conflict_do_update(
        index_elements=["pillar_id", "external_id"],
        set_={
            "title": stmt.excluded.title,
            "prompt_key": stmt.excluded.prompt_key,
            "prompt": stmt.excluded.prompt,
            "content": stmt.excluded.content,
            "content_hash": stmt.excluded.content_hash,
            "metadata": stmt.excluded.metadata,
            "style_features": stmt.excluded.style_features,
            "updated_at": func.now(),
        },
    )
    # The file is read again batch by batch, all in this one transaction (all or nothing).
    # Parsing, hashes and style regexes are CPU work: off the event loop.
    rows = parsed.iter_rows()
    total = 0
    while values := await asyncio.to_thread(_thread_values, rows, existing):
        for start in range(0, len(values), INSERT_ROWS):
            await db.execute(stmt, values[start : start + INSERT_ROWS])
        total += len(values)
    after = await db.scalar(
        select(func.count()).select_from(Thread).where(Thread.pillar_id.in_(existing.values()))
    )
    await db.commit()
    created = (after or 0) - (before or 0)
    return ImportResult(
        created=created,
        updated=total - created,
        pillars_created=created_pillars,
        total=total,
    )


def _thread_query(
    pillar_id: int | None,
    q: str | None,
    prompt_key: str | None = None,
    meta_key: str | None = None,
    meta_value: str | None = None,
) -> Select[Any]:
    stmt = select(Thread, Pillar.name).join(Pillar, Pillar.id == Thread.pillar_id)
    if pillar_id is not None:
        stmt = stmt.where(Thread.pillar_id == pillar_id)
    if prompt_key:
        stmt = stmt.where(Thread.prompt_key == prompt_key)
    if meta_key and meta_value is not None and meta_value != "":
        # JSONB text value, so {"category": "coding"} and {"question_id": 81} both match "81"
        stmt = stmt.where(Thread.meta[meta_key].astext == meta_value)
    elif meta_key:
        stmt = stmt.where(Thread.meta.has_key(meta_key))
    if q:
        escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        like = f"%{escaped}%"
        stmt = stmt.where(
            or_(
                Thread.title.ilike(like),
                Thread.external_id.ilike(like),
                Thread.prompt_key.ilike(like),
            )
        )
    return stmt


async def list_threads(
    *,
    db: AsyncSession,
    pillar_id: int | None = None,
    q: str | None = None,
    limit: int = 50,
    offset: int = 0,
    prompt_key: str | None = None,
    meta_key: str | None = None,
    meta_value: str | None = None,
) -> ThreadPage:
    base = _thread_query(pillar_id, q, prompt_key, meta_key, meta_value)
    total = await db.scalar(select(func.count()).select_from(base.subquery()))
    rows = await db.execute(base.order_by(Pillar.name, Thread.id).limit(limit).offset(offset))
    return ThreadPage(
        total=total or 0,
        limit=limit,
        offset=offset,
        items=[_summary(t, name) for t, name in rows.all()],
    )


def _summary(t: Thread, pillar_name: str) -> ThreadSummary:
    return ThreadSummary.model_validate(columns(t) | {"pillar_name": pillar_name})


async def get_thread(*, db: AsyncSession, thread_id: int) -> ThreadOut:
    row = (
        await db.execute(
            select(Thread, Pillar.name)
            .join(Pillar, Pillar.id == Thread.pillar_id)
            .where(Thread.id == thread_id)
        )
    ).first()
    if row is None:
        raise NotFound(f"thread {thread_id} not found")
    t, name = row
    return ThreadOut(
        **_summary(t, name).model_dump(), prompt=t.prompt, content=t.content, metadata=t.meta
    )


async def threads_by_ids(*, db: AsyncSession, ids: Sequence[int]) -> dict[int, Thread]:
    rows = await db.scalars(select(Thread).where(Thread.id.in_(list(ids))))
    return {t.id: t for t in rows}


async def metadata_keys(*, db: AsyncSession, limit: int = 50) -> list[str]:
    """The metadata keys threads carry (for the thread browser's filter), most common first."""
    key = func.jsonb_object_keys(Thread.meta).label("key")
    sub = select(key).select_from(Thread).subquery()
    rows = await db.execute(
        select(sub.c.key).group_by(sub.c.key).order_by(func.count().desc(), sub.c.key).limit(limit)
    )
    return [k for (k,) in rows.all()]


async def prompt_key_coverage(*, db: AsyncSession, pillar_ids: Sequence[int]) -> tuple[int, int]:
    """(threads with a prompt key, threads) in the given pillars."""
    row = (
        await db.execute(
            select(func.count(Thread.prompt_key), func.count()).where(
                Thread.pillar_id.in_(list(pillar_ids))
            )
        )
    ).one()
    return int(row[0]), int(row[1])
