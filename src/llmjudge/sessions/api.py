"""Judge sessions JSON API: create, estimate, control, results, live events; the import of
judgments made elsewhere; the comparisons of one thread."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Annotated, Literal, TypeVar

from fastapi import APIRouter, File, Form, Path, Query, Request, UploadFile, status
from pydantic import TypeAdapter, ValidationError
from sse_starlette import EventSourceResponse

from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.tournaments import converters
from llmjudge.infra.errors import Invalid
from llmjudge.infra.events.sse import parse_lanes, sse_response
from llmjudge.infra.rowfiles import RowError
from llmjudge.infra.web import (
    IMPORT_BUSY,
    DbSession,
    ImportRejected,
    ImportSlot,
    Offset,
    read_upload,
)
from llmjudge.sessions import control, estimates, execution, reads, service
from llmjudge.sessions.adaptive import state as adaptive
from llmjudge.sessions.adaptive.schemas import AdaptiveEstimateOut, AdaptiveOut
from llmjudge.sessions.comparison_schemas import (
    ComparisonDetail,
    ComparisonPage,
    ThreadComparisons,
    ThreadLabelOut,
)
from llmjudge.sessions.deps import Hub, Tester, parse_ids
from llmjudge.sessions.imports import storing as judgment_import
from llmjudge.sessions.imports.parsing import (
    ParsedJudgments,
    PreferenceScale,
    judgment_file_objects,
    parse_judgment_objects,
)
from llmjudge.sessions.panels import report as panels
from llmjudge.sessions.panels.schemas import GradersPanelReportOut, PanelReport, PanelReportOut
from llmjudge.sessions.run.judging import session_topic
from llmjudge.sessions.schemas import (
    BatchOut,
    ComparisonStatus,
    EstimateOut,
    JudgmentImportOut,
    Mode,
    ModeCount,
    RetryResult,
    SessionIn,
    SessionOut,
    SessionStatus,
    SessionSummary,
)

T = TypeVar("T")
router = APIRouter(prefix="/api/sessions", tags=["sessions"])
threads_router = APIRouter(prefix="/api/threads", tags=["sessions"])
THREAD_COMPARISONS_MAX = 500
_PANEL_REPORT: TypeAdapter[PanelReportOut | GradersPanelReportOut] = TypeAdapter(PanelReport)


ThreadIds = Annotated[
    str,
    Query(
        max_length=6000,
        pattern=r"^[0-9,]*$",
        description=f"comma-separated thread ids (the first {reads.LABELS_MAX} distinct)",
    ),
]


# Before the `/{session_id}` routes: "import" is not a session id.
@router.post(
    "/import",
    response_model=JudgmentImportOut,
    status_code=status.HTTP_201_CREATED,
    responses={
        422: {"description": "Row errors: `detail.errors` is a list of {line, field, message}"}
    }
    | IMPORT_BUSY,
    dependencies=[ImportSlot],
)
async def import_judgments(
    request: Request,
    db: DbSession,
    file: Annotated[UploadFile, File(description="JSONL, one judgment per line")],
    session_name: Annotated[str, Form(min_length=1, max_length=200)],
    judge_label: Annotated[str | None, Form(max_length=200)] = None,
    aggregation: Annotated[
        str, Form(description="a panel's rule: majority, mean, weighted or calibrated")
    ] = "majority",
    weights: Annotated[
        str | None, Form(max_length=2000, description="weighted: one weight per judge, a,b,c")
    ] = None,
    format: Annotated[
        converters.Format,
        Query(description="native (below), fastchat (llm_judge pairwise), arena_hard"),
    ] = "native",
    external_id: Annotated[
        str,
        Form(
            min_length=1,
            max_length=200,
            description="fastchat / arena_hard: the threads' external_id, from {question_id} "
            "and {model} (models are pillars); the demo's is mtbench-{question_id}-{model}",
        ),
    ] = converters.DEFAULT_EXTERNAL_ID,
    baseline: Annotated[
        str, Form(min_length=1, max_length=200, description="arena_hard: the baseline model")
    ] = converters.ARENA_HARD_BASELINE,
    verdict_format: Annotated[
        str | None,
        Form(
            max_length=200_000,
            description="how to read raw `judgment` texts: a verdict format as JSON "
            '(e.g. {"kind": "labels", "rules": [...]}) or a bare kind; unset = built-in',
        ),
    ] = None,
    preference_scale: Annotated[
        PreferenceScale,
        Form(
            description="the scale of the lines' `preference`: probability (P(thread_a is "
            "better), 0..1) or alpacaeval (1..2: 1 = thread_a better, 2 = thread_b; P(A) = "
            "2 - preference)"
        ),
    ] = "probability",
) -> JudgmentImportOut:
    """Import judgments made elsewhere as a completed session that every analysis endpoint
    reads. Native lines: `{"thread_a": REF, "thread_b": REF, "verdict": "A"|"B"|"TIE"}` or
    with `"judgment": "<raw judge text>"` instead of `verdict` (read by the verdict parser;
    an unreadable one is stored as a failed comparison with the parse error). REF: a thread
    id or `{"pillar": name, "external_id": id}`. Optional: `reasoning`, `confidence` (0..1),
    `scores_a`/`scores_b` ({criterion: 1..5}), `repetition`, `swap_group`, `group`,
    `strength` (1 or 2), `preference` (the judge's probability that thread_a is better on
    the declared `preference_scale`, stored as `prob_a`; a line with one needs no
    `verdict`), and the pair's reference label: `label` (A/B/TIE relative to the
    row's threads), `annotator`, `source` (gold unless it says human), `note`; then
    `/agreement` scores the judge. Swap pairs: lines sharing a `swap_group` (original first, then its
    mirror); otherwise a line showing (b, a) is the swap of the earliest unpaired (a, b)
    line of the same `group` and `repetition`. All or nothing. With a `judge` on each line
    naming several judges, the session is a panel: each judge's verdict is a vote on the
    comparison, the comparison's verdict their `aggregation` (`weights` for `weighted`, in
    judge order).

    `format=fastchat`: FastChat llm_judge `model_judgment/*_pair.jsonl` (both games of a
    line are a swap pair). `format=arena_hard`: Arena-Hard-Auto judgments against
    `baseline`, `A>>B` kept as strength 2. The judge label defaults to the file's judge."""
    if not session_name.strip():
        raise Invalid("session_name must not be blank")
    fmt = _verdict_format(verdict_format)
    settings = request.app.state.settings
    data = await read_upload(file, settings)

    def parse() -> tuple[ParsedJudgments, list[str]]:
        errors: list[RowError] = []
        objects = judgment_file_objects(
            data, errors, max_rows=settings.max_import_rows, max_chars=settings.max_field_chars
        )
        converted = converters.convert(format, objects, external_id=external_id, baseline=baseline)
        errors += [
            RowError(line=p.line, field=p.field, message=p.message) for p in converted.problems
        ]
        errors = sorted(errors, key=lambda e: e.line)  # the 422 lists the first ones
        return (
            parse_judgment_objects(
                converted.rows, errors, verdict_format=fmt, preference_scale=preference_scale
            ),
            list(converted.judges),
        )

    # Parsing a large file is CPU work: off the event loop.
    parsed, judges = await asyncio.to_thread(parse)
    try:
        return await judgment_import.import_judgments(
            db=db,
            parsed=parsed,
            session_name=session_name.strip(),
            judge_label=judge_label or ", ".join(judges)[:200] or None,
            aggregation=aggregation,
            weights=_weights(weights),
        )
    except judgment_import.JudgmentsRejected as e:
        raise ImportRejected(e.errors) from None


