// Browser tests of the dashboard: Debian's Chromium driven by playwright-core against a
// real local cluster (a server and 2 agents with simulated GPUs) that this test starts.
//
//   node web/tests/dashboard.test.mjs --trainyard build/trainyard --out DIR [--scale]
//
// Checks: the cluster page lists the nodes; a job submitted through the API appears in
// the jobs table; a run page draws the example trainer's loss; a diagnose verdict
// appears for an injected fault (loss-nan); sign-in with a bad token is refused with a
// message. Screenshots go to DIR. --scale also loads 100,000 jobs and a 10M-point run
// and prints the time to first meaningful render of the jobs page and the run page
// (figures, not a pass/fail timing).
import { chromium } from "playwright-core";
import { readFileSync, mkdirSync } from "node:fs";
import { resolve, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { strict as assert } from "node:assert";
import { startCluster, until } from "./cluster.mjs";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const trainyard = resolve(opt("--trainyard", join(repo, "build/trainyard")));
const out = resolve(opt("--out", join(repo, "build/web-test")));
const scale = args.includes("--scale");
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
mkdirSync(out, { recursive: true });

let passed = 0;
async function step(name, fn) {
  const t0 = Date.now();
  await fn();
  passed++;
  console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
}

const cluster = await startCluster({ trainyard, repo, nodes: 2, gpus: 4 });
const browser = await chromium.launch({
  executablePath: chromiumPath,
  headless: true,
  args: ["--no-sandbox", "--disable-background-networking", "--disable-dev-shm-usage"],
});
const errors = [];
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") errors.push(`console: ${m.text()}`); });
  page.setDefaultTimeout(20000);
  const shot = (name) => page.screenshot({ path: join(out, `${name}.png`), fullPage: true });

  await step("without a token the page asks for one; a bad token is refused with the reason", async () => {
    await page.goto(`${cluster.url}/`);
    await page.locator("form.login").waitFor();
    await page.fill("#token-input", "tyt_bogus_token");
    await page.click("form.login button[type=submit]");
    await page.locator("form.login .notice.error").waitFor();
    const msg = await page.locator("form.login .notice.error").textContent();
    assert.match(msg, /token/i, `the refusal names the token: ${msg}`);
    await shot("login-refused");
    // The browser reports the refused requests (401) on its console: expected here.
    errors.splice(0, errors.length, ...errors.filter((e) => !/status of 401/.test(e)));
  });

  await step("the cluster page lists the nodes and their GPUs", async () => {
    await page.goto(`${cluster.url}/#token=${cluster.token}`);
    await page.locator('[data-testid="node-card"]').nth(1).waitFor();
    const names = await page.locator('[data-testid="node-card"] .node-name').allTextContents();
    assert.deepEqual(names.sort(), ["node-0", "node-1"]);
    assert.equal(await page.locator('[data-testid="node-card"] .gpu').count(), 8);
    assert.ok(!(await page.url()).includes("token="), "the token is removed from the address");
    const summary = await page.locator(".summary").textContent();
    assert.match(summary, /0\/8 H100 in use/);
    assert.equal(await page.locator("section.leaf").count(), 2, "one box per leaf switch");
    await shot("cluster");
  });

  let job;
  await step("a job submitted through the API appears in the jobs table", async () => {
    await page.goto(`${cluster.url}/#/jobs`);
    await page.locator("#jobs-table, .notice.empty").first().waitFor();
    // The example trainer, longer, and with a (simulated) GPU per rank so that the
    // cluster page has GPUs to show as busy.
    const spec = readFileSync(join(repo, "examples/trainer/job.yaml"), "utf8")
      .replace(/"--steps", "2000"/, '"--steps", "100000"')
      .replace("resources: {cpus: 1, memory: 1Gi}", "resources: {cpus: 1, memory: 1Gi, gpus: 1}");
    assert.match(spec, /gpus: 1/);
    job = (await cluster.api("POST", "jobs", spec, "application/yaml")).id;
    const row = page.locator(`#jobs-table tr[data-job-id="${job}"]`);
    await row.waitFor();  // live update, no reload
    assert.match(await row.textContent(), /example-trainer/);
    await until(async () => (await row.getAttribute("data-state")) === "Running", 30000, "the job Running in the table");
    await shot("jobs");
  });

  await step("the cluster page shows which job each busy GPU runs", async () => {
    await page.goto(`${cluster.url}/#/cluster`);
    const busy = page.locator(`.gpu.busy[data-job="${job}"]`);
    await until(async () => (await busy.count()) === 2, 20000, "2 GPUs busy with the job");
    assert.match(await busy.first().getAttribute("title"), new RegExp(`job ${job} example-trainer`));
    // An admin cordons a node and uncordons it from its card.
    const card = page.locator('[data-testid="node-card"][data-node="node-1"]');
    await card.locator('button:has-text("cordon")').first().click();
    await page.locator('[data-testid="node-card"][data-node="node-1"][data-state="Cordoned"]').waitFor();
    assert.equal((await cluster.api("GET", "nodes/node-1")).state, "Cordoned");
    await page.locator('[data-testid="node-card"][data-node="node-1"] button:has-text("uncordon")').click();
    await page.locator('[data-testid="node-card"][data-node="node-1"][data-state="Ready"]').waitFor();
    // Each card says how the node's agent isolates ranks: its limits and its containers.
    assert.match(await card.locator("span.exec").first().textContent(), /^limits: (cgroup v[12]|none)$/);
    assert.match(await card.locator(".meta.exec").textContent(), /containers: /);
    await page.selectOption("#color-mode", "util");  // telemetry colouring: no GPU left without a class
    assert.equal(await page.locator(".gpu.busy").count(), 0);
    assert.equal(await page.locator('[data-testid="node-card"] .gpu').count(), 8);
    await shot("cluster-busy");
  });

  await step("the job page shows its attempts, ranks and live logs", async () => {
    await page.goto(`${cluster.url}/#/jobs/${job}`);
    await page.locator(".timeline .seg.run").first().waitFor();
    await until(async () => (await page.locator('[data-testid="log"]').textContent()).length > 0, 30000, "log output");
    const facts = await page.locator("dl.facts").textContent();
    assert.match(facts, /Runs inhost processes \(no image\)/);
    assert.match(facts, /Resources\d+ replicas? × 1 /);
    await shot("job");
  });

  await step("a run page draws a chart of the example trainer's loss", async () => {
    await until(async () => {
      const m = await cluster.api("GET", `runs/${job}/metrics`);
      return m.series.some((s) => s.key === "loss" && s.count >= 20);
    }, 60000, "20 loss points");
    await page.goto(`${cluster.url}/#/runs?ids=${job}`);
    const chart = page.locator('[data-testid="chart-loss"][data-rendered="true"]');
    await chart.waitFor();
    assert.ok(Number(await chart.getAttribute("data-points")) >= 20);
    assert.equal(await page.locator('[data-testid="chart-loss"] canvas').count(), 1);
    const label = await page.locator('[data-testid="chart-loss"] figcaption').textContent();
    assert.match(label, /loss/);
    await shot("run");
    // Zoom: a drag across the middle of the plot fetches that range of steps again.
    const over = page.locator('[data-testid="chart-loss"] .u-over');
    const box = await over.boundingBox();
    await page.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2, { steps: 5 });
    await page.mouse.up();
    const status = page.locator('[data-testid="chart-loss"] .chart-status');
    await until(async () => /steps \d/.test(await status.textContent()), 10000, "the zoomed range fetched");
    await page.click('[data-testid="chart-loss"] button:has-text("Full range")');
    await until(async () => !/steps \d/.test(await status.textContent()), 10000, "the full range again");
  });

  await step("a diagnose verdict appears for an injected fault", async () => {
    const j = await cluster.api("GET", `jobs/${job}`);
    const node = j.placement[0].node;
    await cluster.api("POST", `nodes/${node}/faults`, JSON.stringify({ kind: "loss-nan", duration: "5m" }));
    await until(async () => (await cluster.api("GET", `jobs/${job}/diagnosis`)).found, 60000, "diagnose to find the fault");
    await page.goto(`${cluster.url}/#/jobs/${job}`);
    await page.click("#diagnose");
    const d = page.locator('[data-testid="diagnosis"][data-found="true"]');
    await d.waitFor();
    assert.match(await d.textContent(), /loss_nan/);
    // The job's own alerts list the rule that fired, linked back to the job.
    await page.locator('tr[data-rule="LossNotFinite"]').first().waitFor();
    assert.equal(await page.locator(`tr[data-rule="LossNotFinite"] a[href="#/jobs/${job}"]`).count() > 0, true);
    await shot("diagnosis");
    await cluster.api("DELETE", "faults");
  });

  await step("the queues and alerts pages render", async () => {
    await page.goto(`${cluster.url}/#/queues`);
    await page.locator('tr[data-queue="default/default"] .qbar').waitFor();
    await shot("queues");
    await page.goto(`${cluster.url}/#/alerts`);
    await page.locator("h2").first().waitFor();
    await page.locator("section table, section .notice").first().waitFor();
    await shot("alerts");
  });

  await step("keyboard: g j goes to the jobs page and / focuses its filter", async () => {
    await page.goto(`${cluster.url}/#/cluster`);
    await page.locator('[data-testid="node-card"]').first().waitFor();
    await page.keyboard.press("g");
    await page.keyboard.press("j");
    await page.locator("#f-name").waitFor();
    await page.keyboard.press("/");
    assert.equal(await page.evaluate(() => document.activeElement && document.activeElement.id), "f-name");
  });

  if (scale) await scaleFigures(browser, cluster, out);
  assert.deepEqual(errors, [], "no errors in the page");
} catch (e) {
  failed = true;
  console.error(`FAIL: ${e.stack || e}`);
  console.error(`--- server log\n${cluster.tail()}`);
  if (errors.length) console.error(`--- page errors\n${errors.join("\n")}`);
} finally {
  await browser.close();
  await cluster.stop();
}
console.log(`${passed} checks passed${failed ? ", 1 failed" : ""}; screenshots in ${out}`);
process.exit(failed ? 1 : 0);

