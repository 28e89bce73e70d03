// Runs: the list of runs (filter with the search language of docs/runs.md) and, for
// the runs picked, their metric charts overlaid (loss, grad norm, lr, step time,
// throughput first) and their params side by side with the ones that differ marked.
import * as api from "../api.js";
import { el, clear, notice, when, num, table, stateBadge } from "../dom.js";
import { metricChart } from "../chart.js";

const FIRST = ["loss", "eval/loss", "grad_norm", "lr", "step_time_s", "tokens_per_s", "samples_per_s"];

export async function mount(root, route, ctx) {
  const ids = (route.params.get("ids") || "").split(",").filter((x) => /^[1-9][0-9]*$/.test(x));
  if (ids.length) return mountCharts(root, route, ctx, [...new Set(ids)].slice(0, 20));
  return mountList(root, route, ctx);
}

async function mountList(root, route, ctx) {
  const p = route.params;
  const filterIn = el("input#runs-filter", { type: "search", value: p.get("filter") || "", placeholder: "params.lr > 1e-4 and metrics.loss < 2", "aria-label": "Filter runs", "data-filter": true, size: 40 });
  const expIn = el("input#runs-experiment", { type: "search", value: p.get("experiment") || "", placeholder: "experiment", "aria-label": "Experiment" });
  const picked = new Set();
  const compare = el("button.primary", { type: "button", disabled: true, onclick: () => ctx.navigate(`#/runs?ids=${[...picked].join(",")}`) }, "Chart selected");
  const form = el("form.filters", {
    role: "search",
    onsubmit: (e) => {
      e.preventDefault();
      ctx.navigate(`#/runs${api.query({ filter: filterIn.value.trim(), experiment: expIn.value.trim() })}`);
    },
  }, filterIn, expIn, el("button", { type: "submit" }, "Filter"), compare);
  const box = el("div.table-box");
  const sortState = { sort: "id", dir: "desc" };
  root.append(el("div.heading", {}, el("h1", {}, "Runs")), form, box);

  let runs = [];
  async function load() {
    const r = await api.get(`runs${api.query({ filter: p.get("filter"), experiment: p.get("experiment"), limit: 500 })}`, { signal: ctx.signal });
    runs = r.runs;
    draw();
  }
  function draw() {
    const metricKeys = [...new Set(runs.flatMap((r) => Object.keys(r.metrics || {})))].filter((k) => FIRST.includes(k)).slice(0, 3);
    const columns = [
      { key: "pick", label: "Pick", render: (r) => el("input", { type: "checkbox", checked: picked.has(String(r.id)), "aria-label": `pick run ${r.id}`, onchange: (e) => {
        if (e.target.checked) picked.add(String(r.id)); else picked.delete(String(r.id));
        compare.disabled = picked.size === 0 || picked.size > 20;
        compare.textContent = picked.size ? `Chart ${picked.size} selected` : "Chart selected";
      } }) },
      { key: "id", label: "ID", cls: "num", sort: (r) => r.id, render: (r) => el("a", { href: `#/runs?ids=${r.id}` }, String(r.id)) },
      { key: "name", label: "Name", sort: (r) => r.name, render: (r) => r.name },
      { key: "experiment", label: "Experiment", sort: (r) => r.experiment, render: (r) => r.experiment },
      { key: "state", label: "State", sort: (r) => r.state, render: (r) => stateBadge(r.state) },
      { key: "user", label: "User", sort: (r) => r.user, render: (r) => r.user },
      { key: "submitted", label: "Submitted", sort: (r) => r.submit_time_ms, render: (r) => when(r.submit_time_ms) },
      ...metricKeys.map((k) => ({ key: `m:${k}`, label: k, cls: "num", sort: (r) => (typeof r.metrics[k] === "number" ? r.metrics[k] : Infinity), render: (r) => num(r.metrics[k]) })),
    ];
    const t = table(columns, runs, sortState, (k, d) => { sortState.sort = k; sortState.dir = d; draw(); }, (r) => ({ dataset: { runId: String(r.id) } }));
    t.id = "runs-table";
    clear(box).append(runs.length ? t : notice("empty", p.get("filter") ? "No run matches this filter." : "No runs yet: every job is a run."));
  }
  await load();
  return { refresh: load, every: 5000 };
}

