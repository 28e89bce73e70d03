#!/usr/bin/env bash
# daemon_exec.sh TRAINYARD: `trainyard` runs trainyard-daemon for the daemons' commands
# (src/cli/app.h): in the same process, with argv[0] kept, and with a clear error when
# trainyard-daemon is not installed beside it. Client commands load no HTTP server,
# TLS, SQLite or PostgreSQL library.
set -euo pipefail
T=$1
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Help of a daemon command comes from trainyard-daemon, named as typed.
out=$("$T" server --help) || fail "trainyard server --help exited $?"
grep -q "Usage: trainyard server" <<<"$out" || fail "no server usage: ${out:0:200}"
grep -q -- "--store" <<<"$out" || fail "server help lacks --store"
# (The help into a variable first: `grep -q` in a pipe may close it before the help is
# written, and pipefail would then count the writer's SIGPIPE as a failure.)
help=$("$T" --help)
grep -q "^  agent " <<<"$help" || fail "trainyard --help does not list agent"

# The same process: exec, not a child (the pid a supervisor started is the server's),
# with argv[0] as typed.
tmp=$(mktemp -d)
pid=
cleanup() {
  [[ -z $pid ]] || kill "$pid" 2> /dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
"$T" server --port 0 --data-dir "$tmp/data" > "$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
  [[ -s $tmp/data/server.url ]] && break
  sleep 0.05
done
[[ -s $tmp/data/server.url ]] || fail "the server did not start: $(cat "$tmp/server.log")"
[[ $(readlink "/proc/$pid/exe") == */trainyard-daemon ]] || fail "pid $pid is not trainyard-daemon"
[[ $(tr '\0' ' ' < "/proc/$pid/cmdline") == "$T server "* ]] || fail "argv[0] not kept"
kill "$pid"
wait "$pid" || true
pid=

# Without trainyard-daemon beside it: exit 1 naming the missing file.
cp "$T" "$tmp/trainyard"
set +e
msg=$("$tmp/trainyard" server --port 0 2>&1)
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "without trainyard-daemon: exit $rc, want 1"
grep -q "cannot run $tmp/trainyard-daemon" <<<"$msg" || fail "no clear error: $msg"
# Client commands still work there.
"$tmp/trainyard" version > /dev/null || fail "version without trainyard-daemon"

# Only libc-level libraries at start (ldd lists what the loader maps).
if libs=$(ldd "$T" 2>/dev/null); then
  for lib in libcpp-httplib libssl libcrypto libsqlite3 libpq; do
    ! grep -q "$lib" <<<"$libs" || fail "trainyard links $lib at start"
  done
fi
echo "ok"
