#!/usr/bin/env bash
# Validates deploy/ with Prometheus's own tools (Debian package `prometheus`):
#   - promtool check rules on deploy/prometheus/trainyard-rules.yml, and promtool test
#     rules with unit tests of every alert (below): when it fires, with which labels and
#     annotations (promtool prints what it got when an expectation fails);
#   - promtool check config on deploy/prometheus/prometheus.yml, next to a throwaway
#     token file (the config names `trainyard.token` beside itself);
#   - deploy/grafana/trainyard.json: valid JSON (python3 -m json.tool), a `datasource`
#     variable of type prometheus that every panel and target uses, unique panel ids,
#     panels within the 24-column grid, every target's expression valid PromQL (checked
#     by promtool as recording rules, with the dashboard's variables filled in);
#   - the rules and the dashboard name only the metrics the server exposes (METRICS below),
#     and select trainyard_* series by snake_case labels only (dcgm-exporter's camel-case
#     names, such as Hostname, are on the DCGM_FI_* series alone).
#
#   check_deploy.sh [SOURCE_DIR]
# Exits 0 with a SKIP message when promtool is not installed (scripts/setup installs it).
set -euo pipefail
SRC=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
RULES=$SRC/deploy/prometheus/trainyard-rules.yml
CONFIG=$SRC/deploy/prometheus/prometheus.yml
DASHBOARD=$SRC/deploy/grafana/trainyard.json
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool not found; install Debian's prometheus package (scripts/setup does)"
  exit 0
fi

