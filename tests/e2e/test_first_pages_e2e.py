"""Issue 20's pages in a real browser: the thread browser's filters (all pillars, URL,
metadata), the new-session defaults for benchmark data, a session's comparisons listed
with filters and one comparison side by side, and the favicon.

Screenshots go to `test-artifacts/` (i20-*.png); on failure the fixtures save one too.
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.async_api import Page, expect

from tests.e2e.conftest import ARTIFACTS, LiveServer

pytestmark = pytest.mark.e2e


async def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"i20-{name}.png"), full_page=True)


async def ensure_demo(page: Page, server: LiveServer) -> None:
    response = await page.request.post("/api/demo", headers=server.api_headers)
    assert response.ok, await response.text()


def query(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.url).query, keep_blank_values=True)


async def test_threads_search_all_pillars_and_filters_in_the_url(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    await ensure_demo(page, live_server)
    await page.goto("/threads")
    rows = page.locator("#thread-rows tbody tr")
    await expect(rows).to_have_count(50)
    # pick a pillar, then go back to "All pillars" and search: no 422 JSON, every pillar
    option = page.locator("#pillar option").nth(1)
    await page.select_option("#pillar", value=await option.get_attribute("value"))
    await expect(rows).to_have_count(10)
    await page.select_option("#pillar", value="")
    await page.fill("#q", "Q81")
    await expect(rows).to_have_count(6)  # question 81 answered by the 6 models
    assert "detail" not in await page.locator("#thread-rows").inner_text()
    assert len(set(await rows.locator("td:nth-child(2)").all_inner_texts())) == 6
    await expect(page).to_have_url(re.compile(r"q=Q81"))
    # metadata filter: MT-Bench category
    await page.fill("#q", "")
    await page.select_option("#meta-key", value="category")
    await page.fill("#meta-value", "coding")
    await expect(page).to_have_url(re.compile(r"meta_value=coding"))
    n = await rows.count()
    assert 0 < n < 50
    assert all("(coding)" in t for t in await rows.locator("td:first-child").all_inner_texts())
    # the URL holds the filters: a reload shows the same rows
    assert query(page)["meta_key"] == ["category"]
    await page.reload()
    await expect(rows).to_have_count(n)
    await expect(page.locator("#meta-value")).to_have_value("coding")
    # prompt key filter
    await page.goto("/threads?prompt_key=81")
    await expect(rows).to_have_count(6)
    # long titles are cut at a word with an ellipsis, whole in the tooltip
    await page.goto("/threads")
    link = rows.first.locator("a")
    shown, full = await link.inner_text(), await link.get_attribute("title")
    assert full is not None and (shown == full or (shown.endswith("…") and len(shown) <= 70))
    await shot(page, "threads")
    assert js_errors == []


async def test_new_session_defaults_for_benchmark_data(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    await ensure_demo(page, live_server)
    await page.goto("/sessions/new")
    await expect(page.locator("input[name=match_by_prompt_key]")).to_be_checked()
    await expect(page.locator("#prompt-default-why")).to_contain_text("prompt key")
    await expect(page.locator("#criteria_set")).to_have_value("answer_quality")
    # the judge dropdown offers judges only
    options = await page.locator("#judge_model_id option").all_inner_texts()
    assert any("simulated-judge" in o for o in options)
    assert not any("simulated-task" in o or "simulated-engineer" in o for o in options)
    # typing one's own criteria switches the set to "Your own"
    await page.fill("#criteria", "tone, brevity")
    await expect(page.locator("#criteria_set")).to_have_value("custom")
    await shot(page, "new-session")
    assert js_errors == []


async def test_adaptive_estimate_follows_the_form(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    """Adaptive's defaults pass the browser's own field checks, so its Summary and mode card
    show adaptive's numbers; a refused field says so instead of leaving stale numbers."""
    await ensure_demo(page, live_server)
    await page.goto("/sessions/new")
    await page.check("input[name=comparison_mode][value=adaptive]")
    # adaptive's estimate simulates a few runs: give it time on a busy machine
    await expect(page.locator("#adaptive-estimate")).to_be_visible(timeout=30_000)
    await expect(page.locator("#mode-count-adaptive")).to_have_text(
        re.compile(r"^[\d,]+ comparisons$")
    )
    await expect(page.locator("#estimate-stale")).to_have_count(0)
    # adaptive sets order and pairing itself: the two checkboxes are off, and say why, so
    # its free-for-all is the form's free-for-all (it said 1,770 beside the card's 300)
    for box in ("position_swap", "match_by_prompt_key"):
        await expect(page.locator(f"input[name={box}]")).to_be_disabled()
    await expect(page.locator("#adaptive-pairing-why")).to_be_visible()
    card = await page.locator("#mode-count-free_for_all").inner_text()
    assert card.endswith(" comparisons")
    free_for_all = page.locator("#adaptive-estimate dt:text('Free-for-all') + dd")
    await expect(free_for_all).to_contain_text(card)
    await page.fill("input[name=adaptive_tolerance]", "0.0005")  # below its minimum
    stale = page.locator("#estimate-stale")
    await expect(stale).to_contain_text("Not up to date: Tolerance")
    await page.fill("input[name=adaptive_tolerance]", "0.02")
    await expect(stale).to_have_count(0, timeout=30_000)
    await expect(page.locator("#adaptive-estimate")).to_be_visible()
    await page.check("input[name=comparison_mode][value=round_robin]")
    await expect(page.locator("input[name=match_by_prompt_key]")).to_be_enabled()
    await expect(page.locator("#adaptive-pairing-why")).to_be_hidden()
    assert js_errors == []


