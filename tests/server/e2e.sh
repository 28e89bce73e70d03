#!/usr/bin/env bash
# End-to-end tests of the control plane with real processes on loopback:
# `trainyard server --port 0` and `trainyard agent` processes with simulated GPUs,
# driven through the CLI the way a user would.
#
#   e2e.sh TRAINYARD_BINARY CASE     CASE: gang | pending | bad-input | preempt |
#                                          server-restart | agent-loss | rank-failure |
#                                          auth | logs | profile
set -euo pipefail
T=$1
CASE=$2
source "$(dirname "$0")/lib.sh"

declare -A AGENT_PID
start_agent() {  # NAME GPUS
  "$T" agent --unmapped-run-as agent --server "$(cat "$D/server.url")" --join-token "$(cat "$D/join-token")" \
    --name "$1" --data-dir "$WORK/agents/$1" --simulated-gpus "$2" --gpu-type H100 \
    >>"$WORK/agent-$1.log" 2>&1 &
  AGENT_PID[$1]=$!
  PIDS+=("$!")
}

wait_state() {  # ID STATE [SECONDS]
  for _ in $(seq $((${3:-20} * 10))); do
    s=$(job_field "$1" 'j["state"]' 2>/dev/null || true)
    [[ $s == "$2" ]] && return 0
    sleep 0.1
  done
  fail "job $1 is ${s:-?}, expected $2"
}

