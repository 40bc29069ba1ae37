// Pair review (/sessions/{id}/review): keys 1/2/3/4 label, n/p move. Loaded by the review
// page; no inline scripts (the CSP forbids them). The same pattern as the persona review:
// a key clicks the button or link of that id, so htmx does the request.
(() => {
  "use strict";

  const PANEL = "pair-review-panel";
  // From a request until the new panel is settled, keys wait: a key pressed in between
  // would act on the old pair, or submit without htmx.
  let busy = false;
  const forPanel = (e) => e.detail.target && e.detail.target.id === PANEL;
  document.addEventListener("htmx:beforeRequest", (e) => { if (forPanel(e)) busy = true; });
  document.addEventListener("htmx:afterRequest", (e) => {
    if (forPanel(e) && !e.detail.successful) busy = false;
  });
  const markReady = () => {
    busy = false;
    const panel = document.getElementById(PANEL);
    if (panel) panel.dataset.ready = "true";  // tests and styles can tell keys work now
  };
  document.addEventListener("htmx:afterSettle", markReady);
  document.addEventListener("DOMContentLoaded", markReady);
  document.addEventListener("htmx:sendError", () => { busy = false; });

  const KEYS = {
    "1": "label-a", "2": "label-b", "3": "label-tie", "4": "label-both-bad",
    n: "next-link", p: "prev-link",
  };

  function typing(el) {
    return el instanceof HTMLElement &&
      (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName));
  }

  document.addEventListener("keydown", (e) => {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    const panel = document.getElementById(PANEL);
    const id = KEYS[e.key && e.key.toLowerCase()];
    if (!panel || !id || busy || panel.dataset.ready !== "true") return;
    const el = document.getElementById(id);
    if (!el || el.disabled) return;
    e.preventDefault();
    panel.dataset.ready = "false";
    el.click();
  });
})();
