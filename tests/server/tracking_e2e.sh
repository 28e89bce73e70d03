#!/usr/bin/env bash
# Experiment tracking end to end (docs/runs.md, docs/metrics.md): the example trainer
# runs twice on a local cluster (server + 2 agents with simulated GPUs, loopback, port 0)
# with different learning rates, submitted from a throwaway git repository. Checked
# through the CLI and HTTP, the way a user would:
#   - runs show: the code version captured at submit (commit, then "-dirty"), data
#     version, params (spec and logged), metrics with the trainer's loss history;
#   - /metrics while the job runs: the job's loss and GPU telemetry under dcgm-exporter
#     names, in a valid exposition;
#   - a downsampled series read, runs compare (the lr differs), runs --filter;
#   - the trace JSON (queueing, attempt, checkpoint and per-rank step spans);
#   - runs export --tensorboard: TFRecord framing with valid masked CRC32C;
#   - the batch endpoint (text and JSON), and runs rerun pinned to the same code.
#
#   tracking_e2e.sh TRAINYARD_BINARY
set -euo pipefail
T=$(realpath "$1")
CASE=tracking
REPO=$(cd "$(dirname "$0")/../.." && pwd)
NODE_TIMEOUT=5s
source "$(dirname "$0")/lib.sh"

py() { "$PY" -c "$@"; }

start_server
start_repo_agent node-0
start_repo_agent node-1
wait_nodes 2
URL=$(cat "$D/server.url")
TOKEN=$(cat "$D/token")

# A git repository holding the job spec: its commit is the run's code version.
G=$WORK/repo
mkdir -p "$G"
git -C "$G" init -q
git -C "$G" -c user.email=t@example.com -c user.name=t commit -q --allow-empty -m init
"$T" validate -o json "$REPO/examples/trainer/job.yaml" | py '
import json, sys
spec = json.load(sys.stdin)[0]["spec"]
spec["resources"]["gpus"] = 1
spec["args"] = ["--steps", "150", "--step-time", "0.04", "--checkpoint-every", "50", "--seed", "1"]
print(json.dumps(spec))' >"$G/job.json"
git -C "$G" add job.json
git -C "$G" -c user.email=t@example.com -c user.name=t commit -q -m spec
COMMIT=$(git -C "$G" rev-parse HEAD)

submit() { "$T" submit "$1" -o json | py 'import json,sys; print(json.load(sys.stdin)["id"])'; }
a=$(submit "$G/job.json")
# The second run: another learning rate, from a tree with uncommitted changes.
py 'import json,sys; s=json.load(open(sys.argv[1])); s["args"] += ["--lr", "0.02"]; json.dump(s, open(sys.argv[1], "w"))' "$G/job.json"
b=$(submit "$G/job.json")
JOBS="$a $b"

# /metrics while the first run trains: its loss, and the GPUs' telemetry.
wait_until "$a" 'j["state"] == "Running"' 30 "Running"
for _ in $(seq 100); do
  curl -sf -H "Authorization: Bearer $TOKEN" "$URL/metrics" >"$WORK/metrics.txt" || true
  grep -q "^trainyard_job_loss{job_id=\"$a\"" "$WORK/metrics.txt" && break
  sleep 0.2
done
grep -q "^trainyard_job_loss{job_id=\"$a\"" "$WORK/metrics.txt" || fail "no trainyard_job_loss for job $a in /metrics"
grep -q '^trainyard_nodes{state="Ready"} 2$' "$WORK/metrics.txt" || fail "/metrics: not 2 Ready nodes"
grep -q '^DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="[^"]*",device="nvidia0",modelName="H100",Hostname="node-0"} ' \
  "$WORK/metrics.txt" || fail "/metrics: no GPU utilisation of node-0 GPU 0"
grep -q "^trainyard_job_tokens_per_second{job_id=\"$a\"" "$WORK/metrics.txt" || fail "/metrics: no tokens/s"
grep -q '^trainyard_scheduling_pass_duration_seconds_bucket{le="+Inf"} ' "$WORK/metrics.txt" ||
  fail "/metrics: no pass duration histogram"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$URL/metrics") == 401 ]] || fail "/metrics without a token"

wait_until "$a" 'j["state"] == "Succeeded"' 90 "Succeeded"
wait_until "$b" 'j["state"] == "Succeeded"' 90 "Succeeded"
sleep 1  # the last metrics lines

# runs show: code, data, params, metrics.
"$T" runs show "$a" -o json >"$WORK/a.json"
py '
import json, sys
r = json.load(open(sys.argv[1])); commit = sys.argv[2]
assert r["code"] == commit, r["code"]
assert r["code_dirty"] is False
assert r["data_version"] == "synthetic-teacher-v1", r["data_version"]
assert r["environment"].startswith("sha256:"), r["environment"]
assert r["params"]["lr"] == "0.05" and r["params"]["model"] == "mlp", r["params"]
assert r["params"]["warmup_steps"] == "10", r["params"]
loss = r["metrics"]["loss"]
assert loss["count"] >= 150 and loss["step"] == 150, loss
assert r["metrics"]["tokens_per_s"]["ranks"] == 2, r["metrics"]["tokens_per_s"]
assert r["mfu"] is not None and r["mfu"]["value"] > 0, r["mfu"]
assert r["attempts"] == 1 and len(r["nodes"]) >= 1
' "$WORK/a.json" "$COMMIT" || fail "runs show $a: $(cat "$WORK/a.json")"
[[ $("$T" runs show "$b" -o json | py 'import json,sys; print(json.load(sys.stdin)["code"])') == "$COMMIT-dirty" ]] ||
  fail "run $b: code is not $COMMIT-dirty"
