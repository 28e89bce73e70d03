#!/usr/bin/env bash
# Hardened job inputs end to end (docs/job-spec.md, Paths and Secrets): a server and an
# agent, both with --allowed-dirs, on loopback.
#   - paths outside the server's allowed dirs, or with "..", are refused at submit;
#   - a working_dir symlink inside an allowed dir that leads outside fails the task at
#     the agent, with a message saying why;
#   - shell metacharacters in argv reach the program verbatim and run nothing;
#   - secret_env values reach the rank but `job show` (text and JSON) shows <redacted>;
#   - the default checkpoint dir is DATA_DIR/checkpoints/TENANT/JOB.
#
#   hardened_e2e.sh TRAINYARD_BINARY
set -euo pipefail
T=$1
CASE=hardened-inputs
source "$(dirname "$0")/lib.sh"

A=$WORK/allowed
mkdir -p "$A/work" "$WORK/outside"
ln -s "$WORK/outside" "$A/escape"
SERVER_FLAGS=(--allowed-dirs "$A,$D/checkpoints")
start_server
"$T" agent --unmapped-run-as agent --server "$(cat "$D/server.url")" --join-token "$(cat "$D/join-token")" \
  --name node-0 --data-dir "$WORK/agents/node-0" --simulated-gpus 1 --gpu-type H100 \
  --allowed-dirs "$A,$D/checkpoints" >>"$WORK/agent-node-0.log" 2>&1 &
PIDS+=("$!")
wait_nodes 1

spec() {  # NAME BODY -> file
  printf '%s\n' "$2" >"$WORK/$1.yaml"
  echo "$WORK/$1.yaml"
}
submit() {  # FILE -> id
  "$T" submit "$1" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
refused() {  # FILE EXPECTED-SUBSTRING
  set +e
  out=$("$T" submit "$1" 2>&1)
  rc=$?
  set -e
  [[ $rc -ne 0 && $out == *"$2"* ]] || fail "submit $1: rc=$rc, expected \"$2\" in: $out"
}
wait_state() {  # ID STATE
  for _ in $(seq 200); do
    s=$(job_field "$1" 'j["state"]' 2>/dev/null || true)
    [[ $s == "$2" ]] && return 0
    sleep 0.1
  done
  fail "job $1 is ${s:-?}, expected $2"
}

# The server: lexical rules at submission; nothing stored.
refused "$(spec outside "name: outside
command: [/bin/true]
working_dir: $WORK/outside")" "working_dir: must lie in one of the directories the admin allows"
refused "$(spec dotdot "name: dotdot
command: [/bin/true]
working_dir: $A/../outside")" 'working_dir: must not have a ".." component'
refused "$(spec tenant "name: tenant
tenant: vision
command: [/bin/true]
checkpoint: {dir: $D/checkpoints/nlp/1}")" "outside tenant vision's part"
[[ $("$T" jobs --all -o json) == "[]" ]] || fail "a refused job was stored"

# The agent: a symlink inside an allowed dir that leads outside.
id=$(submit "$(spec escape "name: escape
command: [/bin/true]
working_dir: $A/escape")")
wait_state "$id" Failed
msg=$(job_field "$id" 'j["attempts"][0]["message"]')
[[ $msg == *"working_dir $A/escape resolves to $(cd "$WORK/outside" && pwd -P), outside the directories this agent allows"* ]] ||
  fail "escape message: $msg"

# Metacharacters are data; secrets reach the rank and nobody else.
id=$(submit "$(spec good "name: good
command: [/usr/bin/printf, '[%s] [%s] [%s]\n']
args: ['\$(touch $WORK/pwned); rm -rf $A', '\`touch $WORK/pwned\`', '\$HF_TOKEN']
working_dir: $A/work
env: {HF_TOKEN: hf_e2e_Sup3rSecret, LR: '0.1'}
secret_env: [HF_TOKEN]")")
wait_state "$id" Succeeded
sleep 0.5  # the last log chunk
log=$("$T" logs "$id")
[[ $log == "[\$(touch $WORK/pwned); rm -rf $A] [\`touch $WORK/pwned\`] [\$HF_TOKEN]" ]] ||
  fail "argv not verbatim: $log"
[[ ! -e $WORK/pwned && -d $A/work ]] || fail "a shell ran the arguments"
show=$("$T" job show "$id")
json=$("$T" job show "$id" -o json)
[[ $show == *'"HF_TOKEN": "<redacted>"'* && $show != *Sup3r* ]] || fail "job show: $show"
[[ $json == *'<redacted>'* && $json != *Sup3r* ]] || fail "job show -o json: $json"

id=$(submit "$(spec env "name: env
command: [/bin/sh, -c, 'test \"\$HF_TOKEN\" = hf_e2e_Sup3rSecret && echo ckpt=\$TRAINYARD_CHECKPOINT_DIR']
env: {HF_TOKEN: hf_e2e_Sup3rSecret}
secret_env: [HF_TOKEN]")")
wait_state "$id" Succeeded
sleep 0.5
log=$("$T" logs "$id")
[[ $log == "ckpt=$D/checkpoints/default/$id" ]] || fail "rank env: $log"
echo "ok ($CASE)"