def _weights(raw: str | None) -> list[float] | None:
    if raw is None or not raw.strip():
        return None
    try:
        return [float(x) for x in raw.split(",")]
    except ValueError:
        raise Invalid("weights must be numbers separated by commas") from None


def _verdict_format(text: str | None) -> VerdictFormat | None:
    if text is None or not text.strip():
        return None
    try:
        raw: object = json.loads(text)
    except json.JSONDecodeError:
        raw = text.strip()  # a bare kind: "tags"
    try:
        fmt = VerdictFormat.model_validate(raw)
    except ValidationError as exc:
        messages = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise Invalid(f"verdict_format: {messages}") from None
    if fmt.reads_logprobs:
        raise Invalid(
            "verdict_format: this format reads token probabilities, which a recorded "
            "judgment text does not carry; import the probabilities as a preference column"
        )
    return fmt


@router.post("", response_model=SessionOut, status_code=status.HTTP_201_CREATED)
async def create_session(data: SessionIn, db: DbSession, hub: Hub, llm: Tester) -> SessionOut:
    """Create a session and its comparison plan (draft; `auto_start` starts it)."""
    return await service.create_session(db=db, data=data, hub=hub, llm=llm)


@router.post("/estimate", response_model=EstimateOut)
async def estimate_new(data: SessionIn, db: DbSession) -> EstimateOut:
    """Comparisons, duration by worker count, tokens and cost of a session; nothing stored."""
    return await estimates.estimate_new(db=db, data=data)


