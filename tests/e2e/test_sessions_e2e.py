"""A tournament in a real browser: load the demo, configure a free-for-all session with the
simulated judge from the form (the estimate follows the mode), start it, watch the
progress bar and the worker lanes move without a page reload until 100%, open every
results tab, export the comparisons as CSV, and read a thread's comparisons.

Screenshots of the configuration page, the live page mid-run, and each results tab go to
`test-artifacts/` (sessions-*.png) for a human to look at.
"""

from __future__ import annotations

import csv as std_csv
import io
import re

import pytest
from playwright.async_api import Page, expect

from tests.e2e.conftest import ARTIFACTS, LiveServer

pytestmark = pytest.mark.e2e

MARKER_JS = "window.__e2eMarker = 'still-here'"
READ_MARKER_JS = "window.__e2eMarker"
# 6 demo pillars capped at 2 threads: 12 threads. Pillar sample: 15 pillar pairs x 5
# samples x 2 (swap) = 150; free for all: 66 pairs x 2 = 132.
PILLAR_SAMPLE_TOTAL, FREE_FOR_ALL_TOTAL = "150", "132"
# About 132 / 4 workers x 0.12 s = 4 s of judging: long enough to watch, short for CI.
SIMULATOR = {"latency_ms_mean": 120, "latency_ms_jitter": 40}
# Each tab: its heading, and what must show in it (a chart, a table's bars, the findings).
TABS = {
    "overview": ("Overview", "svg.chart-bar"),
    "leaderboard": ("Thread leaderboard", "svg.chart-bar"),
    "distribution": ("Elo distribution by pillar", "svg.chart-histogram"),
    "matrix": ("Pillar matrix", "svg.chart-heatmap"),
    "position": ("Position bias", "svg.chart-bar"),
    "performance": ("Thread performance and coverage", "#pillar-coverage progress.meter"),
    "findings": ("Surprise findings", "#findings li, #no-findings"),
    "style": ("Style control", "#style-ranking, #style-not-identified"),
    "categories": ("Categories", "svg.chart-multiples"),
}


async def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"sessions-{name}.png"), full_page=True)


async def slow_down_simulator(page: Page, server: LiveServer) -> None:
    providers = await (await page.request.get("/api/providers", headers=server.api_headers)).json()
    sim = next(p for p in providers if p["kind"] == "simulator")
    r = await page.request.patch(
        f"/api/providers/{sim['id']}",
        headers=server.api_headers,
        data={"settings": (sim.get("settings") or {}) | SIMULATOR},
    )
    assert r.ok, await r.text()


