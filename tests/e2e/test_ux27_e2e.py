"""Issue #27 items 10 and 11 in a real browser, at 1280 and 390 px, each page also passing
axe (no critical or serious violation): the leaderboard's titles
take two lines at most and its bars follow the table; the adaptive live page, the pillar
matrix and the session header fit a phone (the matrix at a legible size, scrolling in its own
box; the Live / Results links clear of the line below); the confusion matrix has no empty
band; a three-judge panel is named in full on the live page, the Overview and the list.

Screenshots go to `test-artifacts/ux27-<page>-<width>.png`.
"""

from __future__ import annotations

import asyncio

import pytest
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page

from tests.e2e.conftest import ARTIFACTS, TIMEOUT_MS, LiveServer, api, demo_with_fast_judge

pytestmark = pytest.mark.e2e

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
SETTLE_TIMEOUT_S = 120.0
BLOCKING = ("critical", "serious")
PANEL_NAMES = ("simulated-judge", "ux27-judge-b", "ux27-judge-c")


async def _finished(page: Page, server: LiveServer, sid: int) -> None:
    deadline = asyncio.get_running_loop().time() + SETTLE_TIMEOUT_S
    while asyncio.get_running_loop().time() < deadline:
        s = await api(page, server, "GET", f"/api/sessions/{sid}")
        if s["status"] in ("completed", "failed"):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"session {sid} did not finish in {SETTLE_TIMEOUT_S:.0f} s")


async def _sessions(page: Page, server: LiveServer) -> dict[str, int]:
    """The demo; a free-for-all with reference labels, a small adaptive run over threads and
    a three-judge panel, all finished."""
    pillars, simulator = await demo_with_fast_judge(page, server)
    models = {m["name"]: m["id"] for m in await api(page, server, "GET", "/api/models")}
    for name in PANEL_NAMES[1:]:
        made = await api(
            page,
            server,
            "POST",
            "/api/models",
            data={"provider_id": simulator, "name": name, "model": name},
        )
        models[name] = made["id"]
    common = {"seed": 7, "auto_start": True}
    ffa = await api(
        page,
        server,
        "POST",
        "/api/sessions",
        data=common
        | {
            "session_name": "ux27 field",
            "pillar_ids": pillars,
            "comparison_mode": "free_for_all",
            "max_threads_per_pillar": 4,
        },
    )
    adaptive = await api(
        page,
        server,
        "POST",
        "/api/sessions",
        data=common
        | {
            "session_name": "ux27 adaptive",
            "pillar_ids": pillars,
            "comparison_mode": "adaptive",
            "adaptive": {"unit": "threads", "budget_comparisons": 150},
        },
    )
    panel = await api(
        page,
        server,
        "POST",
        "/api/sessions",
        data=common
        | {
            "session_name": "ux27 panel",
            "pillar_ids": pillars[:3],
            "comparison_mode": "free_for_all",
            "max_threads_per_pillar": 2,
            "panel": {
                "members": [{"model_id": models[n]} for n in PANEL_NAMES],
                "rule": "majority",
            },
        },
    )
    ids = {"ffa": ffa["id"], "adaptive": adaptive["id"], "panel": panel["id"]}
    for sid in ids.values():
        await _finished(page, server, sid)
    # Reference labels for the free-for-all's first pairs: the Agreement tab's confusion matrix.
    listed = await api(page, server, "GET", f"/api/sessions/{ids['ffa']}/comparisons?limit=80")
    items = listed["items"] if isinstance(listed, dict) else listed
    # one label a pair, whichever order it was shown in
    unordered = {frozenset((c["thread_a_id"], c["thread_b_id"])): c for c in items}
    pairs = [(c["thread_a_id"], c["thread_b_id"]) for c in unordered.values()][:30]
    labels = "\n".join(
        f'{{"thread_a": {a}, "thread_b": {b}, "label": "{("A", "B", "TIE")[i % 3]}"}}'
        for i, (a, b) in enumerate(pairs)
    )
    await api(
        page,
        server,
        "POST",
        "/api/references/import",
        multipart={
            "file": {
                "name": "labels.jsonl",
                "mimeType": "application/json",
                "buffer": labels.encode(),
            }
        },
    )
    return ids


