"""The results page of a session: one tab server-rendered (overview, leaderboard, Elo
distribution, pillar matrix, position bias, thread performance, findings, style control,
categories), the others as partials, with their charts. Every figure comes from `analysis.figures`, the same
functions as its `/api/sessions/{id}/<figure>` twin, with the API's default parameters so
both share one cached computation.

One builder per tab, each given the session's ``_Figures``: the analysis cache, the
sessionmaker its figures load through and the page's options.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.ext.asyncio import AsyncSession

from llmjudge import analysis
from llmjudge.analysis import (
    FINISHED,
    AnalysisCache,
    AnalysisSession,
    RatingOptions,
    RatingQuery,
    ThreadLeaderboardOut,
)
from llmjudge.core import charts
from llmjudge.infra.db.engine import Sessionmaker
from llmjudge.infra.errors import Conflict, Invalid
from llmjudge.infra.web import DbSession, refusal, render
from llmjudge.references import (
    session_agreement,
    session_annotators,
    session_label_sources,
)
from llmjudge.sessions import reads
from llmjudge.sessions.pages import grades, result_charts
from llmjudge.sessions.pages.formatting import (
    SORT_FIRST_DESC,
    SortKey,
    avg_score,
    sort_rows,
    thread_name,
)
from llmjudge.sessions.panels import report as panels

router = APIRouter(include_in_schema=False)
log = logging.getLogger(__name__)

TABS: tuple[tuple[str, str], ...] = (
    ("overview", "Overview"),
    ("leaderboard", "Leaderboard"),
    ("distribution", "Elo distribution"),
    ("matrix", "Pillar matrix"),
    ("position", "Position bias"),
    ("performance", "Thread performance"),
    ("findings", "Findings"),
    ("style", "Style control"),
    ("categories", "Categories"),
    ("agreement", "Agreement"),
    ("baseline", "Win rates"),
)
TAB_NAMES = tuple(name for name, _ in TABS)
# Shown after the others, for a session judged by a panel only.
PANEL_TAB = ("panel", "Panel")
TABLE_ROWS = 200  # rows of the leaderboard and performance tables
SWAP_PAIRS_SHOWN = 20
SWAP_PAIRS_SCANNED = 500  # as the API's default page, so both share one cached figure

BASELINE_CHOICES = 50  # threads offered as the anchor on the leaderboard form
# The tabs drawn from the analysis cache, computed ahead for a finished session.
PREFETCHED = tuple(t for t in TAB_NAMES if t not in ("agreement", "baseline"))
CATEGORY_KEY = "category"  # MT-Bench's; any thread metadata key can be picked
Cache = AnalysisCache


# A grading session's own tab (sessions.pages.grades), and the tabs only pairs fill.
SCORES_TAB = ("scores", "Scores")
PAIRS_ONLY = ("position", "agreement", "baseline")


def _tab_of(tab: str) -> str:
    return tab if tab in TAB_NAMES or tab in (PANEL_TAB[0], SCORES_TAB[0]) else "overview"


def _tabs(s: Any) -> tuple[tuple[str, str], ...]:
    """The Scores tab first for a grading session (mode single), the Panel tab only for a
    session judged by a panel; a grading session has no swaps, labels of pairs or
    baseline pairs, so those tabs are not offered."""
    tabs = TABS
    if getattr(s, "comparison_mode", None) == "single":
        tabs = (SCORES_TAB, *(t for t in TABS if t[0] not in PAIRS_ONLY))
    return (*tabs, PANEL_TAB) if getattr(s, "panel", None) else tabs


@router.get("/sessions/{session_id}/results", response_class=HTMLResponse)
async def results_page(
    request: Request,
    session_id: int,
    db: DbSession,
    rating: RatingQuery,
    tab: str = "overview",
    sort: SortKey = "rank",
    dir: Literal["asc", "desc"] | None = None,
    key: Annotated[str, Query(min_length=1, max_length=100)] = CATEGORY_KEY,
    metadata: Annotated[list[str] | None, Query(max_length=10)] = None,
):
    """The results, one tab server-rendered; the other tabs load as partials. The rating
    options are the API's query parameters, with its defaults."""
    tab = _tab_of(tab)
    extra = _Extra(rating, key, tuple(dict.fromkeys(metadata or ())))
    body = await _tab_context(request, db, session_id, tab, sort, dir, extra)
    return render(
        request, "sessions/results.html", body["tab_status"], tabs=_tabs(body["s"]), **body
    )


