// One job: summary, attempts timeline (queueing, runs, preemptions, checkpoints), ranks,
// live logs per rank with follow, events, its alerts, a diagnose button, and its spec.
import * as api from "../api.js";
import { el, clear, notice, when, duration, stateBadge } from "../dom.js";
import { alertTable } from "./alerts.js";

const FINISHED = new Set(["Succeeded", "Failed", "Cancelled"]);
const LOG_CAP = 1 << 20;  // characters of log kept on the page

// "2 replicas × 1 H100, 4 CPUs, 16Gi (2 GPUs)"; a CPU-only job by its CPUs and memory.
export function resources(s) {
  const res = s.resources || {};
  const replicas = s.replicas || 1;
  const per = [];
  if (res.gpus) per.push(`${res.gpus} ${res.gpu_type || "GPU"}`);
  if (res.cpus) {
    const cpus = /m$/.test(String(res.cpus)) ? parseInt(res.cpus, 10) / 1000 : Number(res.cpus);  // "500m"
    per.push(`${cpus} CPU${cpus === 1 ? "" : "s"}`);
  }
  if (res.memory) per.push(res.memory);
  const text = `${replicas} replica${replicas === 1 ? "" : "s"} × ${per.join(", ") || "no GPU, CPU or memory request"}`;
  return res.gpus ? `${text} (${replicas * res.gpus} GPUs)` : text;
}

// Where the ranks run: a container of the image (the digest the latest attempt resolved
// it to, its mounts and /dev/shm), or host processes.
export function execution(s, job) {
  if (!s.image) return "host processes (no image)";
  const digest = [...(job.attempts || [])].reverse().map((a) => a.image_digest).find(Boolean);
  const parts = [el("code", {}, s.image)];
  parts.push(digest ? [" → ", el("code.digest", { title: digest }, digest.slice(0, 19) + "…")] : " (not resolved yet)");
  for (const m of s.mounts || []) parts.push(el("br"), `mount ${m.source} → ${m.target}${m.read_only ? " (read-only)" : ""}`);
  if (s.shm_size) parts.push(el("br"), `/dev/shm ${s.shm_size}`);
  return parts;
}

