// A small reader of the OpenAPI document: operations grouped by tag, each with its
// parameters, request body schema and answers. No third-party code, no network but this server.
"use strict";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function resolve(spec, schema) {
  let s = schema || {};
  for (let i = 0; i < 10 && s.$ref; i++) {
    s = s.$ref.replace(/^#\//, "").split("/").reduce((o, k) => (o || {})[k], spec) || {};
  }
  return s;
}

function schemaText(spec, schema, depth) {
  const s = resolve(spec, schema);
  if (depth > 3) return s.title || s.type || "...";
  if (s.properties) {
    const out = {};
    for (const [k, v] of Object.entries(s.properties)) out[k] = schemaText(spec, v, depth + 1);
    return out;
  }
  if (s.anyOf) return s.anyOf.map((x) => schemaText(spec, x, depth + 1));
  if (s.type === "array") return [schemaText(spec, s.items, depth + 1)];
  if (s.enum) return s.enum.join(" | ");
  return s.type || "any";
}

async function main() {
  const root = document.getElementById("ops");
  const spec = await (await fetch(root.dataset.openapi, { credentials: "same-origin" })).json();
  root.textContent = "";
  const byTag = {};
  for (const [path, ops] of Object.entries(spec.paths || {})) {
    for (const [method, op] of Object.entries(ops)) {
      const tag = (op.tags || ["other"])[0];
      (byTag[tag] = byTag[tag] || []).push([method, path, op]);
    }
  }
  for (const [tag, ops] of Object.entries(byTag)) {
    root.append(el("h2", {}, tag));
    for (const [method, path, op] of ops) {
      const d = el("details", {});
      d.append(el("summary", {}, el("span", { class: "method " + method }, method.toUpperCase()), el("code", {}, path), " ", op.summary || ""));
      if (op.description) d.append(el("p", {}, op.description));
      const params = op.parameters || [];
      if (params.length) {
        const t = el("table", {}, el("tr", {}, el("th", {}, "parameter"), el("th", {}, "in"), el("th", {}, "schema")));
        for (const p of params) t.append(el("tr", {}, el("td", {}, p.name + (p.required ? " *" : "")), el("td", {}, p.in), el("td", {}, JSON.stringify(schemaText(spec, p.schema, 0)))));
        d.append(t);
      }
      const body = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
      if (body) d.append(el("p", {}, "body:"), el("pre", {}, JSON.stringify(schemaText(spec, body.schema, 0), null, 2)));
      const answers = el("table", {}, el("tr", {}, el("th", {}, "status"), el("th", {}, "meaning")));
      for (const [code, r] of Object.entries(op.responses || {})) answers.append(el("tr", {}, el("td", {}, code), el("td", {}, r.description || "")));
      d.append(answers);
      root.append(d);
    }
  }
}

main().catch((err) => { document.getElementById("ops").textContent = "cannot read the OpenAPI document: " + err.message; });
