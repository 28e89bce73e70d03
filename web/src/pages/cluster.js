// Cluster: every node as a grid of its GPUs, grouped by leaf switch and NVLink domain,
// coloured by state, utilisation, temperature or memory; totals by GPU type; cordon,
// drain and uncordon for cluster admins.
import * as api from "../api.js";
import { el, clear, notice, when, bytes, stateBadge } from "../dom.js";

const MODES = {
  state: { label: "State", legend: [["free", "free"], ["busy", "running a job"], ["down", "node not ready"], ["cordoned", "cordoned / draining"]] },
  util: { label: "Utilisation (%)", legend: [["s0", "0–20 %"], ["s1", "20–40 %"], ["s2", "40–60 %"], ["s3", "60–80 %"], ["s4", "80–100 %"]] },
  temp: { label: "Temperature (°C)", legend: [["s0", "< 40 °C"], ["s1", "40–55 °C"], ["s2", "55–70 °C"], ["s3", "70–82 °C"], ["s4", "≥ 82 °C"]] },
  mem: { label: "Memory used (%)", legend: [["s0", "0–20 %"], ["s1", "20–40 %"], ["s2", "40–60 %"], ["s3", "60–80 %"], ["s4", "80–100 %"]] },
};

function step(x, edges) {
  let i = 0;
  while (i < edges.length && x >= edges[i]) i++;
  return `s${i}`;
}

// A node's "limits" or "containers" as its agent registered them: the gist on the card,
// all of it in the title; "none: why" stands out.
function execInfo(label, text) {
  if (!text) return el("span.muted", {}, `${label}: not reported`);
  const none = text.startsWith("none") || text.startsWith("no ");
  const short = none ? "none" : text.split(/ at |; /)[0];
  return el(`span.exec${none ? ".warn" : ""}`, { title: `${label}: ${text}` }, `${label}: ${short}`);
}

