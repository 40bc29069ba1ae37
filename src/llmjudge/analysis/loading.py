"""Loading a session for analysis: its completed comparisons as columns, and the catalog
facts (pillar names and sizes, thread titles) the figures need. Reads only.

Loading is one `select` of plain columns per session (no ORM objects; criteria scores are
extracted by PostgreSQL) read as a binary COPY and parsed by numpy into an `OutcomeTable`
in a worker thread (a million comparisons in about 2 s, no Python object per value), so
the event loop never waits on the parse.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import (
    ARRAY,
    Float,
    Integer,
    SmallInteger,
    any_,
    case,
    cast,
    func,
    literal_column,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge.analysis.grading import derived_outcomes, load_grades
from llmjudge.analysis.schemas import AnalysisSession, PillarLabel, ThreadLabel
from llmjudge.catalog import Pillar, Thread
from llmjudge.core.analysis.outcomes import OutcomeTable
from llmjudge.core.ratings.style import STYLE_FEATURES
from llmjudge.infra.db.rows import columns
from llmjudge.infra.errors import NotFound
from llmjudge.sessions import Comparison, JudgeSession

__all__ = ["SessionData", "get_analysis_session", "load_session_data", "parse_binary_copy"]


@dataclass(frozen=True, eq=False)
class SessionData:
    """A session's completed comparisons and the catalog facts the figures need."""

    version: int  # the completed count it was loaded for (it may hold a few more)
    table: OutcomeTable
    thread_pillar: dict[int, int]
    pillar_names: dict[int, str]
    pillar_sizes: dict[int, int]  # threads per pillar in the catalog (coverage)
    pillar_ids: tuple[int, ...]  # the session's pillars and any seen in its comparisons
    threads: dict[int, tuple[str, str]]  # thread id -> (title, external_id), if in catalog
    # thread id -> analysis.style.STYLE_FEATURES, for threads in the catalog that have them
    style_features: dict[int, tuple[float, ...]] = field(default_factory=dict)
    # thread id -> its metadata's scalar values (str, number, bool), for categories and
    # numeric covariates
    thread_meta: dict[int, dict[str, str | float | bool]] = field(default_factory=dict)

    def thread_label(self, thread_id: int) -> ThreadLabel:
        title, external_id = self.threads.get(thread_id, (None, None))
        pillar = self.thread_pillar.get(thread_id, -1)
        return ThreadLabel(
            thread_id=thread_id,
            title=title,
            external_id=external_id,
            pillar=PillarLabel(id=pillar, name=self.pillar_name(pillar)),
        )

    def pillar_name(self, pillar_id: int) -> str:
        return self.pillar_names.get(pillar_id, f"pillar {pillar_id}")

    def labels(self, thread_ids: Iterable[int | None]) -> dict[int, ThreadLabel]:
        return {t: self.thread_label(t) for t in sorted({t for t in thread_ids if t is not None})}


async def get_analysis_session(*, db: AsyncSession, session_id: int) -> AnalysisSession:
    """The session's current status and counters; NotFound for an unknown id."""
    s = await db.get(JudgeSession, session_id, populate_existing=True)
    if s is None:
        raise NotFound(f"session {session_id} not found")
    options = s.options or {}
    return AnalysisSession.model_validate(
        columns(s)
        | {
            "comparison_mode": "imported"
            if options.get("source") == "import"
            else s.comparison_mode,
            "calculate_elo": bool(options.get("calculate_elo", True)),
            "criteria": list(s.criteria or []),
            "pillar_ids": list(s.pillar_ids or []),
        }
    )


def scalar_metadata(meta: Any) -> dict[str, str | float | bool]:
    """The scalar values of a thread's metadata (nested lists and objects left out)."""
    if not isinstance(meta, dict):
        return {}
    return {
        str(k): v
        for k, v in meta.items()
        if isinstance(v, str | bool) or (isinstance(v, int | float) and math.isfinite(v))
    }


def _outcome_columns(criteria: Sequence[str]) -> list[tuple[Any, str]]:
    """(expression, big-endian numpy type) of each loaded column. None may be NULL (NaN
    stands for a missing value), so every row of the binary COPY has the same width."""
    nan = literal_column("'NaN'::float8")

    def real(expr: Any, default: Any = nan) -> Any:
        return cast(func.coalesce(cast(expr, Float), default), Float)

    score_a = case((Comparison.winner == "A", 1.0), (Comparison.winner == "B", 0.0), else_=0.5)
    return [
        (Comparison.id, ">i8"),
        (Comparison.thread_a_id, ">i4"),
        (Comparison.thread_b_id, ">i4"),
        (Comparison.pillar_a_id, ">i4"),
        (Comparison.pillar_b_id, ">i4"),
        (real(score_a), ">f8"),
        (real(Comparison.confidence), ">f8"),
        (Comparison.swap_group, ">i4"),
        (Comparison.is_swap, "u1"),
        (Comparison.repetition, ">i4"),
        (real(func.extract("epoch", Comparison.completed_at), 0.0), ">f8"),
        (cast(func.coalesce(Comparison.strength, 0), SmallInteger), ">i2"),
        (real(Comparison.prob_a), ">f8"),
        *(
            (real(side[c].astext), ">f8")
            for side in (Comparison.scores_a, Comparison.scores_b)
            for c in criteria
        ),
    ]