async def _judged_session(page: Page, server: LiveServer) -> int:
    pillars = await (await page.request.get("/api/pillars", headers=server.api_headers)).json()
    body = {
        "session_name": "E2E inspect",
        "pillar_ids": [p["id"] for p in pillars][:3],
        "comparison_mode": "round_robin",
        "match_by_prompt_key": True,
        "max_threads_per_pillar": 3,
        "criteria": ["helpfulness", "accuracy", "detail"],
        "auto_start": True,
    }
    r = await page.request.post("/api/sessions", headers=server.api_headers, data=body)
    assert r.ok, await r.text()
    sid = (await r.json())["id"]
    for _ in range(300):
        s = await (
            await page.request.get(f"/api/sessions/{sid}", headers=server.api_headers)
        ).json()
        if s["status"] in ("completed", "failed"):
            break
        await asyncio.sleep(0.2)
    assert s["status"] == "completed", s
    return sid


async def test_comparisons_list_filters_and_side_by_side(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    await ensure_demo(page, live_server)
    sid = await _judged_session(page, live_server)
    await page.goto(f"/sessions/{sid}/results")
    await page.click("#comparisons-link")
    await expect(page).to_have_url(re.compile(rf"/sessions/{sid}/comparisons$"))
    rows = page.locator("#comparison-table tbody tr")
    total = await rows.count()
    assert total > 0
    # a filter swaps the rows in place and lands in the URL
    await page.check("input[name=flag][value=failed]")
    await expect(page.locator("#no-comparisons")).to_be_visible()
    await expect(page).to_have_url(re.compile(r"flag=failed"))
    await page.check("input[name=flag][value='']")
    await expect(rows).to_have_count(total)
    await shot(page, "comparisons")
    await rows.first.locator("a").click()
    await expect(page).to_have_url(re.compile(rf"/sessions/{sid}/comparisons/\d+$"))
    # the shared MT-Bench question once, both answers side by side, verdict and scores
    await expect(page.locator("#shared-prompt")).to_be_visible()
    a, b = page.locator("#answer-a"), page.locator("#answer-b")
    await expect(a).to_be_visible()
    await expect(b).to_be_visible()
    box_a, box_b = await a.bounding_box(), await b.bounding_box()
    assert box_a and box_b and box_a["x"] + box_a["width"] <= box_b["x"] + 1  # side by side
    assert abs(box_a["y"] - box_b["y"]) < 2
    await expect(page.locator("#verdict-winner")).to_have_text(re.compile(r"wins|Tie"))
    await expect(page.locator("#comparison-scores tbody tr")).to_have_count(3)
    await expect(page.locator("#comparison-reasoning")).not_to_be_empty()
    # code renders in a monospace font
    code = page.locator(".md pre code, .md code").first
    if await code.count():
        family = await code.evaluate("e => getComputedStyle(e).fontFamily")
        assert "mono" in family.lower() or "consolas" in family.lower()
    await shot(page, "comparison")
    assert js_errors == []


async def test_favicon_is_served_and_linked(page: Page, js_errors: list[str]):
    failed: list[str] = []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    await page.goto("/")
    href = await page.locator("link[rel=icon]").get_attribute("href")
    assert href == "/static/favicon.svg"
    r = await page.request.get(href)
    assert r.status == 200 and "svg" in r.headers["content-type"]
    await page.wait_for_timeout(300)
    assert not [u for u in failed if "favicon" in u]
    assert js_errors == []