async function mountCharts(root, route, ctx, ids) {
  const [records, lists] = await Promise.all([
    Promise.all(ids.map((id) => api.get(`runs/${id}`, { signal: ctx.signal }))),
    Promise.all(ids.map((id) => api.get(`runs/${id}/metrics`, { signal: ctx.signal }))),
  ]);
  const runs = records.map((r, i) => ({ id: r.id, name: r.name, state: r.state, keys: new Set(lists[i].series.map((x) => x.key)) }));
  const keys = [...new Set(lists.flatMap((l) => l.series.map((s) => s.key)))];
  const first = FIRST.filter((k) => keys.includes(k));
  const rest = keys.filter((k) => !first.includes(k)).sort();
  const shown = new Set(route.params.get("keys") ? route.params.get("keys").split(",").filter((k) => keys.includes(k)) : first.length ? first : rest.slice(0, 4));

  root.append(el("div.heading", {},
    el("h1", {}, ids.length === 1 ? `Run ${ids[0]} ` : `${ids.length} runs `, el("span.muted", {}, ids.length === 1 ? runs[0].name : runs.map((r) => `${r.id} ${r.name}`).join(" · "))),
    el("div.actions", {}, ids.length === 1 ? el("a.button", { href: `#/jobs/${ids[0]}` }, "Job") : null, el("a.button", { href: "#/runs" }, "All runs"))));
  const picker = el("fieldset.keys", {}, el("legend", {}, "Metrics"), keys.map((k) => el("label.inline", {},
    el("input", { type: "checkbox", checked: shown.has(k), onchange: (e) => {
      if (e.target.checked) shown.add(k); else shown.delete(k);
      history.replaceState(null, "", `#/runs?ids=${ids.join(",")}&keys=${encodeURIComponent([...shown].join(","))}`);
      drawCharts();
    } }), ` ${k}`)));
  const charts = el("div.charts");
  const params = el("section");
  root.append(keys.length ? picker : notice("empty", "These runs have logged no metrics yet."), charts, el("h2", {}, ids.length > 1 ? "Params and attributes (differences marked)" : "Params"), params);

  let live = [];
  let marked = false;
  function drawCharts() {
    for (const c of live) c.destroy();
    clear(charts);
    live = [...first, ...rest].filter((k) => shown.has(k)).map((k) => metricChart(k, runs, {
      signal: ctx.signal,
      onFirstDraw: () => {
        if (!marked) { marked = true; performance.mark("trainyard:chart-rendered"); }
      },
    }));
    charts.append(...live.map((c) => c.node));
    return Promise.all(live.map((c) => c.load()));
  }

  if (ids.length > 1) {
    const cmp = await api.get(`runs/compare?ids=${ids.join(",")}`, { signal: ctx.signal });
    const rows = [...cmp.attributes.map((a) => ({ ...a, kind: "attribute" })), ...cmp.params.map((a) => ({ ...a, kind: "param" }))];
    const onlyDiff = el("input", { type: "checkbox", onchange: () => { body.classList.toggle("only-differs", onlyDiff.checked); } });
    const body = el("tbody", {}, rows.map((r) => el(`tr${r.differs ? ".differs" : ""}`, {},
      el("th", { scope: "row" }, r.key, r.kind === "attribute" ? el("span.muted", {}, " (attribute)") : null),
      r.values.map((v) => el("td", {}, v === null ? el("span.muted", {}, "–") : String(v))),
      el("td", {}, r.differs ? el("span.badge.differs", {}, "differs") : ""))));
    params.append(el("label.inline", {}, onlyDiff, " Only differences"),
      el("div.table-box", {}, el("table.data.params", {}, el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Key"), cmp.runs.map((id) => el("th", { scope: "col" }, `run ${id}`)), el("th", { scope: "col" }, ""))), body)));
  } else {
    const r = records[0];
    const entries = Object.entries(r.params || {});
    params.append(entries.length ? el("table.data.params", {}, el("tbody", {}, entries.map(([k, v]) => el("tr", {}, el("th", { scope: "row" }, k), el("td", {}, String(v))))))
      : notice("empty", "No params logged."),
    el("dl.facts", {}, [["Code", `${r.code}${r.code_dirty ? " (dirty)" : ""}`], ["Data version", r.data_version || "–"], ["Environment", r.environment || "–"], ["MFU", r.mfu === null || r.mfu === undefined ? "–" : num(r.mfu)]].flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
  }

  await drawCharts();
  const anyRunning = () => runs.some((r) => !["Succeeded", "Failed", "Cancelled"].includes(r.state));
  return {
    every: 5000,
    refresh: async () => { if (anyRunning()) await Promise.all(live.map((c) => c.refresh())); },
    dispose: () => { for (const c of live) c.destroy(); },
  };
}