def _outcome_query(session_id: int, columns: Sequence[tuple[Any, str]]) -> Any:
    return select(*(expr for expr, _ in columns)).where(
        Comparison.session_id == session_id,
        Comparison.status == "completed",
        Comparison.winner.is_not(None),
    )


def parse_binary_copy(data: bytes, types: Sequence[str]) -> np.ndarray:
    """Rows of a PostgreSQL binary COPY whose fields are all fixed-width and non-NULL, as a
    structured array (`v0`, `v1`, ...): no Python object per value."""
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for k, t in enumerate(types):
        fields += [(f"n{k}", ">i4"), (f"v{k}", t)]
    header = 19 + int.from_bytes(data[15:19], "big")  # signature, flags, extension length
    rows = np.frombuffer(data[header:-2], dtype=np.dtype(fields))  # -2: the trailer
    for k, t in enumerate(types):
        if np.any(rows[f"n{k}"] != np.dtype(t).itemsize):
            raise ValueError(f"column {k} has NULLs or an unexpected width")
    return rows


def _build_table(
    data: bytes, types: Sequence[str], criteria: Sequence[str]
) -> tuple[OutcomeTable, dict[int, int]]:
    """(OutcomeTable, thread -> pillar) from the binary COPY of `_outcome_query`."""
    rows = parse_binary_copy(data, types)
    col = [rows[f"v{k}"].astype(np.dtype(t).newbyteorder("=")) for k, t in enumerate(types)]
    c = len(criteria)
    likert = np.column_stack(col[13:]) if c else np.zeros((len(rows), 0))
    table = OutcomeTable.from_columns(
        comparison_id=col[0],
        thread_a=col[1],
        thread_b=col[2],
        score_a=col[5],
        confidence=col[6],
        criteria=list(criteria),
        scores_a=likert[:, :c],
        scores_b=likert[:, c:],
        swap_group=col[7],
        is_swap=col[8].astype(bool),
        repetition=col[9],
        completed_order=col[10],
        strength=col[11],
        prob_a=col[12],
    )
    threads = np.concatenate([col[1], col[2]]).astype(np.int64)
    pillars = np.concatenate([col[3], col[4]]).astype(np.int64)
    ids, first = np.unique(threads, return_index=True)
    return table, dict(zip(ids.tolist(), pillars[first].tolist(), strict=True))


async def _copy_out(db: AsyncSession, stmt: Any) -> bytes:
    """The result of `stmt` in PostgreSQL's binary COPY format (inside db's transaction)."""
    sql = str(stmt.compile(dialect=db.get_bind().dialect, compile_kwargs={"literal_binds": True}))
    chunks: list[bytes] = []

    async def sink(chunk: bytes) -> None:
        chunks.append(chunk)

    raw = await (await db.connection()).get_raw_connection()
    await raw.driver_connection.copy_from_query(sql, output=sink, format="binary")
    return b"".join(chunks)


def _int_array(values: Iterable[int]) -> Any:
    return cast(list(values), ARRAY(Integer))


async def load_session_data(*, db: AsyncSession, session: AnalysisSession) -> SessionData:
    """The completed comparisons of `session`, and thread/pillar facts from the catalog.
    A grading session (mode single) has no pairs: its figures read the pairwise outcomes
    its grades imply (``grading.derived_outcomes``)."""
    if session.comparison_mode == "single":
        grades = await load_grades(db, session.id)
        table, thread_pillar = await asyncio.to_thread(derived_outcomes, grades)
    else:
        columns = _outcome_columns(session.criteria)
        data = await _copy_out(db, _outcome_query(session.id, columns))
        table, thread_pillar = await asyncio.to_thread(
            _build_table, data, [t for _, t in columns], session.criteria
        )
    pillar_ids = tuple(sorted(set(session.pillar_ids) | set(thread_pillar.values())))
    names = dict(
        (
            await db.execute(
                select(Pillar.id, Pillar.name).where(Pillar.id == any_(_int_array(pillar_ids)))
            )
        ).all()
    )
    sizes = {p: 0 for p in session.pillar_ids}
    sizes.update(
        (
            await db.execute(
                select(Thread.pillar_id, func.count())
                .where(Thread.pillar_id == any_(_int_array(session.pillar_ids)))
                .group_by(Thread.pillar_id)
            )
        ).all()
    )
    rows = (
        await db.execute(
            select(
                Thread.id, Thread.title, Thread.external_id, Thread.style_features, Thread.meta
            ).where(Thread.id == any_(_int_array(thread_pillar)))
        )
    ).all()
    threads = {t: (title, ext) for t, title, ext, _, _ in rows}
    style = {
        t: tuple(f) for t, _, _, f, _ in rows if f is not None and len(f) == len(STYLE_FEATURES)
    }
    meta = {t: scalar_metadata(m) for t, _, _, _, m in rows if m}
    return SessionData(
        version=session.completed,
        table=table,
        thread_pillar=thread_pillar,
        pillar_names=names,
        pillar_sizes=sizes,
        pillar_ids=pillar_ids,
        threads=threads,
        style_features=style,
        thread_meta=meta,
    )
