// Alerts: firing and pending ones, and the recent transitions and actions, each linked
// to its job or node.
import * as api from "../api.js";
import { el, clear, notice, when, num } from "../dom.js";

function since(rfc3339) {
  return rfc3339 ? when(Date.parse(rfc3339)) : el("span.muted", {}, "–");
}

function subject(labels) {
  const out = [];
  if (labels.job_id) out.push(el("a", { href: `#/jobs/${encodeURIComponent(labels.job_id)}` }, `job ${labels.job_id}`));
  if (labels.node) out.push(el("a", { href: `#/cluster` }, `node ${labels.node}`), labels.gpu !== undefined ? ` GPU ${labels.gpu}` : "");
  if (!out.length) out.push(Object.entries(labels).filter(([k]) => k !== "alertname" && k !== "severity").map(([k, v]) => `${k}=${v}`).join(" ") || "cluster");
  return out.flatMap((x, i) => (i ? [" ", x] : [x]));
}

export function alertTable(alerts) {
  return el("table.data.alerts", {},
    el("thead", {}, el("tr", {}, ["State", "Rule", "Severity", "About", "Summary", "Value", "Since"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, alerts.map((a) => el("tr", { dataset: { rule: a.rule, state: a.state } },
      el("td", {}, el(`span.badge.alert-${a.state}`, {}, a.state)),
      el("td", {}, a.rule),
      el("td", {}, (a.labels && a.labels.severity) || "–"),
      el("td", {}, subject(a.labels || {})),
      el("td", {}, (a.annotations && (a.annotations.summary || a.annotations.description)) || ""),
      el("td.num", {}, num(a.value)),
      el("td", {}, since(a.state === "resolved" ? a.ends_at : a.starts_at || a.active_at))))));
}

export async function mount(root, route, ctx) {
  const active = el("section", { "aria-label": "Active alerts" });
  const recent = el("section", { "aria-label": "Recent alert events" });
  root.append(el("div.heading", {}, el("h1", {}, "Alerts")),
    el("h2", {}, "Firing and pending"), active, el("h2", {}, "Recent events"), recent);

  async function load() {
    const [a, ev] = await Promise.all([
      api.get("alerts?state=pending,firing", { signal: ctx.signal }),
      api.get("alerts/events?limit=200", { signal: ctx.signal }),
    ]);
    const order = { firing: 0, pending: 1 };
    const list = a.alerts.slice().sort((x, y) => order[x.state] - order[y.state] || x.rule.localeCompare(y.rule));
    clear(active).append(list.length ? alertTable(list) : notice("empty", "Nothing firing or pending."));
    clear(recent).append(ev.events.length ? el("table.data", {},
      el("thead", {}, el("tr", {}, ["When", "Event", "Rule", "About", "Detail"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ev.events.map((e) => el("tr", {},
        el("td", {}, since(e.at)), el("td", {}, el(`span.badge.alert-${e.kind}`, {}, e.kind)), el("td", {}, e.rule),
        el("td", {}, subject(e.labels || {})), el("td", {}, e.detail || "")))))
      : notice("empty", "No alert has changed state since the server started."));
  }
  await load();
  return { refresh: load, every: 3000 };
}
