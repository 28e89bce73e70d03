// Jobs: a filterable, sortable, paged table. Filters and paging are the server's
// (state, tenant, queue, name prefix; newest or oldest first with a cursor), so the page
// stays fast with any number of jobs; the other columns sort the page shown.
import * as api from "../api.js";
import { el, clear, notice, when, duration, table, stateBadge } from "../dom.js";

const STATES = ["Pending", "Starting", "Running", "Preempting", "Lost", "Succeeded", "Failed", "Cancelled"];

// The cursor of the page before this one ("-" stands for the first page).
function previous(back) {
  const c = back[back.length - 1];
  return !c || c === "-" ? "" : c;
}

export function gpus(j) {
  return j.replicas * j.gpus_per_replica;
}

export async function mount(root, route, ctx) {
  const p = route.params;
  const f = {
    state: p.get("state") || "", tenant: p.get("tenant") || "", queue: p.get("queue") || "",
    name: p.get("name") || "", order: p.get("order") === "asc" ? "asc" : "desc",
    limit: Number(p.get("limit")) || 100, after: p.get("after") || "",
  };
  const back = (p.get("back") || "").split(",").filter(Boolean);  // cursors of earlier pages
  const sortState = { sort: p.get("sort") || "id", dir: p.get("dir") || f.order };

  const go = (changes) => {
    const next = { ...f, ...changes };
    const q = new URLSearchParams();
    for (const k of ["state", "tenant", "queue", "name"]) if (next[k]) q.set(k, next[k]);
    if (next.order !== "desc") q.set("order", next.order);
    if (next.limit !== 100) q.set("limit", String(next.limit));
    if (next.after) q.set("after", next.after);
    if (next.back && next.back.length) q.set("back", next.back.join(","));
    const s = q.toString();
    ctx.navigate(`#/jobs${s ? `?${s}` : ""}`);
  };

  const stateSel = el("select#f-state", { "aria-label": "State" },
    el("option", { value: "" }, "any state"),
    el("option", { value: "Pending,Starting,Running,Preempting,Lost", selected: f.state === "Pending,Starting,Running,Preempting,Lost" }, "unfinished"),
    STATES.map((s) => el("option", { value: s, selected: f.state.toLowerCase() === s.toLowerCase() }, s)));
  const text = (id, label, value, extra = {}) => el(`input#${id}`, { type: "search", value, placeholder: label, "aria-label": label, ...extra });
  const tenantIn = text("f-tenant", "tenant", f.tenant);
  const queueIn = text("f-queue", "queue", f.queue);
  const nameIn = text("f-name", "name starts with", f.name, { "data-filter": true });
  const limitSel = el("select#f-limit", { "aria-label": "Rows per page" },
    [25, 50, 100, 250, 1000].map((n) => el("option", { value: n, selected: n === f.limit }, `${n} per page`)));
  const form = el("form.filters", {
    role: "search",
    onsubmit: (e) => {
      e.preventDefault();
      go({ state: stateSel.value, tenant: tenantIn.value.trim(), queue: queueIn.value.trim(), name: nameIn.value.trim(), limit: Number(limitSel.value), after: "", back: [] });
    },
  }, stateSel, tenantIn, queueIn, nameIn, limitSel, el("button.primary", { type: "submit" }, "Filter"),
  el("button", { type: "button", onclick: () => ctx.navigate("#/jobs") }, "Clear"));
  const tableBox = el("div.table-box", { "aria-live": "polite", "aria-busy": "true" });
  const pager = el("nav.pager", { "aria-label": "Pages of jobs" });
  root.append(el("div.heading", {}, el("h1", {}, "Jobs"), el("span.muted", {}, "press / to filter")), form, tableBox, pager);

  let firstDraw = true;
  async function load() {
    const page = await api.get(`jobs${api.query({ state: f.state, tenant: f.tenant, queue: f.queue, name: f.name, order: f.order, after: f.after, limit: f.limit })}`, { signal: ctx.signal });
    draw(page);
  }

  function draw(page) {
    const now = Date.now();
    const columns = [
      { key: "id", label: "ID", cls: "num", sort: (j) => j.id, render: (j) => el("a", { href: `#/jobs/${j.id}` }, String(j.id)) },
      { key: "name", label: "Name", sort: (j) => j.name, render: (j) => el("a", { href: `#/jobs/${j.id}` }, j.name || "(unnamed)") },
      { key: "state", label: "State", sort: (j) => j.state, render: (j) => [stateBadge(j.state), j.held ? el("span.badge.held", {}, "held") : null] },
      { key: "tenant", label: "Tenant", sort: (j) => j.tenant, render: (j) => j.tenant },
      { key: "queue", label: "Queue", sort: (j) => j.queue, render: (j) => j.queue },
      { key: "priority", label: "Priority", sort: (j) => j.priority, render: (j) => j.priority },
      { key: "gpus", label: "GPUs", cls: "num", sort: gpus, render: (j) => el("span", { title: `${j.replicas} replicas × ${j.gpus_per_replica} GPUs` }, String(gpus(j))) },
      { key: "age", label: "Age", sort: (j) => -j.submit_time_ms, render: (j) => when(j.submit_time_ms, now) },
      { key: "in_state", label: "In state", sort: (j) => -j.state_time_ms, render: (j) => el("span", { title: new Date(j.state_time_ms).toLocaleString() }, duration(now - j.state_time_ms)) },
      { key: "reason", label: "Reason", cls: "reason", render: (j) => j.reason || el("span.muted", {}, "–") },
    ];
    const t = table(columns, page.jobs, sortState, (key, dir) => {
      if (key === "id") {  // the server's order: start again from the first page
        go({ order: dir, after: "", back: [] });
        return;
      }
      sortState.sort = key; sortState.dir = dir;
      draw(page);
    }, (j) => ({ dataset: { jobId: String(j.id), state: j.state } }));
    t.id = "jobs-table";
    t.setAttribute("aria-label", "Jobs");
    clear(tableBox).append(page.jobs.length ? t : notice("empty", f.after ? "No more jobs." :
      (f.state || f.tenant || f.queue || f.name) ? "No job matches these filters." : "No jobs yet. Submit one with `trainyard submit job.yaml`."));
    tableBox.setAttribute("aria-busy", "false");
    clear(pager).append(
      el("button", { type: "button", disabled: !f.after, onclick: () => go({ after: previous(back), back: back.slice(0, -1) }) }, "‹ Previous"),
      el("span.muted", {}, `${page.jobs.length} shown, ${f.order === "desc" ? "newest" : "oldest"} first`),
      el("button", { type: "button", disabled: page.next_after === null, onclick: () => go({ after: String(page.next_after), back: [...back, f.after || "-"] }) }, "Next ›"));
    if (firstDraw) {
      firstDraw = false;
      requestAnimationFrame(() => performance.mark("trainyard:jobs-rendered"));
    }
  }

  await load();
  return { refresh: load, every: 3000 };
}
