"""A persona's whole life in a real browser: created from a template, a CSV upload with an
error (shown, nothing stored) then a good one dropped on the drop zone, training started on
the simulator, one iteration reviewed with the keyboard only by an oracle reviewer, the
progress tab updating live over SSE (metric cards with their intervals, and "needs more
labelled pairs" when trying to converge on too few), and the judge prompt diff."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from llmjudge.personas.starters import TEMPLATES
from llmjudge.providers.simulated_personas import normalise
from tests.e2e.conftest import ARTIFACTS, LiveServer, _record_console, _record_response, api

pytestmark = pytest.mark.e2e
# Screenshots keep the caret: hiding it leaves style="" on inputs, and htmx copying that
# attribute while settling a swap is a CSP violation that only the test would cause.

MARKER_JS = "window.__e2eMarker = 'still-here'"
READ_MARKER_JS = "window.__e2eMarker"
BAD_CSV = b"input,correct_output\nWhat is 7 times 6?,42\nWhat is 9 times 9?,\n"
# One new pair fixed, one more, and one identical to a template pair (skipped).
GOOD_CSV = (
    "input,correct_output\nWhat is 7 times 6?,42\nHow many legs does an insect have?,6\n"
    "What is the chemical symbol for gold?,Au\n"
)
TEMPLATE_PAIRS = len(TEMPLATES["factual-qa"].pairs)
# Reviewed with the keyboard at the start and at the end of the iteration; the ones between
# through the API one by one (the template's hundreds of pairs would take minutes of keys).
KEYBOARD_FIRST = 4
DROP_JS = """(text) => {
  const dt = new DataTransfer();
  dt.items.add(new File([text], "good.csv", { type: "text/csv" }));
  return dt;
}"""


async def _review_by_api(page: Page, server: LiveServer, pid: int, *, keep: int) -> int:
    """Review iteration 1's pending decisions one by one as the oracle would, all but
    ``keep``; returns how many are reviewed in all."""
    url = f"/api/personas/{pid}/iterations/1/decisions?pending=true"
    pending = await api(page, server, "GET", url)
    for d in pending[: len(pending) - keep]:
        agrees = (d["judge_label"] == "correct") == (
            normalise(d["answer"]) == normalise(d["correct_output"])
        )
        path = f"/api/personas/{pid}/decisions/{d['id']}/feedback"
        await api(page, server, "POST", path, data={"agrees": agrees})
    decisions = await api(page, server, "GET", f"/api/personas/{pid}/iterations/1/decisions")
    return sum(d["human_agrees"] is not None for d in decisions)


async def test_persona_from_template_to_reviewed_iteration(
    page: Page, live_server: LiveServer, js_errors: list[str]
):
    # Fast simulated calls; a weak judge and a high target, so iteration 1 cannot converge
    # and the prompt engineer writes version 2.
    providers = await api(page, live_server, "GET", "/api/providers")
    sim = next(p for p in providers if p["kind"] == "simulator")
    settings = {"latency_ms_mean": 5, "latency_ms_jitter": 2, "judge_base_accuracy": 0.6}
    await api(
        page, live_server, "PATCH", f"/api/providers/{sim['id']}", data={"settings": settings}
    )

    # -- create from a template
    await page.goto("/personas")
    await page.click('nav a[href="/personas"]')
    await page.click("#new-persona")
    await page.screenshot(path=str(ARTIFACTS / "personas-new.png"), full_page=True, caret="initial")
    await expect(page.locator("#template-factual-qa")).to_contain_text(
        f"{TEMPLATE_PAIRS} example pairs"
    )
    await page.click("#template-factual-qa button[type=submit]")
    await page.wait_for_url(re.compile(r"/personas/\d+$"))
    pid = int(page.url.rsplit("/", 1)[1])
    await expect(page.locator("#persona-status")).to_have_text("draft")
    # More pairs of each class than the selection split holds: the status must say so.
    settings = {"target_f1": 0.95, "min_per_class": 100}
    await api(page, live_server, "PATCH", f"/api/personas/{pid}", data=settings)

    # -- a CSV with an error: listed by line, nothing stored
    await page.click("#tab-data")
    await page.evaluate(MARKER_JS)
    await page.set_input_files(
        "#pairs-file", files=[{"name": "bad.csv", "mimeType": "text/csv", "buffer": BAD_CSV}]
    )
    await page.click("#upload-pairs")
    errors = page.locator("#upload-errors")
    await expect(errors.locator("tbody tr")).to_have_count(1)
    await expect(errors.locator("tbody td").nth(0)).to_have_text("3")
    await expect(errors.locator("tbody td").nth(1)).to_have_text("correct_output")
    assert (await api(page, live_server, "GET", f"/api/personas/{pid}"))[
        "pair_count"
    ] == TEMPLATE_PAIRS

    # -- the fixed file, dropped on the drop zone
    transfer = await page.evaluate_handle(DROP_JS, GOOD_CSV)
    await page.dispatch_event("#drop-zone", "drop", {"dataTransfer": transfer})
    await expect(page.locator("#upload-ok")).to_contain_text("Added 2 pair(s); 1 already stored")
    await expect(page.locator("#pair-count")).to_contain_text(f"{TEMPLATE_PAIRS + 2} pair(s)")
    await expect(errors).to_have_count(0)
    assert await page.evaluate(READ_MARKER_JS) == "still-here"  # no reload
    assert (await api(page, live_server, "GET", f"/api/personas/{pid}"))[
        "pair_count"
    ] == TEMPLATE_PAIRS + 2
    await page.screenshot(
        path=str(ARTIFACTS / "personas-data.png"), full_page=True, caret="initial"
    )

    # -- start training; the progress tab follows it live
    await page.click("#tab-overview")
    await page.screenshot(
        path=str(ARTIFACTS / "personas-overview.png"), full_page=True, caret="initial"
    )
    await page.click("#action-start")
    await page.wait_for_url(f"**/personas/{pid}/progress")
    review_link = page.locator("#review-link")
    # the template's 362 answers and labels take a while, even from the simulator
    await expect(review_link).to_be_visible(timeout=90_000)
    # Start, Pause and Resume land on this tab: it offers Pause (or Resume) itself
    await expect(page.locator("#progress-pause")).to_be_visible()
    await expect(page.locator("#live-log li").first).not_to_have_text("Waiting for events…")

    # A second tab stays on the progress page while the first one reviews.
    watcher = await page.context.new_page()
    watcher.on("pageerror", lambda e: js_errors.append(f"watcher pageerror: {e}"))
    watcher.on("console", lambda m: _record_console(m, js_errors))
    watcher.on("response", lambda r: _record_response(r, js_errors))
    await watcher.goto(f"/personas/{pid}/progress")
    await expect(watcher.locator("#review-link")).to_be_visible()
    await expect(watcher.locator("#metric-f1-selection")).to_have_count(0)
    await watcher.evaluate(MARKER_JS)

    # -- review the whole iteration with the keyboard only
    await review_link.click()
    await page.wait_for_url(f"**/personas/{pid}/review/1")
    await page.evaluate(MARKER_JS)
    panel = page.locator("#review-panel")
    # Keys act once the panel htmx swapped in is settled (personas.js marks it ready).
    ready = page.locator("#review-panel[data-ready=true]")
    count = page.locator("#review-count")
    total = int((await count.inner_text()).split()[-1])
    assert total == TEMPLATE_PAIRS + 2
    first = await panel.get_attribute("data-decision-id")
    await expect(ready).to_have_count(1)
    await page.keyboard.press("n")
    await expect(panel).not_to_have_attribute("data-decision-id", first or "")
    await expect(ready).to_have_count(1)
    await page.keyboard.press("p")
    await expect(panel).to_have_attribute("data-decision-id", first or "")
    await expect(ready).to_have_count(1)
    # Typing a note never triggers a shortcut.
    await page.locator("#review-notes").focus()
    await page.keyboard.type("a d")
    await expect(page.locator("#review-notes")).to_have_value("a d")
    await expect(count).to_have_text(f"Reviewed 0 of {total}")
    await page.locator("#review-notes").fill("")
    await page.evaluate("document.activeElement.blur()")

    done = 0
    while done < total:
        if done == KEYBOARD_FIRST:
            done = await _review_by_api(page, live_server, pid, keep=1)
            # the bare address opens on the first undecided one (the current address
            # names the decision shown before)
            await page.goto(f"/personas/{pid}/review/1")
            await page.evaluate(MARKER_JS)  # the keys below must not reload the page again
            await expect(ready).to_have_count(1)
            await expect(count).to_have_text(f"Reviewed {done} of {total}")
        current = await panel.get_attribute("data-decision-id")
        answer = await page.locator("#d-answer").text_content() or ""
        correct = await page.locator("#d-correct").text_content() or ""
        label = (await page.locator("#d-label").text_content() or "").strip()
        # the word diff shows where the suggested answer leaves the correct output
        if answer and correct and answer.strip() != correct.strip():
            assert await page.locator("#d-diff del, #d-diff ins").count() > 0
        elif answer and correct:
            await expect(page.locator("#d-diff-same")).to_have_count(1)
        agrees = (label == "correct") == (normalise(answer) == normalise(correct))
        await expect(ready).to_have_count(1)
        await page.keyboard.press("a" if agrees else "d")
        await expect(count).to_have_text(f"Reviewed {done + 1} of {total}")
        if done + 1 < total:
            await expect(panel).not_to_have_attribute("data-decision-id", current or "")
        if done == 2:
            await page.screenshot(
                path=str(ARTIFACTS / "personas-review.png"), full_page=True, caret="initial"
            )
        done += 1
    await expect(page.locator("#review-done")).to_be_visible()
    assert await page.evaluate(READ_MARKER_JS) == "still-here"
    decisions = await api(page, live_server, "GET", f"/api/personas/{pid}/iterations/1/decisions")
    assert len(decisions) == total and all(d["human_agrees"] is not None for d in decisions)

    # -- the watching tab updated itself: metric cards, confusion matrix, chart
    await expect(watcher.locator("#metric-f1-selection")).to_be_visible()
    await expect(watcher.locator("#metric-f1-optimisation .metric-value")).to_have_text(
        re.compile(r"^0\.\d{3}|^1\.000")
    )
    await expect(watcher.locator("#metric-f1-selection .ci")).to_contain_text("n=")
    await expect(watcher.locator("#confusion td")).to_have_count(4)
    # -- trying to converge with min_per_class 100: the selection split holds fewer of
    # each class, so the status says it needs more labelled pairs, and how many
    status_line = watcher.locator("#convergence-status")
    await expect(status_line).to_contain_text("Needs more labelled pairs")
    await expect(status_line).to_contain_text("more pairs the human calls incorrect")
    await expect(status_line).to_have_attribute("data-status", "needs_more_labelled_pairs")
    assert await watcher.locator("#progress-chart svg .point").count() >= 3
    await expect(watcher.locator("#live-log")).to_contain_text("F1")
    # The engineer's new prompt, then iteration 2 judged and waiting (carried-forward reviews).
    await expect(watcher.locator("#live-log")).to_contain_text("Judge prompt v2", timeout=60_000)
    await expect(watcher.locator("#running-line")).to_contain_text("Iteration 2/20", timeout=60_000)
    assert await watcher.evaluate(READ_MARKER_JS) == "still-here"
    ARTIFACTS.mkdir(exist_ok=True)
    await watcher.screenshot(
        path=str(ARTIFACTS / "personas-progress.png"), full_page=True, caret="initial"
    )

    # -- the prompt diff, v1 against the engineer's v2
    await page.goto("/personas")
    await expect(page.locator("#personas-table tbody tr")).to_have_count(1)
    await page.screenshot(
        path=str(ARTIFACTS / "personas-list.png"), full_page=True, caret="initial"
    )
    await page.goto(f"/personas/{pid}/prompts")
    await page.select_option("#diff-b", "1")
    await expect(page.locator("#diff")).to_contain_text("Pick two different versions")
    await page.select_option("#diff-a", "1")
    await page.select_option("#diff-b", "2")
    inserted = page.locator("#diff-table td.ins")
    await expect(inserted.first).to_contain_text("- Rule:")
    await expect(page.locator("#versions-table")).to_contain_text("prompt engineer")
    await page.screenshot(
        path=str(ARTIFACTS / "personas-prompts.png"), full_page=True, caret="initial"
    )
    await watcher.close()
    assert js_errors == []
