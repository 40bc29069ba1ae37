"""Tournament pages over HTTP: the configuration form and its estimate, the live page and
its partials, page twins of the session actions, every results tab in every session
state, the thread view's comparisons and the home page.

Workers are off in this module: sessions stay in the states the tests give them (draft,
running with some results, failed, completed), written straight into the database.
"""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import case, select, update
from starlette.datastructures import FormData

from llmjudge.analysis.schemas import LeaderboardRow, PillarLabel
from llmjudge.core.judging.prompts import DEFAULT_CRITERIA
from llmjudge.sessions.models import Comparison, JudgeSession
from llmjudge.sessions.pages.formatting import SORT_KEYS, eta_seconds, likert_dots, sort_rows
from llmjudge.sessions.pages.forms import field_errors, session_form
from llmjudge.sessions.pages.results import TAB_NAMES
from llmjudge.sessions.plans import mode_counts
from llmjudge.sessions.reads import outcome_for
from llmjudge.sessions.schemas import SessionIn

HX = {"HX-Request": "true"}
PILLARS, PER_PILLAR = 3, 4
THREADS = PILLARS * PER_PILLAR


# The tests play the workers or start their own pools: no pool inside the app.
IN_PROCESS_WORKERS = False


# -- pure helpers -------------------------------------------------------------------------


def form(**fields: Any) -> FormData:
    items = [
        (k, str(v)) for k, vs in fields.items() for v in (vs if isinstance(vs, list) else [vs])
    ]
    return FormData(items)


def test_session_form_reads_boxes_defaults_and_criteria() -> None:
    got = session_form(
        form(
            session_name="  t  ",
            pillar_ids=["3", "5"],
            comparison_mode="round_robin",
            samples_per_pillar="",
            max_threads_per_pillar="2",
            baseline_pillar_id="5",
            position_swap="1",
            criteria="accuracy, clarity ,,",
            csrf_token="x",
        )
    )
    assert got == {
        "session_name": "t",
        "pillar_ids": ["3", "5"],
        "comparison_mode": "round_robin",
        "max_threads_per_pillar": "2",
        "baseline_pillar_id": "5",
        "position_swap": True,
        "calculate_elo": False,
        "match_by_prompt_key": False,
        "criteria": ["accuracy", "clarity"],
    }
    data = SessionIn.model_validate(got)
    assert data.samples_per_pillar == 5 and data.max_threads_per_pillar == 2
    # Free for all has no baseline: the form disables the field, the parser drops it.
    ffa = session_form(form(session_name="x", comparison_mode="free_for_all", baseline_pillar_id=3))
    assert "baseline_pillar_id" not in ffa and ffa["pillar_ids"] == []


def test_field_errors_name_the_fields() -> None:
    with pytest.raises(Exception) as caught:
        SessionIn.model_validate(
            {"session_name": " ", "pillar_ids": [1, 1], "worker_count": 0, "criteria": ["a{"]}
        )
    errors = field_errors(caught.value)  # type: ignore[arg-type]
    assert set(errors) == {"session_name", "pillar_ids", "worker_count", "criteria"}
    assert "blank" in errors["session_name"][0]
    assert not any(m.startswith("Value error") for ms in errors.values() for m in ms)


