"""Session exports: the comparisons as CSV (streamed), the leaderboard as CSV, and both
as one JSON document (streamed). Reads only; cells a spreadsheet would run as formulas
are neutralised.

Every export says what produced it (`provenance`): product version and export time, the
session's judge model(s) with provider kind and the `simulated` flag, the prompt template,
system prompt and verdict format (SHA-256, and whether they are the built-in ones),
criteria, seed and the session's options. JSON carries it as a `provenance` object first;
CSV as leading lines starting with `#` (`# key: <JSON value>`), then the header.

Why `#` lines rather than a zip with a `*.meta.json` sidecar: the download stays one
streamed text/csv file that opens as is, and its provenance cannot be separated from the
data by unzipping one file and forwarding it. So that readers can skip the block safely
(`pandas.read_csv(path, comment="#")`), every text cell is quoted: a `#` inside a value
(even at the start of one of its own lines) is within quotes and never starts a comment,
and no record starts with `#`. Readers without comment support skip the leading lines
that start with `#` (only those before the header).

Floats are rounded to what they can mean (`ROUNDING`): Elo-scale scores to 0.1, rates to
1e-4, confidences and Likert means to 1e-3, costs to 1e-6 USD.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Float, case, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased

from llmjudge import __version__
from llmjudge.analysis.schemas import AnalysisSession, ThreadLeaderboardOut
from llmjudge.catalog import Pillar, Thread
from llmjudge.core.judging.prompts import DEFAULT_TEMPLATE, SYSTEM_PROMPT
from llmjudge.core.text.csvsafe import provenance_lines, safe_cell
from llmjudge.providers import LLMModel, Provider
from llmjudge.sessions import Comparison, JudgeSession

__all__ = [
    "ROUNDING",
    "comparison_columns",
    "export_comparisons_csv",
    "export_json",
    "export_leaderboard_csv",
    "load_provenance",
    "provenance_lines",
    "rounded",
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
        "raw_response",
        "parse_error",
        "error",
    }
)

# Decimal places by column (or key in the JSON document); prefixes cover per-criterion
# columns. Other floats keep 6 significant digits.
ROUNDING: dict[str, int] = {
    "confidence": 3,
    "avg_confidence": 3,
    "grade": 3,
    "cost_usd": 6,
    "latency_s": 3,
    "elo_score": 1,
    "bt_score": 1,
    "bt_ci_low": 1,
    "bt_ci_high": 1,
    "win_rate": 4,
    "raw_win_rate": 4,
}
_ROUNDING_PREFIXES: tuple[tuple[str, int], ...] = (("score_", 3), ("likert_", 3))
_DEFAULT_SIGNIFICANT = 6


def _places(key: str | None) -> int | None:
    if key is None:
        return None
    if key in ROUNDING:
        return ROUNDING[key]
    return next((n for prefix, n in _ROUNDING_PREFIXES if key.startswith(prefix)), None)


def _round_float(value: float, key: str | None) -> float | None:
    if not math.isfinite(value):
        return None
    places = _places(key)
    if places is not None:
        return round(value, places)
    if value == 0:
        return 0.0
    return round(value, _DEFAULT_SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))


def rounded(value: Any, key: str | None = None) -> Any:
    """``value`` with every float rounded by its key (see ROUNDING); non-finite -> None.
    Mappings and lists are walked; a list's items take the list's key."""
    if isinstance(value, float):
        return _round_float(value, key)
    if isinstance(value, Mapping):
        return {k: rounded(v, k if isinstance(k, str) else key) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, key) for v in value]
    return value


def _export_query(session_id: int, criteria: Sequence[str], graded: bool = False) -> Any:
    """Every comparison in queue order, one labelled column per export column: one score
    column per criterion and side, thread and pillar names, costs; ``graded`` (a session of
    mode single) adds each item's ``grade`` after the verdict columns."""
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
            c.strength,
            c.prob_a,
            c.confidence,
            *((c.score.label("grade"),) if graded else ()),
            *(c.scores_a[k].astext.cast(Float).label(f"score_a_{k}") for k in criteria),
            *(c.scores_b[k].astext.cast(Float).label(f"score_b_{k}") for k in criteria),
            c.reasoning,
            c.raw_response,
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


def comparison_columns(criteria: Sequence[str], graded: bool = False) -> list[str]:
    """Export columns, in order."""
    return [col.name for col in _export_query(0, criteria, graded).selected_columns]


async def _comparison_chunks(
    sessionmaker: async_sessionmaker[AsyncSession], session: AnalysisSession
) -> AsyncIterator[Sequence[Sequence[Any]]]:
    """Every comparison of the session (rows of `_export_query`), a chunk at a time from a
    server-side cursor: memory stays flat however large the session."""
    async with sessionmaker() as db:
        result = await db.stream(
            _export_query(
                session.id, session.criteria, session.comparison_mode == "single"
            ).execution_options(yield_per=EXPORT_CHUNK)
        )
        async for part in result.partitions(EXPORT_CHUNK):
            yield part


