"""Results tabs in a real browser at 1280 and 390 px (issue 27, items 5 and 9): a slow tab
load shows the loading indicator only after 300 ms; the agreement tab of a session with
people's labels only opens on them, names its threads by title, and its links lead to the
comparison's page and to that very pair in the review.

Screenshots go to `test-artifacts/results-tabs-<what>-<width>.png`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from playwright.async_api import Page, Route, expect

from tests.e2e.conftest import ARTIFACTS, LiveServer, api

pytestmark = pytest.mark.e2e

WIDTHS = {1280: {"width": 1280, "height": 800}, 390: {"width": 390, "height": 844}}
SLOW_S = 1.2  # the tab answer is held this long: the indicator must show meanwhile
# Records, per request, when it began and when #tab-loading first became visible.
WATCH_JS = """() => {
  window.__loading = [];
  document.body.addEventListener("htmx:beforeRequest", () => {
    const entry = { start: performance.now(), shown: null };
    window.__loading.push(entry);
    const el = document.getElementById("tab-loading");
    const tick = () => {
      if (getComputedStyle(el).visibility === "visible" && getComputedStyle(el).opacity > 0.5) {
        entry.shown = performance.now() - entry.start;
      } else if (performance.now() - entry.start < 5000) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
}"""


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


async def _labelled_session(page: Page, server: LiveServer) -> tuple[int, list[tuple[int, int]]]:
    """Recorded judgments of two pillars on three prompts, labelled by two people (no gold):
    the judge is wrong on the last pair."""
    rows = [
        {
            "pillar": pillar,
            "external_id": f"tab-{pillar}-{i}",
            "title": f"{pillar.title()} answer to question {i}",
            "content": f"The {pillar} answer to question {i}.",
        }
        for pillar in ("north", "south")
        for i in range(3)
    ]
    file = {"name": "t.jsonl", "mimeType": "application/jsonl", "buffer": _jsonl(rows)}
    await api(page, server, "POST", "/api/threads/import", multipart={"file": file})
    listed = await api(page, server, "GET", "/api/threads?limit=500")
    ids = {t["external_id"]: t["id"] for t in listed["items"]}
    pairs = [(ids[f"tab-north-{i}"], ids[f"tab-south-{i}"]) for i in range(3)]
    judged = [
        {"thread_a": a, "thread_b": b, "verdict": v, "label": "A", "annotator": who}
        | {"source": "human"}
        for (a, b), v in zip(pairs, "AAB", strict=True)
        for who in ("ann", "bob")
    ]
    file = {"name": "j.jsonl", "mimeType": "application/jsonl", "buffer": _jsonl(judged)}
    made = await api(
        page,
        server,
        "POST",
        "/api/sessions/import",
        multipart={"file": file, "session_name": "Agreement in the browser"},
    )
    return made["session_id"], pairs


async def test_results_tabs_at_both_widths(
    page: Page, live_server: LiveServer, js_errors: list[str]
) -> None:
    sid, pairs = await _labelled_session(page, live_server)
    wrong = pairs[2]

    async def slow(route: Route) -> None:
        await asyncio.sleep(SLOW_S)
        await route.continue_()

    await page.route("**/partials/results/agreement*", slow)
    ARTIFACTS.mkdir(exist_ok=True)
    for width, viewport in WIDTHS.items():
        await page.set_viewport_size(viewport)
        await page.goto(f"/sessions/{sid}/results")
        indicator = page.locator("#tab-loading")
        await expect(indicator).to_be_hidden()  # nothing loads: no indicator
        await page.evaluate(WATCH_JS)
        await page.click("#tab-agreement")
        await expect(page.locator("#agreement-figures")).to_be_visible(timeout=15_000)
        await expect(indicator).to_be_hidden()
        (load,) = await page.evaluate("window.__loading")
        # shown while the answer was held, and not before 300 ms had passed
        assert load["shown"] is not None, width
        assert 280 <= load["shown"] <= SLOW_S * 1000, (width, load)

        # people's labels only: the tab opened on them
        await expect(page.locator("#agreement-reference")).to_have_value("human")
        rows = page.locator("#agreement-disagreements tbody tr")
        await expect(rows.first).to_contain_text("North answer to question 2")
        await expect(rows.first).to_contain_text("South answer to question 2")
        scroll = await page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= viewport["width"], (width, scroll)
        await page.screenshot(
            path=str(ARTIFACTS / f"results-tabs-agreement-{width}.png"), full_page=True
        )

        comparison = rows.first.locator("a", has_text="#")
        href = await comparison.get_attribute("href")
        assert href and href.startswith(f"/sessions/{sid}/comparisons/"), href
        await comparison.click()
        await expect(page.locator("h1")).to_be_visible()
        assert "/api/" not in page.url
        await page.go_back()
        await expect(page.locator("#agreement-disagreements")).to_be_visible(timeout=15_000)
        await page.locator("#agreement-disagreements a", has_text="view pair").first.click()
        panel = page.locator("#pair-review-panel")
        await expect(panel).to_have_attribute("data-pair", f"{wrong[0]}-{wrong[1]}")
        await expect(page.locator("#review-viewing")).to_be_visible()
        await page.screenshot(path=str(ARTIFACTS / f"results-tabs-review-{width}.png"))
    assert not js_errors, js_errors
