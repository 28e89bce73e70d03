#!/usr/bin/env bash
# The examples in examples/ run under a real local cluster: `trainyard server --port 0`
# and two `trainyard agent` processes with simulated GPUs, started from the repository
# root as `trainyard up` would be, so the example job specs run unchanged except for
# shorter `args`. Driven through the CLI the way a user would.
#
#   examples_e2e.sh TRAINYARD_BINARY CASE     CASE: trainer | ddp
#
#   trainer: examples/trainer/job.yaml is preempted by a higher-priority job, saves a
#            checkpoint, exits 75, is requeued and resumes from that step, then succeeds.
#   ddp:     examples/ddp/job.yaml (PyTorch DDP, gloo) trains on two ranks and succeeds
#            with a falling loss. Exit 77 (skipped) when /usr/bin/python3 has no torch.
set -euo pipefail
T=$(realpath "$1")
CASE=$2
REPO=$(cd "$(dirname "$0")/../.." && pwd)
NODE_TIMEOUT=5s
source "$(dirname "$0")/lib.sh"

fail_extra() {  # the jobs' state and last log lines
  for id in ${JOBS:-}; do
    echo "--- job $id" >&2; "$T" job show "$id" >&2 || true
    for r in 0 1; do echo "--- job $id rank $r" >&2; "$T" logs "$id" --rank $r 2>&1 | tail -8 >&2 || true; done
  done
}

wait_state() {  # ID STATE SECONDS
  wait_until "$1" "j['state'] == '$2'" "$3" "$2"
}

# An example's job spec, normalised by `trainyard validate`, with shorter args and a
# change (a Python statement over `spec`), as JSON.
example_spec() {  # FILE NAME CHANGE ARGS...
  local file=$1 name=$2 change=$3
  shift 3
  "$T" validate -o json "$REPO/$file" | "$PY" -c "
import json, sys
spec = json.load(sys.stdin)[0]['spec']
spec['args'] = sys.argv[1:]
$change
print(json.dumps(spec))" "$@" >"$WORK/$name.json"
  echo "$WORK/$name.json"
}

submit() {  # FILE -> id
  "$T" submit "$1" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

start_server
start_repo_agent node-0
start_repo_agent node-1
wait_nodes 2

case $CASE in
trainer)
  # 2 ranks x 1 CPU, plus a (simulated) GPU each: the scheduler preempts only for and
  # from jobs that hold GPUs. A checkpoint every 25 steps (~1 s), 500 steps (~20 s).
  id=$(submit "$(example_spec examples/trainer/job.yaml trainer \
    'spec["resources"]["gpus"] = 1' --steps 500 --step-time 0.04 --checkpoint-every 25 --seed 1)")
  JOBS=$id
  wait_state "$id" Running 30
  wait_until "$id" 'j["checkpoint"] and j["checkpoint"]["step"] > 0' 30 "a checkpoint"
  read -r before_step before_ms < <(job_field "$id" \
    'j["checkpoint"]["step"], j["checkpoint"]["completed_at_ms"]' | tr -d '(),')

  # Every GPU for a production job: the trainer (priority normal) must go.
  printf '%s\n' 'name: high' 'priority: production' 'replicas: 2' 'resources: {gpus: 2}' \
    'command: ["/bin/sleep", "1"]' >"$WORK/high.yaml"
  high=$(submit "$WORK/high.yaml")
  JOBS="$id $high"
  wait_until "$id" 'j["attempts"][0].get("end_time_ms")' 60 "attempt 0 to end"
  [[ $(job_field "$id" 'j["attempts"][0]["exit_reason"]') != succeeded ]] ||
    fail "the trainer finished before the preemption (machine too slow?)"
  wait_state "$high" Succeeded 30
  wait_state "$id" Succeeded 60
  sleep 0.5  # the last log chunk

  a0=$(job_field "$id" 'j["attempts"][0]')
  [[ $(job_field "$id" 'j["attempts"][0]["exit_reason"]') == preempted ]] ||
    fail "attempt 0 not preempted: $a0"
  [[ $(job_field "$id" 'len(j["attempts"])') == 2 ]] || fail "expected 2 attempts"
  kinds=$(job_field "$id" '" ".join(e["kind"] for e in j["events"])')
  [[ $kinds == *Preempting*Requeued*Running* ]] || fail "events: $kinds"

  # Attempt 0: the notice reached the trainer, it checkpointed and exited 75.
  l0=$("$T" logs "$id" --attempt 0 --rank 0)
  line=$(grep -E '^rank 0: preempted at step [0-9]+; checkpoint saved, exiting with 75$' <<<"$l0") ||
    fail "rank 0 did not save and exit 75 on the notice: $(tail -3 <<<"$l0")"
  step=$(sed -E 's/.* at step ([0-9]+);.*/\1/' <<<"$line")
  # Ranks of this trainer stop independently (rank 0 alone saves), not in lockstep.
  [[ $("$T" logs "$id" --attempt 0 --rank 1) =~ "rank 1: preempted at step "[0-9]+"; checkpoint saved, exiting with 75" ]] ||
    fail "rank 1 did not exit 75 on the notice"
  (( step >= before_step )) || fail "preempted at step $step, before checkpoint $before_step"

  # Requeued to resume from the checkpoint taken on the notice.
  requeued=$(job_field "$id" '[e["message"] for e in j["events"] if e["kind"] == "Requeued"][0]')
  ckpt=$(printf '%s/step-%08d.ckpt' "$(dirname "$(job_field "$id" 'j["checkpoint"]["path"]')")" "$step")
  [[ $requeued == *"resumes from $ckpt" ]] || fail "requeued without the step-$step checkpoint: $requeued"

  # Attempt 1 started with TRAINYARD_RESUME_FROM set to it and went on from that step.
  l1=$("$T" logs "$id" --attempt 1 --rank 0)
  [[ $l1 == *"rank 0: resumed from $ckpt at step $step"* ]] || fail "attempt 1: $(head -3 <<<"$l1")"
  [[ $l1 == *"rank 0 step $((step + 1))/500 "* ]] || fail "attempt 1 did not go on at step $((step + 1))"
  [[ $l1 != *"rank 0 step 1/500 "* ]] || fail "attempt 1 started over"
  [[ $l1 == *"rank 0: done, 500 steps"* ]] || fail "attempt 1 did not finish"

  # Lost work is at most the time since the checkpoint seen before the preemption.
  lost=$(job_field "$id" 'j["attempts"][0]["lost_work_ms"]')
  end_ms=$(job_field "$id" 'j["attempts"][0]["end_time_ms"]')
  (( lost >= 0 && lost <= end_ms - before_ms )) ||
    fail "lost work $lost ms > $((end_ms - before_ms)) ms since the step-$before_step checkpoint"
  echo "preempted at step $step (checkpoint before: step $before_step), lost work $lost ms"
  ;;