WORK=$(mktemp -d /tmp/trainyard-promcheck-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The series the server exposes (deploy/README.md lists them); a histogram's
# _bucket, _sum and _count count as its name.
METRICS="
trainyard_nodes trainyard_gpus trainyard_jobs
trainyard_queue_gpus_guaranteed trainyard_queue_gpus_limit trainyard_queue_gpus_in_use
trainyard_queue_gpus_borrowed trainyard_queue_pending_jobs
trainyard_scheduling_pass_duration_seconds:histogram trainyard_preemptions_total
trainyard_lost_work_gpu_seconds_total trainyard_jobs_submitted_total
trainyard_node_heartbeat_age_seconds
DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_FB_USED DCGM_FI_DEV_FB_FREE DCGM_FI_DEV_GPU_TEMP
DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_XID_ERRORS DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
trainyard_gpu_xid_errors_total
trainyard_job_step trainyard_job_loss trainyard_job_grad_norm trainyard_job_learning_rate
trainyard_job_step_time_seconds trainyard_job_tokens_per_second trainyard_job_mfu_ratio
trainyard_job_checkpoint_age_seconds trainyard_job_attempts
"

echo "== promtool check rules"
promtool check rules "$RULES" || fail "promtool check rules $RULES"

echo "== promtool check config"
cp "$CONFIG" "$RULES" "$WORK/"
echo "tyt_example_token" >"$WORK/trainyard.token"
promtool check config "$WORK/prometheus.yml" || fail "promtool check config $CONFIG"

echo "== promtool test rules"
cat >"$WORK/trainyard-rules_test.yml" <<'EOF'
rule_files:
  - trainyard-rules.yml
evaluation_interval: 1m
tests:
  - name: cluster, queues and scheduler
    interval: 1m
    input_series:
      - series: 'trainyard_nodes{instance="server:8470",job="trainyard",state="Ready"}'
        values: '3x40'
      - series: 'trainyard_nodes{instance="server:8470",job="trainyard",state="Down"}'
        values: '0 0 1x40'
      - series: 'trainyard_nodes{instance="server:8470",job="trainyard",state="NotReady"}'
        values: '0x40'
      # p99 of about 2 s: most passes take between 0.5 s and 2 s.
      - series: 'trainyard_scheduling_pass_duration_seconds_bucket{instance="server:8470",job="trainyard",le="0.5"}'
        values: '0+1x40'
      - series: 'trainyard_scheduling_pass_duration_seconds_bucket{instance="server:8470",job="trainyard",le="2"}'
        values: '0+10x40'
      - series: 'trainyard_scheduling_pass_duration_seconds_bucket{instance="server:8470",job="trainyard",le="+Inf"}'
        values: '0+10x40'
      # vision/train: pending below its guarantee (starved); nlp/full: pending at its
      # guarantee (not starved); nlp/idle: nothing pending.
      - series: 'trainyard_queue_pending_jobs{instance="server:8470",job="trainyard",tenant="vision",queue="train"}'
        values: '3x40'
      - series: 'trainyard_queue_gpus_in_use{instance="server:8470",job="trainyard",tenant="vision",queue="train"}'
        values: '2x40'
      - series: 'trainyard_queue_gpus_guaranteed{instance="server:8470",job="trainyard",tenant="vision",queue="train"}'
        values: '8x40'
      - series: 'trainyard_queue_pending_jobs{instance="server:8470",job="trainyard",tenant="nlp",queue="full"}'
        values: '5x40'
      - series: 'trainyard_queue_gpus_in_use{instance="server:8470",job="trainyard",tenant="nlp",queue="full"}'
        values: '8x40'
      - series: 'trainyard_queue_gpus_guaranteed{instance="server:8470",job="trainyard",tenant="nlp",queue="full"}'
        values: '8x40'
      - series: 'trainyard_queue_pending_jobs{instance="server:8470",job="trainyard",tenant="nlp",queue="idle"}'
        values: '0x40'
      - series: 'trainyard_queue_gpus_in_use{instance="server:8470",job="trainyard",tenant="nlp",queue="idle"}'
        values: '0x40'
      - series: 'trainyard_queue_gpus_guaranteed{instance="server:8470",job="trainyard",tenant="nlp",queue="idle"}'
        values: '4x40'
    alert_rule_test:
      - eval_time: 6m
        alertname: NodeNotReady
        exp_alerts: []
      - eval_time: 10m
        alertname: NodeNotReady
        exp_alerts:
          - exp_labels: {severity: warning, state: Down}
            exp_annotations:
              summary: "1 Trainyard node(s) Down"
              description: "1 node(s) have been Down for 5 minutes. NotReady: the agent missed heartbeats or a health check fails, and the node may come back; Down: the node is gone and its work was requeued. `trainyard nodes` lists them; trainyard_node_heartbeat_age_seconds shows how long each has been silent. Check the agent's log and the host."
      - eval_time: 20m
        alertname: SchedulerPassSlow
        exp_alerts:
          - exp_labels: {severity: warning, instance: "server:8470"}
            exp_annotations:
              summary: "Trainyard scheduling passes are slow (p99 1.983s)"
              description: "The 99th percentile of the scheduling pass duration on server:8470 has been above 1 s for 10 minutes, so placements, preemptions and quota reclaim lag behind. Look at the number of pending jobs and nodes, and at the server's CPU."
      - eval_time: 20m
        alertname: QueueStarved
        exp_alerts: []
      - eval_time: 35m
        alertname: QueueStarved
        exp_alerts:
          - exp_labels: {severity: warning, instance: "server:8470", job: trainyard, tenant: vision, queue: train}
            exp_annotations:
              summary: "Queue vision/train is starved"
              description: "Queue vision/train has had pending jobs (now 3) for 30 minutes while it uses fewer GPUs than it is guaranteed. Quota reclaim should have given it its guarantee back: check the pending reasons (`trainyard jobs --tenant vision --queue train`), whether its jobs ask for a GPU type or gang shape the cluster cannot offer, and the preemptions of the queues that borrow."

  - name: GPUs and training
    interval: 1m
    input_series:
      - series: 'trainyard_gpu_xid_errors_total{node="node-0",uuid="GPU-0",device="nvidia0",gpu="0",instance="server:8470",job="trainyard",gpu_type="H100"}'
        values: '0 0 0 1x40'
      - series: 'DCGM_FI_DEV_XID_ERRORS{Hostname="node-0",UUID="GPU-0",device="nvidia0",gpu="0",instance="server:8470",job="trainyard",modelName="NVIDIA H100 80GB HBM3"}'
        values: '0 0 0 79x40'
      - series: 'trainyard_gpu_xid_errors_total{node="node-0",uuid="GPU-1",device="nvidia1",gpu="1",instance="server:8470",job="trainyard",gpu_type="H100"}'
        values: '0x40'
      - series: 'DCGM_FI_DEV_GPU_TEMP{Hostname="node-0",UUID="GPU-0",device="nvidia0",gpu="0",instance="server:8470",job="trainyard",modelName="NVIDIA H100 80GB HBM3"}'
        values: '80 80 80 92x40'
      - series: 'DCGM_FI_DEV_GPU_TEMP{Hostname="node-0",UUID="GPU-1",device="nvidia1",gpu="1",instance="server:8470",job="trainyard",modelName="NVIDIA H100 80GB HBM3"}'
        values: '85x40'  # at the threshold, not above
      - series: 'trainyard_job_loss{instance="server:8470",job="trainyard",job_id="7",name="llama",tenant="nlp",queue="train"}'
        values: '2.5 2.1 NaN NaN'
      - series: 'trainyard_job_loss{instance="server:8470",job="trainyard",job_id="8",name="vit",tenant="vision",queue="train"}'
        values: '1 1 Inf Inf'
      - series: 'trainyard_job_loss{instance="server:8470",job="trainyard",job_id="9",name="ok",tenant="vision",queue="train"}'
        values: '1 0.9 0.8 0.7'
      - series: 'trainyard_job_checkpoint_age_seconds{instance="server:8470",job="trainyard",job_id="7",name="llama",tenant="nlp",queue="train"}'
        values: '8000x20'
      - series: 'trainyard_job_checkpoint_age_seconds{instance="server:8470",job="trainyard",job_id="9",name="ok",tenant="vision",queue="train"}'
        values: '600x20'
      # Job 7 is stuck at step 100, job 9 advances, job 10 is younger than 30 minutes.
      - series: 'trainyard_job_step{instance="server:8470",job="trainyard",job_id="7",name="llama",tenant="nlp",queue="train"}'
        values: '100x45'
      - series: 'trainyard_job_step{instance="server:8470",job="trainyard",job_id="9",name="ok",tenant="vision",queue="train"}'
        values: '0+10x45'
      - series: 'trainyard_job_step{instance="server:8470",job="trainyard",job_id="10",name="new",tenant="vision",queue="train"}'
        values: '_x30 5x15'
    alert_rule_test:
      - eval_time: 5m
        alertname: GPUXidError
        exp_alerts:
          - exp_labels: {severity: critical, node: node-0, uuid: GPU-0, device: nvidia0, gpu: "0", instance: "server:8470", job: trainyard, gpu_type: H100}
            exp_annotations:
              summary: "XID error on GPU 0 of node-0"
              description: "GPU 0 (GPU-0, H100) on node-0 reported XID errors in the last 10 minutes; the last one is XID 79. XIDs 48, 63, 64, 74, 79, 92, 94 and 95 point at the hardware (ECC, row remapping, NVLink, fallen off the bus): drain the node (`trainyard drain node-0` cordons it and requeues its jobs) and have the GPU reset or replaced. XIDs 13, 31 and 43 usually come from the application."
      - eval_time: 30m
        alertname: GPUXidError
        exp_alerts: []
      - eval_time: 6m
        alertname: GPUHot
        exp_alerts: []
      - eval_time: 10m
        alertname: GPUHot
        exp_alerts:
          - exp_labels: {severity: warning, Hostname: node-0, UUID: GPU-0, device: nvidia0, gpu: "0", instance: "server:8470", job: trainyard, modelName: "NVIDIA H100 80GB HBM3"}
            exp_annotations:
              summary: "GPU 0 of node-0 at 92 C"
              description: "GPU 0 (GPU-0) on node-0 has been above 85 C for 5 minutes (92 C now). It is likely throttling its clocks, which slows every rank of a gang job on it. Check the node's cooling and fans."
      - eval_time: 1m
        alertname: LossNaN
        exp_alerts: []
      - eval_time: 3m
        alertname: LossNaN
        exp_alerts:
          - exp_labels: {severity: critical, instance: "server:8470", job: trainyard, job_id: "7", name: llama, tenant: nlp, queue: train}
            exp_annotations:
              summary: "Loss of job 7 (llama) is NaN"
              description: "Job 7 (llama) of nlp/train reports a loss that is NaN or infinite: training has diverged and further steps waste GPUs. Cancel it and resume from the last good checkpoint with a lower learning rate, or look for bad data."
          - exp_labels: {severity: critical, instance: "server:8470", job: trainyard, job_id: "8", name: vit, tenant: vision, queue: train}
            exp_annotations:
              summary: "Loss of job 8 (vit) is +Inf"
              description: "Job 8 (vit) of vision/train reports a loss that is NaN or infinite: training has diverged and further steps waste GPUs. Cancel it and resume from the last good checkpoint with a lower learning rate, or look for bad data."
      - eval_time: 10m
        alertname: CheckpointTooOld
        exp_alerts:
          - exp_labels: {severity: warning, instance: "server:8470", job: trainyard, job_id: "7", name: llama, tenant: nlp, queue: train}
            exp_annotations:
              summary: "Job 7 (llama) has not checkpointed for 2h 13m 20s"
              description: "Running job 7 (llama) of nlp/train last wrote a checkpoint 2h 13m 20s ago. A preemption or a node failure now loses all that work. Check that the job checkpoints (and reports it in its metrics file) and that its storage is writable."
      - eval_time: 20m
        alertname: JobStalled
        exp_alerts: []
      - eval_time: 40m
        alertname: JobStalled
        exp_alerts:
          - exp_labels: {severity: warning, instance: "server:8470", job: trainyard, job_id: "7", name: llama, tenant: nlp, queue: train}
            exp_annotations:
              summary: "Job 7 (llama) made no step for 30 minutes"
              description: "Running job 7 (llama) of nlp/train has reported the same step for 30 minutes. A rank may hang (a collective waiting for a dead peer, a stuck data loader) while holding its GPUs. Look at its logs (`trainyard logs 7`) and its GPUs' utilisation; cancel it (`trainyard cancel 7`) if it does not recover."
EOF
promtool test rules "$WORK/trainyard-rules_test.yml" || fail "promtool test rules (alert unit tests in $0)"

echo "== dashboard"
"$PY" -m json.tool "$DASHBOARD" >/dev/null || fail "$DASHBOARD is not valid JSON"
METRICS=$METRICS "$PY" - "$DASHBOARD" "$RULES" "$WORK/dashboard-exprs.yml" <<'EOF' || fail "the problems above"
import json, os, re, sys

dashboard_path, rules_path, out_path = sys.argv[1:4]
allowed = set()
for entry in os.environ["METRICS"].split():
    name, _, kind = entry.partition(":")
    allowed.add(name)
    if kind == "histogram":
        allowed.update(name + s for s in ("_bucket", "_sum", "_count"))
METRIC = re.compile(r"\b(trainyard_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b")
OWN_SELECTOR = re.compile(r"\b(trainyard_[a-z0-9_]+)\{([^}]*)\}")
LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
problems = []

def unknown_metrics(text, where):
    for name in sorted(set(METRIC.findall(text)) - allowed):
        problems.append(f"{where}: unknown metric {name}")
    for name, matchers in OWN_SELECTOR.findall(text):
        for label in LABEL.findall(matchers):
            if not re.fullmatch(r"[a-z_][a-z0-9_]*", label):
                problems.append(f"{where}: {name} has no label {label} (its labels are snake_case)")

d = json.load(open(dashboard_path))
if not 36 <= d.get("schemaVersion", 0) <= 39:
    problems.append(f"schemaVersion {d.get('schemaVersion')}: expected 36..39")
variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
ds = variables.get("datasource")
if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    problems.append('templating: needs a variable "datasource" of type datasource, query prometheus')
for v in variables.values():
    if v.get("type") == "query":
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else q
        unknown_metrics(q, f"variable {v['name']}")

def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))