async def test_tournament_from_form_to_results(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    await page.goto("/")
    await page.click("#load-demo")
    await expect(page.locator("#start-tournament")).to_be_visible()
    await slow_down_simulator(page, live_server)

    # -- configure ------------------------------------------------------------------------
    await page.click("#start-tournament-button")
    await expect(page.locator("h1")).to_have_text("New tournament")
    assert await page.locator("#pillar-chips input:checked").count() == 6
    total = page.locator("#sum-total")
    await page.fill("#session_name", "E2E free for all")
    await page.fill("#max_threads_per_pillar", "2")
    # Every demo thread has a prompt key: match by prompt is on by default, and says why.
    # This test counts pairings across prompts, so it turns it off.
    await expect(page.locator("input[name=match_by_prompt_key]")).to_be_checked()
    await expect(page.locator("#prompt-default-why")).to_be_visible()
    await page.uncheck("input[name=match_by_prompt_key]")
    await expect(total).to_have_text(PILLAR_SAMPLE_TOTAL)
    await expect(page.locator("#mode-count-free_for_all")).to_have_text("132 comparisons")
    await page.check("input[name=comparison_mode][value=free_for_all]")
    await expect(total).to_have_text(FREE_FOR_ALL_TOTAL)
    await expect(page.locator("#sum-threads")).to_have_text("12")
    # The baseline has no meaning in free for all: the form disables it.
    await expect(page.locator("select[name=baseline_pillar_id]")).to_be_disabled()
    await page.eval_on_selector(
        "#worker_count",
        "e => { e.value = '4'; e.dispatchEvent(new Event('input', {bubbles: true})); }",
    )
    await expect(page.locator("#worker-count-out")).to_have_text("4")
    await expect(page.locator("#sum-duration")).to_contain_text("at 4 workers")
    await expect(page.locator("#worker-duration")).to_have_text(re.compile(r"^≈ \d"))
    assert "simulated" in await page.locator("#judge_model_id option:checked").inner_text()
    await shot(page, "new")

    # -- watch it run ---------------------------------------------------------------------
    await page.click("#create-session")
    await page.wait_for_url(re.compile(r"/sessions/\d+$"))
    await page.evaluate(MARKER_JS)
    count = page.locator("#progress-count")
    await expect(count).to_have_text(re.compile(r"^([1-9]\d?|1[0-2]\d|130|131) / 132$"))
    streaming = page.locator(".lane[data-state] .lane-stream:not(:empty)")
    await expect(streaming.first).to_be_visible()
    # Lane names come from the thread-labels lookup, not the bare ids of the events.
    await expect(page.locator(".lane[data-state] .lane-a .pillar").first).not_to_be_empty()
    await page.locator(".lane[data-state]").first.click()
    focused = page.locator(".lane.focused")
    await expect(focused).to_have_count(1)
    await expect(focused).to_have_attribute("aria-expanded", "true")
    await expect(page.locator("#queue-list li").first).to_be_visible()
    # A little later every thread name is known: a fair picture of a run in progress.
    await expect(count).to_have_text(re.compile(r"^([2-9]\d|1[0-2]\d|130|131) / 132$"))
    await expect(focused.locator(".lane-stream")).not_to_be_empty()
    await shot(page, "live")
    await expect(count).to_have_text("132 / 132", timeout=30_000)
    await expect(page.locator("#progress-pct")).to_have_text("100%")
    await expect(page.locator(".lane .lane-result").first).to_be_visible()
    # both score columns fit inside the lane (the B column used to be clipped), also when
    # lanes are narrow
    await page.set_viewport_size({"width": 560, "height": 800})
    lane = page.locator(".lane:has(table.likert)").first
    lane_box = await lane.bounding_box()
    b_cell = lane.locator("table.likert tr").first.locator("td.dots").nth(1)
    b_box = await b_cell.bounding_box()
    assert lane_box and b_box and b_box["x"] + b_box["width"] <= lane_box["x"] + lane_box["width"]
    assert await b_cell.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
    await page.set_viewport_size({"width": 1280, "height": 800})
    await expect(page.locator("#results-link")).to_be_visible()
    assert await page.evaluate(READ_MARKER_JS) == "still-here"  # no reload
    assert await page.locator(".status-completed").count() >= 1

    # -- results --------------------------------------------------------------------------
    await page.click("#results-link")
    await expect(page.locator("#tab-overview")).to_have_class(re.compile("active"))
    await page.evaluate(MARKER_JS)
    for tab, (heading, content) in TABS.items():
        await page.click(f"#tab-{tab}")
        body = page.locator(f"#tab-body.tab-{tab}")
        await expect(body).to_be_visible()
        await expect(body.locator("h2").first).to_have_text(heading)
        await expect(body.locator(content).first).to_be_visible()
        await expect(page.locator(f"#tab-{tab}")).to_have_class(re.compile("active"))
        assert await page.locator("#tab-error").count() == 0
        text = await body.inner_text()
        assert "cannot be computed" not in text and "Internal Server Error" not in text
        await shot(page, f"results-{tab}")
    assert await page.evaluate(READ_MARKER_JS) == "still-here"

    await page.click("#tab-leaderboard")
    rows = page.locator("#leaderboard tbody tr")
    await expect(rows).to_have_count(12)
    await page.click("#leaderboard th a[data-sort=win_rate]")
    await expect(page.locator("#leaderboard th.sorted a")).to_have_attribute(
        "data-sort", "win_rate"
    )
    rates = [int(t.rstrip("%")) for t in await rows.locator("td:nth-child(7)").all_inner_texts()]
    assert rates == sorted(rates, reverse=True)

    # -- export (with the browser's session cookie) -----------------------------------------
    href = await page.locator("#export-csv").get_attribute("href")
    assert href
    csv = await page.request.get(href)
    assert csv.ok and csv.headers["content-type"].startswith("text/csv")
    text = await csv.text()
    # The provenance block (lines starting with #) comes first, then the CSV itself.
    lines = text.splitlines()
    block = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    assert "# simulated: true" in lines[:block]
    assert lines[block].startswith("comparison_id,queue_position,status")
    rows = list(std_csv.DictReader(io.StringIO("\n".join(lines[block:]))))
    assert len(rows) == 132 and any(r["raw_response"] for r in rows)

    # -- a thread's comparisons ------------------------------------------------------------
    await page.locator("#leaderboard tbody tr a").first.click()
    await expect(page.locator("#thread-comparisons .tc").first).to_be_visible()
    await expect(page.locator("#thread-record")).to_contain_text("verdicts")
    await shot(page, "thread")

    # -- the session on the home page -------------------------------------------------------
    await page.click('nav a[href="/"]')
    row = page.locator("#home-sessions tbody tr").first
    await expect(row.locator(".status-completed")).to_be_visible()
    await expect(row.locator("progress")).to_have_attribute("value", "132")
    await shot(page, "home")
    assert js_errors == []
