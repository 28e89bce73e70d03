// Formatting without the DOM: durations, numbers, sizes and chart axis labels (tested
// in web/tests/format.test.mjs with node's test runner).

const units = [
  ["y", 365 * 86400e3], ["d", 86400e3], ["h", 3600e3], ["m", 60e3], ["s", 1e3],
];

// "3m 20s" style, two units at most.
export function duration(ms) {
  if (ms === null || ms === undefined || !isFinite(ms)) return "–";
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const parts = [];
  let left = ms;
  for (const [u, size] of units) {
    if (left >= size || parts.length) {
      const n = Math.floor(left / size);
      left -= n * size;
      if (n || parts.length) parts.push(`${n}${u}`);
      if (parts.length === 2) break;
    }
  }
  return parts.join(" ");
}

export function num(x, digits = 3) {
  if (x === null || x === undefined) return "–";
  if (typeof x === "string") return x;  // "NaN", "Infinity" from the API
  if (!isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(digits - 1);
  return Number.isInteger(x) ? x.toLocaleString() : Number(x.toPrecision(digits + 1)).toString();
}

const compact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 2 });

// Axis ticks: 3.5M rather than 3,500,000, so that ticks do not run into each other.
export function tick(x) {
  if (x === null || x === undefined) return "";
  return Math.abs(x) >= 1e4 ? compact.format(x) : num(x, 2);
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

const KNOWN = {
  loss: "loss",
  "eval/loss": "eval loss",
  grad_norm: "gradient norm (L2)",
  lr: "learning rate",
  step_time_s: "step time (s)",
  tokens_per_s: "throughput (tokens/s)",
  samples_per_s: "throughput (samples/s)",
  data_wait_s: "data wait (s)",
  mfu: "MFU (fraction)",
};

// The y-axis label of a metric key, with its unit when the key says it.
export function axisLabel(key) {
  if (KNOWN[key]) return KNOWN[key];
  const m = /^(.*?)(?:[_/](s|ms|bytes|pct|per_s))$/.exec(key);
  if (!m) return `${key} (value)`;
  const unit = { s: "s", ms: "ms", bytes: "bytes", pct: "%", per_s: "per s" }[m[2]];
  return `${m[1].replace(/_/g, " ")} (${unit})`;
}

