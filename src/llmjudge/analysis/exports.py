"""Session exports: the comparisons as CSV (streamed), the leaderboard as CSV, and both
as one JSON document (streamed). Reads only; cells a spreadsheet would run as formulas
are neutralised.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Float, case, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased

from llmjudge.analysis.schemas import AnalysisSession, ThreadLeaderboardOut
from llmjudge.catalog.models import Pillar, Thread
from llmjudge.csvsafe import safe_cell, write_csv
from llmjudge.sessions.models import Comparison

__all__ = [
    "comparison_columns",
    "export_comparisons_csv",
    "export_json",
    "export_leaderboard_csv",
]

EXPORT_CHUNK = 5000
# Columns that may hold free text; numbers, booleans and NULLs need no neutralising.
_TEXT_COLUMNS = frozenset(
    {
        "status",
        "thread_a_external_id",
        "thread_a_title",
        "pillar_a_name",
        "thread_b_external_id",
        "thread_b_title",
        "pillar_b_name",
        "winner",
        "reasoning",
        "parse_error",
        "error",
    }
)


def _export_query(session_id: int, criteria: Sequence[str]) -> Any:
    """Every comparison in queue order, one labelled column per export column: one score
    column per criterion and side, thread and pillar names, costs."""
    ta, tb = aliased(Thread), aliased(Thread)
    pa, pb = aliased(Pillar), aliased(Pillar)
    c = Comparison
    winner_thread = case((c.winner == "A", c.thread_a_id), (c.winner == "B", c.thread_b_id))
    return (
        select(
            c.id.label("comparison_id"),
            c.queue_position,
            c.status,
            c.repetition,
            c.swap_group,
            c.is_swap,
            c.thread_a_id,
            ta.external_id.label("thread_a_external_id"),
            ta.title.label("thread_a_title"),
            c.pillar_a_id,
            pa.name.label("pillar_a_name"),
            c.thread_b_id,
            tb.external_id.label("thread_b_external_id"),
            tb.title.label("thread_b_title"),
            c.pillar_b_id,
            pb.name.label("pillar_b_name"),
            c.winner,
            winner_thread.label("winner_thread_id"),
            c.confidence,
            *(c.scores_a[k].astext.cast(Float).label(f"score_a_{k}") for k in criteria),
            *(c.scores_b[k].astext.cast(Float).label(f"score_b_{k}") for k in criteria),
            c.reasoning,
            c.parse_error,
            c.error,
            c.attempts,
            c.input_tokens,
            c.output_tokens,
            c.cost_usd,
            c.latency_s,
            c.cache_hit,
            c.completed_at,
        )
        .outerjoin(ta, ta.id == c.thread_a_id)
        .outerjoin(tb, tb.id == c.thread_b_id)
        .outerjoin(pa, pa.id == c.pillar_a_id)
        .outerjoin(pb, pb.id == c.pillar_b_id)
        .where(c.session_id == session_id)
        .order_by(c.queue_position)
    )


def comparison_columns(criteria: Sequence[str]) -> list[str]:
    """Export columns, in order."""
    return [col.name for col in _export_query(0, criteria).selected_columns]


async def _comparison_chunks(
    sessionmaker: async_sessionmaker[AsyncSession], session: AnalysisSession
) -> AsyncIterator[Sequence[Sequence[Any]]]:
    """Every comparison of the session (rows of `_export_query`), a chunk at a time from a
    server-side cursor: memory stays flat however large the session."""
    async with sessionmaker() as db:
        result = await db.stream(
            _export_query(session.id, session.criteria).execution_options(yield_per=EXPORT_CHUNK)
        )
        async for part in result.partitions(EXPORT_CHUNK):
            yield part


def _csv_lines(rows: Iterable[Sequence[Any]], text_at: Sequence[int]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    for row in rows:
        cells = list(row)
        for i in text_at:
            cells[i] = safe_cell(cells[i])
        writer.writerow(cells)
    return out.getvalue()


async def export_comparisons_csv(
    *, sessionmaker: async_sessionmaker[AsyncSession], session: AnalysisSession
) -> AsyncIterator[str]:
    """The comparisons table as CSV (header, then one line per comparison); cells that a
    spreadsheet would run as formulas are neutralised."""
    columns = comparison_columns(session.criteria)
    text_at = [i for i, name in enumerate(columns) if name in _TEXT_COLUMNS]
    yield write_csv([], columns)
    async for chunk in _comparison_chunks(sessionmaker, session):
        yield _csv_lines(chunk, text_at)


def _leaderboard_records(board: ThreadLeaderboardOut) -> list[dict[str, Any]]:
    criteria = board.session.criteria
    m = board.method
    method = {
        "ci_level": m.level,
        "ci_method": m.interval if m.interval == "sandwich" else f"bootstrap/{m.clusters}",
        "tie_model": m.tie_model,
        "strong_weight": m.strong_weight,
        "elo_anchor": m.base,
    }
    return [
        {
            "rank": e.rank,
            "thread_id": e.thread_id,
            "thread_external_id": e.thread_external_id,
            "thread_title": e.thread_title,
            "pillar_id": e.pillar.id,
            "pillar_name": e.pillar.name,
            "elo_score": e.elo_score,
            "bt_score": e.bt_score,
            "bt_ci_low": e.bt_ci_low,
            "bt_ci_high": e.bt_ci_high,
            "matches_played": e.matches_played,
            "wins": e.wins,
            "losses": e.losses,
            "ties": e.ties,
            "win_rate": e.win_rate,
            "avg_confidence": e.avg_confidence,
            **{f"likert_{c}": e.avg_likert_scores.get(c) for c in criteria},
            # how the scores were made, on every row so a pasted extract keeps it
            **method,
        }
        for e in board.entries
    ]


def export_leaderboard_csv(board: ThreadLeaderboardOut) -> str:
    columns = [
        "rank",
        "thread_id",
        "thread_external_id",
        "thread_title",
        "pillar_id",
        "pillar_name",
        "elo_score",
        "bt_score",
        "bt_ci_low",
        "bt_ci_high",
        "matches_played",
        "wins",
        "losses",
        "ties",
        "win_rate",
        "avg_confidence",
        *(f"likert_{c}" for c in board.session.criteria),
        "ci_level",
        "ci_method",
        "tie_model",
        "strong_weight",
        "elo_anchor",
    ]
    return write_csv(_leaderboard_records(board), columns)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return None if isinstance(value, float) and not math.isfinite(value) else value


async def export_json(
    *,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    board: ThreadLeaderboardOut,
) -> AsyncIterator[str]:
    """{"session", "comparisons", "leaderboard"}, the comparisons streamed in chunks."""
    yield '{"session":' + session.model_dump_json() + ',"comparisons":['
    columns = comparison_columns(session.criteria)
    first = True
    async for chunk in _comparison_chunks(sessionmaker, session):
        text = ",".join(
            json.dumps(dict(zip(columns, map(_json_value, r), strict=True)), allow_nan=False)
            for r in chunk
        )
        if text:
            yield ("" if first else ",") + text
            first = False
    yield '],"leaderboard":' + board.model_dump_json(exclude={"session"}) + "}"
