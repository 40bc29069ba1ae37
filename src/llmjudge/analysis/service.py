"""Session analysis: load a session's completed comparisons as columns, compute figures
with the pure analysis modules, cache them; CSV/JSON exports; import of judgments made
elsewhere.

Loading is one `select` of plain columns per session (no ORM objects; criteria scores are
extracted by PostgreSQL) read as a binary COPY and parsed by numpy into an `OutcomeTable`
in a worker thread (a million comparisons in about 2 s, no Python object per value). Figures are
cached per (figure, session, completed count, parameters): nothing changes between two
completions, and pages poll while a session runs. CPU work runs in `asyncio.to_thread`,
so the event loop never waits on a bootstrap.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import (
    ARRAY,
    Float,
    Integer,
    String,
    any_,
    case,
    cast,
    func,
    literal_column,
    select,
)
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased

from llmjudge.analysis.findings import Finding, surprise_findings
from llmjudge.analysis.leaderboard import (
    Leaderboard,
    PillarMatrix,
    ScoreDistribution,
    leaderboard,
    pillar_matrix,
    score_distribution,
)
from llmjudge.analysis.outcomes import Aggregation, OutcomeTable, aggregate
from llmjudge.analysis.performance import ThreadPerformance, thread_performance
from llmjudge.analysis.position import position_swap_analysis
from llmjudge.analysis.ratings import bradley_terry, elo_array, pillar_bradley_terry
from llmjudge.analysis.schemas import (
    AnalysisSession,
    FindingsOut,
    JudgmentImportOut,
    LeaderboardRow,
    PillarAggregateOut,
    PillarLabel,
    PillarMatrixOut,
    PositionSwapOut,
    ScoreDistributionOut,
    ScoreKind,
    ThreadLabel,
    ThreadLeaderboardOut,
    ThreadPerformanceOut,
)
from llmjudge.catalog.models import Pillar, Thread
from llmjudge.catalog.schemas import RowError
from llmjudge.csvsafe import safe_cell, write_csv
from llmjudge.errors import Conflict, Invalid, NotFound
from llmjudge.sessions.importing import (
    KnownThread,
    ParsedJudgments,
    ThreadKey,
    resolve_judgments,
)
from llmjudge.sessions.models import Comparison, JudgeSession

__all__ = [
    "IMPORTED_MODE",
    "AnalysisCache",
    "JudgmentsRejected",
    "SessionData",
    "export_comparisons_csv",
    "export_json",
    "export_leaderboard_csv",
    "findings",
    "get_analysis_session",
    "import_judgments",
    "load_session_data",
    "pillar_matrix_out",
    "position_swap",
    "score_distribution_out",
    "thread_leaderboard",
    "thread_performance_out",
]

T = TypeVar("T")
BT_CONFIDENCE = 0.95
SEED = 0  # bootstrap seed: the same data gives the same intervals on every poll
# How an imported session is recorded (options["source"] == "import" says the same).
IMPORTED_MODE = "imported"


# -- cache --------------------------------------------------------------------------------


class AnalysisCache:
    """Small LRU caches of loaded sessions and computed figures, keyed by (what, version)
    where the version is the session's completed count. Entries are tasks, so concurrent
    requests share one computation, and while one version of a figure is being computed a
    request for a newer version shares it too (a result at most one computation behind):
    polls of a running session never pile up work."""

    def __init__(self, *, max_figures: int = 64, max_sessions: int = 2) -> None:
        self._figures: OrderedDict[Hashable, asyncio.Task[Any]] = OrderedDict()
        self._sessions: OrderedDict[Hashable, asyncio.Task[Any]] = OrderedDict()
        self._running: dict[Hashable, asyncio.Task[Any]] = {}
        self._max_figures, self._max_sessions = max_figures, max_sessions
        self.computed = 0  # figures and loads started (tests read it)

    async def _get(
        self,
        store: OrderedDict[Hashable, asyncio.Task[Any]],
        limit: int,
        key: Hashable,
        version: int,
        make: Callable[[], Awaitable[T]],
    ) -> T:
        task = store.get((key, version))
        if task is not None:
            store.move_to_end((key, version))
        elif (busy := self._running.get((id(store), key))) is not None:
            task = busy
        else:
            task = self._start(store, limit, key, version, make)
        # A waiter that goes away (client disconnect) must not cancel the shared work.
        return await asyncio.shield(task)

    def _start(
        self,
        store: OrderedDict[Hashable, asyncio.Task[Any]],
        limit: int,
        key: Hashable,
        version: int,
        make: Callable[[], Awaitable[T]],
    ) -> asyncio.Task[T]:
        self.computed += 1
        task = asyncio.ensure_future(make())
        store[(key, version)] = task
        while len(store) > limit:
            store.popitem(last=False)
        running = (id(store), key)
        self._running[running] = task

        def finished(done: asyncio.Task[Any]) -> None:
            if self._running.get(running) is done:
                del self._running[running]
            failed = done.cancelled() or done.exception() is not None
            if failed and store.get((key, version)) is done:
                del store[(key, version)]

        task.add_done_callback(finished)
        return task

    async def figure(self, key: Hashable, version: int, make: Callable[[], Awaitable[T]]) -> T:
        return await self._get(self._figures, self._max_figures, key, version, make)

    async def session(self, key: Hashable, version: int, make: Callable[[], Awaitable[T]]) -> T:
        return await self._get(self._sessions, self._max_sessions, key, version, make)


# -- loading ------------------------------------------------------------------------------


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
    return AnalysisSession(
        id=s.id,
        name=s.name,
        status=s.status,
        comparison_mode="imported" if options.get("source") == "import" else s.comparison_mode,
        total=s.total,
        completed=s.completed,
        failed=s.failed,
        calculate_elo=bool(options.get("calculate_elo", True)),
        criteria=list(s.criteria or []),
        pillar_ids=list(s.pillar_ids or []),
    )


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
    likert = np.column_stack(col[11:]) if c else np.zeros((len(rows), 0))
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
    """The completed comparisons of `session`, and thread/pillar facts from the catalog."""
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
    threads = {
        t: (title, ext)
        for t, title, ext in (
            await db.execute(
                select(Thread.id, Thread.title, Thread.external_id).where(
                    Thread.id == any_(_int_array(thread_pillar))
                )
            )
        ).all()
    }
    return SessionData(
        version=session.completed,
        table=table,
        thread_pillar=thread_pillar,
        pillar_names=names,
        pillar_sizes=sizes,
        pillar_ids=pillar_ids,
        threads=threads,
    )


async def _data(
    cache: AnalysisCache, sessionmaker: async_sessionmaker[AsyncSession], session: AnalysisSession
) -> SessionData:
    async def load() -> SessionData:
        # its own database session: a shared load must outlive the request that began it
        async with sessionmaker() as db:
            return await load_session_data(db=db, session=session)

    return await cache.session(session.id, session.completed, load)


async def _figure(
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    key: tuple[Hashable, ...],
    compute: Callable[[SessionData], T],
) -> tuple[SessionData, T]:
    data = await _data(cache, sessionmaker, session)

    async def run() -> T:
        return await asyncio.to_thread(compute, data)

    # versioned by the data actually used, never by a newer count it may lag behind
    return data, await cache.figure((*key, session.id), data.version, run)


# -- figures ------------------------------------------------------------------------------


def _leaderboard(data: SessionData, aggregation: Aggregation, rounds: int) -> Leaderboard:
    return leaderboard(
        data.table,
        data.thread_pillar,
        data.pillar_names,
        aggregation=aggregation,
        bootstrap_rounds=rounds,
        seed=SEED,
        confidence=BT_CONFIDENCE,
    )


async def _leaderboard_figure(
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    bootstrap_rounds: int,
) -> tuple[SessionData, Leaderboard]:
    return await _figure(
        cache,
        sessionmaker,
        session,
        ("leaderboard", aggregation, bootstrap_rounds),
        lambda d: _leaderboard(d, aggregation, bootstrap_rounds),
    )


def _leaderboard_out(
    session: AnalysisSession, data: SessionData, board: Leaderboard
) -> ThreadLeaderboardOut:
    elo = session.calculate_elo
    return ThreadLeaderboardOut(
        session=session,
        aggregation=board.aggregation,
        bootstrap_rounds=board.bootstrap_rounds,
        confidence_level=BT_CONFIDENCE,
        outcome_count=board.outcome_count,
        entries=[
            LeaderboardRow(
                rank=e.rank,
                thread_id=e.thread_id,
                thread_title=data.threads.get(e.thread_id, (None, None))[0],
                thread_external_id=data.threads.get(e.thread_id, (None, None))[1],
                pillar=PillarLabel(id=e.pillar_id, name=data.pillar_name(e.pillar_id)),
                elo_score=e.elo_score if elo else None,
                bt_score=e.bt_score,
                bt_ci_low=e.bt_ci_low,
                bt_ci_high=e.bt_ci_high,
                matches_played=e.matches_played,
                wins=e.wins,
                losses=e.losses,
                ties=e.ties,
                win_rate=e.win_rate,
                raw_win_rate=e.raw_win_rate,
                avg_confidence=e.avg_confidence,
                avg_likert_scores=e.avg_likert_scores,
            )
            for e in board.entries
        ],
        pillar_aggregates=[
            PillarAggregateOut(
                pillar_id=p.pillar_id,
                name=p.name,
                thread_count=p.thread_count,
                avg_elo=p.avg_elo if elo else None,
                avg_bt=p.avg_bt,
                bt_score=p.bt_score,
                bt_ci_low=p.bt_ci_low,
                bt_ci_high=p.bt_ci_high,
                bt_rank=p.bt_rank,
            )
            for p in board.pillar_aggregates
        ],
    )


async def thread_leaderboard(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    bootstrap_rounds: int,
) -> ThreadLeaderboardOut:
    data, board = await _leaderboard_figure(
        cache, sessionmaker, session, aggregation, bootstrap_rounds
    )
    return _leaderboard_out(session, data, board)


def _distribution(
    data: SessionData, aggregation: Aggregation, score: ScoreKind, bins: int
) -> ScoreDistribution:
    table = aggregate(data.table, aggregation)
    if score == "elo":
        values = dict(zip(table.players.tolist(), elo_array(table).tolist(), strict=True))
    else:
        values = {r.player_id: r.score for r in bradley_terry(table, bootstrap_rounds=0).ratings}
    return score_distribution(values, data.thread_pillar, data.pillar_names, bins=bins)


async def score_distribution_out(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
    score: ScoreKind | None,
    bins: int,
) -> ScoreDistributionOut:
    """Per pillar distribution of thread scores: Elo, or Bradley-Terry where the session
    does not calculate Elo (or when asked)."""
    if score == "elo" and not session.calculate_elo:
        raise Conflict(f"session {session.id} does not calculate Elo; ask for score=bt")
    kind: ScoreKind = score or ("elo" if session.calculate_elo else "bt")
    _, dist = await _figure(
        cache,
        sessionmaker,
        session,
        ("distribution", aggregation, kind, bins),
        lambda d: _distribution(d, aggregation, kind, bins),
    )
    return ScoreDistributionOut(
        session=session,
        aggregation=aggregation,
        score=kind,
        bin_edges=dist.bin_edges,
        pillars=dist.pillars,
    )


def _matrix(data: SessionData, aggregation: Aggregation) -> PillarMatrix:
    table = aggregate(data.table, aggregation)
    ranked = [
        r.player_id
        for r in pillar_bradley_terry(table, data.thread_pillar, bootstrap_rounds=0).ratings
    ]
    rest = [p for p in data.pillar_ids if p not in set(ranked)]
    return pillar_matrix(table, data.thread_pillar, data.pillar_names, order=ranked + rest)


async def pillar_matrix_out(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
) -> PillarMatrixOut:
    """Each pillar's record against each other pillar; pillars best first (pillar BT)."""
    _, matrix = await _figure(
        cache,
        sessionmaker,
        session,
        ("matrix", aggregation),
        lambda d: _matrix(d, aggregation),
    )
    return PillarMatrixOut(
        session=session, aggregation=aggregation, pillars=matrix.pillars, cells=matrix.cells
    )