@router.get("/sessions/{session_id}/partials/results/{tab}", response_class=HTMLResponse)
async def results_tab(
    request: Request,
    session_id: int,
    tab: str,
    db: DbSession,
    rating: RatingQuery,
    sort: SortKey = "rank",
    dir: Literal["asc", "desc"] | None = None,
    key: Annotated[str, Query(min_length=1, max_length=100)] = CATEGORY_KEY,
    metadata: Annotated[list[str] | None, Query(max_length=10)] = None,
):
    """One results tab; the tab bar comes along out of band to mark the active tab."""
    tab = _tab_of(tab)
    extra = _Extra(rating, key, tuple(dict.fromkeys(metadata or ())))
    body = await _tab_context(request, db, session_id, tab, sort, dir, extra)
    return render(
        request, "sessions/_tab.html", body["tab_status"], tabs=_tabs(body["s"]), oob=True, **body
    )


async def _tab_context(
    request: Request,
    db: AsyncSession,
    session_id: int,
    tab: str,
    sort: SortKey,
    direction: Literal["asc", "desc"] | None,
    extra: _Extra,
) -> dict[str, Any]:
    s = await reads.get_session(db=db, session_id=session_id)
    session = await analysis.get_analysis_session(db=db, session_id=session_id)
    await db.close()  # figures load through their own database sessions
    if (tab == PANEL_TAB[0] and not s.panel) or (
        tab == SCORES_TAB[0] and s.comparison_mode != "single"
    ):
        tab = "overview"
    ctx: dict[str, Any] = {
        "s": s,
        "a": session,
        "tab_error": None,
        "tab_status": 200,  # the status of errors.py's table when the tab cannot be computed
        "tab": tab,
        "rating": extra.rating,
        "rating_qs": _rating_qs(extra.rating),
    }
    if session.completed == 0 and tab != "overview":
        return ctx
    sessionmaker: Sessionmaker = request.app.state.sessionmaker
    try:
        if tab == SCORES_TAB[0]:  # the grades themselves, not the derived pairs
            ctx |= await grades.scores_tab(sessionmaker, session)
        elif tab == "agreement":  # reads reference labels, not the analysis cache
            ctx |= await _agreement(request, sessionmaker, session_id)
        elif tab == "baseline":  # a chosen baseline pillar, not the analysis cache
            ctx |= await _baseline(request, sessionmaker, session)
        else:
            options = analysis.rating_options(**extra.rating)
            figures = _Figures(analysis.get_cache(request), sessionmaker, session, options, extra)
            ctx |= await _TAB_BUILDERS[tab](figures)
            _prefetch(figures, tab)
    except (Invalid, Conflict) as exc:  # the analysis refuses: say why, keep the page
        found = refusal(exc)
        ctx["tab_error"], ctx["tab_status"] = found.message, found.status
    if tab == "leaderboard" and "board" in ctx:
        desc = (sort in SORT_FIRST_DESC) if direction is None else direction == "desc"
        rows = sort_rows(ctx["board"].entries, sort, desc)
        chart = result_charts.leaderboard_chart(rows, ctx["board"], sort, desc)
        ctx |= {"rows": rows[:TABLE_ROWS], "sort": sort, "desc": desc, "chart": chart}
    return ctx


@dataclass(frozen=True)
class _Extra:
    rating: dict[str, Any]  # the rating query, as analysis.options.rating_query_raw gives it
    key: str  # the categories tab's metadata key
    metadata: tuple[str, ...]  # the style tab's extra covariates


@dataclass(frozen=True)
class _Figures:
    """What a tab builder reads: one session's cached analysis, and the page's options."""

    cache: Cache
    sessionmaker: Sessionmaker
    session: AnalysisSession
    options: RatingOptions
    extra: _Extra

    @property
    def source(self) -> dict[str, Any]:
        """The arguments every figure of ``analysis`` takes first."""
        return {"cache": self.cache, "sessionmaker": self.sessionmaker, "session": self.session}