# Every box of `selector` that overlaps a box of `other` (their rectangles intersect).
OVERLAP_JS = """([selector, other]) => {
  const a = [...document.querySelectorAll(selector)].map(e => e.getBoundingClientRect());
  const b = [...document.querySelectorAll(other)].map(e => e.getBoundingClientRect());
  const hit = [];
  for (const r of a) for (const s of b) {
    if (r.left < s.right - 0.5 && s.left < r.right - 0.5 && r.top < s.bottom - 0.5 && s.top < r.bottom - 0.5)
      hit.push(`${Math.round(r.top)}-${Math.round(r.bottom)} vs ${Math.round(s.top)}-${Math.round(s.bottom)}`);
  }
  return hit;
}"""
# Thread links in the leaderboard taller than two lines, or whose title attribute lacks the text.
TALL_TITLES_JS = """() => {
  const out = [];
  for (const a of document.querySelectorAll("#leaderboard tbody td:nth-child(2) a")) {
    const line = parseFloat(getComputedStyle(a).lineHeight) || 20;
    if (a.getBoundingClientRect().height > 2 * line + 1) out.push(`${a.textContent.slice(0, 40)}: ${Math.round(a.getBoundingClientRect().height)} px`);
    if (a.title !== a.textContent.trim()) out.push(`${a.textContent.slice(0, 40)}: title attribute differs`);
  }
  return out;
}"""
LEADERBOARD_ORDER_JS = """() => {
  const ranks = [...document.querySelectorAll("#leaderboard tbody tr td:first-child")].map(td => td.textContent.trim());
  const bars = [...document.querySelectorAll("svg.chart-bar rect.bar title")].map(t => t.textContent.match(/^#(\\d+) /));
  return {ranks: ranks.slice(0, bars.length), bars: bars.map(m => m ? m[1] : null)};
}"""


async def test_result_pages_fit_and_read_at_desktop_and_phone_widths(
    page: Page, browser: Browser, live_server: LiveServer, js_errors: list[str]
) -> None:
    ids = await _sessions(page, live_server)
    ffa, adaptive, panel = ids["ffa"], ids["adaptive"], ids["panel"]
    state = await page.context.storage_state()
    ARTIFACTS.mkdir(exist_ok=True)
    pages = {
        "adaptive-live": f"/sessions/{adaptive}",
        "live": f"/sessions/{ffa}",
        "leaderboard": f"/sessions/{ffa}/results?tab=leaderboard",
        "matrix": f"/sessions/{ffa}/results?tab=matrix",
        "agreement": f"/sessions/{ffa}/results?tab=agreement",
        "panel-live": f"/sessions/{panel}",
        "panel-overview": f"/sessions/{panel}/results",
        "sessions": "/sessions",
        "import": "/import",
    }
    axe = Axe()
    problems: list[str] = []
    for width_name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        context = await browser.new_context(
            base_url=live_server.url,
            viewport=viewport,  # type: ignore[arg-type]
            storage_state=state,  # type: ignore[arg-type]
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            tab = await context.new_page()
            for name, path in pages.items():
                await tab.goto(path)
                await tab.wait_for_load_state("networkidle")
                await tab.screenshot(
                    path=str(ARTIFACTS / f"ux27-{name}-{width_name}.png"), full_page=True
                )
                where = f"{name} ({width_name})"
                found_axe = await axe.run(tab)
                problems += [
                    f"{where}: axe {v['impact']}: {v['id']} at {[n.get('target') for n in v['nodes'][:3]]}"
                    for v in found_axe.response["violations"]
                    if v.get("impact") in BLOCKING
                ]
                scroll = await tab.evaluate("document.scrollingElement.scrollWidth")
                if scroll > viewport["width"]:
                    problems.append(f"{where}: {scroll} px wide in a {viewport['width']} px window")
                if await tab.locator(".page-head .subnav").count():
                    hit = await tab.evaluate(OVERLAP_JS, [".page-head .subnav a", ".facts"])
                    if hit:
                        problems.append(f"{where}: the Live/Results links overlap the facts: {hit}")
                if name == "leaderboard":
                    problems += [f"{where}: {t}" for t in await tab.evaluate(TALL_TITLES_JS)]
                    order = await tab.evaluate(LEADERBOARD_ORDER_JS)
                    if not order["bars"] or order["bars"] != order["ranks"]:
                        problems.append(f"{where}: bars {order['bars']} vs table {order['ranks']}")
                if name == "matrix":
                    drawn, native = await tab.locator("#tab-body svg.chart").first.evaluate(
                        "s => [s.getBoundingClientRect().width, s.width.baseVal.value]"
                    )
                    if drawn < native - 1:
                        problems.append(f"{where}: matrix shrunk to {drawn:.0f} of {native:.0f} px")
                if name == "agreement" and width_name == "desktop":
                    table, body = await tab.evaluate(
                        "() => [document.querySelector('#agreement-confusion').getBoundingClientRect().width,"
                        " document.querySelector('#tab-body').getBoundingClientRect().width]"
                    )
                    if table > 0.5 * body:
                        problems.append(f"{where}: confusion matrix {table:.0f} of {body:.0f} px")
                if name in ("panel-live", "panel-overview", "sessions"):
                    scope = {"panel-live": ".facts", "panel-overview": "#overview-judges"}
                    found = tab.locator(scope.get(name, f"#session-{panel}"))
                    text = await found.first.inner_text() if await found.count() else ""
                    if not ("panel of 3" in text and all(n in text for n in PANEL_NAMES)):
                        problems.append(f"{where}: the panel is not named in full: {text!r}")
        finally:
            await context.close()
    assert not problems, "\n".join(problems)
    assert not js_errors, js_errors
