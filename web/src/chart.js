// A metric chart over steps for one or several runs, drawn with uPlot. The server
// downsamples (GET /runs/{id}/metrics/{key}?buckets=N&from=&to=): each bucket's last
// value is the line and its min..max the band around it, so a spike or a NaN inside a
// bucket stays visible at any zoom. Zooming (drag across the plot) fetches the range
// again at the plot's resolution, so a 10M-point series stays interactive; double-click
// or "Full range" goes back.
import uPlot from "./vendor/uPlot.esm.js";
import * as api from "./api.js";
import { el, clear } from "./dom.js";
import { axisLabel, num, tick } from "./format.js";

export { axisLabel };

const PALETTE = ["#2f6fdf", "#d9480f", "#2b8a3e", "#9c36b5", "#c92a2a", "#0b7285", "#e67700", "#5c940d", "#862e9c", "#364fc7"];

function value(v) {
  return typeof v === "number" ? v : null;  // "NaN", "Infinity" -> a gap (counted below)
}

function withAlpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
}

// runs: [{id, name, keys (Set of the keys it logged; optional)}]; returns
// {node, load(), refresh(), destroy()}.
export function metricChart(key, runs, { signal, onFirstDraw } = {}) {
  const box = el("figure.chart", { dataset: { testid: `chart-${key}`, key } });
  const caption = el("figcaption", {}, el("strong", {}, axisLabel(key)), el("span.muted", {}, " vs step · line: last value per bucket, band: min–max"));
  const status = el("p.chart-status.muted", { "aria-live": "polite" });
  const plotBox = el("div.plot");
  const full = el("button.small", { type: "button", onclick: () => fetchRange(null) }, "Full range");
  box.append(caption, el("div.chart-tools", {}, full, status), plotBox);
  let plot = null;
  let range = null;  // [from, to] shown, null for everything
  let applying = false;  // setData of fetched data: not a user's zoom
  let drawn = false;
  let zoomTimer = 0;
  let seq = 0;

  function width() {
    return Math.max(320, Math.min(1400, (plotBox.clientWidth || box.parentElement?.clientWidth || 800) - 8));
  }

  async function fetchRange(r) {
    const mine = ++seq;
    const buckets = Math.min(2000, Math.round(width()));
    const q = (id) => `runs/${id}/metrics/${encodeURIComponent(key)}${api.query({ buckets, from: r ? Math.floor(r[0]) : "", to: r ? Math.ceil(r[1]) : "" })}`;
    let results;
    try {
      // A run that never logged the key is not asked (run.keys, when known).
      results = await Promise.all(runs.map((run) => (run.keys && !run.keys.has(key) ? null : api.get(q(run.id), { signal }).catch((e) => {
        if (e.status === 404) return null;  // this run never logged the key
        throw e;
      }))));
    } catch (e) {
      if (e.name !== "AbortError") status.textContent = `Could not load ${key}: ${e.message}`;
      return;
    }
    if (mine !== seq) return;
    range = r;
    const tables = [];
    const shown = [];
    let points = 0, nan = 0;
    results.forEach((res, i) => {
      if (!res) return;
      const p = res.points;
      const x = p.last_step;
      tables.push([x, p.last.map(value), p.max.map(value), p.min.map(value)]);
      shown.push(runs[i]);
      points += p.count.reduce((s, c) => s + c, 0);
      nan += p.nan_count.reduce((s, c) => s + c, 0);
    });
    if (!tables.length) {
      status.textContent = `No run here logged ${key}.`;
      return;
    }
    const data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    status.textContent = `${points.toLocaleString()} points in ${data[0].length.toLocaleString()} buckets${nan ? `, ${nan} NaN/Inf` : ""}${r ? `, steps ${num(r[0])}–${num(r[1])}` : ""}`;
    box.dataset.points = String(points);
    box.dataset.buckets = String(data[0].length);
    draw(shown, data);
  }

  function draw(shown, data) {
    const names = shown.map((r) => r.id).join(",");
    if (plot && plot._names === names) {
      applying = true;
      plot.setData(data, true);
      applying = false;
      return;
    }
    if (plot) plot.destroy();
    const series = [{ label: "step", value: (u, v) => (v === null || v === undefined ? "–" : num(v)) }];
    const bands = [];
    shown.forEach((run, i) => {
      const c = PALETTE[i % PALETTE.length];
      const base = series.length;
      series.push({ label: `${run.id} ${run.name}`, stroke: c, width: 1.5, spanGaps: true, value: (u, v) => num(v), points: { show: false } });
      series.push({ label: `${run.id} max`, stroke: withAlpha(c, 0.25), width: 0.5, spanGaps: true, value: (u, v) => num(v), points: { show: false } });
      series.push({ label: `${run.id} min`, stroke: withAlpha(c, 0.25), width: 0.5, spanGaps: true, value: (u, v) => num(v), points: { show: false } });
      bands.push({ series: [base + 1, base + 2], fill: withAlpha(c, 0.15) });
    });
    const styles = getComputedStyle(document.documentElement);
    const ink = styles.getPropertyValue("--ink").trim() || "#222";
    const grid = styles.getPropertyValue("--grid").trim() || "#ddd";
    const axis = (label, size) => ({ label, stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, size, labelSize: 18 });
    plot = new uPlot({
      width: width(),
      height: 260,
      scales: { x: { time: false } },
      axes: [{ ...axis("step", 40), values: (u, vals) => vals.map(tick) }, { ...axis(axisLabel(key), 70), values: (u, vals) => vals.map(tick) }],
      series,
      bands,
      cursor: { drag: { x: true, y: false, setScale: true }, bind: {
        dblclick: () => () => { fetchRange(null); return null; },
      } },
      legend: { live: true },
      hooks: {
        setScale: [(u, k) => {
          if (k !== "x" || applying) return;
          const { min, max } = u.scales.x;
          if (min === null || max === null) return;
          // Only a zoom into the data shown fetches again (resetting the scales after
          // new data arrives lands here too, on the data's own extent).
          const xs = u.data[0];
          if (!xs.length || (min <= xs[0] && max >= xs[xs.length - 1])) return;
          clearTimeout(zoomTimer);
          zoomTimer = setTimeout(() => fetchRange([min, max]), 120);
        }],
        draw: [() => {
          if (!drawn) {
            drawn = true;
            box.dataset.rendered = "true";
            if (onFirstDraw) onFirstDraw();
          }
        }],
      },
    }, data, plotBox);
    plot._names = names;
    plot.root.setAttribute("role", "img");
    plot.root.setAttribute("aria-label", `Chart of ${axisLabel(key)} against step for ${shown.map((r) => `run ${r.id}`).join(", ")}`);
  }

  return {
    node: box,
    load: () => fetchRange(null),
    refresh: () => (range ? Promise.resolve() : fetchRange(null)),  // a zoomed view stays put
    destroy: () => { seq++; clearTimeout(zoomTimer); if (plot) plot.destroy(); clear(plotBox); },
  };
}
