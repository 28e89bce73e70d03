#!/usr/bin/env bash
# TLS end to end (docs/tls.md): a throwaway CA and a server certificate for 127.0.0.1
# (IP SAN) made with the openssl command line; `trainyard server --tls-cert --tls-key`
# on port 0, an agent with --ca-cert, a job through the CLI with --ca-cert and
# TRAINYARD_CA_CERT, and `trainyard up` with TLS. Clients that do not trust the CA
# (curl without --cacert, the CLI and the agent without --ca-cert) must be refused with
# a certificate error, and nothing may be served in plain HTTP on the port.
#
#   tls_e2e.sh TRAINYARD_BINARY
set -euo pipefail
T=$1
CASE=tls
source "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || { echo "SKIP: no openssl command (scripts/setup installs it)"; exit 77; }

# --- a throwaway CA, a server certificate it signs, and a CA nobody should trust
C=$WORK/certs
mkdir -p "$C"
ossl() { openssl "$@" 2>>"$WORK/openssl.log" || fail "openssl $*: $(tail -3 "$WORK/openssl.log")"; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=Trainyard test CA" -keyout "$C/ca.key" -out "$C/ca.crt"
ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=127.0.0.1" -keyout "$C/server.key" -out "$C/server.csr"
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
  >"$C/server.ext"
ossl x509 -req -in "$C/server.csr" -CA "$C/ca.crt" -CAkey "$C/ca.key" -CAcreateserial -days 2 \
  -extfile "$C/server.ext" -out "$C/server.crt"
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=Some other CA" -keyout "$C/other.key" -out "$C/other.crt"

# --- bad flags and files: refused with the flag and the file named
expect_refusal() {  # WHAT EXPECTED-TEXT ARGS...
  local what=$1 want=$2
  shift 2
  set +e
  out=$(timeout 20 "$T" server --data-dir "$WORK/bad" --port 0 "$@" 2>&1)
  rc=$?
  set -e
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "$what: server started (rc $rc): $out"
  [[ $out == *"$want"* ]] || fail "$what: expected \"$want\" in: $out"
}
expect_refusal "cert without key" "--tls-cert: needs --tls-key" --tls-cert "$C/server.crt"
expect_refusal "key without cert" "--tls-key: needs --tls-cert" --tls-key "$C/server.key"
expect_refusal "missing cert" "--tls-cert $C/nope.crt: cannot read it" \
  --tls-cert "$C/nope.crt" --tls-key "$C/server.key"
expect_refusal "key of another certificate" \
  "--tls-key $C/other.key: the key does not match the certificate in --tls-cert $C/server.crt" \
  --tls-cert "$C/server.crt" --tls-key "$C/other.key"
expect_refusal "key given as the certificate" "--tls-cert $C/server.key: holds no PEM certificate" \
  --tls-cert "$C/server.key" --tls-key "$C/server.key"

# --- the server, with TLS
rm -f "$D/server.url"
"$T" server --data-dir "$D" --port 0 --node-timeout 3s --policy min_runtime=0s \
  --tls-cert "$C/server.crt" --tls-key "$C/server.key" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
for _ in $(seq 200); do
  grep -q "listening on" "$WORK/server.log" 2>/dev/null && [[ -s $D/server.url ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "server exited"
  sleep 0.05
done
URL=$(cat "$D/server.url")
[[ $URL == https://127.0.0.1:* ]] || fail "server.url is $URL, expected https://127.0.0.1:PORT"
grep -q "listening on https://" "$WORK/server.log" || fail "server does not say it serves HTTPS"

# curl (on the public health check, which needs no API token): verified with the CA,
# refused without it; no plain HTTP on the port.
code=$(curl -sS --cacert "$C/ca.crt" -o /dev/null -w '%{http_code}' "$URL/api/v1/healthz") ||
  fail "curl --cacert: $code"
[[ $code == 200 ]] || fail "curl --cacert: HTTP $code"
set +e
out=$(curl -sS -o /dev/null "$URL/api/v1/healthz" 2>&1); rc=$?
set -e
[[ $rc -eq 60 && $out == *certificate* ]] || fail "curl without --cacert: rc $rc: $out"
set +e
out=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "http://${URL#https://}/api/v1/healthz" 2>&1)
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "plain HTTP to the TLS port answered: $out"

# --- an agent that trusts the CA joins; one that does not is refused
start_agent() {  # NAME [AGENT FLAGS...]
  local name=$1
  shift
  "$T" agent --unmapped-run-as agent --server "$URL" --join-token "$(cat "$D/join-token")" --name "$name" \
    --data-dir "$WORK/agents/$name" --simulated-gpus 2 --gpu-type H100 "$@" \
    >>"$WORK/agent-$name.log" 2>&1 &
  PIDS+=("$!")
  LAST_AGENT=$!
}
start_agent node-0 --ca-cert "$C/ca.crt"
start_agent untrusting
UNTRUSTING=$LAST_AGENT

export TRAINYARD_CA_CERT=$C/ca.crt
wait_nodes 1

wait_state() {  # ID STATE
  for _ in $(seq 200); do
    s=$(job_field "$1" 'j["state"]' 2>/dev/null || true)
    [[ $s == "$2" ]] && return 0
    sleep 0.1
  done
  fail "job $1 is ${s:-?}, expected $2"
}
printf '%s\n' 'name: over-tls' 'resources: {gpus: 1}' \
  'command: ["/bin/sh", "-c", "echo hello over TLS from rank $RANK"]' >"$WORK/job.yaml"
id=$("$T" submit "$WORK/job.yaml" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
wait_state "$id" Succeeded
for _ in $(seq 50); do
  logs=$("$T" logs "$id")
  [[ $logs == *"hello over TLS from rank 0"* ]] && break
  sleep 0.1
done
[[ $logs == *"hello over TLS from rank 0"* ]] || fail "job log: $logs"

grep -q "certificate" "$WORK/agent-untrusting.log" ||
  fail "agent without --ca-cert: no certificate error in its log"
"$T" nodes -o json | "$PY" -c 'import json,sys; n=[x["name"] for x in json.load(sys.stdin)]; assert "untrusting" not in n, n' ||
  fail "the agent without --ca-cert registered"
kill -TERM "$UNTRUSTING"

# --- the CLI: --ca-cert, TRAINYARD_CA_CERT, the server's own certificate; refused without
unset TRAINYARD_CA_CERT
"$T" nodes --ca-cert "$C/ca.crt" >/dev/null || fail "CLI with --ca-cert"
TRAINYARD_CA_CERT=$C/server.crt "$T" jobs --all >/dev/null ||
  fail "CLI trusting the server's own certificate"
for how in none other; do
  set +e
  if [[ $how == none ]]; then
    out=$("$T" nodes 2>&1)
  else
    out=$("$T" nodes --ca-cert "$C/other.crt" 2>&1)
  fi
  rc=$?
  set -e
  # httplib's name for the error, or http::DescribeError's words for it.
  [[ $rc -ne 0 && ($out == *SSLServerVerification* || $out == *"certificate failed"*) ]] ||
    fail "CLI with CA '$how': rc $rc: $out"
done

# --- agent flag errors
set +e
out=$("$T" agent --server "http://${URL#https://}" --ca-cert "$C/ca.crt" --join-token x \
  --name n --data-dir "$WORK/agents/n" --simulated-gpus 0 2>&1); rc=$?
set -e
[[ $rc -eq 2 && $out == *"--ca-cert"* ]] || fail "agent --ca-cert with http://: rc $rc: $out"
set +e
out=$("$T" agent --server "$URL" --ca-cert "$C/nope.crt" --join-token x \
  --name n --data-dir "$WORK/agents/n" --simulated-gpus 0 2>&1); rc=$?
set -e
[[ $rc -eq 2 && $out == *"--ca-cert $C/nope.crt: cannot read it"* ]] ||
  fail "agent with a missing --ca-cert: rc $rc: $out"

# --- `trainyard up` with TLS: its agents trust the server's certificate
U=$WORK/up
"$T" up --data-dir "$U" --port 0 --nodes 2 --gpus-per-node 1 \
  --tls-cert "$C/server.crt" --tls-key "$C/server.key" >"$WORK/up.log" 2>&1 &
UP_PID=$!
PIDS+=("$UP_PID")
for _ in $(seq 200); do
  [[ -s $U/server.url ]] && break
  sleep 0.05
done
[[ $(cat "$U/server.url") == https://* ]] || fail "up: server.url is not https: $(cat "$U/server.url")"
# up writes server.url before it prints its banner (after starting its agents): wait for it.
for _ in $(seq 200); do
  grep -q "export TRAINYARD_CA_CERT=$C/server.crt" "$WORK/up.log" && break
  sleep 0.05
done
grep -q "export TRAINYARD_CA_CERT=$C/server.crt" "$WORK/up.log" || fail "up: no TRAINYARD_CA_CERT hint"
fail_extra() {
  cat "$WORK/up.log" >&2
  tail -5 "$U"/agents/*/agent.log >&2 || true
}
TRAINYARD_CA_CERT=$C/ca.crt TRAINYARD_DATA_DIR=$U wait_nodes 2
kill -TERM "$UP_PID"
wait "$UP_PID" || fail "up did not stop cleanly"
echo "PASS (tls)"
