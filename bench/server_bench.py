#!/usr/bin/python3
"""Control-plane speed on this machine (Python 3 standard library only).

  server_bench.py [--trainyard BUILD/trainyard] [--only submit,list,latency,slurm,heartbeat,ingest] ...

Prints figures; it does not pass or fail on them (see docs/api.md, "Speed"):
  submit   jobs/s acknowledged (201, committed with synchronous=FULL) over POST /jobs
           from --clients processes, each with one keep-alive connection;
  list     GET /jobs over --list-jobs jobs, page by page: time per page and in all;
  latency  idle `trainyard up --nodes 2 --gpus-per-node 8`: submit -> process start,
           p50/p99 over --latency-jobs jobs submitted one at a time;
  slurm    --slurm-runs back-to-back runs of --slurm-jobs trivial 1-GPU jobs, one CLI
           call each: `slurm-peer bench N` (sbatch) then `trainyard submit` against
           `trainyard up` (4 x 8 GPUs); jobs/s from the first submission until all have
           finished, medians and their ratio. Skipped, saying why, when the Slurm peer
           (../shared/peers/slurm/slurm-peer) is not set up.
  ingest   metric points/s stored (committed) through POST /api/v1/runs/{id}/metrics on
           loopback from --ingest-clients processes, each posting bodies of
           --ingest-points points (8 keys) for --ingest-seconds; text/plain bodies
           ("key step value time_ms" lines) and JSON column bodies; then the
           size of series.db per point and a 1,000-bucket read of the longest series;
  heartbeat --hb-agents simulated agents (asyncio, from --hb-procs processes) against one
           `trainyard server`: each registers, keeps a long poll outstanding and
           heartbeats every second with 8 GPUs of telemetry, each request on a new
           connection, as `trainyard agent` does;
           heartbeat round trip p50/p99/max over --hb-seconds, the server's CPU and RSS,
           and the RSS of one real `trainyard agent --simulated-gpus 8` meanwhile.
Every process it starts is stopped on exit. Unknown arguments (such as the
--benchmark_min_time that scripts/bench passes) are ignored.
"""

import argparse
import asyncio
import random
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SLURM_PEER = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "peers", "slurm", "slurm-peer"))
UNFINISHED = "Pending,Admitted,Starting,Running,Preempting,Lost"

_children = []  # Popen objects still to stop
_tokens = {}  # "host:port" -> the admin API token the server wrote to its data dir


def stop(p, sig=signal.SIGTERM, grace=15):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in _children:
        _children.remove(p)


def stop_all():
    for p in list(_children):
        stop(p)


def connect(url):
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60)


def call(conn, method, path, body=None, ctype="application/json"):
    headers = {"Content-Type": ctype} if body is not None else {}
    token = _tokens.get(f"{conn.host}:{conn.port}")
    if token:
        headers["Authorization"] = "Bearer " + token
    conn.request(method, path, body, headers)
    resp = conn.getresponse()
    data = resp.read()
    return resp.status, data


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def no_rate_limit(trainyard):
    """The submit and list benches drive one token from many connections: without its
    per-token rate limit (200/s by default), on servers that have one."""
    help_text = subprocess.run([trainyard, "server", "--help"], capture_output=True,
                               text=True).stdout
    return ["--rate-limit", "0"] if "--rate-limit" in help_text else []


def start(trainyard, args, data_dir, log):
    """Starts `trainyard ARGS --port 0 --data-dir DIR`; returns (Popen, URL)."""
    os.makedirs(data_dir, exist_ok=True)
    url_file = os.path.join(data_dir, "server.url")
    if os.path.exists(url_file):
        os.remove(url_file)
    p = subprocess.Popen([trainyard] + args + ["--port", "0", "--data-dir", data_dir],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    _children.append(p)
    for _ in range(600):
        if p.poll() is not None:
            raise RuntimeError(f"{' '.join(args)} exited: see {log}")
        if os.path.exists(url_file) and os.path.getsize(url_file) > 0:
            with open(url_file) as f:
                url = f.read().strip()
            token_file = os.path.join(data_dir, "token")
            if os.path.exists(token_file):
                with open(token_file) as f:
                    _tokens[urllib.parse.urlsplit(url).netloc] = f.read().strip()
            try:
                if call(connect(url), "GET", "/api/v1/healthz")[0] == 200:
                    return p, url
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"{' '.join(args)} did not start: see {log}")


