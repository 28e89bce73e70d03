#!/usr/bin/python3
"""Control-plane speed on this machine (Python 3 standard library only).

  server_bench.py [--trainyard BUILD/trainyard] [--only submit,list,latency,slurm,slurm-array,heartbeat,ingest,failover,node-loss] ...

Prints figures; it does not pass or fail on them (see docs/api.md, "Speed"):
  submit   jobs/s acknowledged (201, committed with synchronous=FULL) over POST /jobs
           from --clients processes, each with one keep-alive connection;
  list     GET /jobs over --list-jobs jobs, page by page: time per page and in all;
  latency  idle `trainyard up --nodes 2 --gpus-per-node 8`: submit -> process start (the
           mtime of a file the rank writes first), p50/p99 over --latency-jobs jobs
           submitted one at a time;
  slurm    --slurm-runs back-to-back runs of --slurm-jobs trivial 1-GPU jobs, one CLI
           call each: `slurm-peer bench N` (sbatch) then `trainyard submit` against
           `trainyard up` (4 x 8 GPUs); jobs/s from the first submission until all have
           finished, medians and their ratio. Skipped, saying why, when the Slurm peer
           (../shared/peers/slurm/slurm-peer, or $SLURM_PEER) is not set up.
  slurm-array (not in the default --only; --slurm-jobs, --slurm-runs as for slurm) the
           same jobs as one job array, one CLI call:
           `slurm-peer bench-array N` (sbatch --array) then `trainyard submit --array`;
           jobs/s from the call until all have finished, medians and their ratio.
  --container  latency, slurm and slurm-array also run every Trainyard job in a container
           (docs/execution.md): a busybox image made by tests/containers/make_busybox_image.sh
           and loaded with `trainyard image load` into a store in the work dir, the job's
           `image:` naming it; each figure is printed for both executors, and latency
           gives the container's start overhead (container p50/p99 minus process p50/p99).
           Needs root and runc, as the container executor does.
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
  failover (not in the default --only: at full size 8 minutes on 2 cores with a Release
           build, 17 with a Debug one, most of it putting the jobs in the store, one
           cancel or hold request per job) leader fail-over at scale (docs/ha.md): a
           throwaway PostgreSQL (Debian's server binaries, a Unix socket in a temporary
           directory, fsync on), two `trainyard server --store postgresql://...` on it (the
           default --leader-timeout 10s), --failover-jobs jobs put in the store through the
           leader's API (arrays, then one cancel or hold each: most cancelled, 1/20 held
           (at most 1,000), one 8-GPU job running on every node but one, then 1/10 (at most
           1,000) 2-node 8-GPU gangs pending that cannot fit), --failover-agents simulated
           agents (asyncio, from --failover-procs processes) that follow the leader as
           `trainyard agent --server A,B` does and report the tasks they are started;
           the leader's, the standby's and PostgreSQL's CPU and RSS over
           --failover-seconds; then `kill -9` of the leader: until the standby took the
           lease and answers /healthz as leader, until a 1-GPU probe job submitted to it
           (retried while it refuses) leaves Pending and runs, until every node is Ready
           on it again, its CPU and RSS over the 10 s after, and how many running jobs it
           adopted rather than restarted. Skipped, saying why, without PostgreSQL or with
           a binary that has no `server --store`.
  node-loss (not in the default --only: about 45 s a run at full size on 2 cores with
           a Release build, 30 s with --loss-agents 100 --loss-nodes 10; --loss-runs runs)
           heartbeats while a rack of nodes is lost at once: one `trainyard server` (SQLite,
           synchronous=FULL, as deployed) with --node-timeout --loss-timeout and
           --node-lost-grace --loss-grace (seconds); --loss-agents simulated agents
           (asyncio, from --loss-procs processes; the fail-over bench's, which report the
           tasks they are started running and stopped ones exited) all Ready; jobs of 8
           GPUs a node on 4/5 of the nodes: 4-node gangs on 2/5, 2-node gangs on 3/10,
           1-node jobs on 1/10, all Running; then --loss-nodes agents fall silent at one
           instant (a last heartbeat sent together, then nothing, as a rack that lost
           power), taken in turns: one node of a 4-node gang, one of a 2-node gang (each
           gang's other ranks on nodes that keep heartbeating), two holding a 1-node job.
           The surviving agents' heartbeat round trip p50/p99/max (client side, sent
           within each window) over --loss-steady s before the silence; while the server
           declares the nodes NotReady (from 0.5 s before the instant its Tick declared
           them, from their state_reason, until 0.5 s after GET /nodes showed all of them
           NotReady: a read waits for the cluster's lock); and while it gives their jobs
           up (from 0.5 s before the first Lost event until 0.5 s after every hit job was
           requeued, the unfinished jobs polled every 100 ms); the server's own histogram
           (p50/p99 bucket) over the steady window and from 0.5 s before the timeout until
           all were requeued; how long after --node-timeout all nodes were shown NotReady
           and after timeout + grace all hit jobs requeued (polled, and the Lost/Requeued
           events' times); surviving nodes seen NotReady (none expected); server CPU and
           the load average. Each run, then the medians over the runs.
Every process it starts is stopped on exit. Unknown arguments (such as the
--benchmark_min_time that scripts/bench passes) are ignored.
"""

import argparse
import asyncio
import random
import re
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
# $SLURM_PEER overrides it (from a git worktree, ../shared is not beside the checkout).
SLURM_PEER = os.environ.get("SLURM_PEER") or os.path.normpath(
    os.path.join(HERE, "..", "..", "shared", "peers", "slurm", "slurm-peer"))
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


_image = {}  # "ref": the bench image's reference once loaded (--container)


def bench_image(trainyard, work):
    """Makes and loads the container benches' busybox image once; returns its reference.
    `trainyard up` (started after this) passes TRAINYARD_IMAGE_STORE to its agents."""
    if "ref" in _image:
        return _image["ref"]
    ref = "bench/busybox:1"
    store = f"{work}/images"
    tar = f"{work}/busybox.tar"
    subprocess.run(["bash", os.path.join(HERE, "..", "tests", "containers", "make_busybox_image.sh"),
                    tar, ref], check=True, stdout=subprocess.DEVNULL)
    os.environ["TRAINYARD_IMAGE_STORE"] = store
    subprocess.run([trainyard, "image", "load", tar], check=True, stdout=subprocess.DEVNULL)
    _image["ref"] = ref
    return ref


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


def failed_jobs(url):
    """How many jobs of the server ended Failed: a benchmark's jobs must all succeed for
    its rate to mean anything (a job that fails at once finishes fast)."""
    conn = connect(url)
    page = json.loads(call(conn, "GET", "/api/v1/jobs?state=Failed&limit=10000")[1])
    return len(page["jobs"])


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


def _native_submit_client(trainyard):
    """bench/submit_load of the same build as `trainyard` (Release builds with benchmarks
    on), or None."""
    path = os.path.join(os.path.dirname(trainyard), "bench", "submit_load")
    return path if os.access(path, os.X_OK) else None


def bench_submit_native(trainyard, work, clients, jobs):
    """The same submissions from bench/submit_load (C++, one thread per keep-alive
    connection): the server's figure with a client that costs it little CPU."""
    native = _native_submit_client(trainyard)
    if native is None:
        print("submit (native client): no bench/submit_load beside the binary; skipped",
              flush=True)
        return
    p, url = start(trainyard, ["server"] + no_rate_limit(trainyard), f"{work}/submit-native",
                   f"{work}/submit-native.log")
    try:
        u = urllib.parse.urlsplit(url)
        token = _tokens.get(u.netloc, "")
        body = json.dumps({"name": "bench-native", "resources": {"gpus": 1},
                           "command": ["/bin/true"]})
        out = ""
        for n in (min(1000, jobs), jobs):  # a short warm-up, then the measured burst
            cpu0 = _proc_cpu_s(p.pid)
            out = subprocess.run([native, url, token, str(clients), str(n), body],
                                 capture_output=True, text=True, check=True).stdout
            cpu1 = _proc_cpu_s(p.pid)
        r = json.loads(out)
        print(f"submit (native client): {r['jobs']} jobs from {clients} keep-alive connections "
              f"(1 process) in {r['seconds']:.2f} s: {r['jobs_per_s']:,.0f} jobs/s acknowledged; "
              f"request p50 {r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms; "
              f"non-201: {r['non_201']}, no answer: {r['errors']}; server CPU "
              f"{(cpu1 - cpu0) / r['seconds'] * 100:.0f}% of one core", flush=True)
    finally:
        stop(p)


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

