"""What a new user meets first, in a real browser: the seven key pages (home, threads, new
tournament, live session, results, persona progress, persona review) at desktop width and
on a 390x844 phone, checked by axe-core (no critical or serious violation) and for
sideways scrolling; the phone's folded menu; a reviewer who is not offered the session
controls and whose forbidden htmx request shows one line; the new-token defaults and
copy button.

Screenshots of every page at both widths go to `test-artifacts/ux-<page>-<width>.png`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page, expect

from tests.e2e.conftest import ARTIFACTS, TIMEOUT_MS, LiveServer, api

pytestmark = pytest.mark.e2e

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
BLOCKING = ("critical", "serious")
SETTLE_TIMEOUT_S = 60.0
# The outermost elements reaching past the viewport, for the failure message.
WIDEST_JS = """(limit) => {
  const out = [];
  for (const e of document.querySelectorAll("body *")) {
    const r = e.getBoundingClientRect();
    if (r.right <= limit + 0.5 || r.width === 0) continue;
    const p = e.parentElement && e.parentElement.getBoundingClientRect();
    if (p && p.right > limit + 0.5) continue;
    out.push(`${e.tagName.toLowerCase()}#${e.id}.${[...e.classList].join(".")} ${Math.round(r.right)}`);
  }
  return out.slice(0, 8).join("; ");
}"""


async def _until(check: Any, what: str) -> Any:
    """Poll an async predicate (returning a truthy value) for up to SETTLE_TIMEOUT_S."""
    deadline = asyncio.get_running_loop().time() + SETTLE_TIMEOUT_S
    while asyncio.get_running_loop().time() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


async def _demo_pillars(page: Page, server: LiveServer) -> list[dict[str, Any]]:
    """The demo's pillars, loading the demo once per live server."""
    pillars = await api(page, server, "GET", "/api/pillars")
    if not pillars:
        await api(page, server, "POST", "/api/demo")
        pillars = await api(page, server, "GET", "/api/pillars")
    return pillars


async def _fixtures(page: Page, server: LiveServer) -> dict[str, str]:
    """The demo, one finished simulated tournament and a persona waiting for review;
    answers the seven pages' paths."""
    pillars = await _demo_pillars(page, server)
    providers = await api(page, server, "GET", "/api/providers")
    sim = next(p for p in providers if p["kind"] == "simulator")
    await api(
        page,
        server,
        "PATCH",
        f"/api/providers/{sim['id']}",
        data={"settings": {"latency_ms_mean": 5, "latency_ms_jitter": 2}},
    )
    session = await api(
        page,
        server,
        "POST",
        "/api/sessions",
        data={
            "session_name": "UX check",
            "pillar_ids": [p["id"] for p in pillars],
            "comparison_mode": "free_for_all",
            "max_threads_per_pillar": 2,
            "seed": 7,
            "auto_start": True,
        },
    )
    sid = session["id"]

    async def finished() -> bool:
        s = await api(page, server, "GET", f"/api/sessions/{sid}")
        return s["status"] in ("completed", "failed")

    await _until(finished, "the session to finish")
    persona = await api(page, server, "POST", "/api/personas/from-template/factual-qa")
    pid = persona["id"]
    await api(page, server, "POST", f"/api/personas/{pid}/training/start")

    async def awaiting_review() -> bool:
        iterations = await api(page, server, "GET", f"/api/personas/{pid}/iterations")
        return any(i["status"] == "awaiting_review" for i in iterations)

    await _until(awaiting_review, "iteration 1 to wait for review")
    return {
        "home": "/",
        "threads": "/threads",
        "new-tournament": "/sessions/new",
        "live": f"/sessions/{sid}",
        "results": f"/sessions/{sid}/results",
        "persona-progress": f"/personas/{pid}/progress",
        "persona-review": f"/personas/{pid}/review/1",
        "_session_id": str(sid),
    }


def _describe(violations: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{v['impact']}: {v['id']} ({v['help']}) at "
        + ", ".join(str(n.get("target")) for n in v.get("nodes", [])[:5])
        for v in violations
    )


async def test_key_pages_fit_a_phone_and_pass_axe(
    page: Page, browser: Browser, live_server: LiveServer, js_errors: list[str]
) -> None:
    pages = await _fixtures(page, live_server)
    state = await page.context.storage_state()
    axe = Axe()
    ARTIFACTS.mkdir(exist_ok=True)
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
                if name.startswith("_"):
                    continue
                await tab.goto(path)
                await tab.wait_for_load_state("networkidle")
                await tab.screenshot(
                    path=str(ARTIFACTS / f"ux-{name}-{width_name}.png"), full_page=True
                )
                if width_name == "phone":
                    scroll = await tab.evaluate("document.documentElement.scrollWidth")
                    if scroll > PHONE["width"]:
                        wide = await tab.evaluate(WIDEST_JS, PHONE["width"])
                        problems.append(
                            f"{name}: scrolls sideways on a phone ({scroll} px): {wide}"
                        )
                results = await axe.run(tab)
                blocking = [
                    v for v in results.response["violations"] if v.get("impact") in BLOCKING
                ]
                if blocking:
                    problems.append(f"{name} ({width_name}):\n{_describe(blocking)}")
        finally:
            await context.close()
    assert not problems, "\n".join(problems)
    assert not js_errors, js_errors