def _rating_qs(rating: dict[str, Any]) -> str:
    """The rating options that differ from the defaults, as a query string to carry on."""
    defaults = analysis.rating_query_raw()
    names = {"tie_model": "ties", "base": "elo_base"}
    changed = {
        names.get(k, k): (int(v) if k == "base" else v)
        for k, v in rating.items()
        if v is not None and v != defaults.get(k)
    }
    return urlencode(changed)


async def _leaderboard(f: _Figures) -> ThreadLeaderboardOut:
    return await analysis.thread_leaderboard(
        **f.source,
        aggregation="all",
        bootstrap_rounds=f.options.bootstrap_rounds,
        options=f.options,
    )


async def _overview(f: _Figures) -> dict[str, Any]:
    if f.session.completed == 0:
        return {}
    # the pillar figures only: the threads' intervals are the Leaderboard tab's (at
    # 10,000 threads they are minutes of bootstrap; issue 27)
    board = await analysis.pillar_leaderboard(
        **f.source,
        aggregation="all",
        bootstrap_rounds=f.options.bootstrap_rounds,
        options=f.options,
    )
    position = await analysis.position_swap(**f.source, pairs_limit=0, pairs_offset=0)
    found = await analysis.findings(**f.source, aggregation="all")
    pillars = [p for p in board.pillar_aggregates if p.bt_score is not None]
    method = board.pillar_method
    has = any(p.bt_ci_low is not None for p in pillars)
    chart = result_charts.bt_chart(
        [p.name for p in pillars],
        [p.bt_score for p in pillars],  # type: ignore[misc]
        [(p.bt_ci_low, p.bt_ci_high) for p in pillars],
        f"Pillar ranking: Bradley-Terry score in Elo points − {method.base:.0f}"
        f" ({result_charts.interval_words(method.level, has)}), {method.comparisons:,} verdicts",
        base=method.base,
    )
    return {
        "board": board,
        "position": position,
        "found": found,
        "pillar_chart": chart,
        "baseline_names": {p.pillar_id: p.name for p in board.pillar_aggregates},
        "baseline_choices": [(p.pillar_id, p.name) for p in board.pillar_aggregates],
    }


async def _leaderboard_tab(f: _Figures) -> dict[str, Any]:
    board = await _leaderboard(f)
    names = {
        e.thread_id: thread_name(e.thread_title, e.thread_external_id, e.thread_id)
        for e in board.entries
    }
    # anchor choices: the top threads, and the current baseline wherever it ranks
    chosen = [e.thread_id for e in board.entries[:BASELINE_CHOICES]]
    if f.options.baseline_thread in names and f.options.baseline_thread not in chosen:
        chosen.append(f.options.baseline_thread)
    return {
        "board": board,
        "avg_score": avg_score,
        "baseline_names": names,
        "baseline_choices": [(t, names[t]) for t in chosen],
    }


async def _distribution(f: _Figures) -> dict[str, Any]:
    dist = await analysis.score_distribution_out(**f.source, aggregation="all", score=None, bins=10)
    label = "Elo" if dist.score == "elo" else "Bradley-Terry score (Elo points)"
    chart = charts.histogram_chart(
        {p.name: p.histogram for p in dist.pillars},
        dist.bin_edges,
        title=f"{label} of threads, by pillar",
        x_label=label,
        y_label="Threads",
        width=1040,
    )
    return {"dist": dist, "chart": chart, "score_label": label}


async def _matrix(f: _Figures) -> dict[str, Any]:
    matrix = await analysis.pillar_matrix_out(**f.source, aggregation="all")
    names = [p.name for p in matrix.pillars]
    chart = charts.heatmap_chart(
        names,
        names,
        [[c.win_rate if c is not None else None for c in row] for row in matrix.cells],
        [[c.n if c is not None else 0 for c in row] for row in matrix.cells],
        title="Win rate of the row pillar against the column pillar",
    )
    return {"matrix": matrix, "chart": chart}


