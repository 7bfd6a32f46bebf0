// The dashboard's script: thin views over the JSON API, refreshed by server-sent events.
"use strict";

const $ = (id) => document.getElementById(id);
const LAYERS = { 1: "system", 2: "session", 3: "working", 4: "instant" };

async function api(method, path, body) {
  const opts = { method, headers: { "X-Tether-Client": "dashboard" }, credentials: "same-origin" };
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  const r = await fetch(path, opts);
  if (r.status === 401) { showLogin(); throw new Error("sign in first"); }
  const data = r.headers.get("content-type", "").includes("json") ? await r.json() : null;
  if (!r.ok) throw new Error((data && data.detail) || r.statusText);
  return data;
}

function text(el, value) { el.textContent = value == null ? "" : String(value); }
function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }
function node(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v; else if (k.startsWith("on")) el.addEventListener(k.slice(2), v); else el.setAttribute(k, v);
  }
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function showLogin() { $("login").classList.remove("hidden"); $("token").focus(); }
function setupLogin(after) {
  $("login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api("POST", "/ui/login", { token: $("token").value });
      $("login").classList.add("hidden"); $("token").value = ""; text($("login-error"), "");
      after();
    } catch (err) { text($("login-error"), err.message); }
  });
}

// A snapshot read that sends only what changed since the version held (RFC 3229 delta):
// If-None-Match names the held version, A-IM asks for the diff; 304 keeps it, 226 patches
// it, 200 replaces it.
function applyChange(old, c) {
  if (c.op === "append") return (Array.isArray(old) ? old : []).concat(c.appended);
  if (c.op === "merge") {
    const out = Object.assign({}, old);
    for (const k of c.removed) delete out[k];
    Object.assign(out, c.added);
    for (const [k, v] of Object.entries(c.changed)) out[k] = v.after;
    return out;
  }
  return c.after;
}

function applyDelta(held, d) {
  const state = Object.assign({}, held.stateData);
  for (const k of d.stateData.removed) delete state[k];
  Object.assign(state, d.stateData.added);
  for (const [k, c] of Object.entries(d.stateData.changed)) state[k] = applyChange(state[k], c);
  const out = Object.assign({}, d, { stateData: state, executionHistory: applyChange(held.executionHistory, d.executionHistory) });
  delete out.fromVersion;
  return out;
}

async function readSnapshot(path, held) {
  const headers = held ? { "If-None-Match": held.etag, "A-IM": "tether-diff" } : {};
  const r = await fetch(path, { headers, credentials: "same-origin", cache: "no-store" });
  document.body.dataset.snapshotReads = (document.body.dataset.snapshotReads || "") + r.status + " ";
  if (r.status === 304) return held;
  if (r.status === 401) { showLogin(); throw new Error("sign in first"); }
  const data = await r.json();
  if (!r.ok) throw new Error((data && data.detail) || r.statusText);
  const snap = r.status === 226 ? applyDelta(held.snap, data) : data;
  return { snap, etag: r.headers.get("etag") };
}

function debounce(fn, ms) { let t = null; return () => { clearTimeout(t); t = setTimeout(fn, ms); }; }

// At most one call of ``fn`` per ``ms`` (the first at once, one more after a burst),
// never two at a time: a stream of events from busy runs never starves the page, as a
// debounce would, nor piles up reads.
function throttle(fn, ms) {
  let busy = false, again = false;
  const fire = async () => {
    if (busy) { again = true; return; }
    busy = true; again = false;
    try { await fn(); } catch (err) { /* the next event tries again */ }
    setTimeout(() => { busy = false; if (again) fire(); }, ms);
  };
  return fire;
}

// Events say which run moved, from this server's runners or from the store's change feed
// (``checkpoint``: a run executed anywhere reached a version). Nothing is learnt while the
// stream is down, so every reconnection re-reads too.
function listen(path, onEvent) {
  const source = new EventSource(path, { withCredentials: true });
  let opened = false;
  source.onopen = () => { text($("live"), "● live"); if (opened) onEvent(); opened = true; };
  source.onerror = () => text($("live"), "○ reconnecting…");
  source.onmessage = onEvent;
  for (const kind of ["checkpoint", "run_started", "run_resumed", "step_started", "step_done", "step_failed", "step_retry", "decision",
    "paused", "completed", "cancelled", "failed", "compressed", "usage_crossed", "context_usage", "state_updated",
    "rolled_back", "forked", "stop_requested", "replanned", "run_error", "state_restored", "rollback_action"]) {
    source.addEventListener(kind, onEvent);
  }
  return source;
}