def bench_latency(trainyard, work, jobs, image=""):
    what = "container" if image else "process"
    d = f"{work}/latency-{what}"
    p, url = start(trainyard, ["up", "--nodes", "2", "--gpus-per-node", "8"], d,
                   f"{work}/latency-{what}.log")
    try:
        wait_nodes(url, 2)
        conn = connect(url)
        marks = f"{work}/marks-{what}"
        os.makedirs(marks)
        lat = []
        for i in range(jobs):
            f = f"{marks}/{i}"
            spec = {"name": f"lat-{i}", "resources": {"gpus": 1},
                    "command": ["/bin/sh", "-c", f"echo > {f}.tmp && mv {f}.tmp {f}"]}
            if image:  # the marks directory is mounted at its own path
                spec.update(image=image, mounts=[f"{marks}:{marks}"])
            spec = json.dumps(spec)
            t0 = time.time_ns()
            status, data = call(conn, "POST", "/api/v1/jobs", spec)
            if status != 201:
                raise RuntimeError(f"submit: HTTP {status}: {data[:200]}")
            deadline = time.monotonic() + 30
            while not os.path.exists(f):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"job {json.loads(data)['id']} did not start in 30 s")
                time.sleep(0.001)
            # When the rank wrote the mark: its mtime (the kernel's coarse clock, a few ms;
            # busybox's date in the container image has no nanoseconds).
            lat.append((os.stat(f).st_mtime_ns - t0) / 1e6)
            wait_all_finished(url, 0.005)  # keep the cluster idle for the next one
        print(f"latency: idle 2 x 8-GPU local cluster, {jobs} jobs one at a time: submit -> "
              f"{what} start p50 {pct(lat, 50):.0f} ms p99 {pct(lat, 99):.0f} ms "
              f"max {max(lat):.0f} ms", flush=True)
        return pct(lat, 50), pct(lat, 99)
    finally:
        stop(p, signal.SIGINT)


# --- slurm comparison --------------------------------------------------------------------

def run_trainyard_jobs(trainyard, url, spec_file, n, array=False):
    """Submits the jobs the way `slurm-peer bench` submits Slurm's: one CLI process
    each, one after the other, from a shell loop (not from Python, whose fork of a large
    interpreter per call would be charged to us); with `array`, as `slurm-peer
    bench-array` does: one CLI call for a job array of n."""
    env = {**os.environ, "TRAINYARD_TOKEN": _tokens.get(urllib.parse.urlsplit(url).netloc, "")}
    t0 = time.monotonic()
    if array:
        subprocess.run([trainyard, "submit", spec_file, "--server", url, "--array", f"1-{n}",
                        "-o", "json"], check=True, env=env, stdout=subprocess.DEVNULL)
    else:
        subprocess.run(["/bin/bash", "-c",
                        'for i in $(seq 1 "$1"); do "$2" submit "$3" --server "$4" -o json >/dev/null '
                        '|| echo "submit $i failed" >&2; done', "submit-loop", str(n), trainyard,
                        spec_file, url], check=True, env=env)
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


def bench_slurm(trainyard, work, runs, n, array=False, image=""):
    mode = "slurm-array" if array else "slurm"
    why = slurm_unavailable()
    if why:
        print(f"{mode}: skipped: {why}", flush=True)
        return
    spec_file = f"{work}/trivial.yaml"
    with open(spec_file, "w") as f:
        f.write('name: trivial\nresources: {gpus: 1}\ncommand: ["/bin/true"]\n')
    image_spec = f"{work}/trivial-container.yaml"
    with open(image_spec, "w") as f:
        f.write(f'name: trivial\nimage: {image}\nresources: {{gpus: 1}}\ncommand: ["/bin/true"]\n')
    p, url = start(trainyard, ["up", "--nodes", "4", "--gpus-per-node", "8"], f"{work}/cmp-{mode}",
                   f"{work}/cmp-{mode}.log")
    slurm_rates, ours_rates, container_rates = [], [], []
    try:
        wait_nodes(url, 4)
        up = subprocess.run([SLURM_PEER, "up"], capture_output=True, text=True)
        if up.returncode != 0:
            print(f"{mode}: skipped: `slurm-peer up` failed: {up.stderr.strip()[-300:]}", flush=True)
            return
        for r in range(runs):
            out = subprocess.run([SLURM_PEER, "bench-array" if array else "bench", str(n)],
                                 capture_output=True, text=True,
                                 check=True).stdout.strip().splitlines()[-1]
            fields = dict(kv.split("=") for kv in out.split()[1:])
            slurm_rates.append(float(fields["completed_per_s"]))
            failed_before = failed_jobs(url)
            sub, done = run_trainyard_jobs(trainyard, url, spec_file, n, array)
            failed = failed_jobs(url) - failed_before
            ours_rates.append(n / done)
            print(f"{mode} run {r + 1}: {out}", flush=True)
            print(f"trainyard{'-array' if array else ''} run {r + 1}: jobs={n} submit_s={sub:.2f} "
                  + ("" if array else f"submit_per_s={n / sub:.1f} ")
                  + f"all_done_s={done:.2f} completed_per_s={n / done:.1f} failed={failed}",
                  flush=True)
            if image:
                failed_before = failed_jobs(url)
                sub, done = run_trainyard_jobs(trainyard, url, image_spec, n, array)
                failed = failed_jobs(url) - failed_before
                container_rates.append(n / done)
                print(f"trainyard{'-array' if array else ''}-container run {r + 1}: jobs={n} "
                      f"submit_s={sub:.2f} all_done_s={done:.2f} completed_per_s={n / done:.1f}"
                      f" failed={failed}", flush=True)
                if failed:
                    print(f"{mode}: {failed} container job(s) failed: this run's rate is not a "
                          "measure of containers started", flush=True)
        s, o = statistics.median(slurm_rates), statistics.median(ours_rates)
        how = "as one job array (one CLI call)" if array else "one CLI call each"
        print(f"{mode} vs trainyard: {n} trivial 1-GPU jobs, {how}, 4 x 8 GPUs, "
              f"median of {runs}: Slurm {s:.1f} jobs/s, Trainyard {o:.1f} jobs/s, "
              f"ratio {o / s:.1f}x", flush=True)
        if image:
            c = statistics.median(container_rates)
            print(f"{mode} vs trainyard with containers: the same, each job in a container of "
                  f"{image}: Slurm {s:.1f} jobs/s, Trainyard {c:.1f} jobs/s, ratio {c / s:.1f}x",
                  flush=True)
    finally:
        subprocess.run([SLURM_PEER, "down"], capture_output=True)
        stop(p, signal.SIGINT)


# --- heartbeat ---------------------------------------------------------------------------

class NoAnswerError(ConnectionError):
    """The server closed a connection without answering the request sent on it. An
    OSError, so that the fail-over agents treat it as any other request that got no
    answer (a leader killed mid-request, a standby stopping as it takes the lease)."""


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
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            raise NoAnswerError(f"{path}: the server closed the connection without an answer "
                                f"({len(e.partial)} bytes)") from e
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
                status, _ = await post("/api/v1/agent/poll", {"node": name, "wait_ms": int(os.environ.get("HB_POLL_MS", "20000"))})
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