async def thread_performance_out(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
) -> ThreadPerformanceOut:
    def compute(d: SessionData) -> ThreadPerformance:
        return thread_performance(
            aggregate(d.table, aggregation), d.thread_pillar, d.pillar_sizes, d.pillar_names
        )

    data, perf = await _figure(cache, sessionmaker, session, ("performance", aggregation), compute)
    return ThreadPerformanceOut(
        session=session,
        aggregation=aggregation,
        threads=perf.threads,
        coverage_stats=perf.coverage,
        pillars=perf.pillars,
        thread_labels=data.labels(t.thread_id for t in perf.threads),
    )


async def position_swap(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    pairs_limit: int,
    pairs_offset: int,
) -> PositionSwapOut:
    """Swap consistency over every verdict (no aggregation: it needs both orders)."""
    listed = pairs_offset + pairs_limit
    data, analysis = await _figure(
        cache,
        sessionmaker,
        session,
        ("position", listed),
        lambda d: position_swap_analysis(d.table, max_pairs=listed),
    )
    pairs = analysis.pairs[pairs_offset:]
    return PositionSwapOut(
        session=session,
        summary=analysis.summary,
        position_bias=analysis.position_bias,
        likert_stability=analysis.likert_stability,
        interpretation=analysis.interpretation,
        pairs_total=analysis.summary.total_swap_pairs,
        pairs_offset=pairs_offset,
        pairs_limit=pairs_limit,
        pairs=pairs,
        thread_labels=data.labels(t for p in pairs for t in (p.thread_a, p.thread_b)),
    )