// ---- runs list -----------------------------------------------------------------------
function runsPage() {
  let offset = 0; const limit = 50;
  async function load() {
    const status = $("status-filter").value;
    const q = new URLSearchParams({ limit, offset }); if (status) q.set("status", status);
    const page = await api("GET", "/api/runs?" + q);
    const body = $("runs"); clear(body);
    for (const r of page.items) {
      if (langGraphIndex(r.runId)) continue;  // the saver's bookkeeping, not a run or a thread
      const thread = langGraphThread(r.runId);
      const shown = thread ? "THREAD" : r.status;  // a LangGraph thread has no tether status
      body.append(node("tr", { "data-run": r.runId },
        node("td", {}, node("a", { href: "/ui/runs/" + encodeURIComponent(r.runId), title: r.runId }, thread || r.runId)),
        node("td", {}, node("span", { class: "badge " + shown }, shown + (r.executing ? " ▶" : ""))),
        node("td", { "data-reason": "" }, thread ? "" : whyText(r)),
        node("td", {}, r.version), node("td", {}, r.nodeId || ""),
        node("td", { "data-holder": r.holder ? r.holder.host + ":" + r.holder.pid : "" }, holderText(r.holder)),
        node("td", {}, new Date(r.updatedAt).toLocaleString())));
    }
    $("prev").disabled = offset === 0; $("next").disabled = page.nextOffset == null;
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }
  $("status-filter").addEventListener("change", () => { offset = 0; load(); });
  $("prev").addEventListener("click", () => { offset = Math.max(0, offset - limit); load(); });
  $("next").addEventListener("click", () => { offset += limit; load(); });
  const reload = throttle(load, 500);
  setupLogin(() => { load(); listen("/api/events", reload); });
  load().then(() => listen("/api/events", reload)).catch(() => {});
}

// The run id of a LangGraph thread's namespace is "lg:" + length-prefixed parts
// ("lg:2:t10:" is thread t1 in the root namespace); a long one is hashed ("lg#…").
function langGraphThread(runId) {
  if (runId.startsWith("lg#")) return "LangGraph thread " + runId.slice(3, 11) + "…";
  if (!runId.startsWith("lg:")) return null;
  const parts = []; let rest = runId.slice(3);
  while (rest) {
    const colon = rest.indexOf(":"); const n = Number(rest.slice(0, colon));
    if (colon < 1 || !Number.isInteger(n)) return null;
    parts.push(rest.slice(colon + 1, colon + 1 + n)); rest = rest.slice(colon + 1 + n);
  }
  if (parts.length !== 2) return null;
  return "LangGraph thread " + parts[0] + (parts[1] ? " › " + parts[1].split("|").map((p) => p.split(":")[0]).join(" › ") : "");
}

