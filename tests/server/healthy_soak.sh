#!/usr/bin/env bash
# No false alerts: a healthy local cluster (server with the built-in alert rules, 3
# agents with 2 simulated H100s each) runs the example trainer jobs for DURATION
# seconds (default 600), and not one alert may fire; alerts that only went pending are
# reported. Not part of `make test` (it takes 10 minutes): `make soak`.
#
#   healthy_soak.sh TRAINYARD_BINARY [DURATION_SECONDS]
set -euo pipefail
T=$(realpath "$1")
DURATION=${2:-600}
CASE=healthy-soak
REPO=$(cd "$(dirname "$0")/../.." && pwd)
NODE_TIMEOUT=15s
source "$(dirname "$0")/lib.sh"
py() { "$PY" -c "$@"; }

SERVER_FLAGS=(--alert-interval 1s)
start_server
for n in node-0 node-1 node-2; do start_repo_agent "$n"; done
wait_nodes 3

# The example trainer as shipped (2 ranks), long enough to run throughout, and a
# 3-rank variant on GPUs with frequent checkpoints.
steps=$((DURATION * 20 + 400))
"$T" validate -o json "$REPO/examples/trainer/job.yaml" | py "
import json, sys
spec = json.load(sys.stdin)[0]['spec']
spec['args'] = ['--steps', '$steps', '--step-time', '0.05', '--checkpoint-every', '200', '--seed', '1']
print(json.dumps(spec))" >"$WORK/a.json"
"$T" validate -o json "$REPO/examples/trainer/job.yaml" | py "
import json, sys
spec = json.load(sys.stdin)[0]['spec']
spec['name'] = 'example-trainer-gpus'
spec['replicas'] = 3
spec['resources']['gpus'] = 1
spec['args'] = ['--steps', '$steps', '--step-time', '0.05', '--checkpoint-every', '100', '--seed', '2', '--lr', '0.02']
print(json.dumps(spec))" >"$WORK/b.json"
a=$("$T" submit "$WORK/a.json" -o json | py 'import json,sys; print(json.load(sys.stdin)["id"])')
b=$("$T" submit "$WORK/b.json" -o json | py 'import json,sys; print(json.load(sys.stdin)["id"])')
wait_until "$a" 'j["state"] == "Running"' 60 "Running"
wait_until "$b" 'j["state"] == "Running"' 60 "Running"
echo "jobs $a and $b running; watching for ${DURATION}s"

end=$(($(date +%s) + DURATION))
while [[ $(date +%s) -lt $end ]]; do
  sleep 10
  for j in $a $b; do
    s=$(job_field "$j" 'j["state"]')
    [[ $s == Running ]] || fail "job $j is $s before the end of the run"
  done
done

"$T" alerts events --limit 1000 -o json >"$WORK/events.json"
py '
import json, sys
events = json.load(open(sys.argv[1]))["events"]
fired = [e for e in events if e["kind"] in ("firing", "action")]
pending = [e for e in events if e["kind"] == "pending"]
for e in pending:
    print("pending only:", e["rule"], e["labels"], e["detail"])
for e in fired:
    print("FALSE ALERT:", e["kind"], e["rule"], e["labels"], e["detail"])
sys.exit(1 if fired else 0)
' "$WORK/events.json" || fail "alerts fired on a healthy cluster"
curl -sf -H "Authorization: Bearer $(cat "$D/token")" "$(cat "$D/server.url")/metrics" |
  grep -E "^trainyard_alert_(evaluations_total|evaluation_seconds|signal_series)" || true
echo "PASS healthy soak: ${DURATION}s, 2 jobs (5 ranks), no alert fired"
