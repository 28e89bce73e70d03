#!/usr/bin/env bash
# Network partitions end to end (docs/ha.md): the server, the agents, PostgreSQL and a
# client each on a host of their own, network namespaces that this test creates (and
# removes), joined by veth pairs to bridges in a "switch" namespace, on addresses of the
# benchmarking range 198.18.0.0/15 that exist only inside them. A cut detaches a host's
# port from its bridge: from then on its packets vanish, as in a real partition (no
# reset, no error; TCP retransmits into the void).
#
#   partition_e2e.sh TRAINYARD_BINARY agent
#       one server (SQLite) and two agents; a 1-GPU job writes "ATTEMPT TIME" ticks to
#       a shared file. Cut the job's agent for less than the node-lost grace: the node
#       goes NotReady, the job keeps running, and once the link is back the two
#       reconcile (no new attempt). Cut it for longer: the agent stops the task itself,
#       the server requeues the job on the other agent after node timeout + grace, and
#       the ticks show the two attempts never ran at once; back again, the old node
#       rejoins without disturbing the new attempt.
#   partition_e2e.sh TRAINYARD_BINARY leader-db
#       PostgreSQL, two servers (each with a link to the agents' network and one to the
#       database's), one agent that knows both, a running job and a stream of
#       submissions. Cut the leader from the database only: it stops at once when its
#       lease may have lapsed (exit 75), the standby leads within the lease plus a
#       renewal, every acknowledged submission is there once, the job was not
#       restarted, no GPU was held twice; healed, the old leader rejoins as a standby.
#
# Needs root (network namespaces) and iproute2; the leader-db case also PostgreSQL's
# server binaries. Exits 77 (skipped) without them, or 1 under CI.
set -euo pipefail
T_REAL=$(realpath "$1")
CASE=$2
skip() {
  echo "skipped: $*"
  [[ -n ${CI:-} ]] && exit 1
  exit 77
}
[[ $(id -u) == 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no ip command (Debian's iproute2; scripts/setup installs it)"
PGBIN=${TRAINYARD_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
if [[ $CASE == leader-db && (-z $PGBIN || ! -x $PGBIN/initdb) ]]; then
  skip "no PostgreSQL server binaries (Debian's postgresql package; scripts/setup installs it)"
fi
source "$(dirname "$0")/lib.sh"
CHECKS=$(dirname "$0")/ha_checks.py

# --- the network ------------------------------------------------------------------------
NS=ty$$-  # every namespace of this run starts so
SW=${NS}sw
HOSTS=()
teardown() {
  for h in "${HOSTS[@]}"; do ip netns del "$NS$h" 2>/dev/null || true; done
  ip netns del "$SW" 2>/dev/null || true
}
PG_PID=
trap '[[ -n $PG_PID ]] && kill -QUIT "$PG_PID" 2>/dev/null; cleanup; teardown' EXIT
ip netns add "$SW" 2>/dev/null || skip "cannot create network namespaces here (ip netns add)"
for net in app db; do
  ip -n "$SW" link add "$net" type bridge
  ip -n "$SW" link set "$net" up
done
declare -A ADDR  # "HOST NET" -> address
host() {  # NAME NET:OCTET...: a namespace with an interface on each NET (198.18.0 app, .1 db)
  local name=$1
  shift
  ip netns add "$NS$name"
  HOSTS+=("$name")
  ip -n "$NS$name" link set lo up
  for spec in "$@"; do
    local net=${spec%%:*} octet=${spec##*:}
    local subnet=$([[ $net == app ]] && echo 198.18.0 || echo 198.18.1)
    ip link add "$net" netns "$NS$name" type veth peer name "$name-$net" netns "$SW"
    ip -n "$NS$name" addr add "$subnet.$octet/24" dev "$net"
    ip -n "$NS$name" link set "$net" up
    ip -n "$SW" link set "$name-$net" master "$net" up
    ADDR["$name $net"]=$subnet.$octet
  done
}
cut() { ip -n "$SW" link set "$1-$2" nomaster; }  # HOST NET
heal() { ip -n "$SW" link set "$1-$2" master "$2"; }
spawn() {  # HOST CMD...: start CMD in HOST's namespace, in the background; its PID in
  # SPAWNED (the command itself: `ip netns exec` execs it), stopped at exit
  local h=$1
  shift
  ip netns exec "$NS$h" "$@" &
  SPAWNED=$!
  PIDS+=("$SPAWNED")
}
# The CLI (and lib.sh's helpers) run on a client host of their own.
T=$WORK/trainyard-on-client
printf '#!/bin/sh\nexec ip netns exec %q %q "$@"\n' "${NS}cli" "$T_REAL" >"$T"
chmod +x "$T"
now() { date +%s.%N; }
elapsed() { "$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
node_state() {  # NAME
  "$T" nodes -o json | "$PY" -c 'import json,sys; print(next((n["state"] for n in json.load(sys.stdin) if n["name"] == sys.argv[1]), "?"))' "$1"
}
wait_node_state() {  # NAME STATE SECONDS
  for _ in $(seq $(($3 * 10))); do
    [[ $(node_state "$1" 2>/dev/null || true) == "$2" ]] && return 0
    sleep 0.1
  done
  fail "node $1 not $2 within $3 s (it is $(node_state "$1" 2>/dev/null || echo ?))"
}
start_agent() {  # HOST SERVERS
  spawn "$1" "$T_REAL" agent --unmapped-run-as agent --server "$2" --join-token sesame --name "$1" \
    --data-dir "$WORK/agents/$1" --address "${ADDR["$1 app"]}" --simulated-gpus 1 \
    --gpu-type H100 --cpus 2 >>"$WORK/agent-$1.log" 2>&1
}
TICKS=$WORK/ticks
submit_ticker() {  # a 1-GPU job that writes "ATTEMPT TIME" to $TICKS every 0.1 s
  printf '%s\n' 'name: ticker' 'resources: {gpus: 1}' \
    "command: [/bin/sh, -c, 'while true; do echo \"\$TRAINYARD_ATTEMPT \$(date +%s.%N)\" >> $TICKS; sleep 0.1; done']" \
    >"$WORK/ticker.yaml"
  "$T" submit "$WORK/ticker.yaml" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
ticks_of_after() {  # ATTEMPT TIME: ticks of ATTEMPT written after TIME
  awk -v a="$1" -v t="$2" '$1 == a && $2 > t' "$TICKS" | wc -l
}
events_of() { "$T" job show "$1" -o json | "$PY" -c 'import json,sys; print(" ".join(e["kind"] for e in json.load(sys.stdin)["events"]))'; }

case $CASE in
agent)
  host srv app:1
  host a1 app:11
  host a2 app:12
  host cli app:100
  # Lost after 3 s of silence, given up 30 s later; the agents stop their tasks 22 s
  # into a silence (two thirds of the 33 s), SIGKILL at 27.5 s.
  spawn srv "$T_REAL" server --data-dir "$D" --listen "${ADDR["srv app"]}:0" --join-token sesame \
    --node-timeout 3s --node-lost-grace 30s --policy min_runtime=0s >"$WORK/server.log" 2>&1
  for _ in $(seq 600); do [[ -s $D/server.url ]] && break; sleep 0.05; done
  [[ -s $D/server.url ]] || fail "server did not start: $(cat "$WORK/server.log")"
  URL=$(cat "$D/server.url")
  start_agent a1 "$URL"
  start_agent a2 "$URL"
  wait_nodes 2
  JOB=$(submit_ticker)
  wait_until "$JOB" 'j["state"] == "Running"' 30 "the ticker running"
  NODE=$(job_field "$JOB" 'j["attempts"][0]["nodes"][0]')
  OTHER=$([[ $NODE == a1 ]] && echo a2 || echo a1)

  # 1. A short cut: NotReady, the job runs on, and nothing changes once it is back.
  CUT=$(now)
  cut "$NODE" app
  wait_node_state "$NODE" NotReady 12
  NOT_READY=$(now)
  sleep 1
  [[ $(job_field "$JOB" 'j["state"]') == Running ]] || fail "job not Running while its node is NotReady"
  [[ $(ticks_of_after 0 "$CUT") -gt 20 ]] || fail "the job stopped ticking during the cut"
  heal "$NODE" app
  HEALED=$(now)
  wait_node_state "$NODE" Ready 15
  BACK=$(now)
  grep -q True <<<"$(job_field "$JOB" 'j["state"] == "Running" and len(j["attempts"]) == 1')" ||
    fail "the job was disturbed by a short cut: $("$T" job show "$JOB" -o json | head -c 600)"
  kinds=$(events_of "$JOB")
  [[ $kinds == *"NodeUnreachable NodeReachable"* ]] || fail "events after a short cut: $kinds"
  echo "short cut of $NODE: NotReady after $(elapsed "$CUT" "$NOT_READY") s; healed after $(elapsed "$CUT" "$HEALED") s, Ready again $(elapsed "$HEALED" "$BACK") s later; the job ran on (1 attempt)"

  # 2. A long cut: the agent stops the task, the server requeues the job elsewhere.
  sleep 2  # heartbeats flow again
  CUT=$(now)
  cut "$NODE" app
  for _ in $(seq 600); do
    [[ $(job_field "$JOB" 'len(j["attempts"])' 2>/dev/null || echo 1) == 2 ]] && break
    sleep 0.1
  done
  REQUEUED=$(now)
  job_field "$JOB" 'len(j["attempts"]) == 2 and j["attempts"][0]["exit_reason"] == "node-lost"' |
    grep -q True || fail "not requeued as node-lost: $("$T" job show "$JOB" -o json | head -c 800)"
  [[ $(job_field "$JOB" 'j["attempts"][1]["nodes"][0]') == "$OTHER" ]] || fail "attempt 1 not on $OTHER"
  wait_until "$JOB" 'j["state"] == "Running"' 30 "attempt 1 running"
  grep -q "no contact with the server" "$WORK/agent-$NODE.log" ||
    fail "the cut-off agent did not stop its task: $(tail -5 "$WORK/agent-$NODE.log")"
  sleep 1
  heal "$NODE" app
  wait_node_state "$NODE" Ready 20
  sleep 2  # its reports of the old attempt arrive
  grep -q True <<<"$(job_field "$JOB" 'j["state"] == "Running" and len(j["attempts"]) == 2')" ||
    fail "the rejoining node disturbed attempt 1: $("$T" job show "$JOB" -o json | head -c 800)"
  # Never both at once: the last tick of attempt 0 comes before the first of attempt 1.
  "$PY" - "$TICKS" <<'PY' || fail "the two attempts ran at once"
import sys
last0 = max(float(t) for a, t in (l.split() for l in open(sys.argv[1])) if a == "0")
first1 = min(float(t) for a, t in (l.split() for l in open(sys.argv[1])) if a == "1")
assert last0 < first1, f"attempt 0 ticked until {last0}, attempt 1 from {first1}"
print(f"attempt 0 stopped {first1 - last0:.1f} s before attempt 1 started")
PY
  LAST0=$(awk '$1 == 0 {t = $2} END {print t}' "$TICKS")
  FIRST1=$(awk '$1 == 1 {print $2; exit}' "$TICKS")
  "$PY" "$CHECKS" gpus "$T" || fail "a GPU was bound twice"
  echo "ok (agent): long cut of $NODE: its agent stopped the task $(elapsed "$CUT" "$LAST0") s in, the server requeued the job $(elapsed "$CUT" "$REQUEUED") s in (node timeout 3 s + grace 30 s), attempt 1 ran on $OTHER from $(elapsed "$CUT" "$FIRST1") s"
  ;;

leader-db)
  host pg db:10
  host s1 app:1 db:1
  host s2 app:2 db:2
  host a1 app:11
  host cli app:100
  # PostgreSQL on the database network only, as the postgres user.
  PG=$WORK/pg
  mkdir -p "$PG"
  chown postgres "$PG"
  chmod 755 "$WORK"
  runuser -u postgres -- "$PGBIN/initdb" -D "$PG/data" -A trust -U trainyard >"$WORK/initdb.log" 2>&1 ||
    fail "initdb: $(tail -3 "$WORK/initdb.log")"
  echo "host all all 198.18.1.0/24 trust" >>"$PG/data/pg_hba.conf"
  spawn pg runuser -u postgres -- "$PGBIN/postgres" -D "$PG/data" -c "listen_addresses=${ADDR["pg db"]}" \
    -c "unix_socket_directories=$PG" -c fsync=off >"$WORK/postgres.log" 2>&1
  for _ in $(seq 100); do [[ -S $PG/.s.PGSQL.5432 ]] && break; sleep 0.1; done
  [[ -S $PG/.s.PGSQL.5432 ]] || fail "postgres did not start: $(tail -3 "$WORK/postgres.log")"
  PG_PID=$(head -1 "$PG/data/postmaster.pid")
  STORE="postgresql://trainyard@${ADDR["pg db"]}:5432/postgres"
  server() {  # HOST
    spawn "$1" "$T_REAL" server --data-dir "$WORK/$1" --listen "${ADDR["$1 app"]}:8470" \
      --store "$STORE" --leader-timeout 3s --join-token sesame --node-timeout 5s \
      --policy min_runtime=0s >>"$WORK/$1.log" 2>&1
    eval "PID_$1=$SPAWNED"
  }
  server s1
  for _ in $(seq 600); do [[ -s $WORK/s1/server.url ]] && break; sleep 0.05; done
  [[ -s $WORK/s1/server.url ]] || fail "s1 did not lead: $(cat "$WORK/s1.log")"
  server s2
  for _ in $(seq 600); do grep -q "standby at" "$WORK/s2.log" && break; sleep 0.05; done
  grep -q "standby at" "$WORK/s2.log" || fail "s2 is not a standby: $(cat "$WORK/s2.log")"
  URL1=http://${ADDR["s1 app"]}:8470
  URL2=http://${ADDR["s2 app"]}:8470
  export TRAINYARD_SERVER="$URL1,$URL2" TRAINYARD_TOKEN=$(cat "$WORK/s1/token")
  start_agent a1 "$URL1,$URL2"
  wait_nodes 1
  JOB=$(submit_ticker)
  wait_until "$JOB" 'j["state"] == "Running"' 30 "the ticker running"

  # Submissions stream in through the CLI (which follows the leader) across the cut.
  printf 'name: filler\ncommand: [/bin/true]\n' >"$WORK/filler.yaml"
  stream_submits "$WORK/filler.yaml" 50
  sleep 1.5
  CUT=$(now)
  cut s1 db
  # s1 stops by itself (exit 75) once its lease may have lapsed; s2 takes over.
  for _ in $(seq 150); do kill -0 "$PID_s1" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$PID_s1" 2>/dev/null && fail "s1 still runs 15 s after losing the database: $(tail -5 "$WORK/s1.log")"
  set +e
  wait "$PID_s1"
  CODE=$?
  set -e
  S1_GONE=$(now)
  [[ $CODE == 75 ]] || fail "s1 exited with $CODE, expected 75: $(tail -5 "$WORK/s1.log")"
  grep -q "lease was not renewed" "$WORK/s1.log" || fail "s1 did not say why: $(tail -5 "$WORK/s1.log")"
  for _ in $(seq 200); do grep -q "leading" "$WORK/s2.log" && break; sleep 0.05; done
  grep -q "leading" "$WORK/s2.log" || fail "s2 did not take over: $(tail -5 "$WORK/s2.log")"
  LED=$(now)
  printf 'name: after\ncommand: [/bin/true]\n' >"$WORK/after.yaml"
  AFTER=$("$T" submit "$WORK/after.yaml" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  wait_until "$AFTER" 'j["state"] == "Succeeded"' 30 "a job after the take-over to run"
  SCHEDULING=$(now)
  wait $STREAM
  wait_node_state a1 Ready 20

  "$PY" "$CHECKS" acked "$WORK/acked" filler "$T" 20 || fail "after the take-over: see above"
  grep -q True <<<"$(job_field "$JOB" 'j["state"] == "Running" and len(j["attempts"]) == 1')" ||
    fail "the job was restarted or stopped: $("$T" job show "$JOB" -o json | head -c 600)"
  [[ $(ticks_of_after 0 "$LED") -gt 5 ]] || fail "the job stopped ticking"
  "$PY" "$CHECKS" gpus "$T" || fail "a GPU was bound twice"
  # Healed, the old leader comes back as a standby of the new one.
  heal s1 db
  server s1
  for _ in $(seq 600); do grep -q "standby at.*the leader is $URL2" "$WORK/s1.log" && break; sleep 0.05; done
  grep -q "standby at.*the leader is $URL2" "$WORK/s1.log" || fail "s1 did not rejoin as a standby: $(tail -3 "$WORK/s1.log")"
  echo "ok (leader-db): leader cut from PostgreSQL -> it exited $(elapsed "$CUT" "$S1_GONE") s later, the standby led $(elapsed "$CUT" "$LED") s after the cut, a job submitted then ran to its end $(elapsed "$CUT" "$SCHEDULING") s after it (lease 3 s)"
  ;;
*)
  echo "unknown case $CASE; expected agent or leader-db" >&2
  exit 2
  ;;
esac