// TetherSaver's own index runs: a thread's namespaces ("lgt:"), a LangGraph run's
// namespaces ("lgr:"), hashed when long ("lgt#…"), and the scratch copy a delete rebuilds in.
function langGraphIndex(runId) {
  return /^lg[tr][:#]/.test(runId) || (runId.startsWith("lg") && runId.endsWith("~rw"));
}

// Why a run waits, in a few words: what the server said, else its pause reason.
function whyText(r) {
  const waits = { decision: "waits for a decision", answer: "waits for an answer", approval: "waits for approval", review: "waits for a review" };
  if (r.waitsFor && waits[r.waitsFor]) return waits[r.waitsFor];
  if (r.status === "INTERRUPTED") return "its process stopped: resume it";
  return r.pauseReason || "";
}

function ago(seconds) {
  if (seconds == null) return "";
  return seconds < 90 ? Math.round(seconds) + "s" : seconds < 5400 ? Math.round(seconds / 60) + "m" : Math.round(seconds / 3600) + "h";
}

function holderText(h) {
  if (!h) return "";
  return `${h.host}:${h.pid}` + (h.age == null ? "" : ` · renewed ${ago(h.age)} ago`);
}

// ---- workers -------------------------------------------------------------------------
function workersPage() {
  async function load() {
    const data = await api("GET", "/api/workers");
    const body = $("workers"); clear(body);
    for (const w of data.items) {
      w.runs.forEach((r, i) => body.append(node("tr", { "data-worker": `${w.host}:${w.pid}`, "data-run": r.runId },
        node("td", {}, i ? "" : w.host), node("td", {}, i ? "" : w.pid),
        node("td", {}, node("a", { href: "/ui/runs/" + encodeURIComponent(r.runId) }, r.runId)),
        node("td", {}, r.version), node("td", {}, r.nodeId || ""),
        node("td", {}, r.age == null ? "" : ago(r.age) + " ago"), node("td", {}, ago(r.expiresIn)))));
    }
    $("no-workers").classList.toggle("hidden", data.items.length > 0);
    $("partial").classList.toggle("hidden", data.complete);
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }
  const reload = throttle(load, 500);
  let source = null;
  setupLogin(() => { load(); if (!source) source = listen("/api/events", reload); });
  load().then(() => { if (!source) source = listen("/api/events", reload); }).catch(() => {});
  setInterval(() => load().catch(() => {}), 5000);  // lease ages move without any event
}

// ---- one run -------------------------------------------------------------------------
function runPage() {
  const runId = decodeURIComponent(location.pathname.split("/ui/runs/")[1]);
  const base = "/api/runs/" + encodeURIComponent(runId);
  let snap = null, ctx = null, preview = null, held = null;
  const thread = langGraphThread(runId);
  text($("run-id"), thread || runId); document.title = "tether · " + runId;

  async function act(fn) {
    text($("action-error"), "");
    try { await fn(); } catch (err) { text($("action-error"), err.message); }
    refresh();
  }

  function renderSnapshot() {
    if (thread) return renderThread();
    const st = snap.status;
    const badge = $("status"); badge.className = "badge " + st; text(badge, st + (snap.executing ? " ▶" : ""));
    text($("where"), `version ${snap.version} · at ${snap.currentNodeName || snap.currentNodeId || "start"} · ` +
      new Date(snap.timestamp).toLocaleString());
    const finished = ["COMPLETED", "CANCELLED", "FAILED"].includes(st);
    $("pause").disabled = finished || st === "PAUSED";
    const waits = waitsFor(snap);
    const resumable = (st === "PAUSED" || st === "INTERRUPTED") && !snap.executing && !waits;
    $("resume").disabled = !resumable;
    $("resume").title = waits === "decision" ? "This run waits for a decision: choose one under Recovery."
      : waits === "answer" ? `This run waits for an answer: tether resume ${snap.conversationId} --answer TEXT`
      : waits === "approval" ? `A command waits for approval: tether approve ${snap.conversationId}`
      : resumable ? "Continue the run from its last checkpoint." : `Nothing to resume: the run is ${st}.`;
    $("cancel").disabled = finished;
    compressButtons();
    const paused = st === "PAUSED" && !snap.executing;
    for (const id of ["state-edit", "edit-node", "save-state"]) $(id).disabled = !paused;
    if (!$("edit-node").value) $("edit-node").value = snap.currentNodeId || "";
    text($("editor-note"), paused ? "The JSON object is merged through the run's reducers (lists append, the rest overwrites)."
      : "Editing is enabled only while the run is paused.");
    text($("state-view"), JSON.stringify(snap.stateData, null, 2).slice(0, 200000));
    renderTodo((snap.stateData._tether || {}).todo || snap.stateData.todo || {});
  }

  // A LangGraph thread's namespace is stored by TetherSaver and executed by the graph that
  // owns it: its stored status means nothing to tether, and tether cannot pause, resume or
  // edit it (the graph's own update_state does that, with the graph's reducers).
  function renderThread() {
    const badge = $("status"); badge.className = "badge THREAD"; text(badge, "THREAD");
    text($("where"), `version ${snap.version} · ` + new Date(snap.timestamp).toLocaleString());
    const why = "A LangGraph thread: the graph that owns it runs it (invoke it with this thread_id); " +
      "tether stores its checkpoints.";
    for (const id of ["pause", "resume", "cancel", "state-edit", "edit-node", "save-state", "open-compress", "open-compress-2"]) {
      $(id).disabled = true; $(id).title = why;
    }
    text($("editor-note"), "Change a thread's state with the graph's update_state, which applies its reducers.");
    text($("state-view"), JSON.stringify(snap.stateData, null, 2).slice(0, 200000));
    renderTodo({});
  }

  // What a PAUSED run waits on before it can continue: a decision, an answer or an approval.
  function waitsFor(s) {
    if (s.status !== "PAUSED") return null;
    const rt = s.stateData._tether || {};
    if (rt.pending_decision) return "decision";
    if (s.stateData.pending_approval) return "approval";
    if (s.stateData.pending_question) return "answer";
    return null;
  }

  // Compression is applied to a paused run only (a live one would overwrite it).
  function compressButtons() {
    if (thread) return;  // renderThread disabled them for good
    const can = !!(ctx && ctx.hasWindow) && !!snap && snap.status === "PAUSED" && !snap.executing;
    for (const id of ["open-compress", "open-compress-2"]) {
      $(id).disabled = !can;
      $(id).title = can ? "Preview a compression, then apply it."
        : !(ctx && ctx.hasWindow) ? "This run keeps no context window." : "Pause the run to compress its context.";
    }
  }

  function renderTodo(todo) {
    const phases = new Map();
    for (const [id, t] of Object.entries(todo)) {
      if (!phases.has(t.phase)) phases.set(t.phase, []);
      phases.get(t.phase).push([id, t]);
    }
    const box = $("todo"); clear(box);
    const icon = { done: "✓", failed: "✗", skipped: "↷", pending: "○" };
    for (const [phase, items] of phases) {
      const done = items.filter(([, t]) => t.status === "done" || t.status === "skipped").length;
      box.append(node("h3", {}, `${phase} (${done}/${items.length})`));
      box.append(node("ul", {}, ...items.map(([id, t]) =>
        node("li", { "data-todo": id, "data-status": t.status }, `${icon[t.status] || "•"} ${t.name || id}`,
          node("span", { class: "muted" }, ` ${t.status}${t.attempts > 1 ? ", " + t.attempts + " attempts" : ""}`)))));
    }
    if (!phases.size) box.append(node("p", { class: "muted" }, "no TODO list in this run"));
  }

  function renderContext() {
    const bar = $("context-bar"); clear(bar);
    const legend = $("context-legend"); clear(legend);
    const warn = $("context-warning");
    if (!ctx.hasWindow) {
      text($("context-numbers"), "this run keeps no context window");
      warn.classList.add("hidden"); compressButtons(); return;
    }
    for (const layer of ctx.layers) {
      const seg = node("div", { class: "seg l" + layer.layer, title: `${layer.name}: ${layer.tokens} tokens` });
      seg.style.width = (100 * layer.tokens / ctx.budget).toFixed(2) + "%";
      bar.append(seg);
      legend.append(node("span", {}, node("i", { class: "seg l" + layer.layer }), `${layer.name} ${layer.tokens}`));
    }
    for (const [name, at] of Object.entries(ctx.thresholds)) {
      const mark = node("div", { class: "mark", title: `${name} at ${Math.round(at * 100)}%` }, node("span", {}, Math.round(at * 100) + "%"));
      mark.style.left = (100 * at) + "%"; bar.append(mark);
    }
    for (const i of legend.querySelectorAll("i")) i.style.background = getComputedStyle(document.documentElement).getPropertyValue("--l" + i.className.slice(-1));
    const pct = Math.round(ctx.ratio * 100);
    bar.setAttribute("aria-label", `context usage ${pct}%`);
    bar.dataset.ratio = String(ctx.ratio);
    text($("context-numbers"), `${ctx.tokens} of ${ctx.budget} tokens (${pct}%)`);
    compressButtons();
    if (ctx.level === "ok") { warn.classList.add("hidden"); }
    else {
      warn.className = "warning " + ctx.level;
      const msg = { warn: `Context is ${pct}% full: compress it soon (automatic compression starts at ${Math.round(ctx.thresholds.standard * 100)}%).`,
        standard: `Context is ${pct}% full: standard compression is due.`,
        deep: `Context is ${pct}% full: deep compression is due now.` }[ctx.level];
      text($("context-warning-text"), msg);
    }
    const items = $("context-items"); clear(items);
    for (const layer of ctx.layers) {
      items.append(node("h3", {}, `${layer.layer}. ${layer.name} (${layer.tokens}/${layer.budget})`));
      items.append(node("ul", {}, ...layer.items.map((it) => node("li", {}, `${it.pinned ? "[pinned] " : ""}[${it.kind}] ${it.preview} `, node("span", { class: "muted" }, `${it.tokens} tok`)))));
    }
  }

  async function renderFailure() {
    const f = await api("GET", base + "/failure");
    const box = $("failure");
    if (!f.pending) { box.classList.add("hidden"); return; }
    box.classList.remove("hidden");
    text($("failure-text"), f.text);
    const offered = new Set(f.options.map((o) => o.decision));
    for (const b of box.querySelectorAll("button[data-decision]")) {
      const opt = f.options.find((o) => o.decision === b.dataset.decision);
      b.disabled = !offered.has(b.dataset.decision) || snap.executing;
      b.title = opt ? opt.description : "not offered for this failure";
    }
    // the step's own options: a label, and the decision each applies
    const list = $("failure-suggestions"); clear(list);
    for (const s of (f.report && f.report.suggestions) || []) {
      const button = node("button", { type: "button", "data-suggestion": s.decision }, s.label);
      button.disabled = !offered.has(s.decision) || snap.executing;
      button.addEventListener("click", () => decide(s.decision));
      list.append(node("li", {}, button, s.detail ? node("span", { class: "muted" }, " " + s.detail) : ""));
    }
  }

  function decide(decision) {
    const note = $("failure-note").value.trim();
    if (decision === "takeover" && !note) { alert("Say what you did by hand first (the note)."); return; }
    act(() => api("POST", base + "/failure/decision", note ? { decision, note } : { decision }));
  }

  async function renderTimeline() {
    const page = await api("GET", base + "/checkpoints?limit=50");
    const list = $("timeline"); clear(list);
    for (const cp of page.items) {
      list.append(node("li", { "data-version": cp.version },
        `v${cp.version} ${cp.nodeId || ""} `, node("span", { class: "muted" }, `${cp.status} · ${new Date(cp.timestamp).toLocaleTimeString()} `),
        node("button", { type: "button", onclick: () => { $("diff-from").value = Math.max(1, cp.version - 1); $("diff-to").value = cp.version; showDiff(); } }, "diff"),
        ...(thread ? [] : [  // a thread is forked and rewound through the graph (its checkpoint ids)
          " ", node("button", { type: "button", onclick: () => fork(cp.version) }, "fork"),
          " ", node("button", { type: "button", onclick: () => rollback(cp.version) }, "roll back")])));
    }
  }

  async function showDiff() {
    const out = $("diff-out");
    try {
      const d = await api("GET", `${base}/diff?from=${$("diff-from").value}&to=${$("diff-to").value || ""}`);
      const lines = [];
      for (const [k, v] of Object.entries(d.added)) lines.push(`+ ${k}: ${JSON.stringify(v).slice(0, 300)}`);
      for (const k of d.removed) lines.push(`- ${k}`);
      for (const [k, c] of Object.entries(d.changed)) {
        if (c.op === "append") lines.push(`~ ${k}: appended ${JSON.stringify(c.appended).slice(0, 300)}`);
        else if (c.op === "merge") lines.push(`~ ${k}: ${JSON.stringify({ added: c.added, removed: c.removed, changed: c.changed }).slice(0, 300)}`);
        else lines.push(`~ ${k}: ${JSON.stringify(c.before).slice(0, 120)} → ${JSON.stringify(c.after).slice(0, 120)}`);
      }
      text(out, `v${d.fromVersion} → v${d.toVersion}\n` + (lines.join("\n") || "no changes"));
    } catch (err) { text(out, err.message); }
    out.classList.remove("hidden");
  }

  function fork(version) {
    const target = prompt(`Fork v${version} into a new run id:`, `${runId}-fork-${version}`);
    if (target) act(async () => { await api("POST", `${base}/checkpoints/${version}/fork`, { newRunId: target }); location.href = "/ui/runs/" + encodeURIComponent(target); });
  }
  function rollback(version) {
    if (confirm(`Make v${version} the latest state again? Later versions stay in the history.`))
      act(() => api("POST", `${base}/checkpoints/${version}/rollback`));
  }

  async function refresh() {
    try {
      held = await readSnapshot(base + "/snapshot", held);
      snap = held.snap;
      renderSnapshot();
      ctx = await api("GET", base + "/context");
      renderContext();
      await renderFailure();
      await renderTimeline();
      document.body.dataset.version = String(snap.version);
    } catch (err) { text($("action-error"), err.message); }
  }

  // the CompressDialog: choose a level, preview, then confirm
  const dialog = $("compress-dialog");
  function compressBody() {
    const level = $("compress-level").value;
    return level === "phase" ? { level, phase: $("compress-phase").value } : { level };
  }
  function showPhases() {
    const phase = $("compress-level").value === "phase";
    const select = $("compress-phase"); clear(select);
    for (const p of (ctx && ctx.phases) || []) select.append(node("option", { value: p }, p));
    for (const id of ["compress-phase", "compress-phase-label"]) $(id).classList.toggle("hidden", !phase);
    preview = null; $("compress-confirm").disabled = true;
    $("compress-summary-text").classList.add("hidden");
  }
  function openCompress() { preview = null; $("compress-confirm").disabled = true; text($("compress-summary"), "Choose a level and preview what it would do."); clear($("compress-items")); text($("compress-error"), ""); text($("compress-summary-text"), ""); showPhases(); dialog.showModal(); $("compress-level").focus(); }
  $("compress-level").addEventListener("change", showPhases);
  $("compress-phase").addEventListener("change", () => { preview = null; $("compress-confirm").disabled = true; });
  $("open-compress").addEventListener("click", openCompress);
  $("open-compress-2").addEventListener("click", openCompress);
  $("compress-close").addEventListener("click", () => dialog.close());
  $("compress-preview").addEventListener("click", async () => {
    text($("compress-error"), "");
    try {
      preview = await api("POST", base + "/context/compress", compressBody());
      const pct = (n) => Math.round(100 * n / preview.budget);
      text($("compress-summary"), `${preview.beforeTokens} → ${preview.afterTokens} tokens (${pct(preview.beforeTokens)}% → ${pct(preview.afterTokens)}%): ` +
        `${preview.summarized.length} folded into the summary, ${preview.dropped.length} dropped.`);
      const list = $("compress-items"); clear(list);
      const all = [...preview.summarized.map((it) => ["folded", it]), ...preview.dropped.map((it) => ["dropped", it])];
      for (const [what, it] of all.slice(0, 40)) list.append(node("li", {}, `${what} [${it.kind}] ${it.preview}`));
      if (all.length > 40) list.append(node("li", { class: "muted" }, `… and ${all.length - 40} more`));
      const summaryText = $("compress-summary-text");  // the text the summary would hold, read before Confirm
      text(summaryText, preview.summary || "(no summary: nothing would be folded)");
      summaryText.classList.remove("hidden");
      $("compress-confirm").disabled = snap.status !== "PAUSED" || snap.executing;
      if ($("compress-confirm").disabled) text($("compress-error"), "Pause the run to apply a compression.");
    } catch (err) { text($("compress-error"), err.message); }
  });
  $("compress-confirm").addEventListener("click", async () => {
    try {
      await api("POST", base + "/context/compress", { ...compressBody(), apply: true, expectedVersion: snap.version });
      dialog.close(); refresh();
    } catch (err) { text($("compress-error"), err.message); }
  });

  $("pause").addEventListener("click", () => act(() => api("POST", base + "/pause")));
  $("resume").addEventListener("click", () => act(() => api("POST", base + "/resume")));
  $("cancel").addEventListener("click", () => { if (confirm("Cancel this run?")) act(() => api("POST", base + "/cancel")); });
  for (const b of document.querySelectorAll("#failure-actions button")) {
    b.addEventListener("click", () => decide(b.dataset.decision));
  }
  $("diff").addEventListener("click", showDiff);
  $("save-state").addEventListener("click", async () => {
    let data;
    try { data = JSON.parse($("state-edit").value); } catch (err) { text($("state-msg"), "not JSON: " + err.message); return; }
    try {
      const r = await api("PATCH", base + "/snapshot", { nodeId: $("edit-node").value || snap.currentNodeId || "manual", stateData: data });
      text($("state-msg"), `merged: version ${r.version}`);
    } catch (err) { text($("state-msg"), err.message); }
    refresh();
  });

  setupLogin(() => { refresh(); listen(base + "/events", debounce(refresh, 150)); });
  refresh().then(() => listen(base + "/events", debounce(refresh, 150)));
}

if (document.body.dataset.page === "runs") runsPage();
else if (document.body.dataset.page === "workers") workersPage();
else runPage();