grep -q "^  code:        $COMMIT" <<<"$("$T" runs show "$a")" || fail "runs show (text): no code line"

# A downsampled read: 10 buckets over the 150 steps, min <= last <= max.
"$T" runs metrics "$a" loss --buckets 10 -o json | py '
import json, sys
p = json.load(sys.stdin)["points"]
assert len(p["count"]) == 10, p
assert sum(p["count"]) >= 150, p["count"]
assert all(lo <= v <= hi for lo, v, hi in zip(p["min"], p["last"], p["max"])), p
assert p["first_step"][0] == 1 and p["last_step"][-1] == 150, p
' || fail "runs metrics $a loss"

# runs compare: the learning rate differs, the model does not.
"$T" runs compare "$a" "$b" -o json | py '
import json, sys
c = json.load(sys.stdin)
params = {p["key"]: p for p in c["params"]}
assert params["lr"]["differs"] and params["lr"]["values"] == ["0.05", "0.02"], params["lr"]
assert not params["model"]["differs"], params["model"]
assert any(m["key"] == "loss" for m in c["metrics"]), c["metrics"]
' || fail "runs compare"
grep -q '^\* params.lr ' <<<"$("$T" runs compare "$a" "$b")" || fail "runs compare (text): lr not marked"

# runs --filter, like MLflow's search.
ids=$("$T" runs --filter 'params.lr > 0.03 and metrics.loss < 100' -o json |
  py 'import json,sys; print(" ".join(str(r["id"]) for r in json.load(sys.stdin)["runs"]))')
[[ $ids == "$a" ]] || fail "runs --filter params.lr > 0.03: got [$ids], want [$a]"
out=$("$T" runs --filter 'params.lr >' 2>&1) && fail "a bad filter was accepted"
[[ $out == *"column"* ]] || fail "bad filter error does not name the column: $out"

# The trace: queueing, the attempt, checkpoints and each rank's steps.
"$T" trace "$a" >"$WORK/trace.json"
py '
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
names = {e["name"] for e in ev}
assert "queued" in names and "attempt 0" in names, sorted(names)[:20]
threads = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert {"lifecycle", "checkpoints", "rank 0", "rank 1"} <= threads, threads
steps = [e for e in ev if e["ph"] == "X" and e["name"].startswith("step ")]
assert len(steps) >= 250, len(steps)
assert any(e["name"].startswith("checkpoint step") for e in ev), "no checkpoint span"
assert all(e["dur"] >= 0 for e in ev if e["ph"] == "X")
' "$WORK/trace.json" || fail "trace $a"
"$T" trace "$a" --format otlp | py '
import json, sys
o = json.load(sys.stdin)
spans = o["resourceSpans"][0]["scopeSpans"][0]["spans"]
assert len(spans) > 10 and all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
' || fail "trace --format otlp"

# TensorBoard: one event file per run, TFRecord-framed with valid masked CRC32C.
"$T" runs export "$a" --tensorboard "$WORK/tb" >/dev/null || fail "runs export"
py '
import glob, struct, sys
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
files = glob.glob(sys.argv[1] + "/run-*/events.out.tfevents.*")
assert len(files) == 1, files
data = open(files[0], "rb").read()
pos = records = 0
while pos < len(data):
    header = data[pos:pos + 8]
    (n,) = struct.unpack("<Q", header)
    assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked(header), "length crc"
    body = data[pos + 12:pos + 12 + n]
    assert struct.unpack("<I", data[pos + 12 + n:pos + 16 + n])[0] == masked(body), "data crc"
    if records == 0:
        assert b"brain.Event:2" in body
    pos += 16 + n
    records += 1
assert records > 150 * 5, records
' "$WORK/tb" || fail "tensorboard export"

# The batch endpoint: text and JSON bodies; bad input names the line.
curl -sf -H "Authorization: Bearer $TOKEN" -H 'Content-Type: text/plain' \
  --data-binary $'eval/loss 150 1.25\neval/loss 300 0.75 1764410000000\n' \
  "$URL/api/v1/runs/$a/metrics" >/dev/null || fail "POST metrics (text)"
curl -sf -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"series": [{"key": "eval/acc", "steps": [150], "values": [0.9]}], "params": {"note": "e2e"}}' \
  "$URL/api/v1/runs/$a/metrics" >/dev/null || fail "POST metrics (json)"
err=$(curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: text/plain' \
  --data-binary $'ok 1 1\nbad line\n' "$URL/api/v1/runs/$a/metrics")
[[ $err == *"metrics line 2"* ]] || fail "bad batch: $err"
"$T" runs show "$a" -o json | py '
import json, sys
r = json.load(sys.stdin)
assert r["metrics"]["eval/loss"]["last"] == 0.75 and r["metrics"]["eval/loss"]["count"] == 2, r["metrics"]["eval/loss"]
assert r["metrics"]["eval/acc"]["last"] == 0.9 and r["params"]["note"] == "e2e"
' || fail "batch points not in runs show"

# rerun: a new job at the same code.
new=$("$T" runs rerun "$a" -o json | py 'import json,sys; print(json.load(sys.stdin)["id"])')
[[ $(job_field "$new" 'j["spec"]["experiment"]["code"]') == "$COMMIT" ]] || fail "rerun not pinned to $COMMIT"
[[ $(job_field "$new" 'j["spec"]["labels"]["trainyard.dev/rerun-of"]') == "$a" ]] || fail "rerun label"
"$T" cancel "$new" >/dev/null
echo "tracking: runs $a and $b, rerun $new: ok"
