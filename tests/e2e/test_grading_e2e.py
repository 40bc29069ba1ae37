"""Single-answer grading in a real browser: the form offers the mode with its explanation,
and a graded demo's Scores tab shows mean grades with intervals, the charts and the
threads, with no JavaScript error. Screenshot: `test-artifacts/grading-scores.png`."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import Page

from tests.e2e.conftest import ARTIFACTS, TIMEOUT_MS, LiveServer, api, demo_with_fast_judge

pytestmark = pytest.mark.e2e


async def test_the_scores_tab_of_a_graded_demo(
    page: Page, live_server: LiveServer, js_errors: list[str]
) -> None:
    pillars, _ = await demo_with_fast_judge(page, live_server)
    await page.goto(f"{live_server.url}/sessions/new", timeout=TIMEOUT_MS)
    await page.locator('input[name="comparison_mode"][value="single"]').check()
    await page.locator("#single-grading-why").wait_for(state="visible", timeout=TIMEOUT_MS)

    made = await api(
        page,
        live_server,
        "POST",
        "/api/sessions",
        data={
            "session_name": "graded demo",
            "pillar_ids": pillars,
            "comparison_mode": "single",
            "auto_start": True,
            "seed": 3,
        },
    )
    sid = made["id"]
    for _ in range(240):
        if (await api(page, live_server, "GET", f"/api/sessions/{sid}"))["status"] == "completed":
            break
        await asyncio.sleep(0.5)
    await page.goto(f"{live_server.url}/sessions/{sid}/results?tab=scores", timeout=TIMEOUT_MS)
    rows = page.locator("#scores-pillars tbody tr")
    assert await rows.count() == 6
    first = await rows.first.inner_text()
    assert "gpt-4" in first and " to " in first  # the best model, with its interval
    assert await page.locator("#tab-body svg").count() >= 2  # means and distribution
    assert await page.locator("#scores-threads tbody tr").count() == 60
    assert await page.locator("#no-reference-grades").is_visible()
    await page.screenshot(path=str(ARTIFACTS / "grading-scores.png"), full_page=True)
    assert js_errors == []
