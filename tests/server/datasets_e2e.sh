#!/usr/bin/env bash
# Datasets end to end (docs/datasets.md): a server and two agents on loopback (port 0)
# with a 1 MiB dataset cache each, a directory standing for shared storage, and the CLI
# as a user would run it:
#
#   1. `datasets register` hashes the directory and registers its version; registering
#      it again reads nothing and changes nothing; `ls` and `show` list it;
#   2. a 2-replica job with `stage: local` waits while each node copies the version into
#      its cache, then both ranks start and read the copy (TRAINYARD_DATA_CORPUS), which
#      is exactly the version; the run records corpus@<version>;
#   3. new content is a new version; a job with `stage: none` reads the source itself;
#   4. `runs rerun` of the first job reads the first version, from the cache;
#   5. bad input: an unknown dataset or version is refused at submission, naming it; a
#      version larger than the nodes' caches fails the job, naming dataset, version and
#      node.
#
#   datasets_e2e.sh TRAINYARD_BINARY
# Output is matched read whole (grep <<<"$(...)"), never as `cmd | grep -q`.
set -euo pipefail
T=$(realpath "$1")
CASE=datasets
REPO=$(cd "$(dirname "$0")/../.." && pwd)
AGENT_FLAGS=(--data-cache-size 1Mi)
source "$(dirname "$0")/lib.sh"
py() { "$PY" -c "$@"; }

SRC=$WORK/shared/corpus
"$PY" - "$SRC" <<'EOF'
import os, sys
root = sys.argv[1]
for i in range(200):
    d = os.path.join(root, "shard-%d" % (i % 8))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "part-%03d.bin" % i), "wb") as f:
        f.write(bytes([i % 251]) * 4096)
EOF

start_server
for n in node-0 node-1; do start_repo_agent "$n"; done
wait_nodes 2

# 1. Register, idempotently; list and show.
out=$("$T" datasets register corpus --source "$SRC" --description "test corpus")
grep -q "^registered corpus sha256:" <<<"$out" || fail "register: $out"
V1=$(awk '/^registered/ {print $3}' <<<"$out")
grep -q "200 files, 800.0 KiB; hashed 200" <<<"$out" || fail "register: $out"
out=$("$T" datasets register corpus --source "$SRC")
grep -q "^unchanged: corpus $V1" <<<"$out" || fail "register again: $out"
grep -q "hashed 0 (0 B)" <<<"$out" || fail "register again read files: $out"
out=$("$T" datasets ls)
grep -q "^corpus .*(cluster-wide) .*1 .*${V1:0:19} .*200 .*800.0 KiB .*$SRC" <<<"$out" || fail "ls: $out"
out=$("$T" datasets show corpus)
grep -q "^Latest: *$V1" <<<"$out" && grep -q "About: *test corpus" <<<"$out" || fail "show: $out"
out=$("$T" datasets show corpus --files)
[[ $(grep -c "shard-" <<<"$out") == 200 ]] || fail "show --files: $out"

submit() { "$T" submit "$1" -o json | py 'import json,sys; print(json.load(sys.stdin)["id"])'; }
state() { job_field "$1" 'j["state"]'; }
events() { "$T" job show "$1" 2>/dev/null | sed -n "/^events:/,\$p" || true; }

# 2. Staged on both nodes before either rank starts; each reads its node's copy.
cat >"$WORK/staged.yaml" <<EOF
name: read-staged
replicas: 2
resources: {gpus: 2}  # a node each
experiment: {code: none}
data: [{dataset: corpus, stage: local}]
command: [sh, -c, 'echo "data=\$TRAINYARD_DATA_CORPUS files=\$(find "\$TRAINYARD_DATA_CORPUS" -type f | wc -l) sum=\$(cat "\$TRAINYARD_DATA_CORPUS"/shard-3/part-003.bin | cksum) mode=\$(stat -c %a "\$TRAINYARD_DATA_CORPUS/shard-3/part-003.bin")"']
EOF
A=$(submit "$WORK/staged.yaml")
wait_until "$A" 'j["state"] in ("Succeeded", "Failed")' 60 "the staged job to end"
[[ $(state "$A") == Succeeded ]] || fail "job $A: $(state "$A"): $(job_field "$A" 'j["reason"]')"
ev=$(events "$A")
grep -q "Staged.*data staged on all 2 node(s)" <<<"$ev" || fail "job $A events: $ev"
WANT=$(cksum <"$SRC/shard-3/part-003.bin")
for r in 0 1; do
  log=$("$T" logs "$A" --rank "$r")
  grep -q "files=200 sum=$WANT" <<<"$log" || fail "job $A rank $r: $log"
  grep -q "data=$WORK/agents/node-$r/datasets/${V1#sha256:}" <<<"$log" ||
    grep -q "data=$WORK/agents/node-$((1 - r))/datasets/${V1#sha256:}" <<<"$log" ||
    fail "job $A rank $r read elsewhere than its node's cache: $log"
  grep -q "mode=444" <<<"$log" || fail "job $A rank $r: the cached copy is not read-only: $log"