def wait_nodes(url, n, tries=600):
    conn = connect(url)
    for _ in range(tries):
        nodes = json.loads(call(conn, "GET", "/api/v1/nodes")[1])["nodes"]
        if sum(1 for x in nodes if x["state"] == "Ready") >= n:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{n} nodes did not become Ready")


def wait_all_finished(url, poll=0.05):
    conn = connect(url)
    while True:
        page = json.loads(call(conn, "GET", f"/api/v1/jobs?state={UNFINISHED}&limit=1")[1])
        if not page["jobs"]:
            return
        time.sleep(poll)


# --- submit ------------------------------------------------------------------------------

def _submit_worker(url, threads, count, tag, go, out):
    """One process: `threads` threads, each with its own keep-alive connection."""
    body = json.dumps({"name": f"bench-{tag}", "resources": {"gpus": 1},
                       "command": ["/bin/true"]})
    lat, bad = [], [0]
    conns = [connect(url) for _ in range(threads)]

    def run(conn):
        for _ in range(count):
            a = time.monotonic()
            status, _ = call(conn, "POST", "/api/v1/jobs", body)
            lat.append(time.monotonic() - a)
            if status != 201:
                bad[0] += 1

    ts = [threading.Thread(target=run, args=(c,)) for c in conns]
    go.wait()
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((t0, time.monotonic(), lat, bad[0]))


def bench_submit(trainyard, work, clients, jobs):
    p, url = start(trainyard, ["server"] + no_rate_limit(trainyard), f"{work}/submit",
                   f"{work}/submit.log")
    try:
        ctx = multiprocessing.get_context("fork")
        # A short warm-up, then the measured burst.
        for n, measured in ((min(1000, jobs), False), (jobs, True)):
            go, out = ctx.Event(), ctx.Queue()
            nproc = min(clients, os.cpu_count() * 4)
            threads = clients // nproc
            per = n // (nproc * threads)
            procs = [ctx.Process(target=_submit_worker, args=(url, threads, per, i, go, out))
                     for i in range(nproc)]
            for w in procs:
                w.start()
            time.sleep(0.5)
            go.set()
            res = [out.get() for _ in procs]
            for w in procs:
                w.join()
            if not measured:
                continue
            wall = max(r[1] for r in res) - min(r[0] for r in res)
            lat = [x for r in res for x in r[2]]
            bad = sum(r[3] for r in res)
            total = per * nproc * threads
            print(f"submit: {total} jobs from {nproc * threads} keep-alive connections "
                  f"({nproc} processes) in {wall:.2f} s: "
                  f"{(total - bad) / wall:,.0f} jobs/s acknowledged; "
                  f"request p50 {pct(lat, 50) * 1e3:.1f} ms p99 {pct(lat, 99) * 1e3:.1f} ms; "
                  f"non-201: {bad}", flush=True)
    finally:
        stop(p)


# --- list --------------------------------------------------------------------------------

def bench_list(trainyard, work, jobs):
    p, url = start(trainyard, ["server"] + no_rate_limit(trainyard), f"{work}/list",
                   f"{work}/list.log")
    try:
        conn = connect(url)
        spec = json.dumps({"name": "listed", "resources": {"gpus": 1}, "command": ["/bin/true"]})
        left = jobs
        while left > 0:
            n = min(10_000, left)
            status, data = call(conn, "POST", f"/api/v1/jobs?array=1-{n}", spec)
            if status != 201:
                raise RuntimeError(f"array submit: HTTP {status}: {data[:200]}")
            left -= n
        for limit in (100, 1000):
            times, after, listed = [], 0, 0
            t0 = time.monotonic()
            while True:
                a = time.monotonic()
                status, data = call(conn, "GET", f"/api/v1/jobs?limit={limit}&after={after}")
                times.append(time.monotonic() - a)
                page = json.loads(data)
                listed += len(page["jobs"])
                if page["next_after"] is None:
                    break
                after = page["next_after"]
            total = time.monotonic() - t0
            print(f"list: {listed} jobs, limit={limit}: {len(times)} pages in {total:.2f} s; "
                  f"per page p50 {pct(times, 50) * 1e3:.1f} ms p99 {pct(times, 99) * 1e3:.1f} ms "
                  f"(including JSON parsing in the client)", flush=True)
    finally:
        stop(p)


# --- latency -----------------------------------------------------------------------------