ddp)
  if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "SKIP: /usr/bin/python3 cannot import torch (apt-get install python3-torch)"
    exit 77
  fi
  id=$(submit "$(example_spec examples/ddp/job.yaml ddp pass \
    --steps 150 --checkpoint-every 50 --log-every 10)")
  JOBS=$id
  wait_state "$id" Succeeded 100
  sleep 0.5  # the last log chunk
  l0=$("$T" logs "$id" --rank 0)
  l1=$("$T" logs "$id" --rank 1)
  r0=$(grep -E '^rank 0 of 2 \(local 0\): rendezvous at [0-9.]+:[0-9]+$' <<<"$l0") ||
    fail "rank 0 env: $(head -2 <<<"$l0")"
  r1=$(grep -E '^rank 1 of 2 \(local 0\): rendezvous at [0-9.]+:[0-9]+$' <<<"$l1") ||
    fail "rank 1 env: $(head -2 <<<"$l1")"
  [[ ${r0#*rendezvous at } == "${r1#*rendezvous at }" ]] ||
    fail "ranks disagree on MASTER_ADDR:MASTER_PORT: $r0 / $r1"
  [[ $l0 == *"rank 0: done, 150 steps"* && $l1 == *"rank 1: done, 150 steps"* ]] ||
    fail "a rank did not finish"
  losses=$(sed -nE 's/^rank 0 step [0-9]+\/150 loss ([0-9.]+) .*/\1/p' <<<"$l0")
  [[ $(wc -l <<<"$losses") -ge 10 ]] || fail "too few loss lines in rank 0's log: $losses"
  "$PY" -c '
import sys
loss = [float(x) for x in sys.argv[1].split()]
first, last = sum(loss[:3]) / 3, sum(loss[-3:]) / 3
sys.exit(0 if last < 0.8 * first else f"loss did not fall: {loss}")' "$losses" ||
    fail "rank 0 loss did not fall"
  echo "rendezvous ${r0#*rendezvous at }; loss $(head -1 <<<"$losses") -> $(tail -1 <<<"$losses")"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "ok ($CASE)"
