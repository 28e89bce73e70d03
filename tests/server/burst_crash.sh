#!/usr/bin/env bash
# kill -9 of the server during a burst of submissions loses no acknowledged job.
#
#   burst_crash.sh TRAINYARD_BINARY [JOBS] [CLIENTS]
#
# Starts `trainyard server --port 0`, submits JOBS (1000) jobs from CLIENTS (8)
# keep-alive HTTP clients, kills the server with SIGKILL once a third of them are
# acknowledged, restarts it on the same data dir and checks, by listing every job page
# by page, that each acknowledged id is there exactly once. No agents: jobs stay Pending.
set -euo pipefail
T=$1
JOBS=${2:-1000}
CLIENTS=${3:-8}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/trainyard-burst-XXXXXX)
D=$WORK/server
export TRAINYARD_DATA_DIR=$D  # burst_crash.py reads the admin token there
SERVER_PID=

cleanup() {
  if [[ -n $SERVER_PID ]]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ ${KEEP:-} == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

fail() {
  echo "FAIL (burst-crash): $*" >&2
  tail -20 "$WORK"/server-*.log >&2 || true
  exit 1
}

start_server() {  # N: log file suffix
  rm -f "$D/server.url"
  "$T" server --data-dir "$D" --port 0 >"$WORK/server-$1.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 200); do
    grep -q "listening on" "$WORK/server-$1.log" 2>/dev/null && [[ -s $D/server.url ]] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || fail "server exited"
    sleep 0.05
  done
  fail "server did not start"
}

start_server 1
"$PY" "$HERE/burst_crash.py" submit "$(cat "$D/server.url")" "$JOBS" "$CLIENTS" \
  "$SERVER_PID" $((JOBS / 3)) "$WORK/acked" || fail "burst"
set +e
wait "$SERVER_PID"
rc=$?
set -e
[[ $rc == 137 ]] || fail "server ended with status $rc, not by SIGKILL"
SERVER_PID=

start_server 2
"$PY" "$HERE/burst_crash.py" check "$(cat "$D/server.url")" "$WORK/acked" || fail "check"
echo "ok (burst-crash)"