ids, used, records = set(), set(), []
for p in panels(d.get("panels", [])):
    where = f"panel {p.get('id')} {p.get('title')!r}"
    if p.get("id") in ids:
        problems.append(f"{where}: duplicate id")
    ids.add(p.get("id"))
    g = p.get("gridPos", {})
    if not all(k in g for k in "hwxy") or g["x"] + g["w"] > 24:
        problems.append(f"{where}: gridPos {g} is not within the 24-column grid")
    if p.get("type") == "row":
        continue
    targets = p.get("targets", [])
    if not targets:
        problems.append(f"{where}: no targets")
    if p.get("datasource", {}).get("uid") != "${datasource}":
        problems.append(f"{where}: datasource is not ${{datasource}}")
    for t in targets:
        expr = t.get("expr", "")
        if not expr:
            problems.append(f"{where} target {t.get('refId')}: no expr")
            continue
        if t.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{where} target {t.get('refId')}: datasource is not ${{datasource}}")
        unknown_metrics(expr, f"{where} target {t.get('refId')}")
        used.update(METRIC.findall(expr))
        # Grafana's variables filled in, so that promtool can parse the expression.
        promql = re.sub(r"\$__(rate_)?interval\b", "5m", expr)
        promql = re.sub(r"\$\{?\w+\}?", ".*", promql)
        records.append((f"dashboard:panel_{p['id']}_{t.get('refId')}", promql))

rules_text = "\n".join(line for line in open(rules_path).read().splitlines()
                       if not line.lstrip().startswith("#"))
unknown_metrics(rules_text, rules_path)
with open(out_path, "w") as f:
    json.dump({"groups": [{"name": "dashboard", "rules":
              [{"record": r, "expr": e} for r, e in records]}]}, f, indent=1)
for p in problems:
    print("  " + p, file=sys.stderr)
unused = sorted(n for n in os.environ["METRICS"].split()
                if n.partition(":")[0] not in used and n.partition(":")[0] + "_bucket" not in used)
print(f"  {len(records)} panel queries; metrics on no panel: {', '.join(unused) or 'none'}")
sys.exit(1 if problems else 0)
EOF
echo "== dashboard queries (promtool, as recording rules)"
promtool check rules "$WORK/dashboard-exprs.yml" || fail "a dashboard query is not valid PromQL"
echo "PASS"