def bench_latency(trainyard, work, jobs):
    d = f"{work}/latency"
    p, url = start(trainyard, ["up", "--nodes", "2", "--gpus-per-node", "8"], d, f"{work}/latency.log")
    try:
        wait_nodes(url, 2)
        conn = connect(url)
        marks = f"{work}/marks"
        os.makedirs(marks)
        lat = []
        for i in range(jobs):
            f = f"{marks}/{i}"
            spec = json.dumps({"name": f"lat-{i}", "resources": {"gpus": 1},
                               "command": ["/bin/sh", "-c", f"date +%s%N > {f}.tmp && mv {f}.tmp {f}"]})
            t0 = time.time_ns()
            status, data = call(conn, "POST", "/api/v1/jobs", spec)
            if status != 201:
                raise RuntimeError(f"submit: HTTP {status}: {data[:200]}")
            deadline = time.monotonic() + 30
            while not os.path.exists(f):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"job {json.loads(data)['id']} did not start in 30 s")
                time.sleep(0.001)
            with open(f) as fh:
                lat.append((int(fh.read()) - t0) / 1e6)
            wait_all_finished(url, 0.005)  # keep the cluster idle for the next one
        print(f"latency: idle 2 x 8-GPU local cluster, {jobs} jobs one at a time: submit -> "
              f"process start p50 {pct(lat, 50):.0f} ms p99 {pct(lat, 99):.0f} ms "
              f"max {max(lat):.0f} ms", flush=True)
    finally:
        stop(p, signal.SIGINT)


# --- slurm comparison --------------------------------------------------------------------

def run_trainyard_jobs(trainyard, url, spec_file, n):
    """Submits the jobs the way `slurm-peer bench` submits Slurm's: one CLI process
    each, one after the other, from a shell loop (not from Python, whose fork of a large
    interpreter per call would be charged to us)."""
    t0 = time.monotonic()
    subprocess.run(["/bin/bash", "-c",
                    'for i in $(seq 1 "$1"); do "$2" submit "$3" --server "$4" -o json >/dev/null '
                    '|| echo "submit $i failed" >&2; done', "submit-loop", str(n), trainyard,
                    spec_file, url], check=True,
                   env={**os.environ, "TRAINYARD_TOKEN": _tokens.get(urllib.parse.urlsplit(url).netloc, "")})
    t1 = time.monotonic()
    wait_all_finished(url)
    t2 = time.monotonic()
    return t1 - t0, t2 - t0


def slurm_unavailable():
    if not os.access(SLURM_PEER, os.X_OK):
        return f"{SLURM_PEER} not found"
    if not shutil.which("slurmctld") and not os.path.exists("/usr/sbin/slurmctld"):
        return "slurm-wlm is not installed (run `slurm-peer setup` as root)"
    peer_dir = os.environ.get("SLURM_PEER_DIR", "/tmp/trainyard-slurm-peer")
    if not os.path.exists(f"{peer_dir}/etc/slurm.conf"):
        return f"{peer_dir} is not laid out (run `slurm-peer setup` as root)"
    return None


def bench_slurm(trainyard, work, runs, n):
    why = slurm_unavailable()
    if why:
        print(f"slurm: skipped: {why}", flush=True)
        return
    spec_file = f"{work}/trivial.yaml"
    with open(spec_file, "w") as f:
        f.write('name: trivial\nresources: {gpus: 1}\ncommand: ["/bin/true"]\n')
    p, url = start(trainyard, ["up", "--nodes", "4", "--gpus-per-node", "8"], f"{work}/cmp",
                   f"{work}/cmp.log")
    slurm_rates, ours_rates = [], []
    try:
        wait_nodes(url, 4)
        up = subprocess.run([SLURM_PEER, "up"], capture_output=True, text=True)
        if up.returncode != 0:
            print(f"slurm: skipped: `slurm-peer up` failed: {up.stderr.strip()[-300:]}", flush=True)
            return
        for r in range(runs):
            out = subprocess.run([SLURM_PEER, "bench", str(n)], capture_output=True, text=True,
                                 check=True).stdout.strip().splitlines()[-1]
            fields = dict(kv.split("=") for kv in out.split()[1:])
            slurm_rates.append(float(fields["completed_per_s"]))
            sub, done = run_trainyard_jobs(trainyard, url, spec_file, n)
            ours_rates.append(n / done)
            print(f"slurm run {r + 1}: {out}", flush=True)
            print(f"trainyard run {r + 1}: jobs={n} submit_s={sub:.2f} submit_per_s={n / sub:.1f} "
                  f"all_done_s={done:.2f} completed_per_s={n / done:.1f}", flush=True)
        s, o = statistics.median(slurm_rates), statistics.median(ours_rates)
        print(f"slurm vs trainyard: {n} trivial 1-GPU jobs, one CLI call each, 4 x 8 GPUs, "
              f"median of {runs}: Slurm {s:.1f} jobs/s, Trainyard {o:.1f} jobs/s, "
              f"ratio {o / s:.1f}x", flush=True)
    finally:
        subprocess.run([SLURM_PEER, "down"], capture_output=True)
        stop(p, signal.SIGINT)