submit() {  # FILE -> id
  "$T" submit "$1" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

spec() {  # NAME BODY -> file
  printf '%s\n' "$2" >"$WORK/$1.yaml"
  echo "$WORK/$1.yaml"
}

start_server

case $CASE in
gang)
  start_agent node-0 2
  start_agent node-1 2
  wait_nodes 2
  f=$(spec gang 'name: gang
replicas: 2
resources: {gpus: 2}
command: ["/bin/sh", "-c", "echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE group=$GROUP_RANK master=$MASTER_ADDR:$MASTER_PORT cuda=$CUDA_VISIBLE_DEVICES job=$TRAINYARD_JOB_ID; sleep 0.5"]')
  id=$(submit "$f")
  wait_state "$id" Succeeded
  [[ $(job_field "$id" 'sorted(j["attempts"][0]["nodes"])') == "['node-0', 'node-1']" ]] ||
    fail "replicas not on both nodes: $(job_field "$id" 'j["attempts"]')"
  sleep 0.5  # the last log chunk
  l0=$("$T" logs "$id" --rank 0)
  l1=$("$T" logs "$id" --rank 1)
  [[ $l0 == rank=0\ world=2\ local=0/1\ group=0\ * ]] || fail "rank 0 log: $l0"
  [[ $l1 == rank=1\ world=2\ local=0/1\ group=1\ * ]] || fail "rank 1 log: $l1"
  [[ ${l0#*master=} == "${l1#*master=}" ]] || true
  m0=$(sed 's/.*master=\([^ ]*\).*/\1/' <<<"$l0"); m1=$(sed 's/.*master=\([^ ]*\).*/\1/' <<<"$l1")
  [[ $m0 == "$m1" ]] || fail "ranks disagree on MASTER_ADDR:PORT: $m0 vs $m1"
  [[ $l0 == *cuda=0,1* && $l1 == *cuda=0,1* ]] || fail "CUDA_VISIBLE_DEVICES: $l0 / $l1"
  "$T" jobs --all -o json | "$PY" -c 'import json,sys; j=json.load(sys.stdin); assert all(k in j[0] for k in ("id","name","state","reason")), j'
  ;;
pending)
  start_agent node-0 2
  wait_nodes 1
  id=$(submit "$(spec big 'name: big
resources: {gpus: 8}
command: ["/bin/true"]')")
  sleep 1
  [[ $(job_field "$id" 'j["state"]') == Pending ]] || fail "big job not Pending"
  reason=$("$T" jobs -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["reason"])')
  [[ $reason == *8* ]] || fail "pending reason does not say why: $reason"
  ;;
bad-input)
  set +e
  out=$("$T" submit "$(dirname "$0")/../../examples/bad/zero-replicas.yaml" 2>&1); rc=$?
  set -e
  [[ $rc -ne 0 && $out == *replicas* && $(wc -l <<<"$out") -eq 1 ]] || fail "bad spec: rc=$rc $out"
  set +e
  out=$("$T" job show 999 2>&1); rc=$?
  set -e
  [[ $rc -ne 0 && $out == *"job 999"* ]] || fail "unknown job: rc=$rc $out"
  url=$(cat "$D/server.url")
  code=$(curl -H "Authorization: Bearer $(cat "$D/token")" -s -o /dev/null -w '%{http_code}' -X POST "$url/api/v1/jobs" --data-binary 'name: [')
  [[ $code == 400 ]] || fail "invalid YAML got HTTP $code"
  code=$(curl -H "Authorization: Bearer $(cat "$D/token")" -s -o /dev/null -w '%{http_code}' "$url/api/v1/jobs?state=Nope")
  [[ $code == 400 ]] || fail "bad filter got HTTP $code"
  [[ $("$T" jobs --all -o json) == "[]" ]] || fail "bad input stored a job"
  ;;
preempt)
  start_agent node-0 2
  wait_nodes 1
  low=$(submit "$(spec low 'name: low
priority: best-effort
resources: {gpus: 2}
checkpoint: {preempt_grace: 5s}
command: ["/bin/sh", "-c", "echo resume=[$TRAINYARD_RESUME_FROM]; trap \"echo notice; exit 0\" USR1; while true; do sleep 0.1; done"]')")
  wait_state "$low" Running
  curl -H "Authorization: Bearer $(cat "$D/token")" -sf -X POST "$(cat "$D/server.url")/api/v1/jobs/$low/checkpoint" \
    -d '{"path": "/ckpt/low/step-7", "step": 7, "duration_ms": 12}' >/dev/null
  sleep 0.3
  high=$(submit "$(spec high 'name: high
priority: production
resources: {gpus: 2}
command: ["/bin/sleep", "1"]')")
  wait_state "$high" Succeeded
  wait_state "$low" Running
  sleep 0.5
  [[ $("$T" logs "$low" --attempt 0) == *notice* ]] || fail "no notice in attempt 0"
  [[ $("$T" logs "$low") == *"resume=[/ckpt/low/step-7]"* ]] || fail "did not resume: $("$T" logs "$low")"
  lost=$(job_field "$low" 'j["attempts"][0]["lost_work_ms"]')
  [[ $(job_field "$low" 'j["attempts"][0]["exit_reason"]') == preempted ]] || fail "not preempted"
  [[ $lost -lt 5000 ]] || fail "lost work $lost ms"
  ;;
server-restart)
  start_agent node-0 2
  wait_nodes 1
  id=$(submit "$(spec long 'name: long
resources: {gpus: 1}
command: ["/bin/sleep", "10"]')")
  wait_state "$id" Running
  port=$(sed 's/.*://' "$D/server.url")
  kill -9 "$SERVER_PID"
  sleep 2
  start_server "$port"  # where the agent keeps retrying
  wait_nodes 1
  state=$(job_field "$id" 'j["state"]')
  [[ $state == Running || $state == Succeeded ]] || fail "$state after restart"
  wait_state "$id" Succeeded 20
  [[ $(job_field "$id" 'len(j["attempts"])') == 1 ]] || fail "restarted instead of adopted"
  ;;
agent-loss)
  start_agent node-0 1
  start_agent node-1 1
  wait_nodes 2
  id=$(submit "$(spec one 'name: one
resources: {gpus: 1}
command: ["/bin/sh", "-c", "echo attempt=$TRAINYARD_ATTEMPT resume=$TRAINYARD_RESUME_FROM; sleep 300"]')")
  wait_state "$id" Running
  curl -H "Authorization: Bearer $(cat "$D/token")" -sf -X POST "$(cat "$D/server.url")/api/v1/jobs/$id/checkpoint" -d '{"path": "/ck/one", "step": 1}' >/dev/null
  node=$(job_field "$id" 'j["attempts"][0]["nodes"][0]')
  kill -9 "${AGENT_PID[$node]}"
  for _ in $(seq 400); do  # node timeout 3 s + lost-node grace 8 s, then a pass
    [[ $(job_field "$id" 'len(j["attempts"])') == 2 ]] && break
    sleep 0.1
  done
  [[ $(job_field "$id" 'j["attempts"][0]["exit_reason"]') == node-lost ]] || fail "attempt 0 not node-lost"
  other=$(job_field "$id" 'j["attempts"][1]["nodes"][0]')
  [[ $other != "$node" ]] || fail "restarted on the lost node"
  wait_state "$id" Running
  ;;
rank-failure)
  start_agent node-0 2
  start_agent node-1 2
  wait_nodes 2
  id=$(submit "$(spec fail 'name: fail
replicas: 2
resources: {gpus: 2}
retry: {max: 1, backoff: 1s}
command: ["/bin/sh", "-c", "if [ $RANK = 1 ]; then sleep 0.5; exit 3; fi; sleep 30"]')")
  wait_state "$id" Failed 30
  [[ $(job_field "$id" 'len(j["attempts"])') == 2 ]] || fail "not retried once"
  [[ $(job_field "$id" 'j["attempts"][0]["message"]') == *"exited with code 3"* ]] ||
    fail "message: $(job_field "$id" 'j["attempts"][0]["message"]')"
  ;;
auth)
  # The first start wrote an admin token, readable by its owner only.
  [[ $(stat -c %a "$D/token") == 600 ]] || fail "admin token mode $(stat -c %a "$D/token")"
  [[ $("$T" whoami) == "admin (cluster-admin; token "* ]] || fail "whoami: $("$T" whoami)"
  "$T" users create alice --tenant vision >/dev/null || fail "create alice"
  "$T" users create bob --tenant nlp >/dev/null || fail "create bob"
  "$T" users create vera --tenant vision --role viewer >/dev/null || fail "create vera"
  ( umask 077
    "$T" tokens create --user alice --description e2e 2>/dev/null >"$WORK/alice.token"
    "$T" tokens create --user bob 2>/dev/null >"$WORK/bob.token"
    "$T" tokens create --user vera --expires 1h 2>/dev/null >"$WORK/vera.token" )
  as() { local u=$1; shift; TRAINYARD_TOKEN=$(cat "$WORK/$u.token") "$T" "$@"; }
  [[ $(as alice whoami) == "alice (member of tenant vision; token "* ]] || fail "alice whoami"
  a=$(as alice submit "$(spec a 'name: a
command: ["/bin/sleep", "60"]')" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  b=$(as bob submit "$(spec b 'name: b
command: ["/bin/sleep", "60"]')" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  [[ $(job_field "$a" 'j["spec"]["tenant"]') == vision ]] || fail "alice's job not in vision"
  # Each sees its own tenant's jobs only; the admin sees both.
  ids() { "$PY" -c 'import json,sys; print(" ".join(str(j["id"]) for j in json.load(sys.stdin)))'; }
  [[ $(as alice jobs -o json | ids) == "$a" ]] || fail "alice lists $(as alice jobs -o json | ids)"
  [[ $(as vera jobs -o json | ids) == "$a" ]] || fail "vera lists other jobs"
  [[ $("$T" jobs -o json | ids) == "$a $b" ]] || fail "admin lists $("$T" jobs -o json | ids)"
  set +e
  out=$(as alice job show "$b" 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *"may not read-jobs"* ]] || fail "alice read bob's job: $out"
  out=$(as alice cancel "$b" 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *"may not"* ]] || fail "alice cancelled bob's job: $out"
  out=$(as vera cancel "$a" 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *"needs role member"* ]] || fail "viewer cancelled: $out"
  out=$(as alice logs "$b" 2>&1); rc=$?
  [[ $rc -ne 0 ]] || fail "alice read bob's logs: $out"
  out=$(as alice cordon node-x 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *"cluster-admin"* ]] || fail "alice cordoned: $out"
  out=$(as alice submit "$(spec p0 'name: p0
priority: p0
command: ["/bin/true"]')" 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *'priority class "p0"'* ]] || fail "alice used p0: $out"
  out=$(as alice users create mallory --role cluster-admin 2>&1); rc=$?
  [[ $rc -ne 0 ]] || fail "a member created a user: $out"
  set -e
  [[ $(job_field "$b" 'j["state"]') == Pending ]] || fail "bob's job changed"
  as alice cancel "$a" >/dev/null || fail "alice cannot cancel her own job"
  # Queues: a tenant-admin manages them within the quota a cluster-admin sets.
  "$T" users create tina --tenant vision --role tenant-admin >/dev/null || fail "create tina"
  ( umask 077; "$T" tokens create --user tina 2>/dev/null >"$WORK/tina.token" )
  "$T" tenants quota vision --guaranteed 8 --limit 16 >/dev/null || fail "tenants quota"
  [[ $("$T" tenants | awk '$1 == "vision" {print $2, $3}') == "8 16" ]] ||
    fail "tenants: $("$T" tenants)"
  as tina queues set vision/train --guaranteed 6 --limit 12 --weight 2 >/dev/null ||
    fail "tina queues set"
  [[ $(as tina queues | awk '$1 == "vision" && $2 == "train" {print $3, $4}') == "6 12" ]] ||
    fail "queues: $(as tina queues)"
  set +e
  out=$(as tina queues set vision/big --guaranteed 3 --limit 4 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *"at most 2 is left"* ]] || fail "over the guarantee: $out"
  out=$(as tina tenants quota vision --guaranteed 99 --limit 99 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *"cluster-admin"* ]] || fail "tina raised her quota: $out"
  out=$(as alice queues set vision/mine --guaranteed 0 --limit 1 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *"may not manage-queues"* ]] || fail "a member made a queue: $out"
  out=$(as tina queues set nlp/x --guaranteed 0 --limit 1 2>&1); rc=$?
  [[ $rc -ne 0 && $out == *"may not manage-queues"* ]] || fail "tina made nlp's queue: $out"
  out=$(as tina queues set train --guaranteed 0 --limit 1 2>&1); rc=$?
  [[ $rc -eq 2 && $out == *"TENANT/QUEUE"* ]] || fail "queue without tenant: rc=$rc $out"
  set -e
  as tina queues delete vision/train >/dev/null || fail "tina queues delete"
  grep -q "train" <<<"$(as tina queues)" && fail "train not deleted"
  # Revoked: refused at once, with a message saying so.
  id=$(cut -c5-16 "$WORK/vera.token")
  grep -q "\"$id\"" <<<"$("$T" tokens --user vera -o json)" || fail "vera's token not listed"
  "$T" tokens revoke "$id" >/dev/null || fail "revoke"
  set +e
  out=$(as vera jobs 2>&1); rc=$?
  set -e
  [[ $rc -ne 0 && $out == *revoked* ]] || fail "revoked token: rc=$rc $out"
  # No token at all.
  code=$(curl -s -o /dev/null -w '%{http_code}' "$(cat "$D/server.url")/api/v1/jobs")
  [[ $code == 401 ]] || fail "no token got HTTP $code"
  # Who did what: alice's refused cancel and her own cancel are on record.
  "$T" audit --actor user:alice -o json | "$PY" -c '
