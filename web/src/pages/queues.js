// Queues: per tenant and queue, guaranteed vs limit vs in use vs borrowed as bars,
// pending and running counts, and the fair-share position (weighted use: the queue with
// the lowest GPUs-in-use per unit of weight is offered GPUs first when all want more).
import * as api from "../api.js";
import { el, clear, notice, num } from "../dom.js";

const UNBOUNDED = 10000000;

export async function mount(root, route, ctx) {
  const body = el("div");
  root.append(el("div.heading", {}, el("h1", {}, "Queues")),
    el("p.muted", {}, "Bars in GPUs: solid is use within the guarantee, hatched is borrowed (use beyond it); the tick marks the guarantee, the bar's end the limit (or the cluster's size when unbounded)."),
    body);

  async function load() {
    const [q, t, n] = await Promise.all([
      api.get("queues", { signal: ctx.signal }),
      api.get("tenants", { signal: ctx.signal }),
      api.get("nodes", { signal: ctx.signal }),
    ]);
    const clusterGpus = n.nodes.reduce((s, x) => s + x.gpus_total, 0);
    clear(body);
    if (!q.queues.length) {
      body.append(notice("empty", "No queues yet: a tenant-admin creates one with PUT /api/v1/queues/TENANT/QUEUE, or submitting as a cluster-admin creates it."));
      return;
    }
    // Fair-share position among queues that want more (pending jobs), by weighted use.
    const wanting = q.queues.filter((x) => x.pending_jobs > 0)
      .map((x) => ({ key: `${x.tenant}/${x.name}`, share: x.gpus_in_use / (x.weight || 1) }))
      .sort((a, b) => a.share - b.share || a.key.localeCompare(b.key));
    const position = new Map(wanting.map((w, i) => [w.key, i + 1]));
    const tenants = new Map(t.tenants.map((x) => [x.name, x]));
    const byTenant = new Map();
    for (const x of q.queues) {
      if (!byTenant.has(x.tenant)) byTenant.set(x.tenant, []);
      byTenant.get(x.tenant).push(x);
    }
    for (const [tenant, qs] of [...byTenant].sort()) {
      const tq = tenants.get(tenant);
      const used = qs.reduce((s, x) => s + x.gpus_in_use, 0);
      body.append(el("section.tenant", { "aria-label": `tenant ${tenant}` },
        el("h2", {}, `Tenant ${tenant}`,
          el("span.muted", {}, tq ? ` · guaranteed ${limitText(tq.guaranteed_gpus)}, limit ${limitText(tq.limit_gpus)} GPUs · ${used} in use` : "")),
        el("table.data.queues", {},
          el("thead", {}, el("tr", {}, ["Queue", "Weight", "GPUs (in use / guaranteed / limit)", "Borrowed", "Running", "Pending", "Fair-share position"].map((h) => el("th", { scope: "col" }, h)))),
          el("tbody", {}, qs.sort((a, b) => a.name.localeCompare(b.name)).map((x) => {
            const key = `${x.tenant}/${x.name}`;
            return el("tr", { dataset: { queue: key } },
              el("th", { scope: "row" }, el("a", { href: `#/jobs?tenant=${encodeURIComponent(x.tenant)}&queue=${encodeURIComponent(x.name)}` }, x.parent ? `${x.parent} › ${x.name}` : x.name)),
              el("td.num", {}, num(x.weight)),
              el("td", {}, bar(x, clusterGpus)),
              el("td.num", {}, String(x.gpus_borrowed)),
              el("td.num", {}, String(x.running_jobs)),
              el("td.num", {}, String(x.pending_jobs)),
              el("td", {}, position.has(key) ? `${position.get(key)} of ${wanting.length} (${num(x.gpus_in_use / (x.weight || 1))} GPUs per weight)` : el("span.muted", {}, "not waiting")));
          })))));
    }
  }

  await load();
  return { refresh: load, every: 5000 };
}

function limitText(v) {
  return v >= UNBOUNDED ? "unbounded" : String(v);
}

function bar(x, clusterGpus) {
  const limit = x.limit_gpus >= UNBOUNDED ? Math.max(clusterGpus, x.guaranteed_gpus, x.gpus_in_use, 1) : Math.max(x.limit_gpus, 1);
  const scale = Math.max(limit, x.gpus_in_use, x.guaranteed_gpus, 1);
  const pct = (v) => `${Math.min(100, (100 * v) / scale).toFixed(2)}%`;
  const within = Math.min(x.gpus_in_use, x.guaranteed_gpus);
  const borrowed = Math.max(0, x.gpus_in_use - x.guaranteed_gpus);
  const label = `${x.gpus_in_use} GPUs in use, ${x.guaranteed_gpus} guaranteed, limit ${limitText(x.limit_gpus)}, ${borrowed} borrowed`;
  return el("div.qbar", { role: "img", "aria-label": label, title: label },
    el("span.used", { style: `width:${pct(within)}` }),
    el("span.borrowed", { style: `left:${pct(within)};width:${pct(borrowed)}` }),
    x.guaranteed_gpus > 0 ? el("span.guarantee", { style: `left:${pct(x.guaranteed_gpus)}` }) : null,
    el("span.qbar-text", {}, `${x.gpus_in_use} / ${x.guaranteed_gpus} / ${limitText(x.limit_gpus)}`));
}