# --- heartbeat ---------------------------------------------------------------------------

async def _agent_post(host, port, token, path, body):
    """One request the way `trainyard agent` makes it (cpp-httplib's client without
    keep-alive): a new connection, `Connection: close`. Returns (status, body bytes)."""
    data = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n"
                     f"Connection: close\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        return int(lines[0].split()[1]), await reader.readexactly(length)
    finally:
        writer.close()


def _hb_worker(host, port, token, proc, agents, seconds, warmup, out):
    """One process: `agents` simulated agents on one asyncio loop."""

    async def run():
        lat, errors = [], [0]
        gpus = [{"index": g, "uuid": f"GPU-{proc}-{g}", "memory_mib": 81920} for g in range(8)]
        telemetry = [{"index": g, "util_pct": 0.0, "mem_used_mib": 0, "temp_c": 35.0,
                      "power_w": 70.0, "sm_clock_mhz": 1980, "throttled": False,
                      "ecc_uncorrectable": 0, "xid_last": 0, "xid_count": 0} for g in range(8)]
        names = []

        def post(path, body):
            return _agent_post(host, port, token, path, body)

        for i in range(agents):
            name = f"sim-{proc}-{i}"
            names.append(name)
            status, data = await post("/api/v1/agent/register", {
                "node": {"name": name, "address": "127.0.0.1", "gpu_type": "H100", "gpus": gpus,
                         "cpus": 64, "memory_mib": 524288, "leaf": f"leaf-{i % 32}",
                         "nvlink_domain": name, "simulated": True},
                "tasks": []})
            if status != 200:
                raise RuntimeError(f"register {name}: HTTP {status}: {data[:200]}")
        loop = asyncio.get_running_loop()
        begin = loop.time() + warmup
        end = begin + seconds
        rng = random.Random(proc)  # fixed seed: the same phases every run

        async def poller(name):
            while loop.time() < end:
                status, _ = await post("/api/v1/agent/poll", {"node": name, "wait_ms": 20000})
                if status != 200:
                    errors[0] += 1
                    await asyncio.sleep(1)

        async def heartbeater(name):
            seq, t = 0, loop.time() + rng.random()
            while t < end:
                await asyncio.sleep(max(0.0, t - loop.time()))
                seq += 1
                a = loop.time()
                status, _ = await post("/api/v1/agent/heartbeat", {
                    "node": name, "seq": seq, "health": {"ok": True, "message": ""},
                    "gpus": telemetry, "tasks": []})
                if a >= begin:
                    lat.append(loop.time() - a)
                    if status != 200:
                        errors[0] += 1
                t += 1.0

        polls = [asyncio.ensure_future(poller(n)) for n in names]
        await asyncio.gather(*(heartbeater(n) for n in names))
        for p in polls:
            p.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
        return lat, errors[0]

    try:
        out.put(asyncio.run(run()))
    except Exception as e:  # reported by the parent instead of leaving it waiting
        out.put(([], f"{type(e).__name__}: {e}"))


def _proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split()[1]
    return "?"


