// The dashboard's shell: routes (#/page/...), who is signed in, and the polling that
// keeps the shown page live. Each page module exports mount(root, route, ctx), which
// renders and returns {refresh(), every (ms)}; refresh() is called on that period while
// the tab is visible, and the page is dropped when the route changes.
import * as api from "./api.js";
import { el, clear, notice } from "./dom.js";
import * as cluster from "./pages/cluster.js";
import * as queues from "./pages/queues.js";
import * as jobs from "./pages/jobs.js";
import * as job from "./pages/job.js";
import * as runs from "./pages/runs.js";
import * as alerts from "./pages/alerts.js";

const main = document.getElementById("main");
let current = null;  // {timer, controller, page}
let whoami = null;

function parseRoute() {
  const h = location.hash.replace(/^#\/?/, "");
  const [path, qs] = h.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(qs || ""), hash: location.hash };
}

function pageFor(route) {
  const [first, second] = route.parts;
  switch (first || "cluster") {
    case "cluster": return { name: "cluster", mod: cluster };
    case "queues": return { name: "queues", mod: queues };
    case "jobs": return second ? { name: "jobs", mod: job } : { name: "jobs", mod: jobs };
    case "runs": return { name: "runs", mod: runs };
    case "alerts": return { name: "alerts", mod: alerts };
    default: return null;
  }
}

function stop() {
  if (!current) return;
  clearTimeout(current.timer);
  current.controller.abort();
  if (current.page && current.page.dispose) current.page.dispose();
  current = null;
}

function loginView(message) {
  stop();
  clear(main);
  const input = el("input#token-input", {
    type: "password", autocomplete: "off", spellcheck: "false", required: true,
    placeholder: "tyt_…", "aria-describedby": "token-help",
  });
  const form = el("form.login", {
    onsubmit: (e) => {
      e.preventDefault();
      api.setToken(input.value.trim());
      whoami = null;
      route();
    },
  },
  el("h1", {}, "Sign in"),
  message ? notice("error", message) : null,
  el("label", { for: "token-input" }, "API token"),
  input,
  el("p#token-help.muted", {},
    "Create one with ", el("code", {}, "trainyard token create"),
    "; a local cluster started by ", el("code", {}, "trainyard up"),
    " keeps its admin token in DATA_DIR/token. The token is kept in this browser only."),
  el("button.primary", { type: "submit" }, "Sign in"));
  main.append(form);
  input.focus();
}

async function ensureWho() {
  if (whoami) return whoami;
  whoami = await api.get("whoami");
  const who = clear(document.getElementById("who"));
  who.append(
    el("span", { title: `tenant ${whoami.tenant || "(all)"}, role ${whoami.role}` },
      `${whoami.user} · ${whoami.role}`),
    api.token() ? el("button.link", {
      type: "button",
      onclick: () => { api.setToken(""); whoami = null; clear(who); loginView(); },
    }, "Sign out") : null);
  return whoami;
}

async function route() {
  api.takeTokenFromLocation();
  const r = parseRoute();
  const page = pageFor(r);
  for (const a of document.querySelectorAll("nav a[data-page]")) {
    if (page && a.dataset.page === page.name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  stop();
  if (!page) {
    clear(main).append(notice("error", `No page at ${location.hash}.`, " ", el("a", { href: "#/cluster" }, "Go to the cluster.")));
    return;
  }
  const controller = new AbortController();
  current = { controller, timer: 0, page: null };
  const mine = current;
  try {
    await ensureWho();
  } catch (e) {
    if (e.status === 401) return loginView(api.token() ? e.message : null);
    clear(main).append(notice("error", e.message));
    return;
  }
  if (current !== mine) return;
  clear(main);
  const root = el("div.page", { dataset: { page: page.name } });
  main.append(root);
  const ctx = { whoami, signal: controller.signal, route: r, navigate: (h) => { location.hash = h; } };
  let p;
  try {
    p = await page.mod.mount(root, r, ctx);
  } catch (e) {
    if (e.name === "AbortError") return;
    if (e.status === 401) return loginView(e.message);
    root.append(notice("error", e.message));
    return;
  }
  if (current !== mine) return;
  mine.page = p;
  stamp();
  schedule(mine);
}

function schedule(mine) {
  if (!mine.page || !mine.page.refresh) return;
  mine.timer = setTimeout(async () => {
    if (current !== mine) return;
    if (!document.hidden) {
      try {
        await mine.page.refresh();
        stamp();
      } catch (e) {
        if (e.name === "AbortError") return;
        if (e.status === 401) return loginView(e.message);
        stamp(e.message);
      }
    }
    if (current === mine) schedule(mine);
  }, mine.page.every || 3000);
}

function stamp(error) {
  const u = document.getElementById("updated");
  u.textContent = error ? `Update failed: ${error}` : `Updated ${new Date().toLocaleTimeString()}`;
  u.classList.toggle("error", Boolean(error));
}

// The firing-alert count in the navigation, every 10 s.
async function alertBadge() {
  try {
    if (whoami) {
      const a = await api.get("alerts?state=firing");
      const c = document.getElementById("alert-count");
      c.textContent = String(a.alerts.length);
      c.hidden = a.alerts.length === 0;
      c.setAttribute("aria-label", `${a.alerts.length} firing`);
    }
  } catch { /* the page shows errors */ }
  setTimeout(alertBadge, 10000);
}

// Keyboard: "/" focuses the page's filter; g then c/q/j/r/a goes to a page.
let pendingG = false;
document.addEventListener("keydown", (e) => {
  const t = e.target;
  if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === "/") {
    const f = main.querySelector("[data-filter]");
    if (f) { e.preventDefault(); f.focus(); }
    return;
  }
  if (pendingG) {
    pendingG = false;
    const to = { c: "cluster", q: "queues", j: "jobs", r: "runs", a: "alerts" }[e.key];
    if (to) location.hash = `#/${to}`;
    return;
  }
  if (e.key === "g") { pendingG = true; setTimeout(() => { pendingG = false; }, 1000); }
});

window.addEventListener("hashchange", route);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && current && current.page && current.page.refresh) current.page.refresh().catch(() => {});
});
if (!location.hash || location.hash === "#" || location.hash === "#/") history.replaceState(null, "", "#/cluster");
route();
setTimeout(alertBadge, 500);
