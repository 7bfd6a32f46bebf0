// The run page's orchestrator view (multi-agent runs only): the dev plan with item states,
// each role's latest report (summary; the full text on demand), the sub-loop's round and
// result, and the milestones. Read from /api/runs/RUN/orchestrator, refreshed on events.
"use strict";

(function () {
  const box = $("orchestrator");
  if (document.body.dataset.page !== "run" || !box) return;
  const runId = decodeURIComponent(location.pathname.split("/ui/runs/")[1]);
  const base = "/api/runs/" + encodeURIComponent(runId) + "/orchestrator";
  const icon = { DONE: "✓", DOING: "◐", BLOCKED: "✗", TODO: "○" };
  const open = new Set();  // the roles whose full report is shown
  let last = "";

  function plan(view) {
    const items = view.plan.map((t) => node("li", { "data-plan": t.id, "data-status": t.status },
      `${icon[t.status] || "•"} ${t.id} ${t.title} `, node("span", { class: "muted" }, t.status)));
    return node("div", { "data-testid": "orch-plan" }, node("h3", {}, `dev_plan (${view.planCounts})`),
      items.length ? node("ul", { class: "todo" }, ...items) : node("p", { class: "muted" }, "no tasks yet"));
  }

  async function toggle(role, holder, button) {
    if (open.has(role)) { open.delete(role); clear(holder); text(button, "Full report"); return; }
    open.add(role); text(button, "Hide report");
    try {
      const r = await api("GET", `${base}/reports/${encodeURIComponent(role)}`);
      clear(holder); holder.append(node("pre", { "data-testid": "orch-report-text" }, r.text));
    } catch (err) { clear(holder); holder.append(node("p", { class: "error" }, err.message)); }
  }

  function report(r) {
    const holder = node("div", {});
    const button = node("button", { type: "button", "data-role": r.role }, open.has(r.role) ? "Hide report" : "Full report");
    button.addEventListener("click", () => toggle(r.role, holder, button));
    if (!r.available) button.disabled = true;
    const facts = [`iteration ${r.iteration}${r.subloop ? ", sub-loop round " + r.subloop : ""}`];
    if (r.blockers.length) facts.push("blockers: " + r.blockers.join("; "));
    if (r.keyChanges.length) facts.push("changes: " + r.keyChanges.join("; "));
    if (r.evidence) facts.push("evidence: " + r.evidence);
    const card = node("li", { "data-report": r.role, "data-verdict": r.verdict },
      node("strong", {}, r.role), " ", node("span", { class: "badge " + (r.verdict === "PASS" ? "COMPLETED" : r.verdict === "FAIL" ? "FAILED" : "PAUSED") }, r.verdict),
      node("div", { class: "muted" }, facts.join(" · ")), button, holder);
    if (open.has(r.role)) { open.delete(r.role); toggle(r.role, holder, button); }
    return card;
  }

  function subloop(view) {
    const s = view.subloop, res = view.subloopResult;
    const lines = [];
    if (s && s.active) lines.push(`active: round ${s.sub_iteration} (${s.stage}), entered at iteration ${s.iteration}: ${s.entry_reason}`);
    else if (s) lines.push(`last sub-loop: iteration ${s.iteration}, ${s.sub_iteration} round(s), exit: ${s.exit_condition || "?"}`);
    if (res) lines.push(`result: ${res.success ? "success" : "no success"}, final TEST ${res.final_test_verdict}, ${res.iterations} round(s)`);
    return node("div", { "data-testid": "orch-subloop" }, node("h3", {}, "TEST→DEV sub-loop"),
      ...(lines.length ? lines.map((l) => node("p", {}, l)) : [node("p", { class: "muted" }, "not entered")]));
  }

  function milestones(view) {
    const items = view.milestones.map((m) => node("li", {}, `iteration ${m.iteration}: ${m.milestone}`, node("span", { class: "muted" }, ` (${m.title})`)));
    return node("div", { "data-testid": "orch-milestones" }, node("h3", {}, "Milestones"),
      items.length ? node("ul", {}, ...items) : node("p", { class: "muted" }, "none yet"));
  }

  async function load() {
    let view;
    try { view = await api("GET", base); } catch (err) { return; }
    if (!view.orchestration) { box.classList.add("hidden"); return; }
    const key = JSON.stringify(view);
    if (key === last) return;
    last = key;
    box.classList.remove("hidden");
    const body = $("orchestrator-body"); clear(body);
    const d = view.lastDecision || {};
    body.append(node("p", { "data-testid": "orch-status" },
      `iteration ${view.iteration} · last stage ${view.lastStage || "-"}` + (d.next_agent ? ` · MAIN → ${d.next_agent}: ${d.reason || ""}` : "")));
    if (view.pendingQuestion) body.append(node("p", { class: "warning" }, "MAIN asks: " + view.pendingQuestion));
    const reports = node("div", { "data-testid": "orch-reports" }, node("h3", {}, "Latest reports"),
      view.reports.length ? node("ul", { class: "reports" }, ...view.reports.map(report)) : node("p", { class: "muted" }, "no reports yet"));
    if (!view.workdirAvailable) reports.append(node("p", { class: "muted" }, "the working directory is not on this server: summaries from the run's state"));
    body.append(node("div", { class: "grid" }, plan(view), reports), node("div", { class: "grid" }, subloop(view), milestones(view)));
  }

  const source = new EventSource("/api/runs/" + encodeURIComponent(runId) + "/events", { withCredentials: true });
  for (const kind of ["step_done", "paused", "completed", "failed", "cancelled", "orchestrator"]) {
    source.addEventListener(kind, () => load());
  }
  load();
})();