async def test_phone_menu_folds_the_top_bar(page: Page) -> None:
    await page.set_viewport_size(PHONE)
    await page.goto("/")
    threads_link = page.locator('#topbar nav a[href="/threads"]')
    toggle = page.locator("#menu-toggle")
    await expect(toggle).to_be_visible()
    await expect(threads_link).to_be_hidden()
    await toggle.click()
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    await expect(threads_link).to_be_visible()
    await threads_link.click()
    await page.wait_for_url("**/threads")
    # On a wide screen there is no menu button: the links show.
    await page.set_viewport_size(DESKTOP)
    await expect(page.locator("#menu-toggle")).to_be_hidden()
    await expect(page.locator('#topbar nav a[href="/threads"]')).to_be_visible()


async def test_reviewer_is_not_offered_session_controls(
    page: Page, browser: Browser, live_server: LiveServer
) -> None:
    pillars = await _demo_pillars(page, live_server)
    session = await api(
        page,
        live_server,
        "POST",
        "/api/sessions",
        data={
            "session_name": "Draft for a reviewer",
            "pillar_ids": [p["id"] for p in pillars[:2]],
        },
    )
    sid = session["id"]
    user = await page.request.post(
        "/api/users",
        headers=live_server.api_headers,
        data={"username": "ux-reviewer", "role": "reviewer", "password": "ux-password-long"},
    )
    assert user.status in (201, 409), await user.text()
    users = await api(page, live_server, "GET", "/api/users")
    uid = next(u["id"] for u in users if u["username"] == "ux-reviewer")
    token = await api(page, live_server, "POST", "/api/tokens", data={"name": "ux", "user_id": uid})
    assert token["role"] == "reviewer"
    context = await browser.new_context(
        base_url=live_server.url,
        extra_http_headers={"Authorization": f"Bearer {token['token']}"},
    )
    context.set_default_timeout(TIMEOUT_MS)
    try:
        tab = await context.new_page()
        await tab.goto(f"/sessions/{sid}")
        await expect(tab.locator("#controls-role")).to_contain_text("needs the researcher role")
        for control in ("#cancel", "#pause", "#resume", "#controls button.primary"):
            await expect(tab.locator(control)).to_have_count(0)
        await expect(tab.locator('#topbar nav a[href="/import"]')).to_have_count(0)
        await tab.goto("/sessions")
        await expect(tab.locator("#new-session")).to_have_count(0)
        await expect(tab.locator("#new-session-disabled")).to_contain_text(
            "needs the researcher role"
        )
        await tab.goto(f"/sessions/{sid}")
        # A forbidden htmx request (as a stale page would send) shows one line, in #flash.
        await tab.evaluate(
            "(sid) => htmx.ajax('POST', `/sessions/${sid}/cancel`, "
            "{target: '#progress-panel', swap: 'innerHTML'})",
            sid,
        )
        flash = tab.locator("#flash p.notice.error")
        await expect(flash).to_contain_text("this needs the researcher role; you are reviewer")
        assert await tab.locator("#flash").evaluate("e => e.children.length") == 1
        await expect(tab.locator("#progress-panel #controls")).to_have_count(1)
        await expect(tab.locator("#progress-panel h1")).to_have_count(0)
        assert (await api(page, live_server, "GET", f"/api/sessions/{sid}"))["status"] == "draft"
    finally:
        await context.close()


async def test_new_token_defaults_and_copy_button(page: Page) -> None:
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await page.goto("/account")
    await expect(page.locator("#token-role")).to_have_value("researcher")
    await expect(page.locator("#token-expiry")).to_have_value("90")
    await page.fill("#token-form input[name=name]", "ux-ci")
    await page.click("#token-form button[type=submit]")
    value = (await page.locator("#new-token-value").inner_text()).strip()
    await expect(page.locator("#new-token")).to_contain_text("(researcher)")
    await page.click("#copy-token")
    note = page.locator('[data-copied-for="#new-token-value"]')
    await expect(note).not_to_have_text("")
    if (await note.inner_text()) == "Copied.":
        assert await page.evaluate("navigator.clipboard.readText()") == value
    row = page.locator("#tokens tr", has_text="ux-ci")
    await expect(row).to_contain_text("researcher")
