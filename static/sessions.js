// Tournament pages: the configuration form's helpers, the bridge from server-sent events to
// throttled HTMX refreshes, and the live worker lanes. Plain JS, no build step; no inline
// scripts or styles anywhere (the CSP forbids them), only DOM and CSSOM changes from here.
(function () {
  "use strict";

  // --- SSE -> HTMX refreshes ---------------------------------------------------------------
  // An element names the events that make it stale in data-refresh-on, and the least time
  // between two of its refreshes in data-refresh-ms. It receives "lj:refresh", which its
  // hx-trigger turns into a fetch of its partial. Unlike htmx's `throttle:` modifier this
  // keeps the trailing event, so the last change (the final verdict, 100%) always shows.
  // State is kept by element id: a partial may replace the element while a refresh waits.
  const SSE_TYPES = [
    "session_status",
    "comparison_start",
    "llm_stream",
    "comparison_complete",
    "comparison_retry",
    "workers_status",
    "panel_vote",
    "adaptive_round",
    "batch_status",
  ];
  const waiting = new Map(); // element id -> { pending: bool }

  function refreshSoon(id) {
    const el = document.getElementById(id);
    if (!el) return;
    const state = waiting.get(id);
    if (state) {
      state.pending = true;
      return;
    }
    const fresh = { pending: false };
    waiting.set(id, fresh);
    htmx.trigger(el, "lj:refresh");
    const tick = function () {
      const now = document.getElementById(id);
      if (fresh.pending && now && now.dataset.refreshOn) {
        fresh.pending = false;
        htmx.trigger(now, "lj:refresh");
        setTimeout(tick, Number(now.dataset.refreshMs || 500));
      } else {
        waiting.delete(id);
      }
    };
    setTimeout(tick, Number(el.dataset.refreshMs || 500));
  }

  function refreshFor(type) {
    document.querySelectorAll("[data-refresh-on]").forEach(function (el) {
      if (el.id && (type === "*" || el.dataset.refreshOn.split(/\s+/).indexOf(type) >= 0)) {
        refreshSoon(el.id);
      }
    });
  }

  const hooked = new WeakSet();
  let opened = false;
  document.addEventListener("htmx:sseOpen", function (e) {
    const source = e.detail && e.detail.source;
    if (!source) return;
    if (!hooked.has(source)) {
      hooked.add(source);
      SSE_TYPES.forEach(function (type) {
        source.addEventListener(type, function (message) {
          let data = {};
          try {
            data = JSON.parse(message.data);
          } catch (err) {
            return;
          }
          if (lanes) lanes.handle(type, data);
          if (type !== "llm_stream") refreshFor(type);
        });
      });
    }
    // A reconnection may have missed events: bring every live fragment up to date.
    if (opened) refreshFor("*");
    opened = true;
  });

  // --- worker lanes ------------------------------------------------------------------------
  const LANE_TEXT = 360; // streamed characters a lane shows
  const KEPT_TEXT = 20000; // characters kept per lane, all shown when it is focused
  const SCALE = 5; // Likert scale

  function dots(score) {
    if (typeof score !== "number" || !isFinite(score)) return "";
    const n = Math.max(0, Math.min(SCALE, Math.round(score)));
    return "●".repeat(n) + "○".repeat(SCALE - n);
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Writes only what changed: 64 lanes re-rendered every frame must not touch the DOM
  // (and so style and layout) for text that stayed the same.
  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function labelOf(worker) {
    return worker ? "worker " + worker.split(":").pop() : "worker";
  }

  function setupLanes(root) {
    const criteria = JSON.parse(root.dataset.criteria || "[]");
    const labelsUrl = root.dataset.labelsUrl;
    const template = document.getElementById("lane-template");
    const note = document.getElementById("lanes-note");
    const byWorker = new Map(); // worker id -> lane
    const free = []; // placeholder lanes no worker has taken yet
    const labels = new Map(); // thread id -> { title, pillar } (null while asked for)
    const startTitles = new Map(); // thread id -> title from comparison_start, until labels
    const wanted = new Set();
    const dirty = new Set();
    let frame = 0;
    let fetchTimer = 0;

    function adopt(node) {
      const num = function (v) {
        return v ? Number(v) : null;
      };
      const lane = {
        node: node,
        worker: node.dataset.worker || "",
        cid: num(node.dataset.comparison),
        a: num(node.dataset.a),
        b: num(node.dataset.b),
        text: "",
        stale: false,
        verdict: null,
        shownVerdict: undefined,
        state: node.dataset.comparison ? "judging" : "waiting",
        parts: {
          worker: node.querySelector(".lane-worker"),
          state: node.querySelector(".lane-state"),
          aName: node.querySelector(".lane-a .name"),
          aPillar: node.querySelector(".lane-a .pillar"),
          bName: node.querySelector(".lane-b .name"),
          bPillar: node.querySelector(".lane-b .pillar"),
          stream: node.querySelector(".lane-stream"),
          verdict: node.querySelector(".lane-verdict"),
        },
      };
      if (lane.a && node.dataset.aTitle) {
        labels.set(lane.a, { title: node.dataset.aTitle, pillar: node.dataset.aPillar });
      }
      if (lane.b && node.dataset.bTitle) {
        labels.set(lane.b, { title: node.dataset.bTitle, pillar: node.dataset.bPillar });
      }
      node.addEventListener("click", function () {
        focus(lane);
      });
      node.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          focus(lane);
        }
      });
      if (lane.worker) byWorker.set(lane.worker, lane);
      else free.push(lane);
      return lane;
    }

    function laneFor(worker) {
      let lane = byWorker.get(worker);
      if (lane) return lane;
      lane = free.shift();
      if (!lane) {
        const node = template.content.firstElementChild.cloneNode(true);
        root.appendChild(node);
        lane = adopt(node);
        free.splice(free.indexOf(lane), 1);
      }
      lane.worker = worker;
      lane.node.dataset.worker = worker;
      lane.node.classList.remove("lane-idle");
      lane.parts.worker.textContent = labelOf(worker);
      lane.parts.worker.title = worker;
      byWorker.set(worker, lane);
      if (note) note.hidden = true;
      return lane;
    }

    function focus(lane) {
      const on = !lane.node.classList.contains("focused");
      byWorker.forEach(function (other) {
        if (other !== lane && other.node.classList.contains("focused")) {
          other.node.classList.remove("focused");
          other.node.setAttribute("aria-expanded", "false");
          mark(other);
        }
      });
      lane.node.classList.toggle("focused", on);
      lane.node.setAttribute("aria-expanded", on ? "true" : "false");
      mark(lane);
    }

    function need(id) {
      if (!id || labels.has(id) || wanted.has(id)) return;
      wanted.add(id);
      if (!fetchTimer) fetchTimer = setTimeout(fetchLabels, 100);
    }

    function fetchLabels() {
      fetchTimer = 0;
      const ids = Array.from(wanted).slice(0, 200);
      ids.forEach(function (id) {
        wanted.delete(id);
        labels.set(id, null);
      });
      fetch(labelsUrl + "?ids=" + ids.join(","), {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      })
        .then(function (r) {
          return r.ok ? r.json() : {};
        })
        .catch(function () {
          return {};
        })
        .then(function (found) {
          Object.keys(found).forEach(function (k) {
            labels.set(Number(k), found[k]);
          });
          byWorker.forEach(function (lane) {
            if (ids.indexOf(lane.a) >= 0 || ids.indexOf(lane.b) >= 0) mark(lane);
          });
          if (wanted.size && !fetchTimer) fetchTimer = setTimeout(fetchLabels, 100);
        });
    }

    function mark(lane) {
      dirty.add(lane);
      if (!frame) frame = requestAnimationFrame(flush);
    }

    function flush() {
      frame = 0;
      dirty.forEach(render);
      // Then show each stream's end: all writes before all reads, so one layout per frame.
      dirty.forEach(function (lane) {
        lane.parts.stream.scrollTop = lane.parts.stream.scrollHeight;
      });
      dirty.clear();
    }

    function side(id, nameNode, pillarNode) {
      const label = id ? labels.get(id) : null;
      const early = id ? startTitles.get(id) : null;
      setText(nameNode, label ? label.title : early ? early : id ? "thread " + id : "–");
      setText(pillarNode, label ? label.pillar : "");
    }

    function renderVerdict(lane) {
      const box = lane.parts.verdict;
      const v = lane.verdict;
      box.replaceChildren();
      lane.node.classList.remove("won-a", "won-b", "tie");
      renderVotes(lane, box);
      if (!v) return;
      if (v.error && v.status !== "completed") {
        box.appendChild(el("p", "lane-error", v.error));
        return;
      }
      const head = el("p", "lane-result");
      // a grade of one thread alone (single-answer grading) has a score, no winner
      const graded = typeof v.score === "number";
      const winner = graded ? "Grade " + v.score : v.winner === "TIE" ? "Tie" : v.winner ? v.winner + " wins" : "no verdict";
      head.appendChild(el("strong", "", winner));
      if (typeof v.confidence === "number") {
        head.appendChild(el("span", "muted", " · " + Math.round(v.confidence * 100) + "% confident"));
      }
      box.appendChild(head);
      if (!graded) lane.node.classList.add(v.winner === "A" ? "won-a" : v.winner === "B" ? "won-b" : "tie");
      const a = v.scores_a || {};
      const b = v.scores_b || {};
      const rows = criteria.filter(function (c) {
        return c in a || c in b;
      });
      if (!rows.length) return;
      const table = el("table", "likert");
      rows.forEach(function (c) {
        const tr = el("tr");
        const th = el("th", "", c.replace(/_/g, " "));
        th.scope = "row";
        tr.appendChild(th);
        tr.appendChild(el("td", "dots", "A " + dots(a[c])));
        if (!graded) tr.appendChild(el("td", "dots", "B " + dots(b[c])));
        table.appendChild(tr);
      });
      box.appendChild(table);
    }

    // A panel: every member's answer, as each arrives (panel_vote) and at the end.
    function renderVotes(lane, box) {
      const votes = (lane.votes || []).filter(Boolean);
      if (!votes.length) return;
      const list = el("ul", "lane-votes");
      votes.forEach(function (v) {
        let text = (v.judge || "member " + (v.member + 1)) + ": ";
        if (v.status === "voted") {
          text += typeof v.score === "number" ? "grade " + v.score : v.winner === "TIE" ? "tie" : v.winner;
          if (typeof v.confidence === "number") text += " (" + Math.round(v.confidence * 100) + "%)";
        } else {
          text += v.status;
        }
        const item = el("li", "vote-" + v.status, text);
        if (v.error) item.title = v.error;
        list.appendChild(item);
      });
      box.appendChild(list);
    }

    function render(lane) {
      const p = lane.parts;
      setText(p.state, lane.state);
      if (lane.node.dataset.state !== lane.state) lane.node.dataset.state = lane.state;
      lane.node.classList.toggle("stale", lane.stale);
      side(lane.a, p.aName, p.aPillar);
      side(lane.b, p.bName, p.bPillar);
      const focused = lane.node.classList.contains("focused");
      const text = lane.text;
      setText(
        p.stream,
        focused || text.length <= LANE_TEXT ? text : "…" + text.slice(text.length - LANE_TEXT),
      );
      if (lane.shownVerdict !== lane.verdict || lane.shownVotes !== lane.votesVersion) {
        renderVerdict(lane);
        lane.shownVerdict = lane.verdict;
        lane.shownVotes = lane.votesVersion;
      }
    }

    // A new comparison keeps the previous one's text, dimmed, until its own first tokens
    // arrive: with fast judges a lane would otherwise be blank most of the time.
    function begin(lane, cid) {
      lane.cid = cid;
      lane.stale = lane.text !== "";
      lane.verdict = null;
      lane.votes = [];
      lane.votesVersion = (lane.votesVersion || 0) + 1;
      lane.state = "judging";
    }

    root.querySelectorAll(".lane").forEach(adopt);

    return {
      handle: function (type, d) {
        if (type === "comparison_start") {
          const lane = laneFor(d.worker_id);
          begin(lane, d.comparison_id);
          lane.a = d.thread_a_id;
          lane.b = d.thread_b_id;
          if (d.thread_a_title) startTitles.set(d.thread_a_id, d.thread_a_title);
          if (d.thread_b_title) startTitles.set(d.thread_b_id, d.thread_b_title);
          need(lane.a);
          need(lane.b);
          mark(lane);
        } else if (type === "llm_stream") {
          const lane = laneFor(d.worker_id);
          if (lane.cid !== d.comparison_id) begin(lane, d.comparison_id);
          if (lane.stale) {
            lane.text = "";
            lane.stale = false;
          }
          lane.text += d.text || "";
          if (lane.text.length > KEPT_TEXT) lane.text = lane.text.slice(-KEPT_TEXT);
          mark(lane);
        } else if (type === "comparison_complete" || type === "comparison_retry") {
          const lane = byWorker.get(d.worker_id);
          if (!lane || lane.cid !== d.comparison_id) return;
          lane.verdict = d;
          if (d.votes) {
            lane.votes = d.votes;
            lane.votesVersion = (lane.votesVersion || 0) + 1;
          }
          lane.state =
            type === "comparison_retry" ? "retrying" : d.status === "failed" ? "failed" : "done";
          mark(lane);
        } else if (type === "panel_vote") {
          const lane = byWorker.get(d.worker_id);
          if (!lane || lane.cid !== d.comparison_id) return;
          // A lane rendered by the server (adopted mid-comparison) has no votes list yet.
          if (!lane.votes) lane.votes = [];
          lane.votes[d.member] = d;
          lane.votesVersion = (lane.votesVersion || 0) + 1;
          mark(lane);
        } else if (type === "workers_status") {
          (d.workers || []).forEach(function (w) {
            if (w.worker_id) laneFor(w.worker_id);
          });
        }
      },
    };
  }

  // --- configuration form ------------------------------------------------------------------
  function syncModes(form) {
    const checked = form.querySelector("input[name=comparison_mode]:checked");
    const mode = checked ? checked.value : "";
    form.querySelectorAll("[data-modes]").forEach(function (label) {
      const on = label.dataset.modes.split(/\s+/).indexOf(mode) >= 0;
      label.classList.toggle("off", !on);
      label.querySelectorAll("input, select").forEach(function (input) {
        input.disabled = !on; // disabled fields are not sent: the estimate ignores them
      });
    });
  }

  function setupForm(form) {
    const slider = form.querySelector("#worker_count");
    const out = document.getElementById("worker-count-out");
    if (slider && out) {
      slider.addEventListener("input", function () {
        out.textContent = slider.value;
      });
    }
    syncModes(form);
    // Typing one's own criteria picks "Your own": a named set would otherwise win.
    const criteria = form.querySelector("#criteria");
    const criteriaSet = form.querySelector("#criteria_set");
    if (criteria && criteriaSet) {
      criteria.addEventListener("input", function () {
        criteriaSet.value = "custom";
      });
    }
    // Capture phase: fields are enabled or disabled before htmx reads the form on "change".
    document.addEventListener(
      "change",
      function (e) {
        if (e.target.name === "comparison_mode") syncModes(form);
      },
      true,
    );
    // A field the browser refuses stops htmx's estimate request: say which, rather than
    // leave the previous numbers standing as if they were this form's.
    form.addEventListener("htmx:validation:halted", function () {
      const box = document.getElementById("estimate");
      const bad = form.querySelector("input:invalid, select:invalid, textarea:invalid");
      if (!box || !bad) return;
      let note = document.getElementById("estimate-stale");
      if (!note) {
        note = el("p", "notice warn");
        note.id = "estimate-stale";
        box.insertBefore(note, box.firstElementChild ? box.firstElementChild.nextSibling : null);
      }
      box.classList.add("stale");
      const label = bad.closest("label");
      const name = label ? label.firstChild.textContent.trim() : bad.name;
      note.textContent =
        "Not up to date: " + name + ": " + bad.validationMessage + " The numbers below are for the form as it was.";
    });
    document.addEventListener("click", function (e) {
      const chips = e.target.closest("[data-chips]");
      if (chips) {
        form.querySelectorAll("input[name=pillar_ids]:not(:disabled)").forEach(function (box) {
          box.checked = chips.dataset.chips === "all";
        });
        form.dispatchEvent(new Event("change", { bubbles: true }));
        return;
      }
      const setter = e.target.closest("[data-set-field]");
      if (setter) {
        const field = form.querySelector("[name=" + setter.dataset.setField + "]");
        if (field) {
          field.value = setter.dataset.value;
          field.dispatchEvent(new Event("change", { bubbles: true }));
        }
      }
    });
  }

  const laneRoot = document.getElementById("lanes");
  const lanes = laneRoot ? setupLanes(laneRoot) : null;
  const form = document.getElementById("session-form");
  if (form) setupForm(form);
})();

// "Start from this" on the new-session page: copy a built-in (read-only) text into the
// field it seeds, to be edited there.
document.addEventListener("click", (e) => {
  const button = e.target.closest("[data-copy-from]");
  if (!button) return;
  const from = document.getElementById(button.dataset.copyFrom);
  const to = document.getElementById(button.dataset.copyTo);
  if (!from || !to) return;
  to.value = from.value;
  to.closest("details.advanced")?.setAttribute("open", "");
  to.focus();
  to.dispatchEvent(new Event("change", { bubbles: true }));
});
