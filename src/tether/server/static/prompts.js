// The run page's "Model calls" section: per call the layers and token counts, the exact
// messages, the diff to the call before, and the reply as it streams (model_delta events).
"use strict";

(function () {
  if (document.body.dataset.page !== "run" || !$("prompts")) return;
  const runId = decodeURIComponent(location.pathname.split("/ui/runs/")[1]);
  const base = "/api/runs/" + encodeURIComponent(runId);
  const layerNames = { 1: "System", 2: "Session", 3: "Working", 4: "Instant" };
  let shown = null, count = -1, streaming = "";

  function layerCells(layers) {
    return Object.entries(layers || {}).map(([name, n]) => `${name} ${n}`).join(" · ");
  }

  async function loadCalls() {
    let list;
    try { list = await api("GET", base + "/prompts"); } catch (err) { return; }
    if (list.calls.length === count) return;
    count = list.calls.length;
    const body = $("prompt-calls").querySelector("tbody"); clear(body);
    for (const c of list.calls.slice().reverse()) {
      const row = node("tr", { "data-iteration": c.iteration, class: "clickable" },
        node("td", {}, c.iteration), node("td", {}, `${c.tokens}${c.budget ? " / " + c.budget : ""}`),
        node("td", { class: "muted" }, layerCells(c.layers)), node("td", { class: "muted" }, c.reply.slice(0, 120)));
      row.addEventListener("click", () => showCall(c.iteration));
      body.append(row);
    }
    text($("prompt-count"), `${list.calls.length} call${list.calls.length === 1 ? "" : "s"}`);
  }

  function describe(rows, mark) {
    return rows.map((r) => node("li", {}, `${mark} ${r.id} [${r.kind}, layer ${r.layer}, ${r.tokens} tok] `, node("span", { class: "muted" }, r.preview)));
  }

  async function showCall(iteration) {
    shown = iteration;
    const view = $("prompt-view"); clear(view);
    let call, diff = null;
    try {
      call = await api("GET", `${base}/prompts/${iteration}`);
      try { diff = await api("GET", `${base}/prompts/${iteration}/diff`); } catch (err) { diff = null; }
    } catch (err) { view.append(node("p", { class: "error" }, err.message)); return; }
    view.append(node("h3", {}, `Iteration ${call.iteration} · ${call.provider} ${call.model} · ${call.tokens}/${call.budget} tokens`));
    view.append(node("p", { class: "muted", "data-testid": "prompt-layers" }, layerCells(call.layers)));
    if (diff) {
      const d = node("div", { "data-testid": "prompt-diff" },
        node("p", {}, `Since iteration ${diff.before}: ${diff.tokensBefore} → ${diff.tokensAfter} tokens, ${diff.kept} unchanged`));
      const ul = node("ul", {}, ...describe(diff.entered, "+"), ...describe(diff.left, "−"),
        ...describe(diff.compressed, "~ compressed"), ...describe(diff.changed, "*"));
      d.append(ul); view.append(d);
    }
    let layer = null, section = null;
    call.messages.forEach((m, i) => {
      const meta = call.items[i] || {};
      if (meta.layer !== layer) {
        layer = meta.layer;
        section = node("details", { open: "" }, node("summary", {}, `${layer}. ${layerNames[layer] || "?"}`));
        view.append(section);
      }
      const content = typeof m.content === "string" ? m.content : JSON.stringify(m, null, 2);
      section.append(node("div", { class: "message" },
        node("div", { class: "muted" }, `${m.role} · ${meta.id} (${meta.kind}, ${meta.tokens} tok)`), node("pre", {}, content)));
    });
    view.append(node("h3", {}, "Reply"), node("pre", { "data-testid": "prompt-reply" }, call.reply));
  }

  function onDelta(e) {
    const data = JSON.parse(e.data);
    const box = $("model-stream");
    if (data.detail.seq === 1) streaming = "";
    streaming += data.detail.text;
    box.classList.remove("hidden");
    text($("model-stream-text"), streaming);
  }
  function onStep() {
    $("model-stream").classList.add("hidden");
    loadCalls();
  }

  const source = new EventSource(base + "/events", { withCredentials: true });
  source.addEventListener("model_delta", onDelta);
  for (const kind of ["step_done", "step_started", "paused", "completed", "failed", "cancelled"]) {
    source.addEventListener(kind, onStep);
  }
  loadCalls();
})();
