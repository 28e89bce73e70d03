#!/usr/bin/env bash
# Monitoring end to end (docs/alerts.md, docs/diagnose.md, docs/faults.md): one fault
# scenario on a local cluster (server + 3 agents with 2 simulated H100s each, loopback,
# port 0) running the example trainer as a 3-rank job, the way an operator would see it:
#
#   1. inject the fault into the node (and GPU) of a rank with `trainyard fault inject`
#      (heartbeat: the agent is stopped with SIGSTOP);
#   2. the scenario's alert fires within its rule's `for` plus two heartbeats (and a
#      little slack for a loaded machine), about the right node / GPU / job, and reaches
#      the webhook receiver in Alertmanager's format;
#   3. `trainyard diagnose JOB` names the right cause and node (and GPU), exit status 3;
#   4. the rule's action happened (cordon, requeue elsewhere resuming from the
#      checkpoint, a checkpoint request), where the rule has one;
#   5. after `trainyard fault clear` the alert resolves.
# Prints a TIMING line: seconds from injection to firing, to the action, and from the
# clear to the resolution.
#
#   monitor_e2e.sh TRAINYARD_BINARY SCENARIO
#   SCENARIO: data-stall straggler link-down thermal xid loss-nan grad-spike heartbeat
#             health-check (the agent's --health-check program cordons and uncordons)
set -euo pipefail
T=$(realpath "$1")
SCENARIO=$2
CASE=monitor-$SCENARIO
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# The heartbeat scenario stops an agent for longer than a heartbeat but shorter than
# the node timeout: the server rides it out, alerts, and the job keeps running.
NODE_TIMEOUT=60s
source "$(dirname "$0")/lib.sh"

py() { "$PY" -c "$@"; }
now() { date +%s.%N; }
secs() { py "print(f'{$2 - $1:.1f}')"; }

# --- health-check: the agent's --health-check program cordons and returns its node ---
if [[ $SCENARIO == health-check ]]; then
  cat >"$WORK/check.sh" <<EOF