done
for n in node-0 node-1; do
  grep -q "datasets: staged corpus $V1 (200 files, 800.0 KiB)" "$WORK/agent-$n.log" ||
    fail "agent $n did not say it staged: $(tail -5 "$WORK/agent-$n.log")"
done
run=$("$T" runs show "$A" -o json)
[[ $(py 'import json,sys; print(json.load(sys.stdin)["data_version"])' <<<"$run") == "corpus@$V1" ]] ||
  fail "run $A data_version: $run"

# 3. New content, new version; stage: none reads the source where it is.
"$PY" -c 'open("'"$SRC"'/extra.txt", "w").write("more\n")'
out=$("$T" datasets register corpus --source "$SRC")
V2=$(awk '/^registered/ {print $3}' <<<"$out")
[[ $V2 == sha256:* && $V2 != "$V1" ]] || fail "register new content: $out"
grep -q "hashed 1 (5 B)" <<<"$out" || fail "re-register read more than the new file: $out"
cat >"$WORK/direct.yaml" <<EOF
name: read-direct
resources: {gpus: 1}
experiment: {code: none}
data: [{dataset: corpus, stage: none}]
command: [sh, -c, 'echo "data=\$TRAINYARD_DATA_CORPUS files=\$(find "\$TRAINYARD_DATA_CORPUS" -type f | wc -l)"']
EOF
B=$(submit "$WORK/direct.yaml")
wait_until "$B" 'j["state"] in ("Succeeded", "Failed")' 30 "the direct job to end"
log=$("$T" logs "$B")
grep -q "data=$SRC files=201" <<<"$log" || fail "job $B: $log"
[[ $(job_field "$B" 'j["spec"]["data"][0]["version"]') == "$V2" ]] || fail "job $B version"

# 4. A rerun reads what the run read: the first version, already cached.
out=$("$T" runs rerun "$A")
grep -q "data corpus@$V1" <<<"$out" || fail "rerun: $out"
C=$(awk '{print $3}' <<<"$out")
wait_until "$C" 'j["state"] in ("Succeeded", "Failed")' 60 "the rerun to end"
[[ $(state "$C") == Succeeded ]] || fail "rerun $C: $(job_field "$C" 'j["reason"]')"
log=$("$T" logs "$C" --rank 0)
grep -q "files=200 sum=$WANT" <<<"$log" || fail "rerun $C read another version: $log"

# 5. Bad input.
set +e
out=$("$T" submit <(printf 'name: x\ncommand: [true]\ndata: [nope]\n') 2>&1); rc=$?
set -e
[[ $rc != 0 ]] && grep -q 'data\[0\].dataset: no dataset "nope"' <<<"$out" || fail "unknown dataset: $rc $out"
set +e
out=$("$T" submit <(printf 'name: x\ncommand: [true]\ndata: [{dataset: corpus, version: "sha256:%064d"}]\n' 0) 2>&1); rc=$?
set -e
[[ $rc != 0 ]] && grep -q "dataset corpus has no version" <<<"$out" && grep -q "$V2" <<<"$out" ||
  fail "unknown version: $rc $out"
set +e
out=$("$T" datasets register corpus --source "$WORK/nowhere" 2>&1); rc=$?
set -e
[[ $rc == 2 ]] && grep -q "not a directory" <<<"$out" || fail "register a missing source: $rc $out"
"$PY" -c '
import os
os.makedirs("'"$WORK"'/shared/big", exist_ok=True)
open("'"$WORK"'/shared/big/blob", "wb").write(b"x" * (2 << 20))'
"$T" datasets register big --source "$WORK/shared/big" >/dev/null
cat >"$WORK/big.yaml" <<EOF
name: read-big
resources: {gpus: 1}
data: [{dataset: big, stage: local}]
command: [true]
EOF
D=$(submit "$WORK/big.yaml")
wait_until "$D" 'j["state"] in ("Succeeded", "Failed")' 30 "the job of a dataset too large to end"
reason=$(job_field "$D" 'j["reason"]')
[[ $(state "$D") == Failed ]] || fail "job $D: $(state "$D"): $reason"
grep -q "staging dataset big sha256:.* on node node-[01] failed: dataset big sha256:.* is 2.0 MiB, more than node node-[01]'s dataset cache holds (1.0 MiB" <<<"$reason" ||
  fail "job $D reason: $reason"
echo "PASS ($CASE)"