@router.post("/estimate/adaptive", response_model=AdaptiveEstimateOut)
async def estimate_adaptive(data: SessionIn, db: DbSession) -> AdaptiveEstimateOut:
    """Judge calls an adaptive session is expected to make before its stopping rule (or
    budget) stops it: an estimate from seeded simulations under the simulator's judge
    model, with the calls the half-price position option saves; nothing stored."""
    return await adaptive.estimate_adaptive(db=db, data=data)


@router.post(
    "/estimate/modes",
    response_model=dict[Mode, ModeCount],
    summary="Comparisons of each comparison mode",
)
async def estimate_modes(data: SessionIn, db: DbSession) -> dict[Mode, ModeCount]:
    """How many comparisons each comparison mode would make with the other options as
    they are, or why it cannot run; nothing stored."""
    return await estimates.estimate_modes(db=db, data=data)


@router.get("", response_model=list[SessionSummary])
async def list_sessions(
    db: DbSession,
    status: SessionStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Offset = 0,
) -> list[SessionSummary]:
    """Sessions, newest first, with progress."""
    return await reads.list_sessions(db=db, status=status, limit=limit, offset=offset)


@router.get("/{session_id}", response_model=SessionOut)
async def get_session(session_id: int, db: DbSession) -> SessionOut:
    """Status, counts per comparison status, tokens and cost so far, judge model (shared by
    concurrent pollers; at most a fraction of a second old)."""
    return await reads.SUMMARY_CACHE.get(
        session_id, lambda: reads.get_session(db=db, session_id=session_id)
    )


@router.get("/{session_id}/adaptive", response_model=AdaptiveOut)
async def adaptive_state(session_id: int, db: DbSession) -> AdaptiveOut:
    """An adaptive session now: the ranking with 95% intervals refitted from the stored
    verdicts, the stopping rule's progress, the spend against the budget, its rounds, and
    the calls a full free-for-all would need (409 for other sessions)."""
    return await adaptive.adaptive_state(db=db, session_id=session_id)


@router.get("/{session_id}/batches", response_model=list[BatchOut])
async def session_batches(session_id: int, db: DbSession) -> list[BatchOut]:
    """A batch session's provider batch jobs and their states (empty for a live session).
    Page twin: the live page's batches panel."""
    return await execution.list_batches(db=db, session_id=session_id)


@router.get("/{session_id}/estimate", response_model=EstimateOut)
async def estimate_session(session_id: int, db: DbSession) -> EstimateOut:
    return await estimates.estimate_session(db=db, session_id=session_id)


async def _changed(session_id: int, change: Awaitable[T]) -> T:
    """A state change: the shared summary is dropped before it (no poller is answered the
    old state once it began) and after it (nor a state read while it ran)."""
    reads.SUMMARY_CACHE.invalidate(session_id)
    try:
        return await change
    finally:
        reads.SUMMARY_CACHE.invalidate(session_id)


@router.post("/{session_id}/start", response_model=SessionOut)
async def start_session(session_id: int, db: DbSession, hub: Hub, llm: Tester) -> SessionOut:
    """draft -> running; 422 when the judge's provider has never answered and a test call
    to it fails (the cause in ``detail``)."""
    return await _changed(
        session_id, control.start_session(db=db, session_id=session_id, hub=hub, llm=llm)
    )


@router.post("/{session_id}/pause", response_model=SessionOut)
async def pause_session(session_id: int, db: DbSession, hub: Hub) -> SessionOut:
    """running -> paused: comparisons in flight finish, no new ones start."""
    return await _changed(session_id, control.pause_session(db=db, session_id=session_id, hub=hub))


@router.post("/{session_id}/resume", response_model=SessionOut)
async def resume_session(session_id: int, db: DbSession, hub: Hub) -> SessionOut:
    """paused -> running."""
    return await _changed(session_id, control.resume_session(db=db, session_id=session_id, hub=hub))


@router.post("/{session_id}/cancel", response_model=SessionOut)
async def cancel_session(session_id: int, db: DbSession, hub: Hub) -> SessionOut:
    """Pending comparisons are cancelled; those in flight finish and are kept."""
    return await _changed(session_id, control.cancel_session(db=db, session_id=session_id, hub=hub))


@router.post("/{session_id}/retry-failed", response_model=RetryResult)
async def retry_failed(session_id: int, db: DbSession, hub: Hub) -> RetryResult:
    """Failed comparisons go back to the queue with fresh attempts."""
    return await _changed(session_id, control.retry_failed(db=db, session_id=session_id, hub=hub))