#!/bin/sh
if [ -e "$WORK/sick" ]; then echo "gpu 1: uncorrectable ECC page retirement pending"; exit 1; fi
echo "all 2 GPUs pass"
EOF
  chmod +x "$WORK/check.sh"
  touch "$WORK/sick"
  start_server
  (cd "$REPO" && exec "$T" agent --unmapped-run-as agent --server "$(cat "$D/server.url")" \
    --join-token "$(cat "$D/join-token")" --name node-0 --data-dir "$WORK/agents/node-0" \
    --simulated-gpus 2 --gpu-type H100 --cpus 2 --health-check "$WORK/check.sh" \
    --health-check-interval 1s >>"$WORK/agent-node-0.log" 2>&1) &
  PIDS+=("$!")
  node_is() {  # STATE REASON-PREFIX SECONDS
    for _ in $(seq $(($3 * 5))); do
      got=$("$T" nodes -o json 2>/dev/null | py "import json,sys; n=[n for n in json.load(sys.stdin) if n['name']=='node-0']; print(n[0]['state'] + '|' + n[0].get('state_reason', '') if n else '')" || true)
      [[ ${got%%|*} == "$1" && ${got#*|} == "$2"* ]] && return 0
      sleep 0.2
    done
    fail "node-0 is '$got', want $1 '$2...'"
  }
  T0=$(now)
  # Cordoned from the join check on; on a busy machine the first look may come after
  # the first periodic check (1 s later) has restated the reason, so either is the cordon
  # of the join, which the agent's log shows ran and failed before it registered.
  node_is Cordoned "health check failed (" 20
  T_JOIN=$(now)
  grep -q "health check (join): FAILED: gpu 1: uncorrectable ECC" "$WORK/agent-node-0.log" ||
    fail "no failed join check in the agent's log"
  [[ $(grep -n "health check (join): FAILED" "$WORK/agent-node-0.log" | head -1 | cut -d: -f1) -lt \
     $(grep -n "registered as node" "$WORK/agent-node-0.log" | head -1 | cut -d: -f1) ]] ||
    fail "the join check did not run before the agent registered"
  rm "$WORK/sick"
  node_is Ready "" 10
  T_PASS=$(now)
  touch "$WORK/sick"
  node_is Cordoned "health check failed (periodic): gpu 1" 10
  [[ $("$T" nodes show node-0) == *"health check (periodic"*"FAILED: gpu 1"* ]] ||
    fail "nodes show: $("$T" nodes show node-0)"
  # An operator's cordon is the operator's: a passing check leaves it.
  rm "$WORK/sick"
  node_is Ready "" 10
  "$T" cordon node-0 >/dev/null
  sleep 2.5
  node_is Cordoned "cordoned by" 1
  "$T" uncordon node-0 >/dev/null
  # A task that fails runs the check at once (trigger task-failed).
  "$T" submit - -o json >/dev/null <<EOF
name: fails
resources: {gpus: 1}
command: ["/bin/sh", "-c", "touch $WORK/sick; exit 3"]
EOF
  node_is Cordoned "health check failed (" 20
  echo "TIMING health-check: join->cordoned $(secs "$T0" "$T_JOIN") s, fixed->ready $(secs "$T_JOIN" "$T_PASS") s (interval 1s)"
  echo "PASS monitor health-check"
  exit 0
fi

# --- a webhook receiver: appends every POST body as one line to $WORK/hooks.jsonl ---
cat >"$WORK/receiver.py" <<'EOF'
import http.server, sys
out, port_file = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(out, "ab") as f:
            f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(port_file + ".tmp", "w").write(str(s.server_port))
import os; os.rename(port_file + ".tmp", port_file)
s.serve_forever()
EOF
"$PY" "$WORK/receiver.py" "$WORK/hooks.jsonl" "$WORK/hook.port" &
PIDS+=("$!")
for _ in $(seq 100); do [[ -s $WORK/hook.port ]] && break; sleep 0.05; done
[[ -s $WORK/hook.port ]] || fail "webhook receiver did not start"

# --- rules: the built-in ones, with `for` durations short enough for a test ---
cat >"$WORK/rules.yaml" <<'EOF'
limits:
  cordon_node: {max_per_hour: 10, max_cordoned: 3}
  requeue_excluding_node: {max_per_hour: 10}
rules:
  - name: JobGpuUtilCollapsed
    signal: job.gpu_util
    condition: {threshold_below: 10}
    for: 3s
    annotations: {summary: "GPUs of job {{job_id}} at {{value}}% utilisation"}
  # 2x rather than the built-in 1.5x: with `for` at 5 s instead of 10 min, a rank that a
  # busy CI host leaves 1.5x behind for a few seconds would count; the fault is 3x.
  - name: RankStraggler
    signal: job.rank_step_time_ratio
    condition: {threshold_above: 2}
    for: 5s
    annotations: {summary: "rank {{rank}} of job {{job_id}} on {{node}} at {{value}}x the median step time"}
    action: requeue_excluding_node
  - name: LinkDown
    signal: link.down
    condition: {threshold_above: 0}
    for: 2s
    annotations: {summary: "link {{link}} of {{node}} is down"}
  - name: GpuThermalThrottling
    signal: gpu.throttled
    condition: {threshold_above: 0}
    for: 3s
    annotations: {summary: "GPU {{gpu}} of {{node}} is throttled"}
    action: cordon_node
  - name: GpuXidError
    signal: gpu.xid_count
    condition: {increase_above: 0, window: 15s}
    for: 0s
    annotations: {summary: "GPU {{gpu}} of {{node}} reported an XID"}
    action: cordon_node
  - name: LossNotFinite
    signal: job.loss
    condition: {nan: true, window: 30s}
    for: 0s
    annotations: {summary: "job {{job_id}} loss is {{value}}"}
  - name: GradNormSpike
    signal: job.grad_norm
    condition: {zscore_above: 6, window: 2m, min_points: 20}
    for: 0s
    keep_firing_for: 3s
    annotations: {summary: "grad norm of job {{job_id}} jumped to {{value}}"}
    action: request_checkpoint
  - name: NodeHeartbeatLost
    signal: node.heartbeat_age_s
    condition: {threshold_above: 2.5}
    for: 1s
    annotations: {summary: "{{node}} silent for {{value}} s"}
  - {name: TrainingStalled, enabled: false}
  - {name: GpuTooHot, enabled: false}
EOF
"$T" alerts check "$WORK/rules.yaml" >/dev/null || fail "rules file refused"

SERVER_FLAGS=(--alert-rules "$WORK/rules.yaml" --alert-interval 250ms
  --alert-webhook "http://127.0.0.1:$(cat "$WORK/hook.port")/hook")
start_server
declare -A AGENT_OF  # node -> its agent's pid (start_repo_agent execs the agent)
for n in node-0 node-1 node-2; do start_repo_agent "$n"; AGENT_OF[$n]=${PIDS[-1]}; done
wait_nodes 3

# --- the job: the example trainer as 3 ranks of 1 GPU each ---
cat >"$WORK/job.yaml" <<EOF
name: watched
replicas: 3
resources: {gpus: 1, cpus: 0.5, memory: 256Mi}
command: ["/usr/bin/python3", "-u", "examples/trainer/trainer.py"]
args: ["--steps", "100000", "--step-time", "0.05", "--checkpoint-every", "40", "--seed", "1"]
checkpoint: {interval: 5s, preempt_grace: 20s, notice_signal: SIGUSR1}
EOF
JOB=$("$T" submit "$WORK/job.yaml" -o json | py 'import json,sys; print(json.load(sys.stdin)["id"])')
wait_until "$JOB" 'j["state"] == "Running"' 60 "Running"
step() { curl -sf -H "Authorization: Bearer $(cat "$D/token")" \
  "$(cat "$D/server.url")/api/v1/runs/$JOB" | py '
import json, sys
r = json.load(sys.stdin)
print(max([m.get("step", 0) for m in r.get("metrics", {}).values()] or [0]))' 2>/dev/null || echo 0; }
for _ in $(seq 300); do [[ $(step) -ge 60 ]] && break; sleep 0.2; done
[[ $(step) -ge 60 ]] || fail "the job made no progress (step $(step))"

# Where rank R runs: "NODE GPU".
placement() { job_field "$JOB" "next(f'{r[\"node\"]} {r[\"gpus\"][0]}' for r in j['ranks'] if r['rank'] == $1)"; }
read -r NODE GPU < <(placement 1)

# No alert before the fault: the cluster is healthy.
firing() { "$T" alerts --state firing -o json | py "
import json, sys
for a in json.load(sys.stdin)['alerts']:
    if a['rule'] == sys.argv[1]: print(json.dumps(a['labels'])); break" "$1"; }
# Whether RULE has fired since the cluster started (an alert whose action moves the job
# may resolve a second later): the labels of its firing event.
fired() { "$T" alerts events --limit 1000 -o json | py "
import json, sys
for e in json.load(sys.stdin)['events']:
    if e['kind'] == 'firing' and e['rule'] == sys.argv[1]: print(json.dumps(e['labels'])); break" "$1"; }
healthy=$("$T" alerts --state pending,firing -o json | py 'import json,sys; print(" ".join(a["rule"] + "=" + str(a.get("value")) + json.dumps(a["labels"]) for a in json.load(sys.stdin)["alerts"]))')
[[ -z $healthy ]] || fail "alerts before any fault: $healthy"

inject() { "$T" fault inject --node "$1" --kind "$2" ${3:+--gpu "$3"} >/dev/null; }
AGENT_PID=
case $SCENARIO in
  data-stall) RULE=JobGpuUtilCollapsed; CAUSE=data_stall; FOR=3; WANT_NODE=; WANT_GPU=
    for n in $(job_field "$JOB" "' '.join(sorted({r['node'] for r in j['ranks']}))"); do
      inject "$n" data-stall; done ;;
  straggler) RULE=RankStraggler; CAUSE=straggler; FOR=5; WANT_NODE=$NODE; WANT_GPU=$GPU
    inject "$NODE" slow "$GPU" ;;
  link-down) RULE=LinkDown; CAUSE=link_down; FOR=2; WANT_NODE=$NODE; WANT_GPU=
    inject "$NODE" link-down ;;
  thermal) RULE=GpuThermalThrottling; CAUSE=thermal; FOR=3; WANT_NODE=$NODE; WANT_GPU=$GPU
    inject "$NODE" thermal "$GPU" ;;
  xid) RULE=GpuXidError; CAUSE=gpu_error; FOR=0; WANT_NODE=$NODE; WANT_GPU=$GPU
    inject "$NODE" xid "$GPU" ;;
  loss-nan) RULE=LossNotFinite; CAUSE=loss_nan; FOR=0; WANT_NODE=; WANT_GPU=
    read -r NODE GPU < <(placement 0)  # rank 0 logs the job's loss
    inject "$NODE" loss-nan ;;
  grad-spike) RULE=GradNormSpike; CAUSE=grad_spike; FOR=0; WANT_NODE=; WANT_GPU=
    read -r NODE GPU < <(placement 0)
    inject "$NODE" grad-spike ;;
  heartbeat) RULE=NodeHeartbeatLost; CAUSE=node_lost; FOR=4; WANT_NODE=$NODE; WANT_GPU=
    AGENT_PID=${AGENT_OF[$NODE]}
    [[ -n $AGENT_PID ]] || fail "no agent process for $NODE"
    kill -STOP "$AGENT_PID" ;;
  *) echo "unknown scenario $SCENARIO" >&2; exit 2 ;;
