// Site-wide behaviour. No inline scripts anywhere: the CSP forbids them.
document.addEventListener("htmx:configRequest", (e) => {
  const meta = document.querySelector('meta[name="csrf-token"]');
  if (meta) e.detail.headers["X-CSRF-Token"] = meta.content;
});

// Swap 4xx fragments too: validation errors (422), too-large uploads (413) and conflicts
// (409) come back as HTML the user must see. htmx 2 discards them by default.
htmx.config.responseHandling = [
  { code: "204", swap: false },
  { code: "[23]..", swap: true },
  { code: "4..", swap: true, error: false },
  { code: "...", swap: false, error: true },
];

// Copy buttons: <button data-copy="#selector">; the status span beside it says it worked.
document.addEventListener("click", async (e) => {
  const button = e.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  const note = document.querySelector(`[data-copied-for="${button.dataset.copy}"]`);
  if (!source) return;
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    if (note) note.textContent = "Copied.";
  } catch {
    // No clipboard (plain http, permissions): select the text so Ctrl+C works.
    const range = document.createRange();
    range.selectNodeContents(source);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    if (note) note.textContent = "Selected: press Ctrl+C to copy.";
  }
});

// The top bar's menu button (narrow screens only; CSS hides it on wide ones).
document.addEventListener("click", (e) => {
  const toggle = e.target.closest("#menu-toggle");
  if (!toggle) return;
  const bar = document.getElementById("topbar");
  const open = bar.classList.toggle("open");
  toggle.setAttribute("aria-expanded", String(open));
});

// A table that scrolls inside its own box (narrow screens) must be reachable by keyboard:
// focusable while it overflows (axe: scrollable-region-focusable). Tables keep their role.
function markScrollers(root) {
  for (const box of root.querySelectorAll("table.data, .table-scroll")) {
    if (box.scrollWidth > box.clientWidth + 1) {
      box.tabIndex = 0;
      box.dataset.scroller = "";
    } else if ("scroller" in box.dataset) {
      box.removeAttribute("tabindex");
      delete box.dataset.scroller;
    }
  }
}
document.addEventListener("DOMContentLoaded", () => markScrollers(document));
document.addEventListener("htmx:afterSettle", (e) => markScrollers(e.target));
window.addEventListener("resize", () => markScrollers(document));
