#!/usr/bin/env bash
# Containers, limits and identities end to end (docs/execution.md, docs/images.md): a
# server and two agents with 2 simulated GPUs each on loopback (port 0), a busybox image
# built here (tests/containers/make_busybox_image.sh) and loaded into the agents' image
# store with `trainyard image load`, then, through the CLI as a user would:
#
#   1. a 2-replica job of tenant vision (run as 2001:2001) in the image: each rank in its
#      own container, as 2001, seeing its GPU only; the run records the image and its
#      digest; the replica's memory limit is in its cgroup;
#   2. a higher-priority job preempts it: the notice reaches the shell inside the
#      container, which saves a checkpoint and exits 75; the next attempt resumes from it;
#   3. tenant nlp (2002:2002) reads vision's checkpoint: refused by the kernel from a host
#      process, absent from inside a container;
#   4. a job over its memory limit in a container is reported as OOMKilled;
#   5. a job whose image no node has fails, naming the image and the node;
#   6. `runs rerun` pins the image to the digest the first run used;
#   7. a tenant with no run_as runs as nobody on these root agents, not as root.
#
#   container_e2e.sh TRAINYARD_BINARY
# Output is matched read whole (grep <<<"$(...)"), never as `cmd | grep -q` (under
# pipefail, grep's early exit fails a command still writing, with SIGPIPE).
# Needs root (cgroups, other uids) and runc: CI has both; elsewhere it fails saying which.
set -euo pipefail
T=$(realpath "$1")
CASE=containers
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DEFAULT_IDENTITY=1  # the agents' default --unmapped-run-as, as on a shared cluster
source "$(dirname "$0")/lib.sh"
py() { "$PY" -c "$@"; }

[[ $(id -u) == 0 ]] || fail "needs root, to make cgroups and run ranks as other uids (CI runs as root)"
command -v runc >/dev/null || fail "no runc on PATH: scripts/setup installs it"

export TRAINYARD_IMAGE_STORE=$WORK/images
IMAGE=trainyard-test/busybox:1
bash "$REPO/tests/containers/make_busybox_image.sh" "$WORK/busybox.tar" "$IMAGE"
"$T" image load "$WORK/busybox.tar" >/dev/null
DIGEST=$("$T" image ls -o json | py 'import json,sys; print(json.load(sys.stdin)[0]["digest"])')
[[ $DIGEST == sha256:* ]] || fail "image ls: digest '$DIGEST'"

start_server
for n in node-0 node-1; do start_repo_agent "$n"; done
wait_nodes 2
"$T" nodes -o json | py '
import json, sys
for n in json.load(sys.stdin):
    c = n.get("containers", "")
    assert c.startswith("runc"), "%s: containers %r" % (n["name"], c)' ||
  fail "the agents found no container runtime: $("$T" nodes -o json)"

for t in vision:2001 nlp:2002; do
  "$T" tenants quota "${t%%:*}" --guaranteed 4 --limit 4 >/dev/null
  "$T" tenants update "${t%%:*}" --run-as "${t##*:}:${t##*:}" >/dev/null
done

submit() { "$T" submit "$1" -o json | py 'import json,sys; print(json.load(sys.stdin)["id"])'; }
state() { job_field "$1" 'j["state"]'; }
# A rank that counts steps, checkpoints every 5 (rank 0 reports the checkpoint) and on
# the preemption notice saves and exits 75; a new attempt resumes from the checkpoint.
cat >"$WORK/steps.sh" <<'EOF'
step=0
if [ -n "$TRAINYARD_RESUME_FROM" ]; then
  step=$(cat "$TRAINYARD_RESUME_FROM")
  echo "resumed from step $step"
fi
echo "rank $RANK pid $$ uid $(id -u) gpus [$CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES] devices [$(ls /dev | grep '^nvidia[0-9]' | tr '\n' ' ')]"
save() {
  f=$TRAINYARD_CHECKPOINT_DIR/step-$step
  echo "$step" >"$f.tmp" && mv "$f.tmp" "$f"
  if [ "$RANK" = 0 ]; then
    echo "{\"kind\":\"checkpoint\",\"time_ms\":$(date +%s)000,\"path\":\"$f\",\"step\":$step}" >>"$TRAINYARD_METRICS_FILE"
  fi
}
trap 'save; echo "notice at step $step: saved, exiting 75"; exit 75' USR1
while true; do
  step=$((step + 1))
  sleep 0.2
  [ $((step % 5)) = 0 ] && save