esac
T_INJECT=$(now)

# 2 and 3. The alert fires within `for` + 2 heartbeats (+ slack for a loaded CI
# machine), and `diagnose` names the cause, the node and the GPU. Diagnose is asked
# while waiting: a rule whose action moves the job (straggler: requeue) leaves nothing
# to diagnose at the old placement once it fired.
cat >"$WORK/check_diagnosis.py" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
cause, node, gpu = sys.argv[2:5]
hit = [f for f in d["findings"] if f["cause"] == cause]
if not hit:
    sys.exit("no %s finding: %s" % (cause, [f["cause"] for f in d["findings"]]))
f = hit[0]
if node and f["node"] != node:
    sys.exit("%s: node %r, want %r" % (cause, f["node"], node))
if gpu and f["gpu"] != gpu:
    sys.exit("%s: gpu %r, want %r" % (cause, f["gpu"], gpu))
if not f["evidence"] or not f["next_step"]:
    sys.exit("%s: no evidence or next step" % cause)
EOF
diagnosed() {
  set +e
  "$T" diagnose "$JOB" -o json >"$WORK/diagnosis.json"
  local rc=$?
  set -e
  [[ $rc == 3 ]] && "$PY" "$WORK/check_diagnosis.py" "$WORK/diagnosis.json" "$CAUSE" \
    "$WANT_NODE" "$WANT_GPU" 2>"$WORK/diagnosis.err"
}
LIMIT=$(py "print(int(($FOR + 2 + 8) * 4))")
labels= T_FIRE= T_DIAG=
for _ in $(seq "$LIMIT"); do
  if [[ -z $T_FIRE ]]; then
    labels=$(fired "$RULE" || true)
    [[ -n $labels ]] && T_FIRE=$(now)
  fi
  if [[ -z $T_DIAG ]] && diagnosed; then
    T_DIAG=$(now)
    "$T" diagnose "$JOB" >"$WORK/diagnosis.txt" || true
  fi
  [[ -n $T_FIRE && -n $T_DIAG ]] && break
  sleep 0.25
