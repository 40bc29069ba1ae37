"""Two reviewers label a session's 10 pairs in a real browser with the keyboard only (keys
1-4, n to skip, p to go back), two labels per pair, each in a browser context of their own;
then the 20 labels are read back through the API, stored in canonical order."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Browser, BrowserContext, Page, expect

from tests.e2e.conftest import (
    ARTIFACTS,
    TIMEOUT_MS,
    LiveServer,
    _record_console,
    _record_response,
    api,
)

pytestmark = pytest.mark.e2e
N_PAIRS = 10
PANEL = "#pair-review-panel"
FLIP = {"A": "B", "B": "A", "TIE": "TIE"}
KEY_LABEL = {"1": ("A", False), "2": ("B", False), "3": ("TIE", False), "4": ("TIE", True)}


async def _session_of_ten_pairs(page: Page, server: LiveServer) -> int:
    threads = []
    for i in range(N_PAIRS):
        for side in ("x", "y"):
            threads.append(
                {
                    "pillar": f"e2e-rv-{side}",
                    "external_id": f"q{i}",
                    "prompt_key": f"e2e-rv-q{i}",
                    "content": f"Answer {side.upper()} to question {i}.\nA second line.",
                }
            )
    body = "\n".join(json.dumps(t) for t in threads).encode()
    await api(
        page,
        server,
        "POST",
        "/api/threads/import",
        multipart={"file": {"name": "t.jsonl", "mimeType": "application/json", "buffer": body}},
    )
    items = (await api(page, server, "GET", "/api/threads?limit=500"))["items"]
    ids = {(t["pillar_name"], t["external_id"]): t["id"] for t in items}
    lines = []
    for i in range(N_PAIRS):
        x, y = ids["e2e-rv-x", f"q{i}"], ids["e2e-rv-y", f"q{i}"]
        lines += [
            {"thread_a": x, "thread_b": y, "verdict": "A"},
            {"thread_a": y, "thread_b": x, "verdict": "B"},
        ]
    body = "\n".join(json.dumps(line) for line in lines).encode()
    out = await api(
        page,
        server,
        "POST",
        "/api/sessions/import",
        multipart={
            "file": {"name": "j.jsonl", "mimeType": "application/json", "buffer": body},
            "session_name": "e2e review",
        },
    )
    return int(out["session_id"])


async def _reviewer(
    browser: Browser, server: LiveServer, admin: Page, name: str, errors: list[str]
) -> tuple[BrowserContext, Page]:
    """A browser context of its own, signed in through the login form as a new reviewer."""
    password = f"{name}-password-not-secret"
    await api(
        admin,
        server,
        "POST",
        "/api/users",
        data={"username": name, "role": "reviewer", "password": password},
    )
    context = await browser.new_context(
        base_url=server.url, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    page.on("pageerror", lambda e: errors.append(f"{name} pageerror: {e}"))
    page.on("console", lambda m: _record_console(m, errors))
    page.on("response", lambda r: _record_response(r, errors))
    await page.goto("/login")
    await page.fill("#login-form input[name=username]", name)
    await page.fill("#login-form input[name=password]", password)
    await page.click("#login-form button[type=submit]")
    await page.wait_for_url(lambda url: urlsplit(url).path != "/login")
    return context, page


async def _ready(page: Page) -> str:
    panel = page.locator(PANEL)
    await expect(panel).to_have_attribute("data-ready", "true")
    return await panel.get_attribute("data-pair") or ""


async def _press(page: Page, key: str, before: str) -> str:
    await page.keyboard.press(key)
    await expect(page.locator(PANEL)).not_to_have_attribute("data-pair", before)
    return await _ready(page)


async def _shown(page: Page) -> tuple[int, int]:
    left = await page.locator("#side-a").get_attribute("data-thread-id")
    right = await page.locator("#side-b").get_attribute("data-thread-id")
    return int(left or 0), int(right or 0)


async def test_two_reviewers_label_ten_pairs_with_the_keyboard(
    page: Page, browser: Browser, live_server: LiveServer, js_errors: list[str]
) -> None:
    sid = await _session_of_ten_pairs(page, live_server)
    settings = await api(
        page,
        live_server,
        "PUT",
        f"/api/sessions/{sid}/review/settings",
        data={"labels_per_pair": 2},
    )
    assert settings["labels_per_pair"] == 2 and settings["progress"]["total"] == N_PAIRS

    reviewers = [
        await _reviewer(browser, live_server, page, name, js_errors)
        for name in ("e2e-reviewer-1", "e2e-reviewer-2")
    ]
    expected: dict[str, dict[tuple[int, int], tuple[str, bool]]] = {}
    try:
        pages = [p for _, p in reviewers]
        current: list[str] = []
        for k, p in enumerate(pages):
            if k == 0:
                await p.goto(f"/sessions/{sid}/review")
            else:  # from the session's page, as a reviewer would find it
                await p.goto(f"/sessions/{sid}")
                await p.click("#review-tab-link")
                await p.wait_for_url(f"**/sessions/{sid}/review")
            await expect(p.locator("#review-progress-text")).to_have_text(
                f"0 of {N_PAIRS} pairs finished"
            )
            current.append(await _ready(p))
        await pages[0].screenshot(
            path=str(ARTIFACTS / "review-pair.png"), full_page=True, caret="initial"
        )
        # Reviewer 1 skips the first pair (n) and gets another; the skipped one comes back.
        skipped = current[0]
        current[0] = await _press(pages[0], "n", skipped)
        assert current[0] and current[0] != skipped

        keys = "12341234123"
        for step in range(N_PAIRS):
            for k, p in enumerate(pages):
                name = ("e2e-reviewer-1", "e2e-reviewer-2")[k]
                key = keys[(step + k) % len(keys)]
                lo, hi = map(int, current[k].split("-"))
                left, _right = await _shown(p)
                label, both_bad = KEY_LABEL[key]
                # what must be stored, for the pair in canonical order
                expected.setdefault(name, {})[lo, hi] = (
                    label if left == lo else FLIP[label],
                    both_bad,
                )
                if step == N_PAIRS - 1:
                    await p.keyboard.press(key)
                    await expect(p.locator("#review-done")).to_be_visible()
                else:
                    current[k] = await _press(p, key, current[k])
                if step == 2 and k == 0:
                    # p: back to the pair just labelled (its label marked), n: back again.
                    back = await _press(p, "p", current[k])
                    assert back == f"{lo}-{hi}"
                    chosen = {"1": "#label-a", "2": "#label-b", "3": "#label-tie"}
                    selector = chosen.get(key, "#label-both-bad")
                    await expect(p.locator(selector)).to_have_class("chosen")
                    current[k] = await _press(p, "n", back)
        for p in pages:
            await p.reload()
            await expect(p.locator("#review-progress-text")).to_have_text(
                f"{N_PAIRS} of {N_PAIRS} pairs finished"
            )
            await expect(p.locator("#review-mine")).to_contain_text(f"You labelled {N_PAIRS}")
        await pages[0].screenshot(
            path=str(ARTIFACTS / "review-done.png"), full_page=True, caret="initial"
        )

        # The 20 labels, through the API as each reviewer sees their own.
        total = 0
        for (_, p), name in zip(reviewers, ("e2e-reviewer-1", "e2e-reviewer-2"), strict=True):
            response = await p.request.get(f"/api/sessions/{sid}/review/mine")
            assert response.ok, await response.text()
            mine = await response.json()
            got = {(m["thread_a_id"], m["thread_b_id"]): (m["label"], m["both_bad"]) for m in mine}
            assert got == expected[name]
            assert all(a < b for a, b in got)
            total += len(mine)
        assert total == 2 * N_PAIRS
        progress = await api(page, live_server, "GET", f"/api/sessions/{sid}/review/progress")
        assert (progress["finished"], progress["total"]) == (N_PAIRS, N_PAIRS)
        assert skipped in {f"{a}-{b}" for a, b in expected["e2e-reviewer-1"]}

        # The Agreement tab: the judge (x wins every pair: "A" in canonical order) against
        # one reviewer, and the two reviewers with each other beside it.
        first, second = expected["e2e-reviewer-1"], expected["e2e-reviewer-2"]
        await page.goto(f"/sessions/{sid}/results?tab=agreement")
        await page.select_option("#agreement-reference", "annotator:e2e-reviewer-1")
        await page.click("#agreement-form button[type=submit]")
        judge_right = sum(label == "A" for label, _ in first.values()) / N_PAIRS
        accuracy = page.locator("#fig-accuracy td").nth(1)
        await expect(accuracy).to_contain_text(f"{100 * judge_right:.1f}%")
        await expect(accuracy).to_contain_text(f"n={2 * N_PAIRS}")
        same = sum(first[k][0] == second[k][0] for k in first) / N_PAIRS
        await expect(page.locator("#human-percent")).to_contain_text(f"{100 * same:.1f}%")
        await expect(page.locator("#human-pairwise")).to_contain_text(
            "e2e-reviewer-1 · e2e-reviewer-2"
        )
        await page.screenshot(path=str(ARTIFACTS / "review-agreement.png"), full_page=True)
    finally:
        for context, _ in reviewers:
            await context.close()
    assert not js_errors, js_errors
