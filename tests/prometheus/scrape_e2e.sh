#!/usr/bin/env bash
# A real Prometheus scrapes a real Trainyard server's /metrics: `trainyard server` and an
# agent with simulated GPUs on loopback (port 0, tests/server/lib.sh), and `prometheus`
# on 127.0.0.1:0 scraping /metrics every second with the admin token as a Bearer token,
# the way deploy/prometheus/prometheus.yml does. Checks that the target is up, that
# trainyard_nodes and DCGM_FI_DEV_GPU_UTIL (with dcgm-exporter's labels) come back from
# Prometheus's query API, and that /metrics refuses a request without a token.
#
#   scrape_e2e.sh TRAINYARD_BINARY
# Exits 77 (skip) when the prometheus binary is not installed (Debian package
# `prometheus`; scripts/setup installs it). KEEP=1 keeps the work directory.
set -euo pipefail
T=$1
CASE=prometheus-scrape
if ! command -v prometheus >/dev/null 2>&1; then
  echo "SKIP: prometheus not found; install Debian's prometheus package (scripts/setup does)"
  exit 77
fi
source "$(dirname "$0")/../server/lib.sh"

fail_extra() {
  echo "--- prometheus log" >&2
  tail -20 "$WORK/prometheus.log" >&2 || true
  if [[ -n ${PROM:-} ]]; then
    echo "--- targets" >&2
    curl -s "$PROM/api/v1/targets" >&2 || true
    echo >&2
  fi
}

start_agent() {  # NAME GPUS
  "$T" agent --unmapped-run-as agent --server "$(cat "$D/server.url")" --join-token "$(cat "$D/join-token")" \
    --name "$1" --data-dir "$WORK/agents/$1" --simulated-gpus "$2" --gpu-type H100 \
    >>"$WORK/agent-$1.log" 2>&1 &
  PIDS+=("$!")
}

listen_port() {  # PID: the TCP port the process listens on, from ss (or /proc without it)
  if command -v ss >/dev/null 2>&1; then
    ss -Hltnp 2>/dev/null | awk -v pid="pid=$1," '
      index($0, pid) { n = split($4, a, ":"); print a[n]; exit }'
  else
    "$PY" - "$1" <<'EOF'
import os, sys
pid = sys.argv[1]
inodes = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if link.startswith("socket:["):
        inodes.add(link[8:-1])
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).readlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN
            print(int(f[1].rsplit(":", 1)[1], 16))
            sys.exit(0)
EOF
  fi
}

query() {  # PROMQL: Prometheus's JSON answer to an instant query
  curl -s -G --data-urlencode "query=$1" "$PROM/api/v1/query"
}

result_count() {  # reads a query answer on stdin: the number of series in it
  "$PY" -c 'import json,sys; r=json.load(sys.stdin); print(len(r["data"]["result"]) if r.get("status")=="success" else -1)'
}

wait_series() {  # PROMQL SECONDS: until the query returns at least one series
  local n=0 deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    n=$(query "$1" | result_count 2>/dev/null || echo -1)
    [[ $n -gt 0 ]] && return 0
    sleep 0.2
  done
  fail "query $1 returned no series after $2 s: $(query "$1")"
}

start_server
start_agent node-0 2
wait_nodes 1
URL=$(cat "$D/server.url")
[[ -s $D/token ]] || fail "no admin token in $D/token"

# /metrics wants a token; with the admin token it is a valid exposition.
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/metrics")
[[ $code == 401 ]] || fail "/metrics without a token: HTTP $code, expected 401"
code=$(curl -s -o "$WORK/metrics.txt" -w '%{http_code}' \
  -H "Authorization: Bearer $(cat "$D/token")" "$URL/metrics")
[[ $code == 200 ]] || fail "/metrics with the admin token: HTTP $code: $(head -c 300 "$WORK/metrics.txt")"
if command -v promtool >/dev/null 2>&1; then
  # promtool's lint is advice (dcgm-exporter's label names are camelCase); print it only.
  promtool check metrics <"$WORK/metrics.txt" >"$WORK/lint.txt" 2>&1 || true
  if [[ -s $WORK/lint.txt ]]; then sed 's/^/promtool check metrics: /' "$WORK/lint.txt"; fi
fi

cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: trainyard
    scheme: ${URL%%://*}
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: $D/token
    static_configs:
      - targets: ["${URL#*://}"]
EOF
if command -v promtool >/dev/null 2>&1; then
  promtool check config "$WORK/prometheus.yml" >/dev/null || fail "promtool check config"
fi
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address=127.0.0.1:0 >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
PIDS+=("$PROM_PID")

PROM=
deadline=$((SECONDS + 20))
while ((SECONDS < deadline)); do
  kill -0 "$PROM_PID" 2>/dev/null || fail "prometheus exited"
  port=$(listen_port "$PROM_PID" || true)
  if [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then
    PROM=http://127.0.0.1:$port
    break
  fi
  sleep 0.2
done
[[ -n $PROM ]] || fail "prometheus did not become ready"

# The target is up once a scrape succeeded.
health=
deadline=$((SECONDS + 15))
while ((SECONDS < deadline)); do
  health=$(curl -s "$PROM/api/v1/targets" | "$PY" -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
print(t[0]["health"] + " " + t[0]["lastError"] if t else "none")' 2>/dev/null || true)
  [[ $health == "up "* ]] && break
  sleep 0.2
done
[[ $health == "up "* ]] || fail "scrape target not up: $health"

wait_series 'up{job="trainyard"} == 1' 10
wait_series 'trainyard_nodes{state="Ready"} == 1' 10
# GPU telemetry arrives with the agent's heartbeats.
wait_series 'DCGM_FI_DEV_GPU_UTIL' 20
query 'DCGM_FI_DEV_GPU_UTIL' | "$PY" -c '
import json, sys
result = json.load(sys.stdin)["data"]["result"]
assert len(result) == 2, f"expected 2 GPUs, got {len(result)}: {result}"
for r in result:
    m = r["metric"]
    missing = {"gpu", "UUID", "device", "modelName", "Hostname"} - set(m)
    assert not missing, f"DCGM_FI_DEV_GPU_UTIL lacks labels {missing}: {m}"
    assert m["Hostname"] == "node-0" and m["device"] == "nvidia" + m["gpu"], m
' || fail "DCGM_FI_DEV_GPU_UTIL series: $(query DCGM_FI_DEV_GPU_UTIL)"
# Our own per-GPU series: the same GPUs, labels in snake case (docs/metrics.md).
query 'trainyard_gpu_xid_errors_total' | "$PY" -c '
import json, sys
result = json.load(sys.stdin)["data"]["result"]
assert len(result) == 2, f"expected 2 GPUs, got {len(result)}: {result}"
for r in result:
    m = r["metric"]
    assert set(m) == {"__name__", "instance", "job", "gpu", "uuid", "device", "gpu_type", "node"}, m
    assert m["node"] == "node-0" and m["gpu_type"] == "H100" and m["device"] == "nvidia" + m["gpu"], m
' || fail "trainyard_gpu_xid_errors_total series: $(query trainyard_gpu_xid_errors_total)"
# Without honor_labels, a `job` or `instance` label on the server's series would be renamed
# exported_job/exported_instance: the server must not expose one (the per-job series say job_id).
clash='{job="trainyard",exported_job=~".+"} or {job="trainyard",exported_instance=~".+"}'
n=$(query "$clash" | result_count)
[[ $n == 0 ]] || fail "series with a label that clashes with Prometheus's target labels: $(query "$clash")"
echo "PASS: prometheus scraped $URL/metrics"
