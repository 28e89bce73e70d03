// A real local cluster for the browser tests: `trainyard server` on loopback (port 0)
// with N agents of simulated GPUs, in a temporary directory removed at the end.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, rmSync, openSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function startCluster({ trainyard, repo, nodes = 2, gpus = 4, serverFlags = [] }) {
  const work = mkdtempSync(join(tmpdir(), "trainyard-web-"));
  const data = join(work, "server");
  const procs = [];
  const log = (name) => openSync(join(work, `${name}.log`), "a");
  const server = spawn(trainyard, ["server", "--data-dir", data, "--port", "0", "--node-timeout", "3s",
    "--policy", "min_runtime=0s", "--alert-interval", "250ms", ...serverFlags],
  { stdio: ["ignore", log("server"), log("server")] });
  procs.push(server);
  const c = {
    work, data, procs, url: "", token: "",
    async stop() {
      for (const p of procs) p.kill("SIGTERM");
      await sleep(500);
      for (const p of procs) if (p.exitCode === null) p.kill("SIGKILL");
      if (process.env.KEEP !== "1") rmSync(work, { recursive: true, force: true });
    },
    tail(name = "server") {
      try { return readFileSync(join(work, `${name}.log`), "utf8").split("\n").slice(-30).join("\n"); } catch { return ""; }
    },
    async api(method, path, body, contentType = "application/json") {
      const res = await fetch(`${c.url}/api/v1/${path}`, {
        method, body, headers: { Authorization: `Bearer ${c.token}`, ...(body !== undefined ? { "Content-Type": contentType } : {}) },
      });
      const text = await res.text();
      let json = null;
      try { json = JSON.parse(text); } catch { /* raw */ }
      if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status}: ${text.slice(0, 500)}`);
      return json ?? text;
    },
  };
  for (let i = 0; i < 400 && !(existsSync(join(data, "server.url")) && existsSync(join(data, "token"))); i++) await sleep(50);
  if (!existsSync(join(data, "server.url"))) {
    await c.stop();
    throw new Error(`the server did not start:\n${c.tail()}`);
  }
  c.url = readFileSync(join(data, "server.url"), "utf8").trim();
  c.token = readFileSync(join(data, "token"), "utf8").trim();
  const join_token = readFileSync(join(data, "join-token"), "utf8").trim();
  for (let i = 0; i < nodes; i++) {
    const name = `node-${i}`;
    mkdirSync(join(work, "agents", name), { recursive: true });
    procs.push(spawn(trainyard, ["agent", "--unmapped-run-as", "agent", "--server", c.url, "--join-token", join_token, "--name", name,
      "--data-dir", join(work, "agents", name), "--simulated-gpus", String(gpus), "--gpu-type", "H100",
      "--cpus", "4", "--leaf", `leaf-${i % 2}`], { cwd: repo, stdio: ["ignore", log(`agent-${name}`), log(`agent-${name}`)] }));
  }
  await until(async () => (await c.api("GET", "nodes")).nodes.filter((n) => n.state === "Ready").length >= nodes,
    30000, `${nodes} Ready nodes`);
  return c;
}

export async function until(check, ms, what) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) { last = e; }
    await sleep(200);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? ` (last error: ${last.message})` : ""}`);
}