import json, sys
entries = json.load(sys.stdin)
statuses = sorted(e["status"] for e in entries if e["action"].endswith("/cancel"))
assert statuses == [200, 403], entries
assert all(e["source"].startswith("127.0.0.1:") for e in entries), entries
' || fail "audit"
  # A server without authentication only on loopback.
  set +e
  out=$("$T" server --data-dir "$WORK/insecure" --listen 0.0.0.0:0 --insecure-local 2>&1); rc=$?
  set -e
  [[ $rc -eq 2 && $out == *"loopback"* ]] || fail "--insecure-local on 0.0.0.0: rc=$rc $out"
  ;;
logs)
  # A job that prints, then dies of a Python exception: search its log, see its error
  # lines in `job show` and the JSON, then let retention delete the log.
  start_agent node-0 1
  wait_nodes 1
  id=$(submit "$(spec traceback 'name: traceback
resources: {gpus: 1}
command:
  - /usr/bin/python3
  - -c
  - |
    for step in range(3):
        print("step", step, "loss", 2.5 - step, flush=True)
    def load(shard):
        raise FileNotFoundError("no such shard: " + shard)
    load("shard-7")')")
  wait_state "$id" Failed 30
  for _ in $(seq 50); do  # the last log chunk
    [[ $("$T" logs "$id") == *FileNotFoundError* ]] && break
    sleep 0.1
  done
  out=$("$T" logs "$id" --grep "loss 1.5")
  [[ $out == "attempt 0 rank 0 line 2: step 1 loss 1.5" ]] || fail "grep: $out"
  out=$("$T" logs "$id" --grep SHARD-7 -i --rank 0 --attempt 0)
  # (Where Python shows the source of -c code, the load("shard-7") line matches too.)
  [[ $(tail -1 <<<"$out") =~ ^attempt\ 0\ rank\ 0\ line\ [0-9]+:\ FileNotFoundError:\ no\ such\ shard:\ shard-7$ ]] ||
    fail "grep -i: $out"
  [[ -z $("$T" logs "$id" --grep "no such line") ]] || fail "grep found what is not there"
  out=$("$T" logs "$id" --grep step --max 2 2>&1)
  [[ $out == *"line 2: step 1"* && $out == *"stopped early"* ]] || fail "grep --max: $out"
  set +e
  out=$("$T" logs "$id" --grep x --max 0 2>&1); rc=$?
  [[ $rc -eq 2 ]] || fail "--max 0: rc=$rc $out"
  code=$(curl -H "Authorization: Bearer $(cat "$D/token")" -s -o "$WORK/body" -w '%{http_code}' \
    "$(cat "$D/server.url")/api/v1/jobs/$id/logs/search?pattern=x&max_matches=99999")
  [[ $code == 400 && $(cat "$WORK/body") == *max_matches*99999* ]] ||
    fail "max_matches=99999: $code $(cat "$WORK/body")"
  set -e
  show=$("$T" job show "$id")
  [[ $show == *"error (rank 0):"*"Traceback (most recent call last):"*"FileNotFoundError: no such shard: shard-7"* ]] ||
    fail "job show: $show"
  [[ $(job_field "$id" 'j["attempts"][0]["error_lines"][0]') == "Traceback (most recent call last):" ]] ||
    fail "error_lines: $(job_field "$id" 'j["attempts"][0]')"
  [[ $(job_field "$id" 'j["attempts"][0]["error_lines"][-1]') == "FileNotFoundError: no such shard: shard-7" ]] ||
    fail "error_lines: $(job_field "$id" 'j["attempts"][0]')"
  # Retention: a server that keeps logs for 1s prunes this job's as it starts.
  set +e
  out=$("$T" server --data-dir "$WORK/other" --port 0 --log-max-bytes lots 2>&1); rc=$?
  set -e
  [[ $rc -eq 2 && $out == *"--log-max-bytes"*lots* ]] || fail "bad --log-max-bytes: rc=$rc $out"
  sleep 1.1
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || true
  SERVER_FLAGS=(--log-retention 1s)
  start_server
  for _ in $(seq 50); do
    out=$("$T" logs "$id" 2>&1)
    [[ $out == *"deleted by the server's log retention"* ]] && break
    sleep 0.1
  done
  [[ $out == *"deleted by the server's log retention"* && $out != *step* ]] || fail "not pruned: $out"
  [[ ! -e $D/logs/$id ]] || fail "the job's log directory is still there"
  out=$("$T" logs "$id" --grep step 2>&1)
  [[ $out == *"deleted by the server's log retention"* && $out != *"line "* ]] ||
    fail "grep after pruning: $out"
  grep -q "log retention: deleted the logs of 1 job" "$WORK/server.log" ||
    fail "no word of pruning in the server log"
  ;;
profile)
  # The example trainer on two ranks, asked for a profile of 5 steps: each rank's SDK
  # records its step spans, its agent uploads them, the CLI merges them into one trace.
  REPO=$(cd "$(dirname "$0")/../.." && pwd)
  start_agent node-0 1
  start_agent node-1 1
  wait_nodes 2
  id=$(submit "$(spec prof "name: prof
replicas: 2
resources: {gpus: 1}
command: [\"$PY\", \"$REPO/examples/trainer/trainer.py\"]
args: [--steps, \"3000\", --step-time, \"0.02\", --checkpoint-every, \"0\"]")")
  wait_state "$id" Running
  set +e
  out=$("$T" profile "$id" --steps 0 2>&1); rc=$?
  [[ $rc -eq 2 && $out == *steps* ]] || fail "--steps 0: rc=$rc $out"
  code=$(curl -H "Authorization: Bearer $(cat "$D/token")" -s -o "$WORK/body" -w '%{http_code}' \
    -X POST "$(cat "$D/server.url")/api/v1/jobs/$id/profile" -d '{"steps": 10001}')
  [[ $code == 400 && $(cat "$WORK/body") == *profile.steps*10001* ]] ||
    fail "steps 10001: $code $(cat "$WORK/body")"
  out=$(timeout 60 "$T" profile "$id" --steps 5 --wait -o "$WORK/t.json" 2>&1); rc=$?
  set -e
  [[ $rc -eq 0 ]] || fail "profile --wait: rc=$rc $out"
  [[ $out == *"rank 0: stored"*"rank 1: stored"*"wrote $WORK/t.json"* ]] || fail "profile: $out"
  "$PY" -c '
import json, sys
trace = json.load(open(sys.argv[1]))
steps = {}
for e in trace["traceEvents"]:
    if e.get("ph") == "X" and e.get("name", "").startswith("step "):
        steps.setdefault(e["pid"], []).append(e)
assert sorted(steps) == [0, 1], sorted(steps)
assert all(len(v) == 5 for v in steps.values()), {k: len(v) for k, v in steps.items()}
assert all("loss" in e["args"] and e["dur"] > 0 for v in steps.values() for e in v)
names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
assert names == {0: "rank 0", 1: "rank 1"}, names
' "$WORK/t.json" || fail "the merged trace: $(head -c 600 "$WORK/t.json")"
  pid=$("$T" profile "$id" --list --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
  [[ $pid == "p-$id-1" ]] || fail "profile id $pid"
  [[ $("$T" profile "$id" --list | grep -c stored) == 2 ]] ||
    fail "--list: $("$T" profile "$id" --list)"
  "$T" profile "$id" --get "$pid" --rank 1 -o "$WORK/r1.json" 2>/dev/null || fail "--get --rank 1"
  "$PY" -c '
import json, sys
trace = json.load(open(sys.argv[1]))
assert {e["pid"] for e in trace["traceEvents"]} == {1}, trace
' "$WORK/r1.json" || fail "rank 1's trace: $(head -c 300 "$WORK/r1.json")"
  [[ -s $D/profiles/$id/$pid/rank-0.json && -s $D/profiles/$id/$pid/rank-1.json ]] ||
    fail "not stored under the data dir: $(ls -R "$D/profiles")"
  [[ -z $(find "$WORK/agents" -path '*/profiles/*' -name 'p-*.json') ]] ||
    fail "uploaded traces left on the nodes"
  "$T" cancel "$id" >/dev/null
  wait_state "$id" Cancelled
  set +e
  out=$("$T" profile "$id" 2>&1); rc=$?
  set -e
  [[ $rc -ne 0 && $out == *"only a Running job can be profiled"* ]] ||
    fail "profile of a cancelled job: $out"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "ok ($CASE)"