done
[[ -n $T_FIRE ]] || fail "$RULE did not fire within $((LIMIT / 4)) s"
[[ -n $T_DIAG ]] || fail "diagnose did not find $CAUSE ($WANT_NODE $WANT_GPU): $(cat "$WORK/diagnosis.err" 2>/dev/null); $("$T" diagnose "$JOB" || true)"
check_label() {  # KEY WANT
  [[ -z $2 ]] && return 0
  got=$(py 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ""))' "$labels" "$1")
  [[ $got == "$2" ]] || fail "$RULE: label $1 is '$got', want '$2' (labels $labels)"
}
check_label node "$WANT_NODE"
[[ $SCENARIO == straggler ]] || check_label gpu "$WANT_GPU"
case $SCENARIO in data-stall|straggler|loss-nan|grad-spike) check_label job_id "$JOB" ;; esac

# 4. The rule's action.
T_ACTION=
case $SCENARIO in
  thermal|xid)
    for _ in $(seq 50); do
      [[ $("$T" nodes -o json | py "import json,sys; print(next(n['state'] for n in json.load(sys.stdin) if n['name'] == '$NODE'))") == Cordoned ]] && break
      sleep 0.2
    done
    reason=$("$T" nodes -o json | py "import json,sys; n = next(n for n in json.load(sys.stdin) if n['name'] == '$NODE'); print(n['state'], n.get('state_reason', ''))")
    [[ $reason == "Cordoned alert $RULE"* ]] || fail "node $NODE not cordoned by the alert: $reason"
    T_ACTION=$(now) ;;
  straggler)
    # Preempted with a checkpoint, then running again away from the slow node, resumed.
    wait_until "$JOB" 'len(j["attempts"]) >= 2 and j["state"] == "Running"' 90 "the requeued attempt"
    T_ACTION=$(now)
    [[ $(job_field "$JOB" "'$NODE' in j.get('excluded_nodes', []) or all(r['node'] != '$NODE' for r in j['ranks'])") == True ]] ||
      fail "the requeued attempt runs on $NODE again"
    [[ $(job_field "$JOB" "all(r['node'] != '$NODE' for r in j['ranks'])") == True ]] ||
      fail "the requeued attempt runs on $NODE again"
    for _ in $(seq 150); do
      # Read whole, then matched: `logs | grep -q` fails under pipefail when grep exits
      # on the first match while logs is still writing (SIGPIPE).
      [[ $("$T" logs "$JOB" --attempt 1 --rank 0 2>/dev/null) == *"resumed from"* ]] && break
      sleep 0.2
    done
    [[ $("$T" logs "$JOB" --attempt 1 --rank 0) == *"resumed from"* ]] ||
      fail "the requeued attempt did not resume from the checkpoint" ;;
  grad-spike)
    for _ in $(seq 50); do
      [[ $("$T" job show "$JOB") == *CheckpointRequested* ]] && break
      sleep 0.2
    done
    [[ $("$T" job show "$JOB") == *CheckpointRequested* ]] || fail "no CheckpointRequested event"
    T_ACTION=$(now) ;;