@router.delete("/{session_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_session(session_id: int, db: DbSession, hub: Hub) -> None:
    """Delete a session and all its comparisons."""
    await _changed(session_id, control.delete_session(db=db, session_id=session_id, hub=hub))


@router.get("/{session_id}/panel", response_model=PanelReport)
async def panel_report(
    session_id: int,
    db: DbSession,
    target: Annotated[
        float | None,
        Query(ge=0, le=1, description="a cascade's target agreement (unset: best member's)"),
    ] = None,
) -> PanelReportOut | GradersPanelReportOut:
    """A panel session's report. A panel of judges of pairs (``kind`` pairs): per member
    agreement with the panel, Cohen's kappa between members, accuracy against reference
    labels (Wilson 95 % intervals), position consistency, cost and latency; the panel
    against its best and its cheapest member on the same comparisons; the effective number
    of independent votes; for a cascade, the share stopped at each member and the saving
    against asking everyone. A panel of graders (``kind`` grades, comparison_mode single):
    per member its items, mean grade, agreement with the panel's grade and with each other
    member (Spearman, Pearson, mean absolute difference, quadratic-weighted kappa on whole
    points, bootstrap intervals over items), its offset from the panel; Krippendorff's
    alpha of the panel, and the most lenient or severe member where the evidence names
    one. ``target`` is for a cascade of pairs only."""
    return _PANEL_REPORT.validate_python(await panels.panel_report(db, session_id, target=target))


@router.get("/{session_id}/comparisons", response_model=ComparisonPage)
async def list_comparisons(
    session_id: int,
    db: DbSession,
    status: ComparisonStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
    flag: Annotated[
        Literal["disagree", "swap_flip", "low_confidence", "failed"] | None,
        Query(
            description="only disagreements with a reference label of the pair, verdicts "
            "whose swapped twin favours the other thread, verdicts below 60 % confidence, "
            "or failures"
        ),
    ] = None,
) -> ComparisonPage:
    """Comparisons in queue order, with thread titles and pillar names (twin of the page
    `/sessions/{id}/comparisons`)."""
    return await reads.list_comparisons(
        db=db, session_id=session_id, status=status, limit=limit, offset=offset, flag=flag
    )


@router.get("/{session_id}/comparisons/{comparison_id}", response_model=ComparisonDetail)
async def get_comparison(session_id: int, comparison_id: int, db: DbSession) -> ComparisonDetail:
    """One comparison, with the judge's raw response."""
    return await reads.get_comparison(db=db, session_id=session_id, comparison_id=comparison_id)


@router.get(
    "/{session_id}/events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def session_events(
    session_id: int,
    request: Request,
    db: DbSession,
    lanes: Annotated[
        str | None,
        Query(
            max_length=4000,
            description="the worker lanes whose `llm_stream` events to send: `all` "
            "(default), `none`, or comma-separated worker ids",
        ),
    ] = None,
) -> EventSourceResponse:
    """Server-sent events: `ready`, `session_status`, `comparison_start`, `llm_stream`
    (text batches, for the `lanes` followed), `comparison_complete`, `comparison_retry`,
    `workers_status` (about once per second per worker process). Events are written in
    frames of at most ~4 per second, each with every event since the last."""
    await reads.get_session(db=db, session_id=session_id)  # 404 for an unknown session
    await db.close()  # hold no connection for the life of the stream
    return sse_response(
        request, request.app.state.events, session_topic(session_id), lanes=parse_lanes(lanes)
    )


@router.get(
    "/{session_id}/thread-labels",
    response_model=dict[str, ThreadLabelOut],
    summary="Thread labels for the live page",
)
async def thread_labels(
    session_id: int, db: DbSession, ids: ThreadIds = ""
) -> dict[str, ThreadLabelOut]:
    """Display name and pillar of each known thread among `ids`, keyed by id (events carry
    only ids); unknown ids are left out."""
    await reads.get_session(db=db, session_id=session_id)  # 404 for an unknown session
    found = await reads.thread_labels(db=db, ids=parse_ids(ids))
    return {str(t): label for t, label in found.items()}


@threads_router.get(
    "/{thread_id}/comparisons",
    response_model=ThreadComparisons,
    summary="A thread's comparisons",
)
async def thread_comparisons(
    thread_id: Annotated[int, Path(ge=1, le=2**31 - 1)],
    db: DbSession,
    limit: Annotated[int, Query(ge=1, le=THREAD_COMPARISONS_MAX)] = 50,
) -> ThreadComparisons:
    """The latest finished comparisons the thread took part in, across sessions, seen from
    its side (opponent, outcome, scores, the judge's reasoning), and its won/lost/tie/failed
    totals."""
    return await reads.thread_comparisons(db=db, thread_id=thread_id, limit=limit)