def _route_buckets(url, route):
    """The server's own request-duration histogram for `route` (POST), from /metrics:
    {upper bound in seconds: cumulative count}."""
    _, text = call(connect(url), "GET", "/metrics")
    out = {}
    for line in text.decode().splitlines():
        if (line.startswith("trainyard_http_request_duration_seconds_bucket{")
                and 'method="POST"' in line and f'route="{route}"' in line):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def _bucket_quantile(before, after, q):
    """The upper bound of the bucket holding quantile q of the observations made between
    two readings of a histogram (as Prometheus' histogram_quantile would, without
    interpolation), and how many there were."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0) for b in bounds]
    total = counts[-1] if counts else 0
    for b, c in zip(bounds, counts):
        if total and c >= q * total:
            return b, int(total)
    return float("nan"), int(total)


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
        hb_route = "/api/v1/agent/heartbeat"
        h0 = _route_buckets(url, hb_route)
        cpu0, t0 = _proc_cpu_s(p.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = _proc_cpu_s(p.pid), time.monotonic()
        h1 = _route_buckets(url, hb_route)
        (s50, n_srv), (s99, _) = _bucket_quantile(h0, h1, 0.5), _bucket_quantile(h0, h1, 0.99)
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
              f"p99 {pct(lat, 99) * 1e3:.1f} ms max {max(lat) * 1e3:.1f} ms; handled by the "
              f"server (its /metrics histogram, {n_srv} heartbeats): p50 <= {s50 * 1e3:g} ms, "
              f"p99 <= {s99 * 1e3:g} ms; errors {bad}; "
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


# --- failover ----------------------------------------------------------------------------

def _pg_bindir():
    env = os.environ.get("TRAINYARD_PG_BINDIR")
    if env:
        return env if os.access(os.path.join(env, "postgres"), os.X_OK) else None
    found = []
    try:
        for v in os.listdir("/usr/lib/postgresql"):
            b = os.path.join("/usr/lib/postgresql", v, "bin")
            if v.isdigit() and os.access(os.path.join(b, "initdb"), os.X_OK) \
                    and os.access(os.path.join(b, "postgres"), os.X_OK):
                found.append((int(v), b))
    except OSError:
        pass
    return max(found)[1] if found else None


class _Postgres:
    """A throwaway PostgreSQL as tests/server/ha_e2e.sh starts it: its own temporary
    directory, a Unix socket there and no TCP port, run as the `postgres` user when we
    are root (it refuses to run as root), fsync and synchronous_commit left on."""

    def __init__(self, bindir):
        self.bin = bindir
        self.root = os.geteuid() == 0
        self.dir = tempfile.mkdtemp(prefix="trainyard-bench-pg-", dir="/tmp")  # short: a socket path
        os.chmod(self.dir, 0o755)
        if self.root:
            import pwd
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.proc = None
        self.pid = None  # the postmaster's own (self.proc is runuser's when we are root)
        self.log = os.path.join(self.dir, "postgres.log")

    def _as_pg(self, argv):
        return ["runuser", "-u", "postgres", "--"] + argv if self.root else argv

    def start(self):
        r = subprocess.run(self._as_pg([f"{self.bin}/initdb", "-D", f"{self.dir}/data", "-A", "trust",
                                        "-U", "postgres", "--no-instructions"]),
                           capture_output=True, text=True, cwd=self.dir)
        if r.returncode != 0:
            raise RuntimeError(f"initdb: {(r.stdout + r.stderr)[-500:]}")
        self.proc = subprocess.Popen(
            self._as_pg([f"{self.bin}/postgres", "-D", f"{self.dir}/data", "-k", self.dir,
                         "-c", "listen_addresses=", "-c", "fsync=on"]),
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, cwd=self.dir)
        deadline = time.monotonic() + 60
        while True:
            r = subprocess.run(self._as_pg([f"{self.bin}/createdb", "-h", self.dir, "-U", "postgres",
                                            "trainyard"]), capture_output=True, text=True, cwd=self.dir)
            if r.returncode == 0:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start: {r.stderr.strip()[-300:]}; "
                                   f"see {self.log}")
            time.sleep(0.2)
        with open(f"{self.dir}/data/postmaster.pid") as f:
            self.pid = int(f.readline())
        return f"postgresql:///trainyard?host={self.dir}&user=postgres"

    def sql(self, query):
        r = subprocess.run(self._as_pg([f"{self.bin}/psql", "-h", self.dir, "-U", "postgres", "-d",
                                        "trainyard", "-Atc", query]),
                           capture_output=True, text=True, cwd=self.dir, timeout=60)
        return r.stdout.strip()

    def pids(self):
        """The postmaster and its children (backends, walwriter, ...)."""
        out = [self.pid] if self.pid else []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    with open(f"/proc/{p}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.pid:
                            out.append(int(p))
                except (OSError, IndexError, ValueError):
                    pass
        return out

    def stop(self):
        # The postmaster itself (SIGQUIT: immediate shutdown), not only runuser.
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGQUIT)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 15
            while os.path.exists(f"/proc/{self.pid}") and time.monotonic() < deadline:
                time.sleep(0.05)
            if os.path.exists(f"/proc/{self.pid}"):
                os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not os.environ.get("KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)


def _tree_cpu_s(pids):
    total = 0.0
    for pid in pids:
        try:
            total += _proc_cpu_s(pid)
        except (OSError, IndexError, ValueError):
            pass
    return total


def _load_worker(url, spec, chunks, verb, threads, out):
    """One process: for each chunk, submits an array of that many jobs, then (with
    `verb`, "cancel" or "hold") applies it to each, one request per job, from `threads`
    keep-alive connections."""
    done, bad, msgs = 0, 0, []
    try:
        for n in chunks:
            status, data = call(connect(url), "POST", f"/api/v1/jobs?array=1-{n}", spec)
            if status != 201:
                raise RuntimeError(f"array submit: HTTP {status}: {data[:200]}")
            ids = json.loads(data)["ids"]
            if verb:
                errs = []

                def run(part):
                    conn = connect(url)
                    for i in part:
                        for retry in (False, True):
                            try:
                                status, data = call(conn, "POST", f"/api/v1/jobs/{i}/{verb}", "")
                            except (OSError, http.client.HTTPException) as e:
                                if retry:
                                    errs.append(f"{verb} {i}: {e}")
                                    break
                                conn = connect(url)  # closed while idle: once more
                                continue
                            if status != 200 and not (retry and status == 409):
                                errs.append(f"{verb} {i}: HTTP {status}: {data[:120]}")
                            break

                ts = [threading.Thread(target=run, args=(ids[k::threads],)) for k in range(threads)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                bad += len(errs)
                msgs += errs[:3]
            done += len(ids)
        out.put((done, bad, msgs[:3]))
    except Exception as e:  # reported by the parent instead of leaving it waiting
        out.put((done, bad, [f"{type(e).__name__}: {e}"]))


def _collect(out, workers, deadline, what):
    res = []
    for _ in workers:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{what} did not end in time")
        try:
            res.append(out.get(timeout=left))
        except Exception:  # queue.Empty
            raise RuntimeError(f"{what} did not end in time")
    for w in workers:
        w.join(10)
    return res


def _sim_agents_worker(servers, token, proc, agents, seed_ms, stop_evt, out, samples_out=None,
                       silence=None):
    """One process: `agents` simulated agents on one asyncio loop that follow the leader
    as `trainyard agent --server A,B` does (src/agent/agent.cc): a request that gets no
    answer, or a standby's 503, moves the agent to the leader the 503 names (unless that
    one gave no answer in the last 5 s: then it stays), else to the next address;
    failures back off (100 ms doubling to 5 s, at most 1 s after a standby's 503); a 404 (`unknown node`, a
    new leader that has not seen it) makes it register again with its tasks, which the
    leader adopts. Each registers, keeps a long poll outstanding and heartbeats every
    second with 8 GPUs of telemetry, each request on a new connection. `start` commands
    become tasks reported running until a `stop`/`preempt` (they then exit).

    With `samples_out`, every heartbeat's (wall-clock time sent, round trip in seconds,
    HTTP status or 0 for no answer, node name) goes there before the stats. From
    `silence`, a queue, a (names, monotonic instant) pair makes those agents send one
    last heartbeat at that instant, all of them together, and then fall silent as a node
    that lost power: no more heartbeats, no new poll, the commands of an outstanding
    poll ignored."""
    import queue
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    urls = [u for u, _, _ in servers]
    addrs = [(h, p) for _, h, p in servers]
    errors = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
              ValueError, IndexError)
    stats = {"registrations": 0, "heartbeats": 0, "switches": 0, "no_answer": 0, "standby_503": 0,
             "unknown_node_404": 0, "other_status": 0, "tasks_started": 0, "tasks_stopped": 0}
    telemetry = [{"index": g, "util_pct": 0.0, "mem_used_mib": 0, "temp_c": 35.0,
                  "power_w": 70.0, "sm_clock_mhz": 1980, "throttled": False,
                  "ecc_uncorrectable": 0, "xid_last": 0, "xid_count": 0} for g in range(8)]

    stopping = [False]

    # As agent.cc: after a standby's 503, retries come at least every second (for 60 s);
    # a standby naming a server that gave no answer in the last 5 s keeps the agent.
    standby_seen = [0.0]

    def backoff(failures):
        d = min(0.1 * 2 ** max(0, failures - 1), 5.0)
        if standby_seen[0] and time.monotonic() - standby_seen[0] < 60:
            d = min(d, 1.0)
        return d

    class Sim:
        def __init__(self, i, loop, rng):
            self.i, self.loop = i, loop
            self.name = f"sim-{proc}-{i}"
            self.gpus = [{"index": g, "uuid": f"GPU-{proc}-{i}-{g}", "memory_mib": 81920}
                         for g in range(8)]
            self.cur = 0  # index in servers, shared by the poll and the main loop
            self.reg = asyncio.Event()
            self.changed = asyncio.Event()
            self.failures = 0
            self.next_attempt = 0.0
            self.next_hb = loop.time() + 2.0 + rng.random()  # spread over the second
            self.start_delay = rng.random() * 2.0
            self.seq = 0
            self.tasks = {}
            self.unanswered = (None, 0.0)  # the server that last gave no answer, and when
            self.silence_at = None  # loop time of its last heartbeat (`silence`)
            self.dead = False

        def fail_over(self, frm, body):
            if len(addrs) < 2:
                return
            to = (frm + 1) % len(addrs)
            leader = body.get("leader") if isinstance(body, dict) else None
            if isinstance(leader, str) and leader.rstrip("/") in urls:
                to = urls.index(leader.rstrip("/"))
                if to == self.unanswered[0] and time.monotonic() - self.unanswered[1] < 5:
                    to = frm
            if to != frm and self.cur == frm:
                self.cur = to
                stats["switches"] += 1

        async def post(self, path, body, timeout):
            at = self.cur
            try:
                status, data = await asyncio.wait_for(
                    _agent_post(addrs[at][0], addrs[at][1], token, path, body), timeout)
            except errors:
                if self.dead:
                    return None, {}
                stats["no_answer"] += 1
                self.unanswered = (at, time.monotonic())
                self.fail_over(at, None)
                return None, {}
            if self.dead:  # its last poll's answer, which a node without power never reads
                return status, {}
            try:
                j = json.loads(data) if data else {}
            except ValueError:
                j = {}
            if status == 503 and isinstance(j, dict) and j.get("standby"):
                stats["standby_503"] += 1
                standby_seen[0] = time.monotonic()
                self.fail_over(at, j)
            elif status == 404:
                stats["unknown_node_404"] += 1
            elif status != 200:
                stats["other_status"] += 1
            return status, (j if isinstance(j, dict) else {})

        def command(self, c):
            kind = c.get("kind")
            now_ms = int(time.time() * 1000)
            if kind == "start":
                t = c.get("task", {})
                tid = t.get("task_id")
                if tid and tid not in self.tasks:
                    self.tasks[tid] = {"task_id": tid, "job_id": t["job_id"], "attempt": t["attempt"],
                                       "rank": t["rank"], "state": "running",
                                       "pid": 100000 + len(self.tasks), "started_ms": now_ms,
                                       "finished_ms": 0, "exit_code": 0, "signal": 0, "message": ""}
                    stats["tasks_started"] += 1
                    self.changed.set()
            elif kind in ("stop", "preempt"):
                t = self.tasks.get(c.get("task_id"))
                if t and t["state"] != "exited":
                    t.update(state="exited", finished_ms=now_ms, exit_code=-1,
                             signal=int(c.get("signal", 15)))
                    stats["tasks_stopped"] += 1
                    self.changed.set()

        async def main(self):
            await asyncio.sleep(self.start_delay)
            loop = self.loop
            while not stopping[0]:
                now = loop.time()
                if not self.reg.is_set():
                    if self.silence_at is not None and now >= self.silence_at:
                        self.dead = True  # lost power while registering again
                        return
                    if now < self.next_attempt:
                        await asyncio.sleep(self.next_attempt - now)
                        continue
                    status, j = await self.post("/api/v1/agent/register", {
                        "node": {"name": self.name, "address": "127.0.0.1", "gpu_type": "H100",
                                 "gpus": self.gpus, "cpus": 64, "memory_mib": 524288,
                                 "leaf": f"leaf-{self.i % 32}", "nvlink_domain": self.name,
                                 "simulated": True},
                        "tasks": list(self.tasks.values())}, 60)
                    if status == 200:
                        stats["registrations"] += 1
                        self.failures = 0
                        for tid in j.get("stop", []):
                            self.tasks.pop(tid, None)  # killed at once
                        self.reg.set()
                    else:
                        self.failures += 1
                        self.next_attempt = loop.time() + backoff(self.failures)
                    continue
                due = max(self.next_hb, self.next_attempt)
                if self.silence_at is not None and due >= self.silence_at:
                    await asyncio.sleep(max(0.0, self.silence_at - loop.time()))
                    await self.heartbeat()  # the last one, with the others it falls silent with
                    self.dead = True
                    return
                if now < due and not self.changed.is_set():
                    wake = due if self.silence_at is None else min(due, self.silence_at)
                    try:
                        await asyncio.wait_for(self.changed.wait(), wake - now)
                    except asyncio.TimeoutError:
                        pass
                    continue
                if now < self.next_attempt:  # a task changed, but we are backing off
                    await asyncio.sleep(self.next_attempt - now)
                    continue
                self.changed.clear()
                status, j = await self.heartbeat()
                self.next_hb = now + 1.0
                if status == 200:
                    stats["heartbeats"] += 1
                    self.failures = 0
                    for tid in j.get("ack", []):
                        if self.tasks.get(tid, {}).get("state") == "exited":
                            del self.tasks[tid]
                elif status == 404:
                    self.reg.clear()
                    self.next_attempt = loop.time()
                else:
                    self.failures += 1
                    self.next_attempt = loop.time() + backoff(self.failures)

        async def heartbeat(self):
            self.seq += 1
            sent, a = time.time(), time.monotonic()
            status, j = await self.post("/api/v1/agent/heartbeat", {
                "node": self.name, "seq": self.seq, "health": {"ok": True, "message": ""},
                "gpus": telemetry, "tasks": list(self.tasks.values())}, 60)
            if samples_out is not None:
                samples.append((sent, time.monotonic() - a, status or 0, self.name))
            return status, j

        async def poller(self):
            failures = 0
            while not stopping[0] and not self.dead:
                await self.reg.wait()
                status, j = await self.post("/api/v1/agent/poll", {"node": self.name, "wait_ms": 20000},
                                            60)
                if self.dead:
                    return
                if status == 200:
                    failures = 0
                    for c in j.get("commands", []):
                        if isinstance(c, dict):
                            self.command(c)
                elif status == 404:
                    self.reg.clear()
                else:
                    failures += 1
                    await asyncio.sleep(backoff(failures))

    async def run():
        loop = asyncio.get_running_loop()
        rng = random.Random(proc * 7919 + seed_ms)
        sims = [Sim(i, loop, rng) for i in range(agents)]
        tasks = [asyncio.ensure_future(s.main()) for s in sims] + \
                [asyncio.ensure_future(s.poller()) for s in sims]
        while not stop_evt.is_set():
            await asyncio.sleep(0.2)
            try:
                names, at = silence.get_nowait() if silence is not None else (None, None)
            except queue.Empty:
                names = None
            for s in sims if names else []:
                if s.name in names:
                    s.silence_at = at
            dead = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
            if dead:
                raise dead[0].exception()
        stopping[0] = True
        # Again until all have ended: Python 3.11's wait_for can swallow a cancel that
        # comes as its inner call ends.
        left = tasks
        while left:
            for t in left:
                t.cancel()
            await asyncio.wait(left, timeout=1)
            left = [t for t in left if not t.done()]
        return stats

    samples = []
    try:
        stats = asyncio.run(run())
        if samples_out is not None:
            samples_out.put(samples)
        out.put(stats)
    except Exception as e:
        if samples_out is not None:
            samples_out.put([])
        out.put(f"{type(e).__name__}: {e}")


def _list_jobs(conn, state):
    jobs, after = [], 0
    while True:
        status, data = call(conn, "GET", f"/api/v1/jobs?state={state}&limit=10000&after={after}")
        if status != 200:
            raise RuntimeError(f"GET /jobs?state={state}: HTTP {status}: {data[:200]}")
        page = json.loads(data)
        jobs += page["jobs"]
        if page["next_after"] is None:
            return jobs
        after = page["next_after"]


def _ready_nodes(conn, since_ms=0):
    """Nodes Ready with their agent connected (a new leader loads nodes from the store,
    so Ready alone may be stale) and, with since_ms, heard from since then."""
    status, data = call(conn, "GET", "/api/v1/nodes")
    if status != 200:
        return -1
    return sum(1 for x in json.loads(data)["nodes"]
               if x["state"] == "Ready" and x.get("connected", True)
               and x.get("last_heartbeat_ms", 0) >= since_ms)


def _wait(what, timeout, pred, every=0.25):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if pred():
                return
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def _mib(kib):
    return f"{int(kib) // 1024} MiB" if str(kib).isdigit() else "?"


def bench_failover(trainyard, work, agents, jobs, procs, seconds, after_s):
    help_text = subprocess.run([trainyard, "server", "--help"], capture_output=True,
                               text=True).stdout
    if "--store" not in help_text:
        print(f"failover: skipped: {trainyard} has no `server --store` (built before PostgreSQL "
              "support)", flush=True)
        return
    bindir = _pg_bindir()
    if not bindir:
        print("failover: skipped: no PostgreSQL server binaries (/usr/lib/postgresql/*/bin; "
              "Debian's postgresql package)", flush=True)
        return
    # The job mix: one 8-GPU job running on every node but one (that node stays free for
    # the probe), 2-node 8-GPU gangs pending that cannot fit beside them, some held, and
    # the rest of the store cancelled (finished: in the store, not in the scheduler).
    running = agents - 1
    pending = min(1000, max(1, jobs // 10))
    held = min(1000, max(1, jobs // 20))
    cancelled = jobs - running - pending - held
    if cancelled < 0:
        raise RuntimeError(f"--failover-jobs {jobs} is fewer than the {running + pending + held} "
                           "running, pending and held jobs the mix needs")
    d = f"{work}/failover"
    os.makedirs(d, exist_ok=True)
    pg = _Postgres(bindir)
    ctx = multiprocessing.get_context("fork")
    workers, agent_procs = [], []
    stop_evt = ctx.Event()
    try:
        store = pg.start()
        join = "bench-join-token"
        common = ["server", "--store", store, "--join-token", join] + no_rate_limit(trainyard)
        a, url_a = start(trainyard, common, f"{d}/a", f"{d}/a.log")
        token = _tokens[urllib.parse.urlsplit(url_a).netloc]
        log_b = f"{d}/b.log"
        b = subprocess.Popen([trainyard] + common + ["--port", "0", "--data-dir", f"{d}/b"],
                             stdout=open(log_b, "w"), stderr=subprocess.STDOUT)
        _children.append(b)
        url_b = None

        def b_standby():
            nonlocal url_b
            if b.poll() is not None:
                raise RuntimeError(f"server B exited: see {log_b}")
            with open(log_b) as f:
                for line in f:
                    if "standby at " in line:
                        url_b = line.split("standby at ", 1)[1].split(";")[0].strip()
                        return True
            return False

        _wait("server B a standby", 60, b_standby, 0.05)

        def leader_alive():
            # A leader that could not renew its lease in time gives it up (docs/ha.md): a
            # figure too, so say so with the servers' own words.
            if a.poll() is not None:
                with open(f"{d}/a.log") as f:
                    last_a = [x.strip() for x in f if x.strip()][-1:]
                with open(log_b) as f:
                    took = [x.strip() for x in f if "leading" in x]
                raise RuntimeError(
                    f"leader A exited (status {a.returncode}) {time.monotonic() - t0:.0f} s into "
                    f"the run, before the kill ({agents_state()}); its last line: {last_a}; "
                    f"B: {took}; load average {os.getloadavg()[0]:.1f}")
        _tokens[urllib.parse.urlsplit(url_b).netloc] = token  # one store, the same users
        status, data = call(connect(url_b), "GET", "/api/v1/jobs")
        if status != 503 or url_a not in data.decode():
            raise RuntimeError(f"standby B answered HTTP {status}: {data[:200]}")

        # --- the store: jobs through A's API ---
        spec = lambda name, **kw: json.dumps({"name": name, "command": ["/bin/sleep", "infinity"],
                                              **kw})
        phase = ["loading the store"]
        agents_state = lambda: phase[0]
        t0 = time.monotonic()
        load_deadline = t0 + 120 + jobs * 0.025
        load = []
        for what, n, body, verb in (
                ("cancelled", cancelled, spec("done", resources={"gpus": 1}), "cancel"),
                ("held", held, spec("held", resources={"gpus": 1}), "hold")):
            if n <= 0:
                continue
            chunks = [1000] * (n // 1000) + ([n % 1000] if n % 1000 else [])
            nproc = max(1, min(4, len(chunks)))
            out = ctx.Queue()
            ws = [ctx.Process(target=_load_worker,
                              args=(url_a, body, chunks[k::nproc], verb, 4, out))
                  for k in range(nproc)]
            workers += ws
            t1 = time.monotonic()
            for w in ws:
                w.start()
            res = _collect(out, ws, load_deadline, f"submitting and {verb}ing {n} jobs")
            done, bad = sum(r[0] for r in res), sum(r[1] for r in res)
            msgs = [m for r in res for m in r[2]]
            if done != n or bad:
                raise RuntimeError(f"{what}: {done} of {n} submitted, {bad} {verb}s failed: {msgs}")
            load.append((what, n, verb, nproc, time.monotonic() - t1))
        conn = connect(url_a)
        for k in range(0, running, 10_000):
            n = min(10_000, running - k)
            status, data = call(conn, "POST", f"/api/v1/jobs?array=1-{n}",
                                spec("train", resources={"gpus": 8}))
            if status != 201:
                raise RuntimeError(f"submitting the running jobs: HTTP {status}: {data[:200]}")
        t_loaded = time.monotonic() - t0
        # Counted before the agents come: listing the finished ones reads the store.
        stored = len(_list_jobs(connect(url_a), "Pending,Cancelled"))
        db_mb = pg.sql("SELECT pg_database_size('trainyard')")

        # --- the agents ---
        servers = [(u, urllib.parse.urlsplit(u).hostname, urllib.parse.urlsplit(u).port)
                   for u in (url_a, url_b)]
        agent_out = ctx.Queue()
        per = agents // procs
        counts = [per + (1 if k < agents % procs else 0) for k in range(procs)]
        seed = int(time.time() * 1000) % 100000
        phase[0] = f"{agents} agents joining"
        leader_alive()
        t_agents = time.monotonic()
        agent_procs = [ctx.Process(target=_sim_agents_worker,
                                   args=(servers, join, k, counts[k], seed, stop_evt, agent_out))
                       for k in range(procs)]
        for w in agent_procs:
            w.start()

        def alive_agents():
            leader_alive()
            for w in agent_procs:
                if not w.is_alive():
                    raise RuntimeError(f"a simulated agent process ended: {agent_out.get(timeout=5)}")

        def all_ready():
            alive_agents()
            return _ready_nodes(connect(url_a)) >= agents

        _wait(f"{agents} nodes Ready on A", 120 + agents * 0.2, all_ready, 0.5)
        t_ready = time.monotonic() - t_agents
        phase[0] = f"all {agents} nodes Ready after {t_ready:.0f} s, jobs starting"
        _wait(f"{running} 8-GPU jobs Running on A", 120 + agents * 0.2,
              lambda: alive_agents() or len(_list_jobs(connect(url_a), "Running")) >= running, 0.5)
        t_running = time.monotonic() - t_agents
        phase[0] = "steady state"
        leader_alive()
        status, data = call(connect(url_a), "POST", f"/api/v1/jobs?array=1-{pending}",
                            spec("wide", replicas=2, resources={"gpus": 8}))
        if status != 201:
            raise RuntimeError(f"submitting the pending jobs: HTTP {status}: {data[:200]}")
        total = cancelled + held + running + pending
        print(f"failover: store: {total:,} jobs put in PostgreSQL (fsync and synchronous_commit on) "
              f"through the leader's API in {t_loaded:.0f} s before the agents: "
              + "; ".join(f"{n:,} {what} ({n // 1000 or 1} array submissions then one {verb} each, "
                          f"{nproc} processes x 4 connections, {s:.0f} s, {n / s:,.0f} jobs/s)"
                          for what, n, verb, nproc, s in load)
              + f"; {running:,} 1-node 8-GPU jobs; then, once they ran, {pending:,} 2-node 8-GPU "
              f"gangs that cannot fit (8 GPUs free). Listed before the agents came: {stored:,} "
              f"jobs; database {int(db_mb) / 1e6 if db_mb.isdigit() else 0:.0f} MB", flush=True)
        print(f"failover: cluster: {agents} simulated agents x 8 GPUs ({procs} processes) all Ready "
              f"{t_ready:.1f} s after they started, the {running} 8-GPU jobs Running (agents report "
              f"their tasks) after {t_running:.1f} s", flush=True)

        # --- steady state ---
        time.sleep(5)  # the pending gangs' pass, and the heartbeats settle
        t1 = time.monotonic()
        cpu = (_proc_cpu_s(a.pid), _proc_cpu_s(b.pid), _tree_cpu_s(pg.pids()),
               _tree_cpu_s([w.pid for w in agent_procs]))
        time.sleep(seconds)
        cpu2 = (_proc_cpu_s(a.pid), _proc_cpu_s(b.pid), _tree_cpu_s(pg.pids()),
                _tree_cpu_s([w.pid for w in agent_procs]))
        el = time.monotonic() - t1
        leader_alive()
        pctc = [(y - x) / el * 100 for x, y in zip(cpu, cpu2)]
        ready = _ready_nodes(connect(url_a))
        print(f"failover: steady state over {el:.0f} s ({agents} agents heartbeating, {running} jobs "
              f"running, {pending + held} pending of which {held} held): leader CPU {pctc[0]:.0f}% of "
              f"one core, RSS {_mib(_proc_status(a.pid, 'VmRSS'))}, "
              f"{_proc_status(a.pid, 'Threads')} threads; standby CPU {pctc[1]:.1f}%, RSS "
              f"{_mib(_proc_status(b.pid, 'VmRSS'))}; PostgreSQL CPU {pctc[2]:.0f}%; the simulated "
              f"agents' CPU {pctc[3]:.0f}%; load average {os.getloadavg()[0]:.1f}; nodes Ready at "
              f"the end {ready}", flush=True)

        # --- kill -9 the leader ---
        marks = {}
        kill_ms = int(time.time() * 1000)
        t_kill = time.monotonic()
        a.kill()
        a.wait()
        _children.remove(a)
        deadline = t_kill + 240

        def healthz():
            while time.monotonic() < deadline and b.poll() is None:
                if "lease" not in marks:
                    with open(log_b) as fh:
                        if "trainyard server: leading" in fh.read():
                            marks["lease"] = time.monotonic() - t_kill
                try:
                    c = connect(url_b)
                    c.timeout = 2
                    status, data = call(c, "GET", "/api/v1/healthz")
                    if status == 200 and json.loads(data).get("role") != "standby":
                        marks["leading"] = time.monotonic() - t_kill
                        return
                except (OSError, http.client.HTTPException, ValueError):
                    pass
                time.sleep(0.05)

        def probe():
            body = spec("probe", priority="production", resources={"gpus": 1})
            pid, tries = None, 0
            while time.monotonic() < deadline and pid is None and b.poll() is None:
                tries += 1
                try:
                    status, data = call(connect(url_b), "POST", "/api/v1/jobs", body)
                    if status == 201:
                        pid = json.loads(data)["id"]
                        marks["probe_acked"] = time.monotonic() - t_kill
                        marks["probe_tries"] = tries
                        break
                    if status != 503:
                        marks["probe_error"] = f"HTTP {status}: {data[:200]}"
                except (OSError, http.client.HTTPException, ValueError):
                    pass
                time.sleep(0.05)
            marks["probe_id"] = pid
            c = connect(url_b)
            while pid is not None and time.monotonic() < deadline and b.poll() is None:
                try:
                    status, data = call(c, "GET", f"/api/v1/jobs/{pid}")
                    j = json.loads(data)
                    if "bound" not in marks and (j["state"] != "Pending" or j.get("attempts")):
                        marks["bound"] = time.monotonic() - t_kill
                        marks["bound_state"] = j["state"]
                    if j["state"] not in ("Pending", "Starting"):
                        marks["probe_running"] = time.monotonic() - t_kill
                        marks["probe_state"] = j["state"]
                        return
                except (OSError, http.client.HTTPException, ValueError, KeyError):
                    c = connect(url_b)
                time.sleep(0.05)

        def nodes():
            while time.monotonic() < deadline and b.poll() is None:
                try:
                    n = _ready_nodes(connect(url_b), kill_ms)
                    marks["nodes_max"] = max(marks.get("nodes_max", 0), n)
                    if n >= agents:
                        marks["nodes"] = time.monotonic() - t_kill
                        return
                except (OSError, http.client.HTTPException, ValueError, KeyError):
                    pass
                time.sleep(0.25)

        ts = [threading.Thread(target=f, daemon=True) for f in (healthz, probe, nodes)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(max(1, deadline - time.monotonic()))
        if b.poll() is not None:
            with open(log_b) as f:
                tail = [x.strip() for x in f if x.strip()][-3:]
            raise RuntimeError(f"server B exited (status {b.returncode}) after the kill, "
                               f"{time.monotonic() - t_kill:.1f} s after it, with no leader left "
                               f"({marks}); its last lines: {tail}")
        fo = lambda k: f"{marks[k]:.2f} s" if k in marks else "not within 240 s"
        print(f"failover: kill -9 of the leader (--leader-timeout 10s, the default) -> the standby "
              f"took the lease (its log says `leading`) {fo('lease')}, answers /healthz as leader "
              f"(state loaded, API up) {fo('leading')}", flush=True)
        print(f"failover: -> a 1-GPU probe job (production priority; the free node) submitted to B, "
              f"retried every 50 ms while it refused: acknowledged {fo('probe_acked')} "
              f"(try {marks.get('probe_tries', '?')}), left Pending ({marks.get('bound_state', '?')}) "
              f"{fo('bound')}, {marks.get('probe_state', 'Running')} (its agent reported it) "
              f"{fo('probe_running')}", flush=True)
        print(f"failover: -> all {agents} nodes Ready again on B (registered again, heartbeating): "
              f"{fo('nodes')}"
              + ("" if "nodes" in marks else f" (at most {marks.get('nodes_max', 0)})"), flush=True)

        # --- B after it took over ---
        t1 = time.monotonic()
        c0 = _proc_cpu_s(b.pid)
        time.sleep(after_s)
        el = time.monotonic() - t1
        cb = (_proc_cpu_s(b.pid) - c0) / el * 100
        trains = [j for j in _list_jobs(connect(url_b), "Running") if j["name"] == "train"]
        first = sum(1 for j in trains if j["attempts"] == 1)
        waiting = len(_list_jobs(connect(url_b), "Pending"))
        print(f"failover: B leading, over {el:.0f} s after: CPU {cb:.0f}% of one core, RSS "
              f"{_mib(_proc_status(b.pid, 'VmRSS'))} (peak {_mib(_proc_status(b.pid, 'VmHWM'))}), "
              f"{_proc_status(b.pid, 'Threads')} threads; nodes Ready {_ready_nodes(connect(url_b))}; "
              f"{len(trains)} of the {running} 8-GPU jobs Running, {first} of them on their first "
              f"attempt (adopted, not restarted); {waiting} jobs Pending; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        stop_evt.set()
        res = _collect(agent_out, agent_procs, time.monotonic() + 30, "stopping the simulated agents")
        bad = [r for r in res if isinstance(r, str)]
        if bad:
            raise RuntimeError(f"simulated agents failed: {bad}")
        st = {k: sum(r[k] for r in res) for k in res[0]}
        print("failover: the simulated agents, in all: "
              + ", ".join(f"{k} {v}" for k, v in st.items()), flush=True)
    finally:
        stop_evt.set()
        for w in agent_procs + workers:
            w.join(5)
            if w.is_alive():
                w.terminate()
                w.join(5)
        for p in list(_children):
            stop(p)
        pg.stop()


# --- node loss ---------------------------------------------------------------------------

# The node-loss cluster's jobs: (name, nodes a job, share of the cluster's nodes), 8 GPUs
# a node each; the other fifth of the nodes idle, where requeued jobs start again.
LOSS_MIX = (("gang4", 4, 0.4), ("gang2", 2, 0.3), ("single", 1, 0.1))
HB_ROUTE = "/api/v1/agent/heartbeat"


def _duration_ms(text):
    """Milliseconds of a duration as the server writes it (core/units.cc: "5s12ms")."""
    units = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
    parts = re.findall(r"(\d+)(ms|d|h|m|s)", text)
    return sum(int(n) * units[u] for n, u in parts) if parts else None


def _pick_lost(running, ready, lost):
    """The `lost` nodes to silence, in turns: one node of a 4-node gang, one of a 2-node
    gang (each gang's other ranks on nodes that keep heartbeating), two each holding a
    1-node job; idle nodes once those run out. Returns (names, {job id: its kind},
    {kind: nodes})."""
    queues = {name: [j for j in sorted(running, key=lambda j: j["id"]) if j["name"] == name]
              for name, _, _ in LOSS_MIX}
    busy = {n for j in running for n in j["nodes"]}
    idle = sorted(n for n in ready if n not in busy)
    names, jobs, kinds = [], {}, {}
    turn = ("gang4", "gang2", "single", "single")
    while len(names) < lost and any(queues[k] for k in turn):
        for kind in turn:
            if len(names) < lost and queues[kind]:
                j = queues[kind].pop(0)
                names.append(j["nodes"][-1])
                jobs[j["id"]] = kind
                kinds[kind] = kinds.get(kind, 0) + 1
    while len(names) < lost and idle:
        names.append(idle.pop(0))
        kinds["idle"] = kinds.get("idle", 0) + 1
    return names, jobs, kinds


def _window(samples, lo, hi):
    """Round trips (ms) of the heartbeats sent in [lo, hi), and how many got no 200."""
    rtt = [s[1] * 1e3 for s in samples if lo <= s[0] < hi]
    bad = sum(1 for s in samples if lo <= s[0] < hi and s[2] != 200)
    if not rtt:
        return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan"), "bad": bad}
    return {"n": len(rtt), "p50": pct(rtt, 50), "p99": pct(rtt, 99), "max": max(rtt), "bad": bad}


def _loss_run(trainyard, work, run, agents, lost, procs, timeout_s, grace_s, steady_s):
    """One server, `agents` simulated agents, jobs on them, `lost` of them silenced at
    once; returns the figures (see bench_node_loss)."""
    d = f"{work}/node-loss-{run}"
    join = "bench-join-token"
    p, url = start(trainyard, ["server", "--join-token", join,
                               "--node-timeout", f"{round(timeout_s * 1000)}ms",
                               "--node-lost-grace", f"{round(grace_s * 1000)}ms"]
                   + no_rate_limit(trainyard), d, f"{d}.log")
    u = urllib.parse.urlsplit(url)
    ctx = multiprocessing.get_context("fork")
    stop_evt = ctx.Event()
    out, samples_out = ctx.Queue(), ctx.Queue()
    silence = [ctx.Queue() for _ in range(procs)]
    counts = [agents // procs + (1 if k < agents % procs else 0) for k in range(procs)]
    workers = [ctx.Process(target=_sim_agents_worker,
                           args=([(url, u.hostname, u.port)], join, k, counts[k], 0, stop_evt, out,
                                 samples_out, silence[k]))
               for k in range(procs)]
    r = {}
    try:
        for w in workers:
            w.start()

        def alive():
            if p.poll() is not None:
                raise RuntimeError(f"the server exited (status {p.returncode}): see {d}.log")
            for w in workers:
                if not w.is_alive():
                    raise RuntimeError(f"a simulated agent process ended: {out.get(timeout=5)}")

        t0 = time.monotonic()
        _wait(f"{agents} nodes Ready", 120 + agents * 0.2,
              lambda: alive() or _ready_nodes(connect(url)) >= agents, 0.5)
        r["ready_s"] = time.monotonic() - t0
        conn = connect(url)
        mix = []
        for name, nodes, share in LOSS_MIX:
            n = int(agents * share) // nodes
            if n:
                status, data = call(conn, "POST", f"/api/v1/jobs?array=1-{n}", json.dumps(
                    {"name": name, "replicas": nodes, "resources": {"gpus": 8},
                     "command": ["/bin/sleep", "infinity"]}))
                if status != 201:
                    raise RuntimeError(f"submitting {n} {name} jobs: HTTP {status}: {data[:200]}")
                mix.append((name, nodes, n))
        total = sum(n for _, _, n in mix)
        t1 = time.monotonic()
        _wait(f"{total} jobs Running", 120 + agents * 0.2,
              lambda: alive() or len(_list_jobs(connect(url), "Running")) >= total, 0.5)
        r["running_s"] = time.monotonic() - t1
        running = _list_jobs(conn, "Running")
        nodes = json.loads(call(conn, "GET", "/api/v1/nodes")[1])["nodes"]
        names, affected, kinds = _pick_lost(running, [n["name"] for n in nodes
                                                      if n["state"] == "Ready"], lost)
        if len(names) < lost:
            raise RuntimeError(f"only {len(names)} Ready nodes to lose of {lost}")
        lost_set = set(names)
        attempts = {j["id"]: j["attempts"] for j in running}
        r.update(mix=mix, kinds=kinds, affected=len(affected))
        time.sleep(3)  # the starts' heartbeats settle

        # --- steady window, then `lost` agents fall silent together ---
        off = time.time() - time.monotonic()
        silence_at = time.monotonic() + steady_s + 0.5
        for k in range(procs):
            silence[k].put(([n for n in names if n.startswith(f"sim-{k}-")], silence_at))
        time.sleep(0.5)
        h0, cpu0, c0 = _route_buckets(url, HB_ROUTE), _proc_cpu_s(p.pid), time.monotonic()
        r["load_steady"] = os.getloadavg()[0]
        time.sleep(max(0.0, silence_at - 0.2 - time.monotonic()))
        h1, cpu1, c1 = _route_buckets(url, HB_ROUTE), _proc_cpu_s(p.pid), time.monotonic()
        t_s = silence_at + off  # wall clock, as the samples and the server's times

        # --- NotReady: one lost node polled from just before the timeout until the
        # server shows it NotReady (a read waits for the cluster's lock), then all ---
        time.sleep(max(0.0, silence_at + timeout_s - 0.5 - time.monotonic()))
        h2, cpu2, c2 = _route_buckets(url, HB_ROUTE), _proc_cpu_s(p.pid), time.monotonic()
        deadline = time.monotonic() + timeout_s + grace_s + 60
        false_notready = set()
        while True:
            alive()
            status, data = call(conn, "GET", f"/api/v1/nodes/{names[0]}")
            if status == 200 and json.loads(data)["state"] == "NotReady":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {names[0]} not NotReady within "
                                   f"{timeout_s + grace_s + 60:.0f} s of --node-timeout")
            time.sleep(0.1)
        r["notready_probe_s"] = time.time() - t_s - timeout_s
        while True:
            alive()
            listed = json.loads(call(conn, "GET", "/api/v1/nodes")[1])["nodes"]
            seen = time.time()
            false_notready |= {n["name"] for n in listed
                               if n["state"] != "Ready" and n["name"] not in lost_set}
            if sum(1 for n in listed if n["name"] in lost_set and n["state"] == "NotReady") >= lost:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not all {lost} silent nodes NotReady within "
                                   f"{timeout_s + grace_s + 60:.0f} s of --node-timeout")
            time.sleep(0.25)
        r["notready_all_s"] = seen - t_s - timeout_s
        declared = []  # the server's instants of NotReady: its last heartbeat + the silence
        for n in listed:
            ms = _duration_ms(n.get("state_reason", "").partition("no heartbeat for ")[2])
            if n["name"] in lost_set and ms is not None:
                declared.append((n["last_heartbeat_ms"] + ms) / 1e3)

        # --- Lost: the unfinished jobs polled from just before the grace ends until
        # every hit job left its attempt (Lost) and then was requeued ---
        time.sleep(max(0.0, silence_at + timeout_s + grace_s - 0.5 - time.monotonic()))
        lost_seen = requeued_seen = None
        while requeued_seen is None:
            alive()
            jobs = {j["id"]: j for j in _list_jobs(conn, UNFINISHED)}
            now = time.time()
            left = [i for i in affected if i in jobs and jobs[i]["state"] != "Pending"
                    and jobs[i]["attempts"] <= attempts[i]]
            if lost_seen is None and not any(jobs[i]["state"] == "Running" for i in left):
                lost_seen = now
            if not left:
                requeued_seen = now
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(left)} of the {len(affected)} jobs on the silent nodes "
                                   f"not requeued within {timeout_s + grace_s + 60:.0f} s "
                                   f"(e.g. job {left[0]}: {jobs[left[0]]['state']})")
            time.sleep(0.1)
        r["lost_all_s"] = lost_seen - t_s - timeout_s - grace_s
        r["requeued_all_s"] = requeued_seen - t_s - timeout_s - grace_s
        time.sleep(max(0.0, requeued_seen + 0.5 - time.time()))
        h3, cpu3, c3 = _route_buckets(url, HB_ROUTE), _proc_cpu_s(p.pid), time.monotonic()
        r["load_loss"] = os.getloadavg()[0]
        listed = json.loads(call(conn, "GET", "/api/v1/nodes")[1])["nodes"]
        false_notready |= {n["name"] for n in listed
                           if n["state"] != "Ready" and n["name"] not in lost_set}
        r["false_notready"] = len(false_notready)

        # The server's own instants, from the hit jobs' events.
        ev = {"NodeUnreachable": [], "Lost": [], "Requeued": []}
        for i in affected:
            status, data = call(conn, "GET", f"/api/v1/jobs/{i}/events")
            for e in json.loads(data)["events"] if status == 200 else []:
                if e["kind"] in ev and e["time_ms"] / 1e3 >= t_s:
                    ev[e["kind"]].append(e["time_ms"] / 1e3)
        r["events"] = {k: len(v) for k, v in ev.items()}
        due_nr, due_lost = t_s + timeout_s, t_s + timeout_s + grace_s
        span = lambda xs, due: (min(xs) - due, max(xs) - due) if xs else (float("nan"),) * 2
        r["declared_s"] = span(declared, due_nr)
        r["lost_ev_s"] = span(ev["Lost"], due_lost)
        r["requeued_ev_s"] = span(ev["Requeued"], due_lost)
        r["cpu_steady"] = (cpu1 - cpu0) / (c1 - c0) * 100
        r["cpu_loss"] = (cpu3 - cpu2) / (c3 - c2) * 100
        r["srv_steady"] = (_bucket_quantile(h0, h1, 0.5), _bucket_quantile(h0, h1, 0.99))
        r["srv_loss"] = (_bucket_quantile(h2, h3, 0.5), _bucket_quantile(h2, h3, 0.99))

        stop_evt.set()
        samples = []
        for _ in workers:
            samples += samples_out.get(timeout=60)
        res = _collect(out, workers, time.monotonic() + 60, "stopping the simulated agents")
        bad = [x for x in res if isinstance(x, str)]
        if bad:
            raise RuntimeError(f"simulated agents failed: {bad}")
        r["agents"] = {k: sum(x[k] for x in res) for k in res[0]}
        # A surviving node the server gave up on between two of our reads (its heartbeats
        # held up past --node-timeout) shows as an agent told `unknown node` that registered
        # again.
        r["reregistered"] = r["agents"]["registrations"] - agents
        alive_samples = [s for s in samples if s[3] not in lost_set]
        nr_lo = min(declared) if declared else due_nr
        lost_lo = min(ev["Lost"]) if ev["Lost"] else due_lost
        r["windows"] = {
            "steady": (t_s - steady_s, t_s - 0.2),
            "notready": (nr_lo - 0.5, seen + 0.5),
            "lost": (lost_lo - 0.5, requeued_seen + 0.5)}
        r["rtt"] = {k: _window(alive_samples, lo, hi) for k, (lo, hi) in r["windows"].items()}
        return r
    finally:
        stop_evt.set()
        for w in workers:
            w.join(5)
            if w.is_alive():
                w.terminate()
                w.join(5)
        stop(p)


def _print_loss_run(run, agents, lost, timeout_s, grace_s, r):
    f = lambda x: f"{x:.2f} s"
    mix = ", ".join(f"{n} {k}-node" for _, k, n in r["mix"])
    kinds = ", ".join(f"{v} {k}" for k, v in r["kinds"].items())
    w = r["rtt"]
    rtt = lambda k: (f"{w[k]['n']} heartbeats in {r['windows'][k][1] - r['windows'][k][0]:.1f} s, "
                     f"p50 {w[k]['p50']:.1f} ms p99 {w[k]['p99']:.1f} ms max {w[k]['max']:.1f} ms"
                     + (f", {w[k]['bad']} not answered 200" if w[k]["bad"] else ""))
    srv = lambda k: (f"p50 <= {r[k][0][0] * 1e3:g} ms p99 <= {r[k][1][0] * 1e3:g} ms "
                     f"({r[k][0][1]} heartbeats)")
    print(f"node-loss run {run}: {agents} simulated agents x 8 GPUs Ready after {r['ready_s']:.1f} s; "
          f"jobs 8 GPUs a node ({mix}: {sum(n * k for _, k, n in r['mix'])} nodes busy) Running "
          f"(the agents report their tasks) after {r['running_s']:.1f} s; {lost} nodes silenced "
          f"at once (their last heartbeats sent together), holding {kinds} "
          f"({r['affected']} jobs hit); --node-timeout {timeout_s:g}s --node-lost-grace {grace_s:g}s",
          flush=True)
    print(f"node-loss run {run}: NotReady: the server declared them {f(r['declared_s'][0])}"
          f"-{f(r['declared_s'][1])} after the timeout (its Tick's clock); one of them shown "
          f"NotReady {f(r['notready_probe_s'])} after it, all {lost} {f(r['notready_all_s'])} "
          f"(GET /nodes polled); Lost events {f(r['lost_ev_s'][0])}-{f(r['lost_ev_s'][1])} after "
          f"timeout + grace, every hit job off its attempt (polled) {f(r['lost_all_s'])}; "
          f"Requeued events {f(r['requeued_ev_s'][0])}-{f(r['requeued_ev_s'][1])}, all requeued "
          f"(polled) {f(r['requeued_all_s'])}; events {r['events']}; surviving nodes seen "
          f"NotReady: {r['false_notready']}, surviving agents that had to register again "
          f"(given up by the server meanwhile): {r['reregistered']}", flush=True)
    print(f"node-loss run {run}: heartbeat round trip of the {agents - lost} surviving agents "
          f"(client side): steady (before the silence): {rtt('steady')}; while NotReady was "
          f"declared: {rtt('notready')}; while Lost and requeued: {rtt('lost')}", flush=True)
    print(f"node-loss run {run}: heartbeats handled by the server (/metrics histogram): steady "
          f"{srv('srv_steady')}, from 0.5 s before the timeout until all requeued "
          f"{srv('srv_loss')}; server CPU {r['cpu_steady']:.0f}% / {r['cpu_loss']:.0f}% of one "
          f"core; load average {r['load_steady']:.1f} / {r['load_loss']:.1f}; agents: "
          + ", ".join(f"{k} {v}" for k, v in r["agents"].items() if v), flush=True)


def bench_node_loss(trainyard, work, agents, lost, procs, timeout_s, grace_s, steady_s, runs):
    results = []
    for run in range(1, runs + 1):
        r = _loss_run(trainyard, work, run, agents, lost, procs, timeout_s, grace_s, steady_s)
        _print_loss_run(run, agents, lost, timeout_s, grace_s, r)
        results.append(r)
    med = lambda get: statistics.median(get(r) for r in results)
    print(f"node-loss: median of {runs}: heartbeat round trip p99 steady "
          f"{med(lambda r: r['rtt']['steady']['p99']):.1f} ms, while NotReady "
          f"{med(lambda r: r['rtt']['notready']['p99']):.1f} ms (max "
          f"{med(lambda r: r['rtt']['notready']['max']):.1f}), while Lost "
          f"{med(lambda r: r['rtt']['lost']['p99']):.1f} ms (max "
          f"{med(lambda r: r['rtt']['lost']['max']):.1f}); handled p99 <= "
          f"{med(lambda r: r['srv_steady'][1][0]) * 1e3:g} ms steady, <= "
          f"{med(lambda r: r['srv_loss'][1][0]) * 1e3:g} ms in the loss; all {lost} NotReady "
          f"{med(lambda r: r['notready_all_s']):.2f} s after the timeout, all hit jobs requeued "
          f"{med(lambda r: r['requeued_all_s']):.2f} s after timeout + grace; surviving agents "
          f"registered again {med(lambda r: r['reregistered']):g}; load average "
          f"{med(lambda r: r['load_steady']):.1f}", flush=True)


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
    ap.add_argument("--failover-agents", type=int, default=1000)
    ap.add_argument("--failover-jobs", type=int, default=100_000)
    ap.add_argument("--failover-procs", type=int, default=2)
    ap.add_argument("--failover-seconds", type=float, default=20)
    ap.add_argument("--loss-agents", type=int, default=1000)
    ap.add_argument("--loss-nodes", type=int, default=100)
    ap.add_argument("--loss-procs", type=int, default=2)
    ap.add_argument("--loss-timeout", type=float, default=5)
    ap.add_argument("--loss-grace", type=float, default=5)
    ap.add_argument("--loss-steady", type=float, default=10)
    ap.add_argument("--loss-runs", type=int, default=3)
    ap.add_argument("--container", action="store_true")
    args, _ = ap.parse_known_args()
    if "node-loss" in args.only.split(","):
        if args.loss_agents < 2:
            ap.error(f"--loss-agents: expected at least 2 simulated agents, got {args.loss_agents}")
        if not 1 <= args.loss_nodes < args.loss_agents:
            ap.error(f"--loss-nodes: expected 1 to {args.loss_agents - 1} (fewer than "
                     f"--loss-agents {args.loss_agents}: some must survive), got {args.loss_nodes}")
        if not 1 <= args.loss_procs <= args.loss_agents:
            ap.error(f"--loss-procs: expected 1 to --loss-agents ({args.loss_agents}), "
                     f"got {args.loss_procs}")
        if not 1 <= args.loss_timeout <= 600:
            ap.error(f"--loss-timeout: expected 1 to 600 seconds (the server's --node-timeout is "
                     f"at least 1s), got {args.loss_timeout:g}")
        if not 1 <= args.loss_grace <= 600:
            ap.error(f"--loss-grace: expected 1 to 600 seconds (at least 1 keeps NotReady and Lost "
                     f"apart), got {args.loss_grace:g}")
        if not 1 <= args.loss_steady <= 3600:
            ap.error(f"--loss-steady: expected 1 to 3600 seconds, got {args.loss_steady:g}")
        if not 1 <= args.loss_runs <= 100:
            ap.error(f"--loss-runs: expected 1 to 100, got {args.loss_runs}")
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
            bench_submit_native(trainyard, work, args.clients, args.jobs)
        if "list" in only:
            bench_list(trainyard, work, args.list_jobs)
        image = bench_image(trainyard, work) if args.container else ""
        if "latency" in only:
            p50, p99 = bench_latency(trainyard, work, args.latency_jobs)
            if image:
                c50, c99 = bench_latency(trainyard, work, args.latency_jobs, image)
                print(f"latency: container start overhead (container minus process) "
                      f"p50 {c50 - p50:.0f} ms p99 {c99 - p99:.0f} ms", flush=True)
        if "slurm" in only:
            bench_slurm(trainyard, work, args.slurm_runs, args.slurm_jobs, image=image)
        if "slurm-array" in only:
            bench_slurm(trainyard, work, args.slurm_runs, args.slurm_jobs, array=True, image=image)
        if "ingest" in only:
            bench_ingest(trainyard, work, args.ingest_clients, args.ingest_points,
                         args.ingest_seconds)
        if "heartbeat" in only:
            try:
                bench_heartbeat(trainyard, work, args.hb_agents, args.hb_procs, args.hb_seconds)
            except RuntimeError as e:  # a figure too: at this many agents it does not hold up
                print(f"heartbeat: {args.hb_agents} simulated agents: failed: {e}", flush=True)
        if "failover" in only:
            try:
                bench_failover(trainyard, work, args.failover_agents, args.failover_jobs,
                               args.failover_procs, args.failover_seconds, 10)
            except RuntimeError as e:  # a figure too: say what did not hold up
                print(f"failover: {args.failover_agents} agents, {args.failover_jobs} jobs: "
                      f"failed: {e}", flush=True)
        if "node-loss" in only:
            try:
                bench_node_loss(trainyard, work, args.loss_agents, args.loss_nodes, args.loss_procs,
                                args.loss_timeout, args.loss_grace, args.loss_steady,
                                args.loss_runs)
            except RuntimeError as e:  # a figure too: say what did not hold up
                print(f"node-loss: {args.loss_agents} agents, {args.loss_nodes} lost: failed: {e}",
                      flush=True)
    finally:
        stop_all()
        if not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