async def findings(
    *,
    cache: AnalysisCache,
    sessionmaker: async_sessionmaker[AsyncSession],
    session: AnalysisSession,
    aggregation: Aggregation,
) -> FindingsOut:
    def compute(d: SessionData) -> list[Finding]:
        return surprise_findings(aggregate(d.table, aggregation), d.thread_pillar, d.pillar_names)

    data, found = await _figure(cache, sessionmaker, session, ("findings", aggregation), compute)
    return FindingsOut(
        session=session,
        aggregation=aggregation,
        findings=found,
        thread_labels=data.labels(f.thread_id for f in found),
    )


# -- exports ------------------------------------------------------------------------------

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


# -- import -------------------------------------------------------------------------------


class JudgmentsRejected(Invalid):
    """Row errors in an import; nothing was stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(f"{len(errors)} problem(s) found; nothing was imported")
        self.errors = errors


async def _known_threads(
    db: AsyncSession, keys: Iterable[ThreadKey]
) -> dict[ThreadKey, KnownThread]:
    ids = sorted({k for k in keys if isinstance(k, int)})
    refs = sorted({k for k in keys if isinstance(k, tuple)})
    found: dict[ThreadKey, KnownThread] = {}
    if ids:
        rows = await db.execute(
            select(Thread.id, Thread.pillar_id).where(Thread.id == any_(_int_array(ids)))
        )
        found.update({t: KnownThread(id=t, pillar_id=p) for t, p in rows.all()})
    if refs:
        wanted = select(
            func.unnest(cast([r[0] for r in refs], ARRAY(String))).label("pillar"),
            func.unnest(cast([r[1] for r in refs], ARRAY(String))).label("external_id"),
        ).subquery()
        rows = await db.execute(
            select(Pillar.name, Thread.external_id, Thread.id, Thread.pillar_id)
            .join(Pillar, Pillar.id == Thread.pillar_id)
            .join(
                wanted,
                (wanted.c.pillar == Pillar.name) & (wanted.c.external_id == Thread.external_id),
            )
        )
        found.update(
            {(name, ext): KnownThread(id=t, pillar_id=p) for name, ext, t, p in rows.all()}
        )
    return found


_COPY_COLUMNS = (
    "session_id",
    "queue_position",
    "thread_a_id",
    "thread_b_id",
    "pillar_a_id",
    "pillar_b_id",
    "repetition",
    "swap_group",
    "is_swap",
    "status",
    "attempts",
    "completed_at",
    "winner",
    "confidence",
    "scores_a",
    "scores_b",
    "reasoning",
    "raw_response",
    "parse_error",
)


async def import_judgments(
    *,
    db: AsyncSession,
    parsed: ParsedJudgments,
    session_name: str,
    judge_label: str | None = None,
) -> JudgmentImportOut:
    """Store a parsed judgment file as a finished session, in one transaction; raises
    JudgmentsRejected (nothing stored) for unknown threads, self-pairs or bad swap groups.

    Every comparison gets the same completion time, so Elo replays them in file order. Like
    a live session, one with no readable judgment at all ends as "failed"."""
    if parsed.errors:
        raise JudgmentsRejected(parsed.errors)
    keys = [k for r in parsed.rows for k in (r.thread_a, r.thread_b)]
    resolved, errors = resolve_judgments(parsed.rows, await _known_threads(db, keys))
    if errors:
        raise JudgmentsRejected(errors)
    criteria = list(
        dict.fromkeys(c for r in resolved for c in (*r.judgment.scores_a, *r.judgment.scores_b))
    )
    completed = sum(r.judgment.winner is not None for r in resolved)
    now = datetime.now(UTC)
    session = JudgeSession(
        name=session_name,
        status="completed" if completed else "failed",
        comparison_mode=IMPORTED_MODE,
        pillar_ids=sorted(
            {p for r in resolved for p in (r.thread_a.pillar_id, r.thread_b.pillar_id)}
        ),
        options={
            "source": "import",
            "judge_label": judge_label,
            "position_swap": any(r.is_swap for r in resolved),
            "repetitions_per_pair": 1 + max(r.judgment.repetition for r in resolved),
            "calculate_elo": True,
            "seed": 0,
        },
        worker_count=1,
        judge_model_id=None,
        criteria=criteria,
        total=len(resolved),
        completed=completed,
        failed=len(resolved) - completed,
        started_at=now,
        finished_at=now,
    )
    db.add(session)
    await db.flush()
    records = [
        (
            session.id,
            position,
            r.thread_a.id,
            r.thread_b.id,
            r.thread_a.pillar_id,
            r.thread_b.pillar_id,
            j.repetition,
            r.swap_group,
            r.is_swap,
            "completed" if j.winner is not None else "failed",
            1,
            now,
            j.winner,
            j.confidence,
            json.dumps(j.scores_a) if j.scores_a else None,
            json.dumps(j.scores_b) if j.scores_b else None,
            j.reasoning,
            j.raw_response,
            j.parse_error,
        )
        for position, r in enumerate(resolved)
        for j in (r.judgment,)
    ]
    raw = await (await db.connection()).get_raw_connection()
    await raw.driver_connection.copy_records_to_table(
        "comparisons", records=records, columns=_COPY_COLUMNS
    )
    await db.commit()
    failures = [r.judgment for r in resolved if r.judgment.winner is None]
    return JudgmentImportOut(
        session_id=session.id,
        session_name=session_name,
        total=len(resolved),
        completed=completed,
        failed=len(failures),
        swap_pairs=sum(r.is_swap for r in resolved),
        criteria=criteria,
        parse_failures=[
            RowError(line=j.line, field="judgment", message=j.parse_error or "")
            for j in failures[:200]
        ],
    )
