"""The catalog in a real browser: empty state, demo data, thread filter (HTMX), thread view,
and an import with errors then success, all without full page reloads where HTMX is used.

The tests share one live server (module scope) and run in file order: the first one needs
the empty database. The others load the demo themselves (idempotent) so each can run alone.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from playwright.async_api import Page, expect

from tests.e2e.conftest import ARTIFACTS, LiveServer

pytestmark = pytest.mark.e2e

# A page-level marker survives HTMX swaps and vanishes on a full page load.
MARKER_JS = "window.__e2eMarker = 'still-here'"
READ_MARKER_JS = "window.__e2eMarker"


async def ensure_demo(page: Page, server: LiveServer) -> None:
    response = await page.request.post("/api/demo", headers=server.api_headers)
    assert response.ok, await response.text()


def path_of(page: Page) -> str:
    return urlparse(page.url).path


async def test_home_empty_state_then_load_demo(page: Page, js_errors: list[str]):
    await page.goto("/")
    await expect(page.locator("#empty-state")).to_be_visible()
    await page.click("#load-demo")
    pillar_links = page.locator('a[href^="/threads?pillar_id="]')
    await expect(pillar_links).to_have_count(6)
    await expect(page.locator("#empty-state")).to_have_count(0)
    assert path_of(page) == "/"
    assert "gpt-4" in await pillar_links.all_inner_texts()
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "home.png"), full_page=True)
    assert js_errors == []


async def test_threads_filter_by_pillar_swaps_rows_without_reload(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    await ensure_demo(page, live_server)
    await page.goto("/")
    await page.click('nav a[href="/threads"]')
    rows = page.locator("#thread-rows tbody tr")
    await expect(rows).to_have_count(50)  # first page of 60 demo threads
    assert len(set(await rows.locator("td:nth-child(2)").all_inner_texts())) > 1

    option = page.locator("#pillar option").nth(2)
    value, label = await option.get_attribute("value"), await option.inner_text()
    name, count = label.rsplit(" (", 1)
    await page.evaluate(MARKER_JS)
    await page.select_option("#pillar", value=value)
    await expect(rows).to_have_count(int(count.rstrip(")")))
    assert set(await rows.locator("td:nth-child(2)").all_inner_texts()) == {name}
    assert path_of(page) == "/threads"
    assert await page.evaluate(READ_MARKER_JS) == "still-here"
    assert js_errors == []


async def test_thread_page_shows_the_conversation(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    await ensure_demo(page, live_server)
    await page.goto("/threads")
    link = page.locator("#thread-rows tbody tr a").first
    # the list cuts long titles at a word; the whole title is the link's tooltip
    title = await link.get_attribute("title")
    assert title and (await link.inner_text()).rstrip("…").strip() in title
    await link.click()
    await expect(page.locator("h1")).to_have_text(title)
    assert path_of(page).startswith("/threads/")
    messages = page.locator("#conversation .message")
    await expect(messages.first).to_be_visible()
    roles = await messages.locator(".role").all_text_contents()  # not CSS-uppercased
    assert roles[:2] == ["user", "assistant"], roles
    assert all(body.strip() for body in await messages.locator(".body").all_inner_texts())
    assert js_errors == []


BAD_CSV = b"pillar,content\ne2e-pillar,a fine answer\ne2e-pillar,\n"
GOOD_CSV = (
    b"pillar,external_id,content\n"
    b"e2e-pillar,e2e-1,first answer\n"
    b'e2e-pillar,e2e-2,"second answer, with a comma"\n'
)


async def test_import_lists_errors_then_imports_without_reload(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    await page.goto("/")
    await page.click('nav a[href="/import"]')
    await page.evaluate(MARKER_JS)
    submit = page.locator("#import-form button[type=submit]")

    await page.set_input_files(
        "#import-file", files=[{"name": "bad.csv", "mimeType": "text/csv", "buffer": BAD_CSV}]
    )
    await submit.click()
    errors = page.locator("#import-errors")
    await expect(errors).to_be_visible()
    await expect(errors.locator("tbody tr")).to_have_count(1)
    await expect(errors.locator("tbody td").nth(0)).to_have_text("3")  # the file's line
    await expect(errors.locator("tbody td").nth(1)).to_have_text("content")
    assert await page.evaluate(READ_MARKER_JS) == "still-here"

    await page.set_input_files(
        "#import-file", files=[{"name": "good.csv", "mimeType": "text/csv", "buffer": GOOD_CSV}]
    )
    await submit.click()
    await expect(page.locator("#import-ok")).to_contain_text("Imported 2 thread(s)")
    await expect(errors).to_have_count(0)
    assert path_of(page) == "/import"
    assert await page.evaluate(READ_MARKER_JS) == "still-here"
    # Nothing from the bad file was stored: exactly the two good rows.
    response = await page.request.get("/api/pillars", headers=live_server.api_headers)
    pillars = await response.json()
    assert [p["thread_count"] for p in pillars if p["name"] == "e2e-pillar"] == [2]
    assert js_errors == []


async def test_api_docs_render_offline_under_the_csp(page: Page, js_errors: list[str]):
    """Swagger UI is vendored: it renders our operations with no CDN and no CSP violation."""
    await page.goto("/docs")
    await expect(page.locator(".opblock").first).to_be_visible(timeout=15_000)
    assert await page.locator(".opblock").count() > 50
    await expect(page.get_by_text("/api/threads/import").first).to_be_visible()
    assert js_errors == []
