"""Pages a new user hits first (issue 20): the thread browser's filters, a session's
comparisons listed with filters, one comparison side by side (sanitised Markdown).

Workers are off: the tests write verdicts straight into the database.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from llmjudge.core.judging.prompts import CRITERIA_SETS, DEFAULT_CRITERIA
from llmjudge.references.models import ReferenceLabel
from llmjudge.sessions.models import Comparison

IN_PROCESS_WORKERS = False
HX = {"HX-Request": "true"}

EVIL = (
    "Here is code:\n\n```python\nprint('hi')\n```\n\n"
    "<script>alert('xss')</script> [click](javascript:alert(1)) "
    '<img src=x onerror="alert(2)"> [ok](https://example.org)'
)
LONG_TITLE = "A rather long title about travel blogs and the cultural experiences of Hawaii islands"


def _row(i: int, pillar: str, category: str, content: Any, title: str | None = None) -> str:
    return json.dumps(
        {
            "pillar": pillar,
            "external_id": f"x-{pillar}-{i}",
            "title": title or f"Question {i} of {pillar}",
            "prompt_key": f"q{i}",
            "content": content,
            "metadata": {"category": category, "question_id": i},
        }
    )


@pytest.fixture(scope="module")
async def catalog(client: httpx.AsyncClient) -> dict[str, int]:
    rows = []
    for pillar in ("alpha", "beta"):
        for i in range(4):
            content = [
                {"role": "user", "content": f"Shared question {i}?"},
                {"role": "assistant", "content": EVIL if pillar == "alpha" else f"**Bold** {i}"},
            ]
            title = LONG_TITLE if (pillar, i) == ("alpha", 0) else None
            rows.append(_row(i, pillar, "coding" if i < 2 else "writing", content, title))
    r = await client.post(
        "/api/threads/import", files={"file": ("t.jsonl", "\n".join(rows).encode())}
    )
    assert r.status_code == 200, r.text
    return {p["name"]: p["id"] for p in (await client.get("/api/pillars")).json()}


# -- /threads ------------------------------------------------------------------------------


async def test_threads_all_pillars_is_an_empty_value_not_a_422(client, catalog):
    r = await client.get("/threads", params={"pillar_id": "", "q": "Question"}, headers=HX)
    assert r.status_code == 200, r.text
    assert "detail" not in r.text
    assert r.text.count("<tr>") == 1 + 7  # header + every thread but the long-titled one
    assert "alpha" in r.text and "beta" in r.text
    full = await client.get("/threads?pillar_id=")
    assert full.status_code == 200 and "All pillars" in full.text


async def test_threads_filter_by_prompt_key_and_metadata(client, catalog):
    r = await client.get("/api/threads", params={"prompt_key": "q1"})
    assert {t["prompt_key"] for t in r.json()["items"]} == {"q1"} and r.json()["total"] == 2
    r = await client.get("/api/threads", params={"meta_key": "category", "meta_value": "writing"})
    assert r.json()["total"] == 4
    r = await client.get("/api/threads", params={"meta_key": "question_id", "meta_value": "0"})
    assert r.json()["total"] == 2
    page = await client.get(
        "/threads",
        params={"pillar_id": str(catalog["beta"]), "meta_key": "category", "meta_value": "coding"},
        headers=HX,
    )
    assert page.text.count("<tr>") == 1 + 2
    full = await client.get("/threads")
    assert '<option value="category"' in full.text  # metadata keys are offered
    # a key alone keeps the threads that carry it; odd input is no server error
    r = await client.get("/api/threads", params={"meta_key": "question_id"})
    assert r.json()["total"] == 8
    for odd in ("\x00", "'; --", "%_\\"):
        r = await client.get("/api/threads", params={"meta_key": odd, "meta_value": odd})
        assert r.status_code in (200, 422), r.text
        page = await client.get("/threads", params={"meta_key": odd, "prompt_key": odd})
        assert page.status_code in (200, 422), page.text


async def test_thread_titles_cut_at_a_word_with_an_ellipsis(client, catalog):
    r = await client.get("/threads", params={"q": "rather long"}, headers=HX)
    link = re.search(r'<a href="/threads/\d+" title="([^"]*)">([^<]*)</a>', r.text)
    assert link is not None
    assert link.group(1) == LONG_TITLE
    shown = link.group(2)
    assert shown.endswith("…") and len(shown) <= 70
    assert LONG_TITLE.startswith(shown[:-1].rstrip())
    assert LONG_TITLE[len(shown[:-1].rstrip())] == " "  # cut between words


async def test_thread_pagination_keeps_filters(client, catalog):
    r = await client.get("/threads", params={"meta_key": "category", "offset": "0"})
    assert r.status_code == 200
    assert "pillar_id=&" not in r.text  # empty filters stay out of the URL


# -- comparisons ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def judged(app: Any, client: httpx.AsyncClient, catalog: dict[str, int]) -> int:
    """Answers matched by prompt with swaps over 2 x 4 threads: 4 pairs, 8 comparisons,
    judged. Pair 0's swap flips the verdict; pair 1 has a reference label the judge meets,
    pair 2 one it contradicts; pair 3 has a failure and a low-confidence verdict."""
    body = {
        "session_name": "Inspect me",
        "pillar_ids": list(catalog.values()),
        "comparison_mode": "round_robin",
        "match_by_prompt_key": True,
        "position_swap": True,
    }
    r = await client.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    async with app.state.sessionmaker() as db:
        rows = list(
            await db.scalars(
                select(Comparison)
                .where(Comparison.session_id == sid)
                .order_by(Comparison.queue_position)
            )
        )
        assert len(rows) == 8
        pairs: dict[frozenset[int], list[Comparison]] = {}
        for c in rows:
            # the lower thread id wins in either order: swap twins agree
            c.winner = "A" if c.thread_a_id < c.thread_b_id else "B"
            c.status, c.confidence = "completed", 0.9
            c.scores_a, c.scores_b = {"helpfulness": 4.0}, {"helpfulness": 2.0}
            c.reasoning, c.completed_at = (
                "A is **clearer**. <script>x()</script>",
                datetime.now(UTC),
            )
            pairs.setdefault(frozenset((c.thread_a_id, c.thread_b_id)), []).append(c)
        groups = list(pairs.values())
        assert [len(g) for g in groups] == [2, 2, 2, 2]
        flip = groups[0][1]
        flip.winner = "A" if flip.winner == "B" else "B"
        groups[3][0].status, groups[3][0].winner = "failed", None
        groups[3][0].error = "provider said no"
        groups[3][1].confidence = 0.3
        for g, agree in ((groups[1], True), (groups[2], False)):
            lo, hi = sorted((g[0].thread_a_id, g[0].thread_b_id))
            label = "A" if agree else "B"  # the lower id wins every verdict
            db.add(ReferenceLabel(thread_a_id=lo, thread_b_id=hi, label=label, source="human"))
        await db.commit()
        return sid


async def _flagged(client: httpx.AsyncClient, sid: int, flag: str) -> list[dict[str, Any]]:
    r = await client.get(f"/api/sessions/{sid}/comparisons", params={"flag": flag, "limit": 500})
    assert r.status_code == 200, r.text
    return r.json()["items"]


async def test_comparison_filters_api(client, judged, app):
    sid = judged
    failed = await _flagged(client, sid, "failed")
    assert len(failed) == 1 and failed[0]["status"] == "failed"
    low = await _flagged(client, sid, "low_confidence")
    assert [c["confidence"] for c in low] == [0.3]
    flips = await _flagged(client, sid, "swap_flip")
    assert len(flips) == 2 and flips[0]["swap_group"] == flips[1]["swap_group"]
    assert {c["winner"] for c in flips} == {"A"} or {c["winner"] for c in flips} == {"B"}
    disagree = await _flagged(client, sid, "disagree")
    # the contradicted pair in both orders; the pair whose label it meets is not listed
    assert len(disagree) == 2
    assert len({frozenset((c["thread_a_id"], c["thread_b_id"])) for c in disagree}) == 1
    async with app.state.sessionmaker() as db:
        labels = list(await db.scalars(select(ReferenceLabel)))
    for c in disagree:
        lo, hi = sorted((c["thread_a_id"], c["thread_b_id"]))
        label = next(r.label for r in labels if (r.thread_a_id, r.thread_b_id) == (lo, hi))
        in_order = label if c["thread_a_id"] < c["thread_b_id"] else {"A": "B", "B": "A"}[label]
        assert in_order != c["winner"]
    everything = await client.get(f"/api/sessions/{sid}/comparisons")
    assert everything.json()["total"] == 8
    r = await client.get(f"/api/sessions/{sid}/comparisons", params={"flag": "bogus"})
    assert r.status_code == 422


async def test_comparisons_page_lists_and_filters(client, judged):
    sid = judged
    r = await client.get(f"/sessions/{sid}/comparisons")
    assert r.status_code == 200
    assert 'name="flag" value="swap_flip"' in r.text
    assert re.search(rf'href="/sessions/{sid}/comparisons/\d+"', r.text)
    part = await client.get(f"/sessions/{sid}/comparisons", params={"flag": "failed"}, headers=HX)
    assert part.text.count("<tr data-comparison-id") == 1 and "<html" not in part.text
    bad = await client.get(f"/sessions/{sid}/comparisons", params={"flag": "nonsense"})
    assert bad.status_code == 200  # an unknown filter shows everything
    assert (await client.get("/sessions/999999/comparisons")).status_code == 404


async def test_comparison_view_side_by_side_and_sanitised(client, judged, app):
    sid = judged
    async with app.state.sessionmaker() as db:
        c = (
            await db.scalars(
                select(Comparison)
                .where(Comparison.session_id == sid, Comparison.status == "completed")
                .order_by(Comparison.queue_position)
            )
        ).first()
        assert c is not None
        # make sure the view shows the untrusted answer on one side
        await db.execute(update(Comparison).where(Comparison.id == c.id).values(confidence=0.9))
        await db.commit()
    r = await client.get(f"/sessions/{sid}/comparisons/{c.id}")
    assert r.status_code == 200, r.text
    html = r.text
    assert 'id="answer-a"' in html and 'id="answer-b"' in html
    # the shared question is shown once, above both answers
    shared = re.search(r'id="shared-prompt".*?</section>', html, re.S)
    assert shared is not None and "Shared question" in shared.group(0)
    assert html.count("Shared question") == 1
    # verdict, scores of both sides, reasoning (rendered)
    assert 'id="verdict-winner"' in html and "wins" in html
    assert "<strong>clearer</strong>" in html
    assert re.search(r"●●●●○</span> 4", html) and re.search(r"●●○○○</span> 2", html)
    detail = await client.get(f"/api/sessions/{sid}/comparisons/{c.id}")
    assert detail.status_code == 200 and detail.json()["scores_b"] == {"helpfulness": 2.0}
    # if the evil thread is on a side, its HTML is inert
    if "print(&#39;hi&#39;)" in html or "print('hi')" in html:
        assert '<code class="language-python">' in html
    assert "<script>alert" not in html and "<script>x()" not in html
    assert 'href="javascript:' not in html
    # raw HTML shows as text: no tag carries an event handler, no image is loaded
    assert not re.search(r"<[a-z][^>]*\son[a-z]+=", html) and "<img" not in html
    missing = await client.get(f"/sessions/{sid}/comparisons/99999999")
    assert missing.status_code == 404


async def test_view_of_an_untrusted_answer(client, judged, app, catalog):
    """Find a comparison with the alpha thread holding HTML and links, and check its view."""
    sid = judged
    async with app.state.sessionmaker() as db:
        c = (
            await db.scalars(
                select(Comparison).where(
                    Comparison.session_id == sid, Comparison.pillar_a_id == catalog["alpha"]
                )
            )
        ).first()
    assert c is not None
    html = (await client.get(f"/sessions/{sid}/comparisons/{c.id}")).text
    answer_a = re.search(r'id="answer-a".*?</section>', html, re.S)
    assert answer_a is not None
    a = answer_a.group(0)
    assert '<code class="language-python">' in a  # code in a monospace block
    assert "&lt;script&gt;" in a and "<script" not in a
    assert 'href="https://example.org"' in a and "javascript:" not in a.split("[click]")[0]
    assert 'href="javascript' not in a and "<img" not in a


# -- new-session form: criteria sets, pairing default ----------------------------------------


async def test_new_session_form_defaults_for_prompt_keyed_threads(client, catalog):
    r = await client.get("/sessions/new")
    assert r.status_code == 200, r.text
    html = r.text
    box = re.search(r'<input type="checkbox" name="match_by_prompt_key"[^>]*>', html)
    assert box is not None and "checked" in box.group(0)
    assert 'id="prompt-default-why"' in html and "prompt key" in html
    chosen = re.search(r'<option value="(\w+)" selected>', html.split('id="criteria_set"')[1])
    assert chosen is not None and chosen.group(1) == "answer_quality"
    assert 'value="counselling"' in html and 'value="custom"' in html


async def test_new_session_form_defaults_pass_the_browsers_checks(client, catalog):
    """A default the field's own min/max/step rule refuses blocks the browser's estimate
    (adaptive's tolerance 0.01 against min 0.001, step 0.005). HTML's step base is `min`."""
    html = (await client.get("/sessions/new")).text
    fields = re.findall(r'<input type="number"[^>]*>', html)
    assert len(fields) > 5
    for field in fields:
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', field))
        if not attrs.get("value"):
            continue
        value = Decimal(attrs["value"])
        low = Decimal(attrs["min"]) if "min" in attrs else None
        if low is not None:
            assert value >= low, field
        if "max" in attrs:
            assert value <= Decimal(attrs["max"]), field
        step = attrs.get("step", "1")
        if step != "any":
            steps = (value - (low or Decimal(0))) / Decimal(step)
            assert steps == steps.to_integral_value(), field


async def test_creating_with_a_criteria_set(client, catalog):
    base = {"session_name": "Set", "comparison_mode": "round_robin"}
    ids = [str(i) for i in catalog.values()]
    r = await client.post(
        "/sessions/new",
        data=base | {"pillar_ids": ids, "criteria_set": "answer_quality", "criteria": "x"},
    )
    assert r.status_code == 303, r.text
    sid = int(r.headers["location"].rsplit("/", 1)[1])
    got = (await client.get(f"/api/sessions/{sid}")).json()
    assert got["criteria"] == [
        "helpfulness",
        "relevance",
        "accuracy",
        "depth",
        "creativity",
        "detail",
    ]
    r = await client.post(
        "/sessions/new",
        data=base | {"pillar_ids": ids, "criteria_set": "custom", "criteria": "tone, brevity"},
    )
    assert r.status_code == 303, r.text
    sid = int(r.headers["location"].rsplit("/", 1)[1])
    assert (await client.get(f"/api/sessions/{sid}")).json()["criteria"] == ["tone", "brevity"]


async def test_api_default_criteria_follow_the_threads_as_the_form_does(client, catalog):
    """Unset criteria on prompt-keyed threads (the demo, a benchmark) are answer quality, as
    the form chooses; set criteria are kept."""
    base = {"session_name": "API default", "pillar_ids": list(catalog.values())}
    r = await client.post("/api/sessions", json=base | {"comparison_mode": "round_robin"})
    assert r.status_code == 201, r.text
    assert r.json()["criteria"] == list(CRITERIA_SETS["answer_quality"].criteria)
    est = await client.post("/api/sessions/estimate", json=base)
    assert est.status_code == 200, est.text
    mine = base | {"criteria": ["tone"], "comparison_mode": "round_robin"}
    r = await client.post("/api/sessions", json=mine)
    assert r.status_code == 201 and r.json()["criteria"] == ["tone"]


async def test_form_keeps_match_by_prompt_off_when_a_thread_has_no_key(client, catalog):
    """Runs last in the module: it adds a pillar whose threads have no prompt key."""
    row = json.dumps({"pillar": "gamma", "external_id": "g1", "content": "no key"})
    r = await client.post("/api/threads/import", files={"file": ("g.jsonl", row.encode())})
    assert r.status_code == 200, r.text
    html = (await client.get("/sessions/new")).text
    box = re.search(r'<input type="checkbox" name="match_by_prompt_key"[^>]*>', html)
    assert box is not None and "checked" not in box.group(0)
    assert 'id="prompt-default-why"' not in html
    # ... and the API's unset criteria are the default set for threads without a key
    pillars = [p["id"] for p in (await client.get("/api/pillars")).json()]
    body = {"session_name": "Unkeyed", "pillar_ids": pillars, "comparison_mode": "round_robin"}
    r = await client.post("/api/sessions", json=body)
    assert r.status_code == 201 and r.json()["criteria"] == list(DEFAULT_CRITERIA)


async def test_running_count_says_claimed_ahead_beyond_the_workers(app, client, catalog):
    body = {
        "session_name": "Ahead",
        "pillar_ids": list(catalog.values())[:2],
        "comparison_mode": "round_robin",
        "worker_count": 2,
    }
    r = await client.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    async with app.state.sessionmaker() as db:
        ids = list(
            await db.scalars(select(Comparison.id).where(Comparison.session_id == sid).limit(3))
        )
        await db.execute(update(Comparison).where(Comparison.id.in_(ids)).values(status="running"))
        await db.commit()
    html = (await client.get(f"/sessions/{sid}/partials/progress")).text
    stat = re.search(r'<dd id="stat-running" title="([^"]*)">(.*?)</dd>', html, re.S)
    assert stat is not None and "claimed ahead" in stat.group(1) and "2 workers" in stat.group(1)
    assert "(2 judging, 1 claimed ahead)" in stat.group(2)
    async with app.state.sessionmaker() as db:
        await db.execute(update(Comparison).where(Comparison.id == ids[0]).values(status="pending"))
        await db.commit()
    html = (await client.get(f"/sessions/{sid}/partials/progress")).text
    assert 'id="claimed-ahead"' not in html  # at or under the worker count: nothing to explain