def bench_heartbeat(trainyard, work, agents, procs, seconds):
    d = f"{work}/heartbeat"
    p, url = start(trainyard, ["server"], d, f"{work}/heartbeat.log")
    probe = None
    try:
        with open(f"{d}/join-token") as f:
            token = f.read().strip()
        u = urllib.parse.urlsplit(url)
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        per = agents // procs
        warmup = 3.0
        workers = [ctx.Process(target=_hb_worker,
                               args=(u.hostname, u.port, token, i, per, seconds, warmup, out))
                   for i in range(procs)]
        for w in workers:
            w.start()
        wait_nodes(url, per * procs, tries=2400)  # each registration is one commit
        # One real agent beside them, for its resident memory.
        probe = subprocess.Popen([trainyard, "agent", "--server", url, "--join-token", token,
                                  "--name", "rss-probe", "--data-dir", f"{d}/probe",
                                  "--simulated-gpus", "8"],
                                 stdout=open(f"{work}/probe.log", "w"), stderr=subprocess.STDOUT)
        _children.append(probe)
        time.sleep(warmup)
        cpu0, t0 = _proc_cpu_s(p.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = _proc_cpu_s(p.pid), time.monotonic()
        agent_rss = (_proc_status(probe.pid, "VmRSS"), _proc_status(probe.pid, "VmHWM"))
        server_rss, threads = _proc_status(p.pid, "VmRSS"), _proc_status(p.pid, "Threads")
        res = [out.get() for _ in workers]
        for w in workers:
            w.join()
        failed = [r[1] for r in res if isinstance(r[1], str)]
        if failed:
            raise RuntimeError(f"simulated agents failed: {failed}")
        lat = [x for r in res for x in r[0]]
        bad = sum(r[1] for r in res)
        ready = sum(1 for x in json.loads(call(connect(url), "GET", "/api/v1/nodes")[1])["nodes"]
                    if x["state"] == "Ready")
        print(f"heartbeat: {per * procs} simulated agents ({procs} processes), 1 heartbeat/s each "
              f"+ a long poll each, {seconds:.0f} s: {len(lat)} heartbeats "
              f"({len(lat) / seconds:,.0f}/s), round trip p50 {pct(lat, 50) * 1e3:.1f} ms "
              f"p99 {pct(lat, 99) * 1e3:.1f} ms max {max(lat) * 1e3:.1f} ms; errors {bad}; "
              f"nodes Ready at the end {ready}; server CPU {(cpu1 - cpu0) / (t1 - t0) * 100:.0f}% "
              f"of one core, RSS {int(server_rss) // 1024} MiB, {threads} threads; "
              f"one real agent (8 simulated GPUs) RSS {int(agent_rss[0]) // 1024} MiB "
              f"(peak {int(agent_rss[1]) // 1024} MiB)", flush=True)
    finally:
        if probe is not None:
            stop(probe)
        stop(p)



def _ingest_worker(url, job, kind, points, seconds, client, go, out):
    # Bodies are made before the clock starts (Python is slower at writing them than
    # the server at reading them): 16 bodies of successive steps, cycled, each cycle
    # on new ranks so that steps only ever grow within a series.
    keys = [f"key{k}" for k in range(8)]
    per_key = points // len(keys)
    bodies = []
    for b in range(16):
        steps = range(b * per_key, (b + 1) * per_key)
        if kind == "text":
            lines = []
            for k in keys:
                lines += [f"{k} {s} {1.0 / (s + 1):.9g} {1764410000000 + s * 10}" for s in steps]
            bodies.append(("\n".join(lines) + "\n").encode())
        else:
            bodies.append(json.dumps({"rank": "RANK", "series": [
                {"key": k, "steps": list(steps), "values": [1.0 / (s + 1) for s in steps],
                 "times_ms": [1764410000000 + s * 10 for s in steps]} for k in keys]}))
    conn = connect(url)
    sent = 0
    n = 0
    out.put("ready")
    go.wait()
    t_end = time.time() + seconds
    while time.time() < t_end:
        rank = client * 10_000 + n // len(bodies)
        if kind == "text":
            status, data = call(conn, "POST", f"/api/v1/runs/{job}/metrics?rank={rank}",
                                bodies[n % len(bodies)], "text/plain")
        else:
            status, data = call(conn, "POST", f"/api/v1/runs/{job}/metrics",
                                bodies[n % len(bodies)].replace('"RANK"', str(rank), 1),
                                "application/json")
        if status != 200:
            raise RuntimeError(f"POST metrics: {status} {data[:200]}")
        sent += per_key * len(keys)
        n += 1
    out.put(sent)


def bench_ingest(trainyard, work, clients, points, seconds):
    data = os.path.join(work, "ingest")
    p, url = start(trainyard, ["server"] + no_rate_limit(trainyard), data,
                   os.path.join(work, "ingest.log"))
    conn = connect(url)
    status, body = call(conn, "POST", "/api/v1/jobs",
                        json.dumps({"name": "metrics", "command": ["x"]}))
    job = json.loads(body)["id"]
    for kind in ("text", "json"):
        go = multiprocessing.Event()
        out = multiprocessing.Queue()
        # Each client its own rank: its own series, as the ranks of one job would be.
        first = 0 if kind == "text" else clients
        procs = [multiprocessing.Process(target=_ingest_worker,
                                         args=(url, job, kind, points, seconds, first + c, go, out))
                 for c in range(clients)]
        for w in procs:
            w.start()
        for _ in procs:
            assert out.get() == "ready"  # the bodies are made
        t0 = time.time()
        go.set()
        total = sum(out.get() for _ in procs)
        wall = time.time() - t0
        for w in procs:
            w.join()
        print(f"ingest ({kind}): {total:,} points in {wall:.1f} s from {clients} clients "
              f"x {points:,}-point bodies: {total / wall:,.0f} points/s", flush=True)
    # One 10,000,000-point series, for the read below.
    conn = connect(url)  # the first one has been idle past the keep-alive timeout
    t0 = time.time()
    for b in range(125):
        base = b * 80_000
        body = "\n".join(f"long {s} {1.0 / (s + 1):.9g} {1764410000000 + s * 10}"
                         for s in range(base, base + 80_000)) + "\n"
        status, data_ = call(conn, "POST", f"/api/v1/runs/{job}/metrics", body, "text/plain")
        assert status == 200, data_[:200]
    print(f"ingest: one 10,000,000-point series posted in {time.time() - t0:.1f} s "
          "(the client making the bodies is most of it)", flush=True)
    stop(p)
    db = os.path.join(data, "series.db")
    size = os.path.getsize(db) + (os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0)
    print(f"ingest: series.db {size / 1e6:.1f} MB after a clean stop", flush=True)
    p, url = start(trainyard, ["server"] + no_rate_limit(trainyard), data,
                   os.path.join(work, "ingest2.log"))
    conn = connect(url)
    status, body = call(conn, "GET", f"/api/v1/runs/{job}")
    run = json.loads(body)
    n = sum(m["count"] for m in run["metrics"].values())
    print(f"ingest: {n:,} points stored, {size / max(n, 1):.1f} bytes/point on disk", flush=True)
    times = []
    for _ in range(11):
        t0 = time.time()
        status, body = call(conn, "GET", f"/api/v1/runs/{job}/metrics/long?buckets=1000")
        times.append(time.time() - t0)
        assert status == 200, body[:200]
    pts = json.loads(body)["points"]
    print(f"ingest: GET a {sum(pts['count']):,}-point series as 1,000 buckets over HTTP: "
          f"median {statistics.median(times) * 1000:.1f} ms", flush=True)
    stop(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainyard", default=os.path.join(os.getcwd(), "build-release", "trainyard"))
    ap.add_argument("--only", default="submit,list,latency,slurm,heartbeat,ingest")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--list-jobs", type=int, default=100_000)
    ap.add_argument("--latency-jobs", type=int, default=200)
    ap.add_argument("--slurm-runs", type=int, default=3)
    ap.add_argument("--slurm-jobs", type=int, default=1000)
    ap.add_argument("--ingest-clients", type=int, default=4)
    ap.add_argument("--ingest-points", type=int, default=80_000)
    ap.add_argument("--ingest-seconds", type=float, default=10)
    ap.add_argument("--hb-agents", type=int, default=1000)
    ap.add_argument("--hb-procs", type=int, default=2)
    ap.add_argument("--hb-seconds", type=float, default=20)
    args, _ = ap.parse_known_args()
    trainyard = os.path.abspath(args.trainyard)
    if not os.access(trainyard, os.X_OK):
        print(f"server_bench: no trainyard binary at {trainyard}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = tempfile.mkdtemp(prefix="trainyard-server-bench-")
    only = set(args.only.split(","))
    print(f"server_bench: {trainyard}, {os.cpu_count()} CPUs, work dir {work}", flush=True)
    try:
        if "submit" in only:
            bench_submit(trainyard, work, args.clients, args.jobs)
        if "list" in only:
            bench_list(trainyard, work, args.list_jobs)
        if "latency" in only:
            bench_latency(trainyard, work, args.latency_jobs)
        if "slurm" in only:
            bench_slurm(trainyard, work, args.slurm_runs, args.slurm_jobs)
        if "ingest" in only:
            bench_ingest(trainyard, work, args.ingest_clients, args.ingest_points,
                         args.ingest_seconds)
        if "heartbeat" in only:
            try:
                bench_heartbeat(trainyard, work, args.hb_agents, args.hb_procs, args.hb_seconds)
            except RuntimeError as e:  # a figure too: at this many agents it does not hold up
                print(f"heartbeat: {args.hb_agents} simulated agents: failed: {e}", flush=True)
    finally:
        stop_all()
        if not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