export async function mount(root, route, ctx) {
  const id = route.parts[1];
  if (!/^[1-9][0-9]*$/.test(id)) {
    root.append(notice("error", `"${id}" is not a job id: a job id is a positive integer.`));
    return {};
  }
  const head = el("div.heading");
  const facts = el("dl.facts");
  const timeline = el("section", { "aria-label": "Attempts timeline" });
  const diag = el("section.diagnosis-box", { "aria-label": "Diagnosis" });
  const alertsBox = el("section");
  const ranksBox = el("section");
  const logsBox = el("section.logs");
  const eventsBox = el("section");
  const specBox = el("section");
  const status = el("div", { role: "status", "aria-live": "polite" });
  root.append(head, status, facts,
    el("h2", {}, "Timeline"), timeline,
    el("h2", {}, "Diagnosis"), diag,
    el("h2", {}, "Alerts"), alertsBox,
    el("h2", {}, "Ranks"), ranksBox,
    el("h2", {}, "Logs"), logsBox,
    el("h2", {}, "Events"), eventsBox,
    specBox);

  let job = null;
  let events = [];

  // --- diagnosis
  const diagButton = el("button.primary#diagnose", { type: "button", onclick: () => diagnose() }, "Diagnose");
  const diagOut = el("div", { "aria-live": "polite" });
  diag.append(el("p.muted", {}, "Walks system → communication → training and says what it found, with evidence."), diagButton, diagOut);
  async function diagnose() {
    diagButton.disabled = true;
    clear(diagOut).append(notice("loading", "Diagnosing…"));
    try {
      const d = await api.get(`jobs/${id}/diagnosis`, { signal: ctx.signal });
      clear(diagOut).append(renderDiagnosis(d));
    } catch (e) {
      if (e.name !== "AbortError") clear(diagOut).append(notice("error", `Diagnosis failed: ${e.message}`));
    } finally {
      diagButton.disabled = false;
    }
  }

  // --- logs
  const rankSel = el("select#log-rank", { "aria-label": "Rank", onchange: () => restartLogs() });
  const attemptSel = el("select#log-attempt", { "aria-label": "Attempt", onchange: () => restartLogs() });
  const follow = el("input#log-follow", { type: "checkbox", checked: true, onchange: () => restartLogs() });
  const pre = el("pre.log", { tabindex: "0", "aria-label": "Log output", dataset: { testid: "log" } });
  const logNote = el("p.muted");
  logsBox.append(el("div.controls", {}, el("label.inline", {}, "Rank ", rankSel), el("label.inline", {}, "Attempt ", attemptSel),
    el("label.inline", {}, follow, " Follow")), logNote, pre);
  let logRun = 0;
  async function restartLogs() {
    const mine = ++logRun;
    pre.textContent = "";
    let offset = 0;
    const rank = rankSel.value || "0";
    const attempt = attemptSel.value;
    clear(logNote);
    while (mine === logRun && !ctx.signal.aborted) {
      const wait = follow.checked && job && !FINISHED.has(job.state) ? 10000 : 0;
      let r;
      try {
        r = await api.get(`jobs/${id}/logs${api.query({ rank, attempt, offset, max_bytes: 262144, wait_ms: wait })}`, { raw: true, signal: ctx.signal });
      } catch (e) {
        if (e.name !== "AbortError" && mine === logRun) logNote.replaceChildren(notice("error", `Logs: ${e.message}`));
        return;
      }
      if (mine !== logRun) return;
      const next = Number(r.headers.get("X-Trainyard-Next-Offset") || offset);
      if (r.headers.get("X-Trainyard-Log-Pruned") === "true") {
        logNote.textContent = "This attempt's logs were deleted by log retention.";
      }
      if (r.text) {
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        let t = pre.textContent + r.text;
        if (t.length > LOG_CAP) t = `[… earlier output not shown]\n${t.slice(t.length - LOG_CAP)}`;
        pre.textContent = t;
        if (atBottom) pre.scrollTop = pre.scrollHeight;
      }
      const grew = next > offset;
      offset = next;
      const state = r.headers.get("X-Trainyard-Job-State") || "";
      if (!grew && (!follow.checked || FINISHED.has(state) || wait === 0)) {
        if (!pre.textContent) logNote.textContent = "No output yet for this rank and attempt.";
        if (!follow.checked || FINISHED.has(state)) return;
        await new Promise((res) => setTimeout(res, 2000));
      }
    }
  }

  async function load() {
    const [j, ev, al] = await Promise.all([
      api.get(`jobs/${id}`, { signal: ctx.signal }),
      api.get(`jobs/${id}/events?limit=1000`, { signal: ctx.signal }),
      api.get(`alerts${api.query({ job: id, state: "pending,firing,resolved" })}`, { signal: ctx.signal }).catch(() => ({ alerts: [] })),
    ]);
    const firstLoad = job === null;
    job = j;
    events = ev.events;
    drawHead();
    drawFacts();
    drawTimeline();
    clear(alertsBox).append(al.alerts.length ? alertTable(al.alerts) : notice("empty", "No alerts about this job."));
    drawRanks();
    drawEvents();
    if (firstLoad) {
      specBox.append(el("details", {}, el("summary", {}, "Spec (as stored)"), el("pre.spec", {}, JSON.stringify(job.spec, null, 2))));
      fillLogSelectors();
      restartLogs();
    }
  }

  function action(what) {
    return el("button.small", {
      type: "button",
      onclick: async (e) => {
        if (what === "cancel" && !confirm(`Cancel job ${id}? Its ranks are stopped.`)) return;
        e.target.disabled = true;
        try {
          await api.post(`jobs/${id}/${what}`);
          status.replaceChildren(notice("ok", `Job ${id}: ${what} requested.`));
          await load();
        } catch (err) {
          status.replaceChildren(notice("error", `${what} failed: ${err.message}`));
          e.target.disabled = false;
        }
      },
    }, what);
  }

  function drawHead() {
    const acts = [];
    if (!FINISHED.has(job.state)) acts.push(action("cancel"));
    if (job.state === "Pending") acts.push(action(job.held ? "release" : "hold"));
    clear(head).append(
      el("h1", {}, `Job ${job.id} `, el("span.job-name", {}, job.name || "(unnamed)"), " ", stateBadge(job.state), job.held ? el("span.badge.held", {}, "held") : null),
      el("div.actions", {}, el("a.button", { href: `#/runs?ids=${job.id}` }, "Metrics"), acts));
  }

  function drawFacts() {
    const s = job.spec;
    const ck = job.checkpoint;
    const rows = [
      ["Tenant / queue", `${s.tenant} / ${s.queue}`],
      ["Priority", s.priority],
      ["Submitted", [when(job.submit_time_ms), ` by ${job.submitted_by}`]],
      ["State", [job.state, " for ", duration(Date.now() - job.state_time_ms), job.reason ? ` — ${job.reason}` : ""]],
      ["Resources", resources(s)],
      ["Runs in", execution(s, job)],
      ...(s.data && s.data.length
        ? [["Data", s.data.map((d) => `${d.dataset}@${d.version.slice(0, 19)} ${s.image ? `at ${d.mount}` : `in $TRAINYARD_DATA_${d.dataset.toUpperCase().replace(/[.-]/g, "_")}`}${d.stage === "local" ? " (staged to each node)" : ""}`).join("; ")]]
        : []),
      ["Placement", job.placement && job.placement.length ? job.placement.map((p) => `${p.node}${p.gpus.length ? `[${p.gpus.join(",")}]` : ""}`).join(" ") : "–"],
      ["Checkpoint", ck && ck.completed_at_ms ? [`step ${ck.step}, `, when(ck.completed_at_ms), `, written in ${duration(ck.write_duration_ms)}`] : "none yet"],
      ["Retries", String(job.retries)],
    ];
    if (job.excluded_nodes && job.excluded_nodes.length) rows.push(["Excluded nodes", job.excluded_nodes.join(", ")]);
    if (job.stopping) rows.push(["Stopping", job.stopping]);
    clear(facts).append(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  }

  function drawTimeline() {
    const start = job.submit_time_ms;
    const end = FINISHED.has(job.state) ? job.state_time_ms : Date.now();
    const span = Math.max(1, end - start);
    const pct = (t) => `${((100 * (t - start)) / span).toFixed(3)}%`;
    const width = (a, b) => `${Math.max(0.2, (100 * (b - a)) / span).toFixed(3)}%`;
    const segs = [];
    let cursor = start;
    for (const a of job.attempts) {
      if (a.start_time_ms > cursor) {
        segs.push(el("span.seg.queued", { style: `left:${pct(cursor)};width:${width(cursor, a.start_time_ms)}`, title: `queued ${duration(a.start_time_ms - cursor)}` }));
      }
      const aEnd = a.end_time_ms ?? end;
      const label = `attempt ${a.index}: ${duration(aEnd - a.start_time_ms)} on ${[...new Set(a.nodes)].join(", ") || "?"}; ${a.exit_reason === "none" ? "running" : a.exit_reason}${a.lost_work_ms ? `, ${duration(a.lost_work_ms)} of work lost` : ""}`;
      segs.push(el(`span.seg.run.exit-${a.exit_reason}`, { style: `left:${pct(a.start_time_ms)};width:${width(a.start_time_ms, aEnd)}`, title: label }));
      cursor = aEnd;
    }
    if (!job.attempts.length || (cursor < end && !FINISHED.has(job.state))) {
      segs.push(el("span.seg.queued", { style: `left:${pct(cursor)};width:${width(cursor, end)}`, title: `queued ${duration(end - cursor)}` }));
    }
    const marks = events.filter((e) => ["Checkpoint", "Preempting", "Lost", "Retrying", "TimeLimit"].includes(e.kind)).map((e) =>
      el(`span.mark.kind-${e.kind.toLowerCase()}`, { style: `left:${pct(e.time_ms)}`, title: `${e.kind} ${new Date(e.time_ms).toLocaleString()}: ${e.message}` }));
    clear(timeline).append(
      el("div.timeline", { role: "img", "aria-label": `Timeline of job ${job.id}: ${job.attempts.length} attempts over ${duration(span)}` }, segs, marks),
      el("div.timeline-axis", {}, el("span", {}, when(start)), el("span", {}, FINISHED.has(job.state) ? when(end) : "now")),
      el("ul.legend", {}, [["queued", "queued"], ["run", "running / ran"], ["run exit-preempted", "preempted"], ["run exit-failed", "failed"]].map(([c, t]) =>
        el("li", {}, el(`span.swatch.seg.${c.split(" ").join(".")}`, { "aria-hidden": "true" }), t)),
      el("li", {}, el("span.swatch.mark.kind-checkpoint", { "aria-hidden": "true" }), "checkpoint"),
      el("li", {}, el("span.swatch.mark.kind-preempting", { "aria-hidden": "true" }), "preemption / loss")),
      job.attempts.length ? el("table.data.attempts", {},
        el("thead", {}, el("tr", {}, ["Attempt", "Started", "Ran", "Nodes", "Outcome", "Lost work", "Error"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, job.attempts.map((a) => el("tr", {},
          el("td.num", {}, String(a.index)), el("td", {}, when(a.start_time_ms)),
          el("td", {}, duration((a.end_time_ms ?? Date.now()) - a.start_time_ms)),
          el("td", {}, [...new Set(a.nodes)].join(", ")),
          el("td", {}, a.exit_reason === "none" ? "running" : `${a.exit_reason}${a.exit_code ? ` (exit ${a.exit_code})` : ""}${a.message ? `: ${a.message}` : ""}`),
          el("td", {}, a.lost_work_ms ? duration(a.lost_work_ms) : "–"),
          el("td", {}, a.error_lines && a.error_lines.length ? el("details", {}, el("summary", {}, `rank ${a.error_rank}`), el("pre", {}, a.error_lines.join("\n"))) : "–")))))
        : null);
  }

  function drawRanks() {
    const ranks = job.ranks || [];
    clear(ranksBox).append(ranks.length ? el("table.data", {},
      el("thead", {}, el("tr", {}, ["Rank", "Replica", "Node", "GPUs", "State", "Exit", "Message"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ranks.map((r) => el("tr", {},
        el("td.num", {}, String(r.rank)), el("td.num", {}, String(r.replica)), el("td", {}, r.node),
        el("td", {}, r.gpus.join(",") || "–"), el("td", {}, r.state),
        el("td", {}, r.signal ? `signal ${r.signal}` : r.state === "exited" ? String(r.exit_code) : "–"),
        el("td", {}, r.message || "")))))
      : notice("empty", FINISHED.has(job.state) ? "No ranks: the job has finished (its attempts are above)." : "No ranks: the job has not started."));
  }

  function fillLogSelectors() {
    const n = Math.max(1, (job.ranks || []).length || (job.spec.replicas || 1) * (job.spec.procs_per_replica || 1));
    clear(rankSel).append(...Array.from({ length: n }, (_, i) => el("option", { value: i }, `rank ${i}`)));
    clear(attemptSel).append(el("option", { value: "" }, "latest"),
      ...job.attempts.map((a) => el("option", { value: a.index }, `attempt ${a.index}`)));
  }

  function drawEvents() {
    clear(eventsBox).append(events.length ? el("table.data.events", {},
      el("thead", {}, el("tr", {}, ["When", "Kind", "By", "Message"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, events.slice().reverse().map((e) => el("tr", {},
        el("td", {}, when(e.time_ms)), el("td", {}, e.kind), el("td", {}, e.actor), el("td", {}, e.message)))))
      : notice("empty", "No events."));
  }

  await load();
  return { refresh: load, every: 3000, dispose: () => { logRun++; } };
}

export function renderDiagnosis(d) {
  const out = el("div.diagnosis", { dataset: { testid: "diagnosis", found: String(Boolean(d.found)) } });
  if (!d.verdict) {
    out.append(el("p.verdict.ok", {}, `Nothing wrong found (${d.checks.length} checks).`));
  } else {
    const v = d.verdict;
    out.append(el("div.verdict.bad", {},
      el("p", {}, el("strong", {}, `Verdict (${v.layer}, ${v.cause}): `), v.summary),
      el("pre.evidence", { "aria-label": "Evidence" }, Array.isArray(v.evidence) ? v.evidence.join("\n") : v.evidence),
      v.next_step ? el("p", {}, el("strong", {}, "Next step: "), v.next_step) : null));
    const rest = d.findings.slice(1);
    if (rest.length) {
      out.append(el("h3", {}, "Other findings"), el("ul", {}, rest.map((f) => el("li", {}, `${f.layer} / ${f.cause}: ${f.summary}`))));
    }
  }
  out.append(el("details", {}, el("summary", {}, `The walk (${d.checks.length} checks)`),
    el("table.data", {}, el("thead", {}, el("tr", {}, ["Layer", "Check", "Result", "Detail"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, d.checks.map((c) => el(`tr.check-${c.result.replace(" ", "-")}`, {}, el("td", {}, c.layer), el("td", {}, c.name), el("td", {}, c.result), el("td", {}, c.detail)))))));
  return out;
}