done
EOF
STEPS=$(py 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$WORK/steps.sh")

# --- 1. two replicas in containers, as 2001 -------------------------------------------
cat >"$WORK/vision.yaml" <<EOF
name: vision-train
tenant: vision
priority: best-effort
replicas: 2
image: $IMAGE
shm_size: 16Mi
experiment: {code: none}
resources: {gpus: 2, cpus: 0.5, memory: 96Mi}
checkpoint: {preempt_grace: 15s, notice_signal: SIGUSR1}
command: ["/bin/sh", "-c", $STEPS]
EOF
JOB=$(submit "$WORK/vision.yaml")
wait_until "$JOB" 'j["state"] == "Running"' 60 "Running"
for r in 0 1; do
  for _ in $(seq 100); do grep -q "^rank $r pid" <<<"$("$T" logs "$JOB" --rank "$r" 2>/dev/null)" && break; sleep 0.1; done
  line=$("$T" logs "$JOB" --rank "$r" | grep "^rank $r pid") || fail "rank $r printed nothing: $("$T" logs "$JOB" --rank "$r")"
  [[ $line == *"uid 2001 "* ]] || fail "rank $r does not run as 2001: $line"
  # Its 2 GPUs, and of the host's GPU device nodes (none with simulated GPUs) theirs only.
  [[ $line =~ gpus\ \[([0-9]),([0-9])\ ([0-9]),([0-9])\]\ devices\ \[(.*)\]$ ]] ||
    fail "rank $r: not 2 GPUs: $line"
  [[ ${BASH_REMATCH[1]},${BASH_REMATCH[2]} == "${BASH_REMATCH[3]},${BASH_REMATCH[4]}" ]] ||
    fail "rank $r: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES differ: $line"
  for d in ${BASH_REMATCH[5]}; do
    [[ $d == "nvidia${BASH_REMATCH[1]}" || $d == "nvidia${BASH_REMATCH[2]}" ]] ||
      fail "rank $r sees $d, not its GPU: $line"
  done
done
# The replica's limits are in the cgroup of the rank's process or the replica's group
# above it (host pids: the container shares the host's pid namespace): the least of them.
pid=$("$T" logs "$JOB" --rank 0 | sed -n 's/^rank 0 pid \([0-9]*\) .*/\1/p')
mem=$(grep -E '^[0-9]+:(memory|):' "/proc/$pid/cgroup" | head -1 | cut -d: -f3)
limit=
while [[ $mem == */trainyard/* ]]; do
  for f in "/sys/fs/cgroup/memory$mem/memory.limit_in_bytes" "/sys/fs/cgroup$mem/memory.max"; do
    [[ -f $f ]] || continue
    v=$(cat "$f")
    [[ $v != max && ( -z $limit || $v -lt $limit ) ]] && limit=$v
  done
  mem=${mem%/*}
done
[[ $limit == $((96 << 20)) ]] || fail "rank 0 (pid $pid): memory limit '$limit', want $((96 << 20))"
runs=$("$T" runs show "$JOB" -o json)
py 'import json,sys; r = json.loads(sys.argv[1]); assert r["image"] == sys.argv[2] and r["image_digest"] == sys.argv[3], (r.get("image"), r.get("image_digest"))' \
  "$runs" "$IMAGE" "$DIGEST" || fail "runs show: image/digest not recorded"
grep -q "$DIGEST" <<<"$("$T" job show "$JOB")" || fail "job show names no digest: $("$T" job show "$JOB")"

# --- 2. preempted in the container, resumed from its checkpoint -----------------------
for _ in $(seq 100); do
  [[ $(job_field "$JOB" 'j.get("checkpoint", {}).get("step", 0) if j.get("checkpoint") else 0') -ge 5 ]] && break
  sleep 0.1
done
cat >"$WORK/urgent.yaml" <<EOF
name: urgent
priority: production
resources: {gpus: 2}
command: ["/bin/sleep", "1"]
EOF
URGENT=$(submit "$WORK/urgent.yaml")
wait_until "$URGENT" 'j["state"] == "Succeeded"' 60 "the urgent job"
wait_until "$JOB" 'len(j["attempts"]) >= 2 and j["state"] == "Running"' 60 "the second attempt"
[[ $(job_field "$JOB" 'j["attempts"][0]["exit_reason"]') == preempted ]] ||
  fail "attempt 0 ended as $(job_field "$JOB" 'j["attempts"][0]["exit_reason"]'), want preempted"
grep -q "notice at step [0-9]*: saved, exiting 75" <<<"$("$T" logs "$JOB" --attempt 0 --rank 0)" ||
  fail "no notice inside the container: $("$T" logs "$JOB" --attempt 0 --rank 0 | tail -3)"
for _ in $(seq 100); do grep -q "resumed from step" <<<"$("$T" logs "$JOB" --rank 0 2>/dev/null)" && break; sleep 0.1; done
grep -q "resumed from step [1-9]" <<<"$("$T" logs "$JOB" --rank 0)" ||
  fail "attempt 1 did not resume: $("$T" logs "$JOB" --rank 0 | head -3)"
CKPT=$(job_field "$JOB" 'j["checkpoint"]["path"]')

# --- 3. another tenant cannot read it ---------------------------------------------------
cat >"$WORK/peek.yaml" <<EOF
name: peek
tenant: nlp
resources: {cpus: 0.2}
command: ["/bin/sh", "-c", "id -u; cat '$CKPT'"]
EOF
PEEK=$(submit "$WORK/peek.yaml")
wait_until "$PEEK" 'j["state"] in ("Failed", "Succeeded")' 30 "the peek job"
[[ $(state "$PEEK") == Failed ]] || fail "tenant nlp read vision's checkpoint: $("$T" logs "$PEEK")"
grep -q "Permission denied" <<<"$("$T" logs "$PEEK")" || fail "peek: $("$T" logs "$PEEK")"
grep -qx 2002 <<<"$("$T" logs "$PEEK")" || fail "peek did not run as 2002: $("$T" logs "$PEEK")"
sed -i "s|^resources:|image: $IMAGE\nresources:|" "$WORK/peek.yaml"
PEEK=$(submit "$WORK/peek.yaml")
wait_until "$PEEK" 'j["state"] in ("Failed", "Succeeded")' 30 "the peek job in a container"
[[ $(state "$PEEK") == Failed ]] || fail "a container of nlp read vision's checkpoint"
grep -q "No such file or directory" <<<"$("$T" logs "$PEEK")" || fail "peek in a container: $("$T" logs "$PEEK")"
"$T" cancel "$JOB" >/dev/null

# --- 4. out of memory in a container ----------------------------------------------------
cat >"$WORK/oom.yaml" <<EOF
name: hog
tenant: vision
image: $IMAGE
resources: {gpus: 1, memory: 48Mi}
command: ["/bin/sh", "-c", "x=\$(head -c 200000000 /dev/zero | tr '\\\\000' a) || exit 1"]
EOF
OOM=$(submit "$WORK/oom.yaml")
wait_until "$OOM" 'j["state"] == "Failed"' 60 "the OOM kill"
msg=$(job_field "$OOM" 'j["attempts"][0].get("message", "")')
[[ $msg == *"OOMKilled: memory limit 48Mi"* ]] || fail "hog: attempt message '$msg'"
grep -q "^ *$OOM .*OOMKilled" <<<"$("$T" jobs --all)" || fail "jobs does not say OOMKilled: $("$T" jobs --all)"

# --- 5. an image no node has -------------------------------------------------------------
cat >"$WORK/missing.yaml" <<EOF
name: missing
image: trainyard-test/nothere:1
resources: {gpus: 1}
command: ["/bin/true"]
EOF
MISSING=$(submit "$WORK/missing.yaml")
wait_until "$MISSING" 'j["state"] == "Failed"' 60 "the missing image"
msg=$("$T" job show "$MISSING")
[[ $msg == *"trainyard-test/nothere:1"* && $msg == *node-* ]] || fail "missing image: $msg"

# --- 6. rerun pins the digest ----------------------------------------------------------
RERUN=$("$T" runs rerun "$JOB" -o json | py 'import json,sys; print(json.load(sys.stdin)["id"])')
[[ $(job_field "$RERUN" 'j["spec"]["image"]') == "trainyard-test/busybox@$DIGEST" ]] ||
  fail "rerun image: $(job_field "$RERUN" 'j["spec"]["image"]')"
"$T" cancel "$RERUN" >/dev/null

# --- 7. no run_as: nobody -----------------------------------------------------------------
for image in "" "$IMAGE"; do
  cat >"$WORK/anon.yaml" <<EOF
name: anon
${image:+image: $image}
working_dir: /tmp
resources: {cpus: 0.2}
command: ["/bin/sh", "-c", "echo \$(id -u):\$(id -g)"]
EOF
  ANON=$(submit "$WORK/anon.yaml")
  wait_until "$ANON" 'j["state"] in ("Failed", "Succeeded")' 30 "the job of the default tenant"
  [[ $(state "$ANON") == Succeeded && $("$T" logs "$ANON") == 65534:65534 ]] ||
    fail "default tenant${image:+ in $image}: $(state "$ANON"), ran as '$("$T" logs "$ANON")', want nobody 65534:65534"
done
echo "PASS containers"
