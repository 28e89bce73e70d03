# Shared by the control-plane end-to-end scripts (e2e.sh, examples_e2e.sh): a server
# and agents on loopback (port 0) in a temporary directory, stopped on exit, and
# small helpers over the CLI's JSON output.
#
# The sourcing script sets T (the trainyard binary) and CASE, and may set
# NODE_TIMEOUT (default 3s), NODE_LOST_GRACE (default 8s), SERVER_FLAGS (an array of more
# `trainyard server` flags), AGENT_FLAGS (more `trainyard agent` flags for
# start_repo_agent) and define fail_extra (more to print on failure).
WORK=$(mktemp -d /tmp/trainyard-e2e-XXXXXX)
D=$WORK/server
export TRAINYARD_DATA_DIR=$D
PIDS=()
PY=/usr/bin/python3  # starts fast; the pyenv shim on PATH takes seconds under load
[[ -x $PY ]] || PY=python3

cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [[ ${KEEP:-} == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# Prints where each thread of process PID is (gdb, when installed): for a server that
# hangs, the failure then says on what.
stacks() {
  command -v gdb >/dev/null || return 0
  echo "--- threads of $1" >&2
  timeout 30 gdb -batch -p "$1" -ex "thread apply all bt 12" 2>/dev/null |
    grep -E "^Thread|^#" | head -200 >&2 || true
}

fail() {
  echo "FAIL ($CASE): $*" >&2
  echo "--- server log" >&2; tail -20 "$WORK/server.log" >&2 || true
  for f in "$WORK"/agent-*.log; do echo "--- $f" >&2; tail -10 "$f" >&2 || true; done
  if declare -F fail_extra >/dev/null; then fail_extra; fi
  exit 1
}

SERVER_PID=
start_server() {  # [PORT]: 0 (any) by default
  rm -f "$D/server.url"
  # A lost node's jobs are requeued NODE_TIMEOUT + NODE_LOST_GRACE after its last
  # heartbeat (its agent stops them itself two thirds of the way): long enough to ride
  # out the server restarts the tests make, short enough for the agent-loss case.
  "$T" server --data-dir "$D" --port "${1:-0}" --node-timeout "${NODE_TIMEOUT:-3s}" \
    --node-lost-grace "${NODE_LOST_GRACE:-8s}" --policy min_runtime=0s ${SERVER_FLAGS[@]+"${SERVER_FLAGS[@]}"} >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  for _ in $(seq 200); do
    grep -q "listening on" "$WORK/server.log" 2>/dev/null && [[ -s $D/server.url ]] && return 0
    sleep 0.05
  done
  fail "server did not start"
}

wait_nodes() {  # N: until N nodes are Ready
  for _ in $(seq 200); do
    n=$("$T" nodes -o json 2>/dev/null | "$PY" -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin) if n["state"]=="Ready"))' 2>/dev/null || echo 0)
    [[ $n -ge $1 ]] && return 0
    sleep 0.05
  done
  fail "expected $1 Ready nodes"
}

job_field() {  # ID PYTHON-EXPR over j
  "$T" job show "$1" -o json | "$PY" -c "import json,sys; j=json.load(sys.stdin); print($2)"
}

# The agents run the ranks of tenants without run_as as their own user, as `trainyard up`
# does (the jobs of these tests write to $WORK, which is root's alone); a script that sets
# DEFAULT_IDENTITY=1 gets what a shared cluster's root agent does: nobody.
unmapped_run_as() { [[ ${DEFAULT_IDENTITY:-} == 1 ]] || echo "--unmapped-run-as=agent"; }

start_repo_agent() {  # NAME: 2 simulated H100s, from the repository root ($REPO) as
  # `trainyard up` run there would start it, so job specs' relative paths resolve
  (cd "$REPO" && exec "$T" agent $(unmapped_run_as) --server "$(cat "$D/server.url")" \
    --join-token "$(cat "$D/join-token")" --name "$1" --data-dir "$WORK/agents/$1" \
    --simulated-gpus 2 --gpu-type H100 --cpus 2 ${AGENT_FLAGS[@]+"${AGENT_FLAGS[@]}"} \
    >>"$WORK/agent-$1.log" 2>&1) &
  PIDS+=("$!")
}

wait_until() {  # ID PYTHON-CONDITION-OVER-j SECONDS WHAT
  for _ in $(seq $(($3 * 5))); do
    [[ $(job_field "$1" "bool($2)" 2>/dev/null || true) == True ]] && return 0
    sleep 0.2
  done
  fail "job $1: timed out waiting for $4 (state $(job_field "$1" 'j["state"]' 2>/dev/null || echo ?))"
}

stream_submits() {  # SPEC COUNT: submits SPEC COUNT times 0.1 s apart through "$T", in the
  # background (its PID in STREAM); the ids acknowledged go to $WORK/acked, failures
  # (a server going away mid-request) to $WORK/submit.err
  (for _ in $(seq "$2"); do
    "$T" submit "$1" -o json 2>>"$WORK/submit.err" |
      "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])' >>"$WORK/acked" 2>/dev/null || true
    sleep 0.1
  done) &
  STREAM=$!
}