esac
# The webhook got the firing alert.
for _ in $(seq 50); do
  grep -q "\"alertname\":\"$RULE\"" "$WORK/hooks.jsonl" 2>/dev/null && break
  sleep 0.2
done
py '
import json, sys
bodies = [json.loads(l) for l in open(sys.argv[1])]
hit = [b for b in bodies if b["status"] == "firing" and any(a["labels"]["alertname"] == sys.argv[2] for a in b["alerts"])]
assert hit, "no firing notification of " + sys.argv[2]
assert hit[0]["version"] == "4" and hit[0]["receiver"] == "trainyard"
' "$WORK/hooks.jsonl" "$RULE" || fail "webhook: $(cat "$WORK/hooks.jsonl" 2>/dev/null)"

# 5. Clear the fault; the alert resolves.
if [[ -n $AGENT_PID ]]; then kill -CONT "$AGENT_PID"; else "$T" fault clear --all >/dev/null; fi
T_CLEAR=$(now)
resolved=
for _ in $(seq 300); do
  if [[ -z $(firing "$RULE" || true) ]]; then resolved=1; break; fi
  sleep 0.2
done
[[ -n $resolved ]] || fail "$RULE still firing 60 s after the fault was cleared"
T_RESOLVED=$(now)

echo "TIMING $SCENARIO: inject->firing $(secs "$T_INJECT" "$T_FIRE") s (expected ${FOR}s + up to 2 heartbeats)," \
  "inject->diagnosed $(secs "$T_INJECT" "$T_DIAG") s," \
  "${T_ACTION:+inject->action $(secs "$T_INJECT" "$T_ACTION") s }clear->resolved $(secs "$T_CLEAR" "$T_RESOLVED") s"
echo "PASS monitor $SCENARIO"
