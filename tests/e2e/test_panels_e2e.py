"""A panel session in a real browser: three simulated members judge every comparison; the
live lanes show each member's answer as it arrives, and the Results tab "Panel" shows the
members, the kappa heatmap and whether the panel beats its best member.

Screenshots: `test-artifacts/panels-live.png`, `panels-results.png`.
"""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from tests.e2e.conftest import ARTIFACTS, LiveServer
from tests.e2e.test_sessions_e2e import slow_down_simulator

pytestmark = pytest.mark.e2e


async def test_panel_lanes_and_report(page: Page, live_server: LiveServer, js_errors: list[str]):
    await page.goto("/")
    await page.click("#load-demo")
    await expect(page.locator("#start-tournament")).to_be_visible()
    await slow_down_simulator(page, live_server)
    api = live_server.api_headers
    models = await (await page.request.get("/api/models", headers=api)).json()
    judge = next(m["id"] for m in models if m["name"] == "simulated-judge")
    pillars = await (await page.request.get("/api/pillars", headers=api)).json()
    r = await page.request.post(
        "/api/sessions",
        headers=api,
        data={
            "session_name": "E2E panel",
            "pillar_ids": [p["id"] for p in pillars if p["thread_count"] > 0],
            "comparison_mode": "free_for_all",
            "max_threads_per_pillar": 2,
            "worker_count": 4,
            "panel": {"members": [{"model_id": judge}] * 3, "rule": "majority"},
            "auto_start": True,
        },
    )
    assert r.ok, await r.text()
    sid = (await r.json())["id"]

    await page.goto(f"/sessions/{sid}")
    votes = page.locator(".lane .lane-votes li")
    await expect(votes.first).to_be_visible()
    await expect(votes.first).to_have_text(re.compile(r"^simulated-judge: "))
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "panels-live.png"), full_page=True)
    await expect(page.locator("#progress-pct")).to_have_text("100%", timeout=60_000)

    await page.goto(f"/sessions/{sid}/results?tab=panel")
    body = page.locator("#tab-body.tab-panel")
    await expect(body.locator("h2").first).to_contain_text("Panel")
    await expect(body.locator("svg.chart-heatmap")).to_be_visible()
    await expect(body.locator("#panel-members tbody tr")).to_have_count(4)  # 3 + the panel
    await expect(body.locator("#panel-verdict")).to_be_visible()
    await page.screenshot(path=str(ARTIFACTS / "panels-results.png"), full_page=True)
    assert js_errors == []
