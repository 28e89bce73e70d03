#!/usr/bin/env bash
# Fail-over end to end (docs/ha.md): a throwaway PostgreSQL (Debian's, on a Unix socket
# in a temporary directory: no port), two `trainyard server --store postgres://...` on
# loopback (port 0) and one agent that knows both. Checks:
#   - one leads, the other is a standby that answers 503 naming the leader;
#   - kill -9 of the leader while a gang job runs and submissions stream in: the standby
#     leads within the lease (2 s here) plus a renewal period, and is scheduling again;
#   - every acknowledged submission is there exactly once; the running job was not
#     restarted (one attempt, its ranks adopted); no GPU is held by two jobs.
# Exits 77 (skipped) without PostgreSQL's server binaries, or 1 under CI.
#
#   ha_e2e.sh TRAINYARD_BINARY
set -euo pipefail
T=$(realpath "$1")
CASE=failover
PGBIN=${TRAINYARD_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
if [[ -z $PGBIN || ! -x $PGBIN/initdb ]]; then
  echo "skipped: no PostgreSQL server binaries (Debian's postgresql package; scripts/setup installs it)"
  [[ -n ${CI:-} ]] && exit 1
  exit 77
fi
source "$(dirname "$0")/lib.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)

# PostgreSQL refuses to run as root: as root, run it as the postgres user.
PG=$WORK/pg
mkdir -p "$PG"
as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[[ $(id -u) == 0 ]] && chown postgres "$PG" && chmod 755 "$WORK"
as_pg "$PGBIN/initdb" -D "$PG/data" -A trust -U trainyard >"$WORK/initdb.log" 2>&1 || fail "initdb: $(tail -3 "$WORK/initdb.log")"
as_pg "$PGBIN/postgres" -D "$PG/data" -c listen_addresses= -c "unix_socket_directories=$PG" \
  -c fsync=off >"$WORK/postgres.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do [[ -S $PG/.s.PGSQL.5432 ]] && break; sleep 0.1; done
[[ -S $PG/.s.PGSQL.5432 ]] || fail "postgres did not start: $(tail -3 "$WORK/postgres.log")"
# The postmaster itself (the PID above is runuser's): stopped at exit with SIGQUIT, an
# immediate shutdown, before lib.sh's cleanup removes its directory.
PG_PID=$(head -1 "$PG/data/postmaster.pid")
trap 'kill -QUIT "$PG_PID" 2>/dev/null || true; cleanup' EXIT
STORE="postgresql:///postgres?host=$PG&user=trainyard"

server() {  # NAME: a server on port 0 with its own data dir, sharing the store
  "$T" server --data-dir "$WORK/$1" --port 0 --store "$STORE" --leader-timeout 2s \
    --join-token sesame --node-timeout 5s --policy min_runtime=0s >"$WORK/$1.log" 2>&1 &
  PIDS+=("$!")
  eval "PID_$1=$!"
}
server a
for _ in $(seq 600); do [[ -s $WORK/a/server.url ]] && break; sleep 0.05; done
if [[ ! -s $WORK/a/server.url ]]; then
  stacks "$PID_a"
  fail "server a did not lead: $(cat "$WORK/a.log")"
fi
URL_A=$(cat "$WORK/a/server.url")
server b
for _ in $(seq 600); do grep -q "standby at" "$WORK/b.log" && break; sleep 0.05; done
URL_B=$(grep -o "standby at http://[0-9.:]*" "$WORK/b.log" | head -1 | cut -d' ' -f3)
[[ -n $URL_B ]] || fail "server b is not a standby: $(cat "$WORK/b.log")"
body=$(curl -s "$URL_B/api/v1/jobs")
[[ $body == *'"standby":true'* && $body == *"$URL_A"* ]] || fail "standby answered $body"

export TRAINYARD_SERVER="$URL_A,$URL_B" TRAINYARD_TOKEN=$(cat "$WORK/a/token")
for n in n0 n1; do
  (cd "$REPO" && exec "$T" agent --unmapped-run-as agent --server "$URL_B,$URL_A" --join-token sesame --name $n \
    --data-dir "$WORK/agents/$n" --simulated-gpus 2 --gpu-type H100 --cpus 2 \
    >>"$WORK/agent-$n.log" 2>&1) &
  PIDS+=("$!")
done
wait_nodes 2
# A 2-replica gang of the example trainer, 1 GPU a replica, long enough to outlive this.
sed -e 's/"--steps", "2000"/"--steps", "100000"/' \
  -e 's/resources: {cpus: 1, memory: 1Gi}/resources: {cpus: 1, memory: 1Gi, gpus: 1}/' \
  "$REPO/examples/trainer/job.yaml" >"$WORK/gang.yaml"
GANG=$("$T" submit "$WORK/gang.yaml" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
wait_until "$GANG" 'j["state"] == "Running"' 30 "the gang running"

# Submissions stream in (through the CLI, which follows the leader) while the leader dies.
printf 'name: filler\nresources: {gpus: 1}\ncommand: [/bin/sleep, "600"]\n' >"$WORK/filler.yaml"
stream_submits "$WORK/filler.yaml" 60
sleep 1.5
KILLED=$(date +%s.%N)
kill -9 "$PID_a"
for _ in $(seq 200); do grep -q "leading" "$WORK/b.log" && break; sleep 0.05; done
grep -q "leading" "$WORK/b.log" || fail "server b did not take over: $(tail -5 "$WORK/b.log")"
LED=$(date +%s.%N)
# Scheduling again: a job submitted now runs to its end (it needs no GPU).
printf 'name: after\ncommand: [/bin/true]\n' >"$WORK/after.yaml"
AFTER=$("$T" submit "$WORK/after.yaml" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
wait_until "$AFTER" 'j["state"] == "Succeeded"' 30 "a job after the fail-over to run"
SCHEDULING=$(date +%s.%N)
wait $STREAM

# Nothing acknowledged is lost or doubled; the gang was not restarted; no GPU was held
# by two jobs at once, now or at any time across both leaders.
CHECKS=$(dirname "$0")/ha_checks.py
"$PY" "$CHECKS" acked "$WORK/acked" filler "$T" 30 || fail "after the fail-over: see above"
job_field "$GANG" 'j["state"] == "Running" and len(j["attempts"]) == 1 and all(r["state"] == "running" for r in j["ranks"])' |
  grep -q True || fail "the gang was restarted or stopped: $("$T" job show "$GANG" -o json | head -c 600)"
"$PY" "$CHECKS" gpus "$T" || fail "a GPU was bound twice"
"$PY" -c "import sys; k,l,s=map(float,sys.argv[1:]); print(f'ok (failover): leader killed -> standby leading {l-k:.1f} s, a job submitted then ran to its end {s-k:.1f} s (lease 2 s)')" "$KILLED" "$LED" "$SCHEDULING"