export async function mount(root, route, ctx) {
  const admin = ctx.whoami.role === "cluster-admin";
  let mode = route.params.get("color") || "state";
  if (!MODES[mode]) mode = "state";
  const summary = el("section.summary", { "aria-label": "Totals by GPU type" });
  const legend = el("ul.legend", { "aria-label": "Colour legend" });
  const grid = el("section.topology", { "aria-label": "Nodes by leaf switch and NVLink domain" });
  const status = el("div", { role: "status", "aria-live": "polite" });
  const select = el("select#color-mode", {
    onchange: () => {
      mode = select.value;
      history.replaceState(null, "", `#/cluster?color=${mode}`);
      draw();
    },
  }, Object.entries(MODES).map(([k, m]) => el("option", { value: k, selected: k === mode }, m.label)));
  root.append(
    el("div.heading", {}, el("h1", {}, "Cluster"),
      el("label.inline", {}, "Colour GPUs by ", select)),
    summary, legend, status, grid);

  let nodes = [];
  let jobNames = new Map();

  async function load() {
    const [n, running] = await Promise.all([
      api.get("nodes", { signal: ctx.signal }),
      api.get("jobs?state=Starting,Running,Preempting&limit=10000", { signal: ctx.signal }),
    ]);
    nodes = n.nodes;
    jobNames = new Map(running.jobs.map((j) => [j.id, j]));
    draw();
  }

  function gpuClass(node, g, tel, jobId) {
    if (mode === "state") {
      if (node.state === "NotReady") return "down";
      if (jobId !== null && jobId !== undefined) return "busy";
      if (node.state === "Cordoned" || node.state === "Draining") return "cordoned";
      return "free";
    }
    if (!tel) return "nodata";
    if (mode === "util" && tel.util_pct !== undefined) return step(tel.util_pct, [20, 40, 60, 80]);
    if (mode === "temp" && tel.temp_c !== undefined) return step(tel.temp_c, [40, 55, 70, 82]);
    if (mode === "mem" && tel.mem_used_mib !== undefined && g.memory_bytes) {
      return step((100 * tel.mem_used_mib * 1048576) / g.memory_bytes, [20, 40, 60, 80]);
    }
    return "nodata";
  }

  function gpuJob(node, index) {
    if (Array.isArray(node.gpu_jobs)) return node.gpu_jobs[index] ?? null;
    return null;
  }

  function nodeCard(node) {
    const tel = new Map((node.telemetry || []).map((t) => [t.index, t]));
    const cells = node.gpus.map((g) => {
      const t = tel.get(g.index);
      const jobId = gpuJob(node, g.index);
      const hidden = jobId === "hidden";
      const job = jobId !== null && !hidden ? jobNames.get(jobId) : null;
      const lines = [`${node.name} GPU ${g.index} (${g.model}, ${bytes(g.memory_bytes)})`];
      if (hidden) lines.push("in use by another tenant's job");
      else if (jobId !== null) lines.push(`job ${jobId}${job ? ` ${job.name} (${job.tenant}/${job.queue})` : ""}`);
      else lines.push("free");
      if (t) {
        const parts = [];
        if (t.util_pct !== undefined) parts.push(`${Math.round(t.util_pct)} % util`);
        if (t.mem_used_mib !== undefined) parts.push(`${Math.round(t.mem_used_mib)} MiB used`);
        if (t.temp_c !== undefined) parts.push(`${Math.round(t.temp_c)} °C`);
        if (t.power_w !== undefined) parts.push(`${Math.round(t.power_w)} W`);
        if (t.xid_count) parts.push(`${t.xid_count} XID errors (last ${t.xid_last})`);
        if (t.ecc_uncorrectable) parts.push(`${t.ecc_uncorrectable} uncorrectable ECC`);
        if (t.throttled) parts.push("throttled");
        lines.push(parts.join(", "));
      }
      const label = lines.join("\n");
      const cell = el(`span.gpu.${gpuClass(node, g, t, jobId)}`, {
        title: label, "aria-label": label, role: "img", tabindex: "0",
        dataset: { gpu: String(g.index), job: jobId !== null ? String(jobId) : "" },
      }, String(g.index));
      return jobId !== null && !hidden ? el("a.gpu-link", { href: `#/jobs/${jobId}`, tabindex: "-1" }, cell) : cell;
    });
    const actions = [];
    if (admin) {
      const act = (what, confirmText) => el("button.small", {
        type: "button",
        onclick: async (e) => {
          if (confirmText && !confirm(confirmText)) return;
          e.target.disabled = true;
          try {
            await api.post(`nodes/${encodeURIComponent(node.name)}/${what}`);
            status.replaceChildren(notice("ok", `${node.name}: ${what} done.`));
            await load();
          } catch (err) {
            status.replaceChildren(notice("error", `${node.name}: ${what} failed: ${err.message}`));
            e.target.disabled = false;
          }
        },
      }, what);
      if (node.state === "Ready" || node.state === "NotReady") actions.push(act("cordon"));
      if (node.state !== "Draining") {
        actions.push(act("drain", `Drain ${node.name}? Every job with a rank on it is preempted (notice, grace period, requeued).`));
      }
      if (node.state === "Cordoned" || node.state === "Draining") actions.push(act("uncordon"));
    }
    return el("article.node", { dataset: { testid: "node-card", node: node.name, state: node.state } },
      el("header", {},
        el("h3", {}, el("span.node-name", {}, node.name)), stateBadge(node.state)),
      el("div.gpus", { "aria-label": `GPUs of ${node.name}` }, cells.length ? cells : el("span.muted", {}, "no GPUs")),
      el("p.meta", {},
        `${node.gpus_used}/${node.gpus_total} ${node.gpu_type || "GPU"} used · ${(node.milli_cpus / 1000).toFixed(0)} CPUs · ${bytes(node.memory_bytes)}`,
        node.simulated ? " · simulated" : "",
        " · heartbeat ", when(node.last_heartbeat_ms)),
      el("p.meta.exec", {}, execInfo("limits", node.limits), " · ", execInfo("containers", node.containers)),
      node.state_reason ? el("p.reason", {}, node.state_reason) : null,
      actions.length ? el("div.actions", {}, actions) : null);
  }

  function draw() {
    const items = MODES[mode].legend.map(([cls, text]) =>
      el("li", {}, el(`span.swatch.gpu.${cls}`, { "aria-hidden": "true" }), text));
    if (mode !== "state") items.push(el("li", {}, el("span.swatch.gpu.nodata", { "aria-hidden": "true" }), "no data"));
    clear(legend).append(...items);
    clear(summary);
    clear(grid);
    if (!nodes.length) {
      grid.append(notice("empty", "No nodes have joined yet. Start an agent: ",
        el("code", {}, "trainyard agent --server URL --join-token TOKEN"), "."));
      return;
    }
    const byType = new Map();
    const states = {};
    for (const n of nodes) {
      states[n.state] = (states[n.state] || 0) + 1;
      const t = n.gpu_type || "no GPU";
      const s = byType.get(t) || { total: 0, used: 0, nodes: 0 };
      s.total += n.gpus_total; s.used += n.gpus_used; s.nodes += 1;
      byType.set(t, s);
    }
    summary.append(
      el("div.stat", {}, el("span.big", {}, String(nodes.length)), " nodes: ",
        Object.entries(states).map(([k, v]) => `${v} ${k}`).join(", ")),
      ...[...byType].map(([t, s]) => el("div.stat", { dataset: { gpuType: t } },
        el("span.big", {}, `${s.used}/${s.total}`), ` ${t} in use (${s.total - s.used} free, ${s.nodes} nodes)`,
        el("meter", { min: 0, max: s.total || 1, value: s.used, "aria-label": `${t} GPUs in use` }))));
    // leaf -> NVLink domains spanning several nodes (titled groups), then the nodes whose
    // NVLink domain is their own (one grid).
    const leaves = new Map();
    for (const n of nodes) {
      const leaf = (n.topology && n.topology.leaf) || "(no leaf)";
      const domains = [...new Set(n.gpus.map((g) => g.nvlink_domain).filter(Boolean))];
      const own = !domains.length || (domains.length === 1 && domains[0] === n.name);
      const domain = own ? "" : domains.join(", ");
      if (!leaves.has(leaf)) leaves.set(leaf, new Map());
      const d = leaves.get(leaf);
      if (!d.has(domain)) d.set(domain, []);
      d.get(domain).push(n);
    }
    const byName = (a, b) => a.name.localeCompare(b.name, undefined, { numeric: true });
    for (const [leaf, domains] of [...leaves].sort()) {
      const box = el("section.leaf", { "aria-label": `leaf switch ${leaf}` }, el("h2", {}, `Leaf ${leaf}`));
      for (const [domain, ns] of [...domains].sort()) {
        box.append(el("div.domain", {}, domain ? el("h3.domain-name", {}, `NVLink domain ${domain}`) : null,
          el("div.nodes", {}, ns.sort(byName).map(nodeCard))));
      }
      grid.append(box);
    }
  }

  await load();
  return { refresh: load, every: 3000 };
}