async def _position(f: _Figures) -> dict[str, Any]:
    position = await analysis.position_swap(
        **f.source,
        pairs_limit=SWAP_PAIRS_SCANNED,
        pairs_offset=0,
    )
    summary, bias = position.summary, position.position_bias
    chart = None
    if summary.total_swap_pairs:
        total = summary.total_swap_pairs
        other = max(0, summary.inconsistent - bias.primacy_count - bias.recency_count)
        chart = charts.bar_chart(
            ["Same winner", "Tie both times", "Primacy", "Recency", "Other"],
            [
                summary.consistent_wins / total,
                summary.consistent_ties / total,
                bias.primacy_count / total,
                bias.recency_count / total,
                other / total,
            ],
            title=f"{total} swap pairs: does the verdict survive swapping the order?",
        )
    # The pairs worth reading first: those whose verdict changed with the order.
    pairs = sorted(position.pairs, key=lambda p: p.classification == "consistent")
    return {"position": position, "chart": chart, "pairs": pairs[:SWAP_PAIRS_SHOWN]}


async def _performance(f: _Figures) -> dict[str, Any]:
    perf = await analysis.thread_performance_out(**f.source, aggregation="all")
    return {"perf": perf, "threads": perf.threads[:TABLE_ROWS]}


async def _findings(f: _Figures) -> dict[str, Any]:
    found = await analysis.findings(**f.source, aggregation="all")
    return {"found": found}


async def _style(f: _Figures) -> dict[str, Any]:
    out = await analysis.style_out(
        **f.source,
        aggregation="all",
        options=f.options,
        metadata_keys=f.extra.metadata,
    )
    report = out.style
    chart = None
    shown = [c for c in report.covariates if c.identified and c.coef is not None]
    if shown:
        chart = charts.bar_chart(
            [c.name for c in shown],
            [c.coef for c in shown],  # type: ignore[misc]
            title=f"Style coefficients: logit per standard deviation ({report.level:.0%}"
            f" interval), {report.comparisons_used:,} comparisons",
            value_format="{:+.2f}",
            errors=[(c.ci_low, c.ci_high) for c in shown]  # type: ignore[misc]
            if all(c.ci_low is not None for c in shown)
            else None,
        )
    return {
        "style": out,
        "chart": chart,
        "picked": set(f.extra.metadata),
        "tab_qs": urlencode([("metadata", k) for k in f.extra.metadata]),
    }


async def _categories(f: _Figures) -> dict[str, Any]:
    out = await analysis.categories_out(
        **f.source,
        aggregation="all",
        options=f.options,
        key=f.extra.key,
    )
    report = out.categories
    multiples = charts.small_multiples_chart(
        [
            (
                f"{c.value} · {c.comparisons:,} comparisons",
                [p.name for p in c.pillars if p.score is not None],
                [p.score for p in c.pillars if p.score is not None],
                [(p.ci_low, p.ci_high) for p in c.pillars if p.score is not None],
            )
            for c in report.categories
        ],
        title=f"Pillar ranking per {report.key} (Bradley-Terry, {report.level:.0%} interval)",
    )
    names = [p.name for p in report.pillars]
    heat = charts.heatmap_chart(
        [c.value for c in report.categories],
        names,
        report.matrix,
        report.counts,
        title=f"Win rate of each pillar per {report.key}",
        legend_label="Win rate in the category",
    )
    return {
        "cats": out,
        "multiples": multiples,
        "heat": heat,
        "key": f.extra.key,
        "tab_qs": urlencode({"key": f.extra.key}) if f.extra.key != CATEGORY_KEY else "",
    }


async def _panel(f: _Figures) -> dict[str, Any]:
    async with f.sessionmaker() as db:
        report = await panels.panel_report(db, f.session.id)
    labels = [m["label"] for m in report["members"]]
    if report["kind"] == "grades":
        return {"panel": report, "kappa_chart": result_charts.graders_chart(report, labels)}
    chart = charts.heatmap_chart(
        labels,
        labels,
        report["kappa"],
        title="Cohen's kappa between members",
        legend_label="Cohen's kappa (1 = always agree, 0 = chance)",
        value_range=(-1.0, 1.0),
        value_format="{:.2f}",
        missing_label="undefined",
    )
    return {"panel": report, "kappa_chart": chart}


