// Persona pages: CSV drop zone, live training progress over SSE, review keyboard shortcuts,
// and confirmations. Loaded by the persona templates; no inline scripts (the CSP forbids them).
(() => {
  "use strict";

  // -- confirmations for plain forms (htmx forms use hx-confirm) ----------------------------
  document.addEventListener("submit", (e) => {
    const form = e.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      e.preventDefault();
      e.stopImmediatePropagation();
    }
  }, true);

  // -- training pairs: drop a CSV on the zone to upload it ----------------------------------
  function setUpDropZone() {
    const zone = document.getElementById("drop-zone");
    const input = document.getElementById("pairs-file");
    if (!zone || !input || zone.dataset.ready) return;
    zone.dataset.ready = "1";
    const over = (on) => zone.classList.toggle("dragover", on);
    zone.addEventListener("dragenter", (e) => { e.preventDefault(); over(true); });
    zone.addEventListener("dragover", (e) => { e.preventDefault(); over(true); });
    zone.addEventListener("dragleave", (e) => {
      if (!zone.contains(e.relatedTarget)) over(false);
    });
    zone.addEventListener("drop", (e) => {
      e.preventDefault();
      over(false);
      const files = e.dataTransfer && e.dataTransfer.files;
      if (!files || !files.length) return;
      const chosen = new DataTransfer();
      chosen.items.add(files[0]);
      input.files = chosen.files;
      input.form.requestSubmit();
    });
  }

  // -- training progress: a live log, and fresh fragments when something changes -------------
  const REFRESH_ON = new Set([
    "iteration_started", "awaiting_review", "metrics", "prompt_version",
    "converged", "incomplete", "paused", "batch_status",
  ]);

  function pct(x) { return (100 * x).toFixed(1) + "%"; }

  function describe(type, d) {
    const it = d.iteration !== undefined ? `Iteration ${d.iteration}: ` : "";
    switch (type) {
      case "ready": return "Connected: live updates on.";
      case "iteration_started": return `Iteration ${d.iteration} started with judge prompt v${d.prompt_version}.`;
      case "outputs_generated": return `${it}answers generated ${d.n}/${d.total}.`;
      case "judged": return `${it}answers judged ${d.n}/${d.total}.`;
      case "awaiting_review":
        if (d.pending === undefined) return `${it}${d.decisions} decisions judged.`;
        return `${it}${d.pending} of ${d.decisions} decisions await your review` +
          (d.carried_forward ? ` (${d.carried_forward} carried forward).` : ".");
      case "metrics":
        return `${it}F1 ${Number(d.f1).toFixed(3)} on the selection pairs. ${d.message || ""}`;
      case "prompt_version":
        if (d.kept) return `${it}${d.note}`;
        return `Judge prompt v${d.version} by ${d.created_by === "ai" ? "the prompt engineer" : "a human"}: ${d.rationale || ""}` +
          (d.addressed && d.addressed.length ? ` (addresses ${d.addressed.length} case(s)${d.addressed.some((a) => a.note) ? ", with reviewer notes" : ""})` : "");
      case "converged": return `Converged at iteration ${d.iteration}: F1 ${Number(d.f1).toFixed(3)}. ${d.note || ""}`;
      case "incomplete": return `Stopped: ${d.note || "the target was not reached"}`;
      case "paused": return `Paused: ${d.reason || ""}`;
      case "batch_status":
        return "Batch jobs: " + (d.batches || []).map((b) => `${b.id} ${b.state} (${b.requests})`).join(", ") + ".";
      default: return `${type}`;
    }
  }

  let refreshTimer = null;
  function refreshSoon(selector) {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => {
      const target = document.querySelector(selector);
      if (target && window.htmx) window.htmx.trigger(target, "refresh");
    }, 250);
  }

  function setUpLiveLog() {
    const log = document.getElementById("live-log");
    if (!log || log.dataset.ready || !window.EventSource) return;
    log.dataset.ready = "1";
    const refresh = log.dataset.refresh;
    const source = new EventSource(log.dataset.personaEvents);
    const add = (type, data) => {
      const empty = document.getElementById("live-log-empty");
      if (empty) empty.remove();
      const li = document.createElement("li");
      li.className = "event-" + type;
      const time = document.createElement("time");
      time.textContent = new Date().toLocaleTimeString();
      li.append(time, " ", describe(type, data));
      log.prepend(li);
      while (log.children.length > 200) log.lastElementChild.remove();
    };
    const handle = (type) => (e) => {
      let data = {};
      try { data = JSON.parse(e.data); } catch (_) { /* a malformed event only loses its text */ }
      if (type === "outputs_generated" || type === "judged") {
        const step = document.getElementById("step-progress");
        if (step) step.textContent = `(${data.n}/${data.total})`;
        // Throttled server-side already; log only the step's end to keep the log readable.
        if (data.n !== data.total) return;
      }
      add(type, data);
      // "ready": anything that happened between the page's render and the subscription.
      if ((REFRESH_ON.has(type) || type === "ready") && refresh) refreshSoon(refresh);
    };
    ["ready", "outputs_generated", "judged", ...REFRESH_ON].forEach((type) =>
      source.addEventListener(type, handle(type)));
    // Leaving the page closes the stream (and its server-side subscription) at once.
    window.addEventListener("pagehide", () => source.close());
  }

  // -- human review: a / d / n / p ------------------------------------------------------------
  // From the request until the new panel is settled (its form handled by htmx), keys wait:
  // a key pressed in between would act on the old decision or submit without htmx.
  let reviewBusy = false;
  const forPanel = (e) => e.detail.target && e.detail.target.id === "review-panel";
  document.addEventListener("htmx:beforeRequest", (e) => { if (forPanel(e)) reviewBusy = true; });
  document.addEventListener("htmx:afterRequest", (e) => {
    if (forPanel(e) && !e.detail.successful) reviewBusy = false;
  });
  const markReady = () => {
    reviewBusy = false;
    const panel = document.getElementById("review-panel");
    if (panel) panel.dataset.ready = "true";  // tests and styles can tell keys work now
  };
  document.addEventListener("htmx:afterSettle", markReady);
  document.addEventListener("DOMContentLoaded", markReady);
  document.addEventListener("htmx:sendError", () => { reviewBusy = false; });

  const KEYS = { a: "agree", d: "disagree", n: "next-link", p: "prev-link" };

  function typing(el) {
    return el instanceof HTMLElement &&
      (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName));
  }

  document.addEventListener("keydown", (e) => {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    const panel = document.getElementById("review-panel");
    const id = KEYS[e.key && e.key.toLowerCase()];
    if (!panel || !id || reviewBusy) return;
    const el = document.getElementById(id);
    if (!el || el.disabled) return;
    e.preventDefault();
    el.click();
  });

  function setUp() {
    setUpDropZone();
    setUpLiveLog();
  }

  document.addEventListener("DOMContentLoaded", setUp);
  document.addEventListener("htmx:afterSettle", setUpDropZone);
})();