@given(
    sizes=st.lists(st.integers(1, 30), min_size=2, max_size=6),
    swap=st.booleans(),
    reps=st.integers(1, 3),
    samples=st.integers(1, 10),
)
def test_mode_counts_follow_the_formulas(
    sizes: list[int], swap: bool, reps: int, samples: int
) -> None:
    data = SessionIn(
        session_name="x",
        pillar_ids=list(range(1, len(sizes) + 1)),
        position_swap=swap,
        repetitions_per_pair=reps,
        samples_per_pillar=samples,
    )
    counts = mode_counts(data, dict(zip(data.pillar_ids, sizes, strict=True)))
    n, passes, k = sum(sizes), reps * (2 if swap else 1), len(sizes)
    assert counts["free_for_all"] == (n * (n - 1) // 2 * passes, None)
    assert counts["round_robin"] == ((n * n - sum(s * s for s in sizes)) // 2 * passes, None)
    assert counts["pillar_sample"] == (k * (k - 1) // 2 * samples * passes, None)


def test_mode_counts_explain_impossible_modes() -> None:
    data = SessionIn(session_name="x", pillar_ids=[1])
    counts = mode_counts(data, {1: 5})
    assert counts["free_for_all"] == (20, None)
    assert counts["round_robin"][0] is None and "2 pillars" in (counts["round_robin"][1] or "")
    assert counts["single"] == (5, None)  # one grade per thread: no pair needed
    keyed = SessionIn(session_name="x", pillar_ids=[1, 2], match_by_prompt_key=True)
    # pair modes are counted from a built plan; single grades every thread, keys or not
    counted = mode_counts(keyed, {1: 3, 2: 3})
    assert counted.pop("single") == (6, None)
    assert set(counted.values()) == {(None, None)}


def row(thread_id: int, **kw: Any) -> LeaderboardRow:
    base: dict[str, Any] = {
        "rank": 1,
        "thread_id": thread_id,
        "thread_title": f"t{thread_id}",
        "thread_external_id": None,
        "pillar": PillarLabel(id=1, name="p"),
        "elo_score": 1500.0,
        "bt_score": 1500.0,
        "bt_ci_low": None,
        "bt_ci_high": None,
        "matches_played": 2,
        "wins": 1,
        "losses": 1,
        "ties": 0,
        "win_rate": 0.5,
        "raw_win_rate": 0.5,
        "avg_confidence": None,
        "avg_likert_scores": {},
    }
    return LeaderboardRow(**(base | kw))


@given(
    elos=st.lists(st.one_of(st.none(), st.floats(1000, 2000)), min_size=1, max_size=12),
    key=st.sampled_from(SORT_KEYS),
    desc=st.booleans(),
)
def test_sort_rows_orders_and_keeps_missing_last(
    elos: list[float | None], key: str, desc: bool
) -> None:
    rows = [
        row(i, elo_score=e, bt_score=1400.0 + i, avg_confidence=e and e / 2000)
        for i, e in enumerate(elos)
    ]
    out = sort_rows(rows, key, desc)  # type: ignore[arg-type]
    assert sorted(r.thread_id for r in out) == list(range(len(elos)))
    if key == "elo":
        values = [r.elo_score for r in out]
        present = [v for v in values if v is not None]
        assert present == sorted(present, reverse=desc)
        assert values[len(present) :] == [None] * (len(values) - len(present))
    if key == "bt":
        assert [r.bt_score for r in out] == sorted((r.bt_score for r in rows), reverse=desc)


def test_small_formatters() -> None:
    assert likert_dots(3.4) == "●●●○○" and likert_dots(None) == "" and likert_dots(9) == "●" * 5
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    assert eta_seconds(25, 100, t0, t0 + timedelta(seconds=10)) == pytest.approx(30)
    assert eta_seconds(0, 100, t0, t0) is None and eta_seconds(100, 100, t0, t0) is None
    assert [outcome_for(s, "completed", w) for s, w in (("A", "A"), ("B", "A"), ("A", "TIE"))] == [
        "won",
        "lost",
        "tie",
    ]
    assert outcome_for("A", "failed", None) == "failed"


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def pillar_ids(client: httpx.AsyncClient) -> list[int]:
    rows = [
        {
            "pillar": f"pg{i % PILLARS}",
            "external_id": f"pg-{i}",
            "title": f"Thread <{i}>",
            "content": f"Answer {i}.",
        }
        for i in range(THREADS)
    ]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/api/threads/import", files={"file": ("t.jsonl", body)})
    assert r.status_code == 200, r.text
    return [p["id"] for p in (await client.get("/api/pillars")).json()]


async def create(client: httpx.AsyncClient, pillar_ids: list[int], name: str, **kw: Any) -> int:
    body = {"session_name": name, "pillar_ids": pillar_ids, "comparison_mode": "round_robin"}
    r = await client.post("/api/sessions", json=body | kw)
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def judge(app: Any, sid: int, n: int, *, status: str, error: str | None = None) -> None:
    """Complete the first `n` comparisons (the lower thread id wins, in either order, so
    swap pairs agree) and fail the rest when the session is to be `failed`."""
    criteria = list(DEFAULT_CRITERIA)
    async with app.state.sessionmaker() as db:
        positions = select(Comparison.queue_position).where(Comparison.session_id == sid)
        first = positions.order_by(Comparison.queue_position).limit(n).scalar_subquery()
        await db.execute(
            update(Comparison)
            .where(Comparison.session_id == sid, Comparison.queue_position.in_(first))
            .values(
                status="completed",
                winner=case((Comparison.thread_a_id < Comparison.thread_b_id, "A"), else_="B"),
                confidence=0.8,
                scores_a={c: 4 for c in criteria},
                scores_b={c: 2 for c in criteria},
                reasoning="The first answer is more specific.",
                completed_at=datetime.now(UTC),
                cost_usd=0.001,
                attempts=1,
            )
        )
        failed = 0
        if status == "failed":
            result = await db.execute(
                update(Comparison)
                .where(Comparison.session_id == sid, Comparison.status == "pending")
                .values(status="failed", error="provider said no", attempts=3)
                .returning(Comparison.id)
            )
            failed = len(result.all())
        s = await db.get(JudgeSession, sid)
        assert s is not None
        s.status, s.completed, s.failed, s.error = status, n, failed, error
        s.cost_usd, s.started_at = 0.001 * n, datetime.now(UTC) - timedelta(seconds=30)
        if status in ("completed", "failed"):
            s.finished_at = datetime.now(UTC)
        await db.commit()


@pytest.fixture(scope="module")
async def states(app: Any, client: httpx.AsyncClient, pillar_ids: list[int]) -> dict[str, int]:
    """One session per state; round robin over 3 x 4 threads with swap: 96 comparisons."""
    made = {
        "draft": await create(client, pillar_ids, "Draft one"),
        "running": await create(client, pillar_ids, "Running one"),
        "failed": await create(client, pillar_ids, "Failed one"),
        "completed": await create(client, pillar_ids, "Completed one"),
    }
    await judge(app, made["running"], 40, status="running")
    await judge(app, made["failed"], 20, status="failed", error="the judge model was deleted")
    await judge(app, made["completed"], 96, status="completed")
    return made


def text_of(html: str) -> str:
    """Visible text, tags dropped, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


# -- home and list ------------------------------------------------------------------------


async def test_pages_before_any_pillar_explain_what_to_do(client: httpx.AsyncClient) -> None:
    """First in the module: the catalog is still empty."""
    listed = await client.get("/sessions")
    assert listed.status_code == 200 and 'id="sessions-empty"' in listed.text
    assert "No threads to judge yet" in listed.text and 'id="new-session"' not in listed.text
    new = await client.get("/sessions/new")
    assert new.status_code == 200 and 'id="new-empty"' in new.text
    assert 'id="session-form"' not in new.text
    home = await client.get("/")
    assert 'id="empty-state"' in home.text and 'id="start-tournament"' not in home.text


async def test_home_offers_a_tournament_before_any_session(
    client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    r = await client.get("/")
    assert r.status_code == 200
    assert 'id="start-tournament"' in r.text and 'href="/sessions/new"' in r.text
    assert "pg0" in r.text and 'href="/sessions"' in r.text  # pillars, nav link


async def test_home_and_list_show_sessions_with_progress_and_cost(
    client: httpx.AsyncClient, states: dict[str, int]
) -> None:
    home = await client.get("/")
    assert 'id="start-tournament"' not in home.text
    assert f'id="session-{states["running"]}"' in home.text
    # polls while a session runs
    assert 'hx-get="/sessions/partials/rows?limit=5"' in home.text
    listed = await client.get("/sessions")
    assert listed.status_code == 200
    for sid in states.values():
        assert f'id="session-{sid}"' in listed.text
    running = listed.text.split(f'id="session-{states["running"]}"')[1].split("</tr>")[0]
    assert 'class="status status-running"' in running
    assert '<progress class="meter" max="96" value="40"' in running
    assert "$0.0400" in running and "simulated" in running
    rows = await client.get("/sessions/partials/rows", headers=HX)
    assert rows.text.lstrip().startswith('<div id="session-rows"')


# -- configuration ------------------------------------------------------------------------


async def test_new_session_page_shows_chips_modes_and_summary(
    client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    r = await client.get("/sessions/new")
    assert r.status_code == 200
    assert r.text.count('name="pillar_ids"') == PILLARS
    assert re.search(r'class="chip-count">4<', r.text)
    # adaptive and single-answer grading too
    assert r.text.count('type="radio" name="comparison_mode"') == 5
    # all pillars chosen, pillar sample, 5 samples, swap: 3 pillar pairs x 5 x 2
    assert re.search(r'id="sum-total" class="big">30<', r.text)
    assert re.search(r'id="mode-count-free_for_all">132 comparisons<', r.text)
    assert re.search(r'id="mode-count-round_robin">96 comparisons<', r.text)
    assert 'type="range" id="worker_count" name="worker_count" min="1" max="256"' in r.text
    assert "simulated-judge (simulated)" in r.text
    assert 'name="csrf_token"' in r.text and "/static/sessions.js" in r.text


async def test_estimate_follows_the_mode_and_reports_errors(
    client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    body = {
        "session_name": "x",
        "pillar_ids": [str(p) for p in pillar_ids],
        "comparison_mode": "free_for_all",
        "max_threads_per_pillar": "2",
        "position_swap": "1",
        "worker_count": "4",
    }
    r = await client.post("/sessions/new/estimate", data=body, headers=HX)
    assert r.status_code == 200, r.text
    assert re.search(r'id="sum-total" class="big">30<', r.text)  # 6 threads: 15 x 2
    assert re.search(r'id="mode-count-pillar_sample" hx-swap-oob="true">30 comparisons<', r.text)
    assert 'id="worker-duration" hx-swap-oob="true">≈' in r.text and "4 workers" in r.text
    # pillar sample with unequal capped pillars warns and recommends repetitions
    sample = body | {"comparison_mode": "pillar_sample", "max_threads_per_pillar": ""}
    sample["samples_per_pillar"] = "2"
    r = await client.post("/sessions/new/estimate", data=sample, headers=HX)
    assert 'id="estimate-warnings"' in r.text and 'data-set-field="repetitions_per_pair"' in r.text
    r = await client.post(
        "/sessions/new/estimate", data=body | {"pillar_ids": [], "worker_count": "0"}, headers=HX
    )
    assert r.status_code == 422
    assert "Pillars: choose at least one pillar" in text_of(r.text)
    assert "Workers:" in text_of(r.text)
    assert 'id="sum-total"' not in r.text


async def test_mode_counts_api_twin_matches_the_form(
    client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    body = {
        "session_name": "x",
        "pillar_ids": pillar_ids,
        "comparison_mode": "free_for_all",
        "max_threads_per_pillar": 2,
        "position_swap": True,
    }
    r = await client.post("/api/sessions/estimate/modes", json=body)
    assert r.status_code == 200, r.text
    # 3 pillars capped at 2 threads, swapped: 6 threads
    assert r.json() == {
        "pillar_sample": {"comparisons": 3 * 5 * 2, "reason": None},
        "round_robin": {"comparisons": (36 - 3 * 4) // 2 * 2, "reason": None},
        "free_for_all": {"comparisons": 15 * 2, "reason": None},
        "single": {"comparisons": 6, "reason": None},  # each capped thread graded once
    }
    form = {k: [str(x) for x in v] if isinstance(v, list) else str(v) for k, v in body.items()}
    page = await client.post("/sessions/new/estimate", data=form, headers=HX)
    for mode, count in r.json().items():
        shown = f'id="mode-count-{mode}" hx-swap-oob="true">{count["comparisons"]} comparisons<'
        assert shown in page.text, mode
    one = (
        await client.post(
            "/api/sessions/estimate/modes", json=body | {"pillar_ids": pillar_ids[:1]}
        )
    ).json()
    assert one["free_for_all"] == {"comparisons": 2, "reason": None}
    assert one["round_robin"]["comparisons"] is None and "2 pillars" in one["round_robin"]["reason"]
    keyed = body | {"match_by_prompt_key": True}  # counted from a built plan, not formulas
    got = (await client.post("/api/sessions/estimate/modes", json=keyed)).json()
    assert set(got) == {"pillar_sample", "round_robin", "free_for_all", "single"}
    for count in got.values():
        assert (count["comparisons"] is None) != (count["reason"] is None)
    bad = await client.post("/api/sessions/estimate/modes", json=body | {"pillar_ids": []})
    assert bad.status_code == 422


async def test_create_validates_inline_then_starts_and_redirects(
    app: Any, client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    body = {
        "session_name": " ",
        "pillar_ids": [str(pillar_ids[0])],
        "comparison_mode": "round_robin",
        "position_swap": "1",
    }
    r = await client.post("/sessions/new", data=body, headers=HX)
    assert r.status_code == 422
    assert 'id="create-error-list"' in r.text and "Tournament name:" in text_of(r.text)
    assert "<html" not in r.text
    # without htmx: the whole form again, with the values kept
    r = await client.post("/sessions/new", data=body | {"session_name": "kept name"})
    assert r.status_code == 422 and 'value="kept name"' in r.text
    assert "needs threads in at least 2 pillars" in r.text

    good = body | {"session_name": "Made from the form", "pillar_ids": [str(p) for p in pillar_ids]}
    r = await client.post("/sessions/new", data=good, headers=HX)
    assert r.status_code == 200 and r.headers["HX-Redirect"].startswith("/sessions/")
    sid = int(r.headers["HX-Redirect"].rsplit("/", 1)[1])
    made = (await client.get(f"/api/sessions/{sid}")).json()
    assert (made["name"], made["status"], made["total"]) == ("Made from the form", "running", 96)
    assert made["options"]["calculate_elo"] is False  # unticked box
    r = await client.post("/sessions/new", data=good)
    assert r.status_code == 303 and r.headers["location"].startswith("/sessions/")


# -- live page ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("draft", ["The session has not started", ">Start</button>", 'id="cancel"']),
        ("running", ['id="pause"', "40 / 96", 'class="lane lane-idle"', "Results so far"]),
        ("failed", ["Tournament failed.", "the judge model was deleted", 'id="retry-failed"']),
        ("completed", ["96 / 96", "100%", 'id="results-link"', "this session is completed"]),
    ],
)
async def test_live_page_in_each_state(
    client: httpx.AsyncClient, states: dict[str, int], state: str, expected: list[str]
) -> None:
    sid = states[state]
    r = await client.get(f"/sessions/{sid}")
    assert r.status_code == 200
    for fragment in expected:
        assert fragment in r.text, fragment
    assert f'sse-connect="/api/sessions/{sid}/events"' in r.text
    assert 'data-refresh-on="comparison_complete comparison_retry session_status"' in r.text
    assert 'id="lane-template"' in r.text
    assert "simulated" in r.text
    progress = await client.get(f"/sessions/{sid}/partials/progress", headers=HX)
    assert progress.status_code == 200 and "<html" not in progress.text
    queue = await client.get(f"/sessions/{sid}/partials/queue", headers=HX)
    assert queue.status_code == 200 and "Up next" in queue.text


async def test_live_page_lists_queue_and_recent_verdicts(
    client: httpx.AsyncClient, states: dict[str, int]
) -> None:
    r = await client.get(f"/sessions/{states['running']}/partials/queue")
    assert "56 pending" in r.text
    assert r.text.count("<li>") == 10  # the next ten
    assert "Thread &lt;" in r.text  # titles escaped
    assert r.text.count("A wins") + r.text.count("B wins") == 8
    assert (await client.get("/sessions/987654")).status_code == 404


async def test_actions_answer_with_the_progress_panel(
    app: Any, client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    sid = await create(client, pillar_ids, "Controlled")
    r = await client.post(f"/sessions/{sid}/start", headers=HX)
    assert r.status_code == 200 and 'id="pause"' in r.text
    r = await client.post(f"/sessions/{sid}/pause", headers=HX)
    assert r.status_code == 200 and 'id="resume"' in r.text
    r = await client.post(f"/sessions/{sid}/pause", headers=HX)
    assert r.status_code == 409 and 'id="action-notice"' in r.text and "paused" in r.text
    r = await client.post(f"/sessions/{sid}/cancel", headers=HX)
    assert r.status_code == 200 and "status-cancelled" in r.text
    broken = await create(client, pillar_ids, "Broken")
    await judge(app, broken, 90, status="failed")
    r = await client.post(f"/sessions/{broken}/retry-failed", headers=HX)
    assert r.status_code == 200 and "6 failed comparison(s) queued again." in r.text
    assert (await client.get(f"/api/sessions/{broken}")).json()["status"] == "running"
    r = await client.post(f"/sessions/{sid}/explode", headers=HX)
    assert r.status_code == 404
    r = await client.post(f"/sessions/{sid}/delete", headers=HX)
    assert r.headers["HX-Redirect"] == "/sessions"
    assert (await client.get(f"/api/sessions/{sid}")).status_code == 404


async def test_a_refused_request_has_one_status_on_the_page_under_htmx_and_in_the_api(
    client: httpx.AsyncClient, pillar_ids: list[int]
) -> None:
    sid = await create(client, pillar_ids, "One status")
    await client.post(f"/api/sessions/{sid}/start")
    await client.post(f"/api/sessions/{sid}/pause")
    # Conflict: pausing a paused session.
    api = await client.post(f"/api/sessions/{sid}/pause")
    page = await client.post(f"/sessions/{sid}/pause", headers=HX)
    assert api.status_code == page.status_code == 409
    # NotFound: the page says so as a page, an HTMX partial as one line in the flash region.
    api = await client.get("/api/sessions/987654")
    page = await client.get("/sessions/987654/results")
    swap = await client.get("/sessions/987654/partials/queue", headers=HX)
    assert api.status_code == page.status_code == swap.status_code == 404
    assert 'id="error-message"' in page.text and api.json()["detail"] in page.text
    assert swap.headers["HX-Retarget"] == "#flash" and "<html" not in swap.text
    # A form its schema refuses: 422 with the problems, as the API's validation list.
    api = await client.post("/api/sessions", json={"session_name": "", "pillar_ids": []})
    page = await client.post("/sessions/new", data={"session_name": ""}, headers=HX)
    assert api.status_code == page.status_code == 422


async def test_thread_labels_for_the_lanes(client: httpx.AsyncClient, states: dict[str, int]):
    page = (await client.get(f"/api/sessions/{states['running']}/comparisons?limit=1")).json()
    item = page["items"][0]
    url = f"/sessions/{states['running']}/thread-labels"
    r = await client.get(f"{url}?ids={item['thread_a_id']},987654")
    assert r.status_code == 200
    assert r.json() == {
        str(item["thread_a_id"]): {"title": item["thread_a_title"], "pillar": item["pillar_a_name"]}
    }
    assert (await client.get(f"{url}?ids=1;2")).status_code == 422


async def test_thread_labels_api_twin_matches_the_page(
    client: httpx.AsyncClient, states: dict[str, int]
) -> None:
    sid = states["running"]
    page = (await client.get(f"/api/sessions/{sid}/comparisons?limit=2")).json()
    ids = sorted({i[k] for i in page["items"] for k in ("thread_a_id", "thread_b_id")})
    query = f"ids={','.join(map(str, ids))},,987654"  # an empty item and an unknown id
    api = await client.get(f"/api/sessions/{sid}/thread-labels?{query}")
    assert api.status_code == 200
    assert api.json() == (await client.get(f"/sessions/{sid}/thread-labels?{query}")).json()
    assert sorted(map(int, api.json())) == ids
    item = page["items"][0]
    assert api.json()[str(item["thread_b_id"])] == {
        "title": item["thread_b_title"],
        "pillar": item["pillar_b_name"],
    }
    assert (await client.get(f"/api/sessions/{sid}/thread-labels?ids=1;2")).status_code == 422
    assert (await client.get("/api/sessions/987654/thread-labels?ids=1")).status_code == 404


@pytest.mark.parametrize("bad", ["0", "99999999999", "7" * 4301])
async def test_thread_labels_refuse_ids_no_row_can_have(
    client: httpx.AsyncClient, states: dict[str, int], bad: str
) -> None:
    # Beyond int4 used to be skipped, and more than 4,300 digits (int()'s limit) was a 500.
    sid = states["running"]
    for url in (f"/api/sessions/{sid}/thread-labels", f"/sessions/{sid}/thread-labels"):
        r = await client.get(f"{url}?ids=1,{bad}")
        assert r.status_code == 422, r.text
        assert f"from 1 to 2147483647, got {bad[:20]!r}"[:-1] in html.unescape(r.text)


# -- results ------------------------------------------------------------------------------

STATE_TEXT = {
    "draft": "This session has not started yet",
    "running": "these figures use the 40 comparisons completed so far",
    "failed": "Tournament failed.",
    "completed": None,
}
TAB_TEXT = {
    "overview": "Pillar ranking",
    "leaderboard": "Thread leaderboard",
    "distribution": "Elo distribution by pillar",
    "matrix": "Pillar matrix",
    "position": "Position bias",
    "performance": "Thread performance and coverage",
    "findings": "Surprise findings",
    "style": "Style control",
    "categories": "Categories",
    "agreement": "Agreement with reference labels",
    "baseline": "Win rates against a baseline",
}


@pytest.mark.parametrize("state", list(STATE_TEXT))
async def test_every_results_tab_in_every_state(
    client: httpx.AsyncClient, states: dict[str, int], state: str
) -> None:
    sid = states[state]
    for tab in TAB_NAMES:
        page = await client.get(f"/sessions/{sid}/results?tab={tab}")
        part = await client.get(f"/sessions/{sid}/partials/results/{tab}", headers=HX)
        for r in (page, part):
            assert r.status_code == 200, (state, tab, r.text[:500])
            assert 'id="tab-error"' not in r.text, (state, tab)
            assert "Internal Server Error" not in r.text
        assert f'id="tab-{tab}" class="active"' in page.text
        assert part.text.lstrip().startswith('<nav class="tabs" id="result-tabs"')
        assert 'hx-swap-oob="true"' in part.text and 'id="tab-body"' in part.text
        expected = STATE_TEXT[state]
        if state == "draft":
            assert 'id="results-empty"' in part.text and expected in part.text
            continue
        assert TAB_TEXT[tab] in part.text, (state, tab)
        if state == "failed":
            assert expected in page.text
        elif expected:
            assert expected in part.text
        live = 'data-refresh-on="comparison_complete session_status"' in part.text
        assert live == (state == "running"), (state, tab)


async def test_results_figures_of_a_completed_session(
    client: httpx.AsyncClient, states: dict[str, int]
) -> None:
    sid = states["completed"]
    board = await client.get(f"/sessions/{sid}/partials/results/leaderboard", headers=HX)
    assert board.text.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart chart-bar"') == 1
    body = board.text.split('id="leaderboard"')[1]
    assert body.count("<tr>") == THREADS + 1  # header + one row per thread
    assert 'aria-sort="ascending"' in body  # by rank
    # the lower thread id always wins: sorted by win rate, the best has 100%
    by_rate = await client.get(
        f"/sessions/{sid}/partials/results/leaderboard?sort=win_rate&dir=desc", headers=HX
    )
    cells = re.findall(r'<td class="num">(\d+)%</td>', by_rate.text.split('id="leaderboard"')[1])
    rates, confidences = cells[::2], cells[1::2]  # win %, then average confidence
    assert rates[0] == "100" and rates == sorted(rates, key=int, reverse=True)
    assert len(rates) == THREADS and set(confidences) == {"80"}
    # live refreshes keep the order
    assert (
        f'hx-get="/sessions/{sid}/partials/results/leaderboard?sort=win_rate&amp;dir=desc"'
        in (by_rate.text.split('id="tab-body"')[1])
    )
    matrix = await client.get(f"/sessions/{sid}/partials/results/matrix", headers=HX)
    assert "chart-heatmap" in matrix.text
    dist = await client.get(f"/sessions/{sid}/partials/results/distribution", headers=HX)
    assert "chart-histogram" in dist.text and "pg1" in dist.text
    position = await client.get(f"/sessions/{sid}/partials/results/position", headers=HX)
    assert "100%" in position.text and 'id="swap-pairs"' in position.text  # always consistent
    assert "<strong>Robust to answer order</strong>" in position.text  # not a bare grade
    overview = await client.get(f"/sessions/{sid}/results")
    assert 'id="export-csv"' in overview.text and f"/api/sessions/{sid}/export?format=csv" in (
        overview.text
    )
    assert "sse-connect" not in overview.text  # a finished session needs no live updates
    assert (await client.get("/sessions/987654/results")).status_code == 404


# -- thread view --------------------------------------------------------------------------


async def test_thread_view_lists_its_comparisons(
    client: httpx.AsyncClient, states: dict[str, int]
) -> None:
    threads = (await client.get("/api/threads?limit=100")).json()["items"]
    first = min(t["id"] for t in threads if t["external_id"].startswith("pg-"))
    page = await client.get(f"/threads/{first}")
    assert f'hx-get="/threads/{first}/comparisons" hx-trigger="load"' in page.text
    r = await client.get(f"/threads/{first}/comparisons", headers=HX)
    assert r.status_code == 200
    record = text_of(r.text.split('id="thread-record"')[1].split("</p>")[0])
    wins = int(re.search(r"(\d+) won", record).group(1))  # type: ignore[union-attr]
    assert wins > 0 and " 0 lost" in record  # the lowest id never loses
    assert "The first answer is more specific." in r.text and "Completed one" in r.text
    last = max(t["id"] for t in threads)
    none = await client.get(f"/threads/{last + 1000}/comparisons", headers=HX)
    assert 'id="no-thread-comparisons"' in none.text


async def test_thread_comparisons_api_twin(
    client: httpx.AsyncClient, states: dict[str, int]
) -> None:
    threads = (await client.get("/api/threads?limit=100")).json()["items"]
    first = min(t["id"] for t in threads if t["external_id"].startswith("pg-"))
    r = await client.get(f"/api/threads/{first}/comparisons")
    assert r.status_code == 200
    body = r.json()
    totals, items = body["totals"], body["items"]
    assert body["thread_id"] == first and body["limit"] == 50
    assert set(totals) == {"won", "lost", "tie", "failed"}
    assert totals["won"] > 0 and totals["lost"] == 0 and totals["tie"] == 0  # lowest id wins
    assert totals["failed"] > 0  # the failed session's pending comparisons
    assert len(items) == min(50, sum(totals.values()))
    assert [i["id"] for i in items] == sorted((i["id"] for i in items), reverse=True)
    for i in items:
        assert i["outcome"] == ("won" if i["status"] == "completed" else "failed")
        assert i["opponent_id"] != first and i["side"] in ("A", "B")
        if i["outcome"] == "won":
            assert i["own_scores"] and i["reasoning"] == "The first answer is more specific."
        else:
            assert i["error"] == "provider said no"
    # the page shows the same record
    page = await client.get(f"/threads/{first}/comparisons", headers=HX)
    record = text_of(page.text.split('id="thread-record"')[1].split("</p>")[0])
    assert f"{totals['won']} won" in record and f"{totals['failed']} failed" in record
    few = (await client.get(f"/api/threads/{first}/comparisons?limit=3")).json()
    assert few["totals"] == totals and [i["id"] for i in few["items"]] == [
        i["id"] for i in items[:3]
    ]
    last = max(t["id"] for t in threads)
    none = (await client.get(f"/api/threads/{last + 1000}/comparisons")).json()
    assert none["items"] == [] and set(none["totals"].values()) == {0}
    assert (await client.get(f"/api/threads/{first}/comparisons?limit=0")).status_code == 422
