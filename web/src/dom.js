// Small DOM helpers. Every text from the API goes in through textContent (never
// innerHTML), so a job name cannot inject markup. The formatters are in format.js.
import { duration } from "./format.js";

export { duration, num, bytes } from "./format.js";

// el("tag.class#id", {attr: value, onclick: fn, dataset: {...}}, children...)
export function el(spec, attrs = {}, ...children) {
  const m = /^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i.exec(spec);
  const node = document.createElement((m && m[1]) || "div");
  for (const part of ((m && m[2]) || "").match(/[.#][\w-]+/g) || []) {
    if (part[0] === ".") node.classList.add(part.slice(1));
    else node.id = part.slice(1);
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "text") node.textContent = String(v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

// A time shown relative ("5m ago"), with the absolute time on hover.
export function when(ms, now = Date.now()) {
  if (!ms) return el("span.muted", {}, "–");
  const d = new Date(ms);
  const delta = now - ms;
  const text = delta >= 0 ? `${duration(delta)} ago` : `in ${duration(-delta)}`;
  return el("time", { datetime: d.toISOString(), title: d.toLocaleString() }, text);
}

export function stateBadge(state) {
  return el(`span.badge.state-${String(state).toLowerCase()}`, {}, state);
}

// A message in place of content: loading, empty, or an error (role=alert).
export function notice(kind, text, ...more) {
  return el(`div.notice.${kind}`, kind === "error" ? { role: "alert" } : { role: "status" }, text, ...more);
}

// A sortable table: columns [{key, label, render(row) -> node|text, sort(row) -> value,
// cls}]; rows; state {sort, dir} kept by the caller so re-renders keep the order.
export function table(columns, rows, state, onsort, rowAttrs = () => ({})) {
  const sorted = rows.slice();
  const col = columns.find((c) => c.key === state.sort && c.sort);
  if (col) {
    const dir = state.dir === "desc" ? -1 : 1;
    sorted.sort((a, b) => {
      const x = col.sort(a), y = col.sort(b);
      return (x < y ? -1 : x > y ? 1 : 0) * dir;
    });
  }
  const head = el("tr", {}, columns.map((c) => {
    const active = state.sort === c.key;
    const aria = active ? (state.dir === "desc" ? "descending" : "ascending") : "none";
    const th = el("th", { scope: "col", "aria-sort": c.sort ? aria : null, class: c.cls });
    if (c.sort) {
      th.append(el("button.sort", {
        type: "button",
        onclick: () => onsort(c.key, active && state.dir === "asc" ? "desc" : "asc"),
      }, c.label, el("span.arrow", { "aria-hidden": "true" }, active ? (state.dir === "desc" ? " ▼" : " ▲") : "")));
    } else {
      th.textContent = c.label;
    }
    return th;
  }));
  const body = el("tbody", {}, sorted.map((r) =>
    el("tr", rowAttrs(r), columns.map((c) => el("td", { class: c.cls }, c.render(r))))));
  return el("table.data", {}, el("thead", {}, head), body);
}