// 100,000 jobs and a run with 10,000,000 points; time to first meaningful render.
async function scaleFigures(browser, cluster, out) {
  const t0 = Date.now();
  const spec = "name: filler\nresources: {gpus: 1, gpu_type: B200}\ncommand: [/bin/true]\n";
  for (let i = 0; i < 10; i++) await cluster.api("POST", "jobs?array=1-10000", spec, "application/yaml");
  console.log(`     100,000 jobs submitted in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const run = (await cluster.api("POST", "jobs", "name: long-run\nresources: {gpus: 1, gpu_type: B200}\ncommand: [/bin/true]\n", "application/yaml")).id;
  const t1 = Date.now();
  const perRequest = 80000;  // about 2.3 MB of JSON a request (the limit is 4 MiB)
  for (let start = 0; start < 10000000; start += perRequest) {  // 125 requests
    const steps = new Array(perRequest);
    const values = new Array(perRequest);
    for (let i = 0; i < perRequest; i++) {
      const s = start + i + 1;
      steps[i] = s;
      values[i] = 3 * Math.exp(-s / 2e6) + 0.05 * Math.sin(s / 997) + (s % 1000003 === 0 ? 5 : 0);
    }
    await cluster.api("POST", `runs/${run}/metrics`, JSON.stringify({ rank: 0, series: [{ key: "loss", steps, values }] }));
  }
  console.log(`     10,000,000 loss points ingested in ${((Date.now() - t1) / 1000).toFixed(1)} s`);
  const measure = async (hash, mark, waitFor) => {
    const times = [];
    for (let i = 0; i < 5; i++) {
      const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
      await ctx.addInitScript((t) => localStorage.setItem("trainyard.token", t), cluster.token);
      const p = await ctx.newPage();
      await p.goto(`${cluster.url}/${hash}`);
      await p.locator(waitFor).first().waitFor({ timeout: 30000 });
      await p.waitForFunction((m) => performance.getEntriesByName(m).length > 0, mark);
      times.push(await p.evaluate((m) => performance.getEntriesByName(m)[0].startTime, mark));
      if (i === 0) await p.screenshot({ path: join(out, `scale-${mark.split(":")[1]}.png`) });
      await ctx.close();
    }
    times.sort((a, b) => a - b);
    return times;
  };
  const jobsT = await measure("#/jobs", "trainyard:jobs-rendered", "#jobs-table tbody tr");
  const rowsShown = 100;
  console.log(`     jobs page, 100,001 jobs (${rowsShown} rows shown): first render ${jobsT.map((t) => t.toFixed(0)).join(", ")} ms; median ${jobsT[2].toFixed(0)} ms`);
  const runT = await measure(`#/runs?ids=${run}&keys=loss`, "trainyard:chart-rendered", '[data-testid="chart-loss"][data-rendered="true"]');
  console.log(`     run page, 10,000,000-point loss: first render ${runT.map((t) => t.toFixed(0)).join(", ")} ms; median ${runT[2].toFixed(0)} ms`);
  // Zooming into the 10M points: a drag, then the range fetched and drawn again.
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await ctx.addInitScript((t) => localStorage.setItem("trainyard.token", t), cluster.token);
  const p = await ctx.newPage();
  await p.goto(`${cluster.url}/#/runs?ids=${run}&keys=loss`);
  await p.locator('[data-testid="chart-loss"][data-rendered="true"]').waitFor();
  const over = p.locator('[data-testid="chart-loss"] .u-over');
  const status = p.locator('[data-testid="chart-loss"] .chart-status');
  const zooms = [];
  for (const [a, b] of [[0.2, 0.6], [0.3, 0.7], [0.1, 0.9], [0.4, 0.5], [0.25, 0.75]]) {
    await p.click('[data-testid="chart-loss"] button:has-text("Full range")');
    await until(async () => !/steps \d/.test(await status.textContent()), 10000, "the full range");
    const box = await over.boundingBox();
    await p.mouse.move(box.x + box.width * a, box.y + box.height / 2);
    await p.mouse.down();
    await p.mouse.move(box.x + box.width * b, box.y + box.height / 2, { steps: 3 });
    const t0 = Date.now();
    await p.mouse.up();
    await until(async () => /steps \d/.test(await status.textContent()), 10000, "the zoomed range");
    zooms.push(Date.now() - t0);
  }
  await p.screenshot({ path: join(out, "scale-zoomed.png") });
  await ctx.close();
  zooms.sort((x, y) => x - y);
  console.log(`     zoom into the 10,000,000-point loss (fetch + redraw, 120 ms debounce included): ${zooms.join(", ")} ms; median ${zooms[2]} ms`);
}