async def _agreement(
    request: Request, sessionmaker: Sessionmaker, session_id: int
) -> dict[str, Any]:
    """The judge against reference labels, as ``/api/sessions/{id}/agreement`` gives it.
    Without a chosen reference the tab opens on the labels that exist: gold when there
    are any, else people's (the API keeps its documented default, gold)."""
    chosen = request.query_params.get("reference")
    group_by = (request.query_params.get("group_by") or "").strip()[:100] or None
    async with sessionmaker() as db:
        if not chosen:
            sources = await session_label_sources(db=db, session_id=session_id)
            chosen = "human" if "human" in sources and "gold" not in sources else "gold"
        report = await session_agreement(
            db=db, session_id=session_id, reference=chosen[:220], group_by=group_by
        )
        annotators = await session_annotators(db=db, session_id=session_id)
        shown = [t for d in report.disagreements for t in (d.thread_a_id, d.thread_b_id)]
        names = await reads.thread_labels(db=db, ids=shown)
    query = {"reference": report.reference, "group_by": report.group_by or ""}
    return {
        "agreement": report,
        "reliability_chart": result_charts.reliability_chart(report.stated_confidence),
        "probability_chart": result_charts.reliability_chart(
            report.judge_probability, "the judge's"
        ),
        "annotators": annotators,
        "thread_names": names,
        "tab_qs": urlencode(query),
    }


async def _baseline(
    request: Request, sessionmaker: Sessionmaker, session: AnalysisSession
) -> dict[str, Any]:
    """Win rates against the pillar chosen as ``?baseline=``, as
    ``/api/sessions/{id}/baseline`` gives them; without one, the choice."""
    chosen = (request.query_params.get("baseline") or "").strip()
    async with sessionmaker() as db:
        names = await analysis.pillar_names(db, session.pillar_ids)
        report = None
        if chosen:
            if not chosen.isdigit() or len(chosen) > 10:
                raise Invalid(f"baseline must be a pillar id, got {chosen[:40]!r}")
            report = await analysis.baseline_report(
                db=db, session=session, baseline_pillar_id=int(chosen)
            )
    chart = None
    if report is not None:
        shown = [p for p in report.pillars if p.lc_win_rate is not None]
        chart = charts.bar_chart(
            [p.pillar_name for p in shown],
            [p.lc_win_rate for p in shown],  # type: ignore[misc]
            errors=[
                (p.lc_win_rate_low or p.lc_win_rate, p.lc_win_rate_high or p.lc_win_rate)
                for p in shown
            ],  # type: ignore[misc]
            title=f"Length-controlled win rate against {report.baseline_pillar_name}",
        )
    return {
        "pillar_choices": sorted(names.items(), key=lambda kv: kv[1]),
        "baseline": report,
        "baseline_chart": chart,
        "tab_qs": urlencode({"baseline": chosen}) if chosen else "",
    }


def _prefetch(f: _Figures, shown: str) -> None:
    """A finished session cannot change: once one tab is shown, its other tabs' figures
    are computed in the background, one after the other in tab order, so the next click
    finds them cached (a cold Style control or Categories tab took seconds; issue 27)."""
    if f.session.status not in FINISHED:
        return
    tabs = [t for t in PREFETCHED if t != shown]
    f.cache.prefetch(
        ("tabs", f.session.id, f.session.completed, f.options, f.extra.key, f.extra.metadata),
        lambda: (_TAB_BUILDERS[t](f) for t in tabs),
    )


async def default_figures(
    cache: AnalysisCache, sessionmaker: Sessionmaker, session: AnalysisSession
) -> None:
    """Every prefetched tab's figures with the page's default options, one after the other:
    what a finished session's first visit asks for, computed (and stored) ahead by the
    background job (``analysis.storing``). A tab the analysis refuses is skipped."""
    raw = analysis.rating_query_raw()
    f = _Figures(
        cache, sessionmaker, session, analysis.rating_options(**raw), _Extra(raw, CATEGORY_KEY, ())
    )
    for tab in PREFETCHED:
        try:
            await _TAB_BUILDERS[tab](f)
        except (Invalid, Conflict):
            pass  # the tab says why when shown
        except Exception:  # a bug in one figure must not keep the others from being stored
            log.exception("figures of tab %s of session %d", tab, session.id)


_TAB_BUILDERS: dict[str, Callable[[_Figures], Awaitable[dict[str, Any]]]] = {
    "overview": _overview,
    "leaderboard": _leaderboard_tab,
    "distribution": _distribution,
    "matrix": _matrix,
    "position": _position,
    "performance": _performance,
    "findings": _findings,
    "style": _style,
    "categories": _categories,
    "panel": _panel,
}