def _header_line(columns: Sequence[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow([safe_cell(c) for c in columns])
    return out.getvalue()


def _csv_lines(rows: Iterable[Sequence[Any]], columns: Sequence[str]) -> str:
    """Data records: numbers bare (rounded), every other cell quoted and neutralised, so a
    record never starts with `#` and a `#` in a value never reads as a comment."""
    text_at = [i for i, name in enumerate(columns) if name in _TEXT_COLUMNS]
    round_at = [(i, _places(name)) for i, name in enumerate(columns) if name not in _TEXT_COLUMNS]
    out = io.StringIO()
    # QUOTE_NONNUMERIC quotes text, times and None (as ""); ints, floats and bools stay bare.
    writer = csv.writer(out, lineterminator="\r\n", quoting=csv.QUOTE_NONNUMERIC)
    for row in rows:
        cells = list(row)
        for i in text_at:
            cells[i] = safe_cell(cells[i])
        for i, places in round_at:
            value = cells[i]
            if value.__class__ is float:
                if places is not None and math.isfinite(value):
                    cells[i] = round(value, places)
                else:
                    cells[i] = _round_float(value, columns[i])
            elif isinstance(value, str):  # text in a column not listed as text: still neutralised
                cells[i] = safe_cell(value)
        writer.writerow(cells)
    return out.getvalue()


async def export_comparisons_csv(
    *,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    provenance: Mapping[str, Any] | None = None,
) -> AsyncIterator[str]:
    """The comparisons table as CSV (provenance block, header, then one line per
    comparison with the judge's raw response); cells that a spreadsheet would run as
    formulas are neutralised."""
    columns = comparison_columns(session.criteria, session.comparison_mode == "single")
    if provenance is not None:
        yield provenance_lines(provenance)
    yield _header_line(columns)
    async for chunk in _comparison_chunks(sessionmaker, session):
        yield _csv_lines(chunk, columns)


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


def export_leaderboard_csv(
    board: ThreadLeaderboardOut, provenance: Mapping[str, Any] | None = None
) -> str:
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
    records = _leaderboard_records(board)
    head = provenance_lines(provenance) if provenance is not None else ""
    return (
        head
        + _header_line(columns)
        + _csv_lines(([r.get(c) for c in columns] for r in records), columns)
    )


def _json_value(value: Any, key: str) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return rounded(value, key)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)


async def export_json(
    *,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    board: ThreadLeaderboardOut,
    provenance: Mapping[str, Any] | None = None,
) -> AsyncIterator[str]:
    """{"provenance", "session", "comparisons", "leaderboard"}, the comparisons streamed in
    chunks; floats rounded (ROUNDING)."""
    head = '{"provenance":' + _dumps(provenance) + "," if provenance is not None else "{"
    yield head + '"session":' + session.model_dump_json() + ',"comparisons":['
    columns = comparison_columns(session.criteria, session.comparison_mode == "single")
    first = True
    async for chunk in _comparison_chunks(sessionmaker, session):
        text = ",".join(
            _dumps({k: _json_value(v, k) for k, v in zip(columns, r, strict=True)}) for r in chunk
        )
        if text:
            yield ("" if first else ",") + text
            first = False
    leaderboard = rounded(board.model_dump(mode="json", exclude={"session"}))
    yield '],"leaderboard":' + _dumps(leaderboard) + "}"


# -- provenance ----------------------------------------------------------------------------


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _judge_ids(s: JudgeSession) -> list[int]:
    """The session's judge model and, where a panel judged it, every panel member."""
    ids = [s.judge_model_id] if s.judge_model_id is not None else []
    members = [m.get("model_id") for m in (s.panel or {}).get("members", [])]
    ids += [i for i in members if isinstance(i, int) and i not in ids]
    return ids


async def load_provenance(
    db: AsyncSession, session_id: int, *, table: str, **query: Any
) -> dict[str, Any]:
    """What produced an export of one session (see the module docstring); ``query`` holds
    the export's own parameters (aggregation, bootstrap rounds)."""
    s = await db.get(JudgeSession, session_id)
    if s is None:
        raise LookupError(session_id)
    judges: list[dict[str, Any]] = []
    ids = _judge_ids(s)
    if ids:
        rows = (
            await db.execute(
                select(LLMModel.id, LLMModel.name, LLMModel.model, Provider.name, Provider.kind)
                .join(Provider, Provider.id == LLMModel.provider_id)
                .where(LLMModel.id.in_(ids))
            )
        ).all()
        found = {r[0]: r for r in rows}
        for i in ids:
            r = found.get(i)
            judges.append(
                {"model_id": i, "deleted": True}
                if r is None
                else {
                    "model_id": i,
                    "name": r[1],
                    "model": r[2],
                    "provider": r[3],
                    "provider_kind": r[4],
                    "simulated": r[4] == "simulator",
                }
            )
    options = dict(s.options or {})
    imported = options.get("source") == "import"
    if imported:
        judges = [{"label": options.get("judge_label"), "imported": True}]
    template = s.prompt_template if s.prompt_template is not None else DEFAULT_TEMPLATE
    system = s.system_prompt if s.system_prompt is not None else SYSTEM_PROMPT
    # Unknown for imports (the judge ran elsewhere); fail closed, never "not simulated".
    simulated: bool | None = (
        None if imported or not judges else any(j.get("simulated") is True for j in judges)
    )
    return {
        "product": "llmjudge",
        "version": __version__,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "table": table,
        "query": query,
        "session": {
            "id": s.id,
            "name": s.name,
            "status": s.status,
            "comparison_mode": s.comparison_mode,
            "created_at": s.created_at.isoformat() if s.created_at else None,
            "finished_at": s.finished_at.isoformat() if s.finished_at else None,
            "total": s.total,
            "completed": s.completed,
            "failed": s.failed,
        },
        "judges": judges,
        "simulated": simulated,
        "prompt_template": {
            "builtin": s.prompt_template is None,
            "sha256": None if imported else _digest(template),
        },
        "system_prompt": {
            "builtin": s.system_prompt is None,
            "sha256": None if imported else _digest(system),
        },
        "verdict_format": s.verdict_format,
        "criteria": list(s.criteria or []),
        "seed": options.get("seed"),
        "options": options,
        "pillar_ids": list(s.pillar_ids or []),
        "worker_count": s.worker_count,
    }
