"""The new-session page in a real browser: the built-in judge is shown read-only, and
"Start from this" copies it into the fields to edit, which the estimate then validates."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from tests.e2e.conftest import LiveServer

pytestmark = pytest.mark.e2e


async def test_start_from_the_builtin_judge(
    page: Page, live_server: LiveServer, js_errors: list[str]
) -> None:
    r = await page.request.post("/api/demo", headers=live_server.api_headers)
    assert r.ok, await r.text()
    await page.goto("/sessions/new")
    await page.click("details.advanced > summary")
    await page.click("#builtin-judge > summary")
    builtin = page.locator("#builtin-template")
    await expect(builtin).to_have_attribute("readonly", "")
    assert "{thread_a}" in await builtin.input_value()
    for source, target in (
        ("builtin-template", "prompt_template"),
        ("builtin-system", "system_prompt"),
        ("builtin-format", "verdict_format"),
    ):
        assert await page.locator(f"#{target}").input_value() == ""
        await page.click(f"[data-copy-from={source}]")
        copied = await page.locator(f"#{target}").input_value()
        assert copied and copied == await page.locator(f"#{source}").input_value()
    # An edited copy is a user's field like any other: a broken format is reported by field.
    await page.fill("#verdict_format", '{"kind": "labels", "rules": []}')
    await page.locator("#verdict_format").dispatch_event("change")
    await expect(page.locator("#estimate")).to_contain_text("at least one rule")
    assert js_errors == []
