#!/usr/bin/python3
"""Hostile requests against a real `trainyard server` (loopback, port 0).

  hostile_input.py TRAINYARD_BINARY

Each request must get a 4xx answer whose JSON body names the problem (or, where the
HTTP layer refuses the request before any handler, a 4xx status); after every one the
server must still answer, and at the end nothing may have been stored: no job, no
node. Python standard library only; raw sockets where http.client would refuse to
send the request.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

T = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="trainyard-hostile-")
DATA = os.path.join(WORK, "server")
failures = []


def start():
    log = open(os.path.join(WORK, "server.log"), "wb")
    p = subprocess.Popen([T, "server", "--data-dir", DATA, "--port", "0"], stdout=log, stderr=log)
    url_file = os.path.join(DATA, "server.url")
    for _ in range(400):
        if os.path.exists(url_file) and os.path.getsize(url_file) > 0:
            with open(url_file) as f:
                return p, urllib.parse.urlsplit(f.read().strip())
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit("server did not start; log:\n" + open(os.path.join(WORK, "server.log")).read())


server, URL = start()
HOST, PORT = URL.hostname, URL.port
with open(os.path.join(DATA, "join-token")) as f:
    JOIN = f.read().strip()
with open(os.path.join(DATA, "token")) as f:  # the admin token of the first start
    TOKEN = f.read().strip()
AUTH = {"Authorization": "Bearer " + TOKEN}


def request(method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(HOST, PORT, timeout=30)
    try:
        conn.request(method, path, body, AUTH if headers is None else headers)
        r = conn.getresponse()
        return r.status, r.read()
    except (ConnectionError, http.client.HTTPException, socket.timeout) as e:
        return None, str(e).encode()
    finally:
        conn.close()


def raw(data):
    """Sends bytes as they are; returns the status line's code (None if closed)."""
    with socket.create_connection((HOST, PORT), timeout=10) as s:
        try:
            s.sendall(data)  # no half-close: the server answers before it reads on
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = b""
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    if not reply.startswith(b"HTTP/1."):
        return None, reply
    return int(reply.split(b" ", 2)[1]), reply


def alive():
    status, _ = request("GET", "/api/v1/healthz")
    return status == 200 and server.poll() is None


def check(name, status, body, want_message=True, expect=None):
    ok = status is not None and 400 <= status < 500 and (expect is None or status in expect)
    message = ""
    if ok and want_message:
        try:
            message = json.loads(body).get("error", "")
        except (ValueError, AttributeError):
            message = ""
        ok = bool(message)
    if not alive():
        failures.append(f"{name}: the server stopped answering")
        return
    if not ok:
        failures.append(f"{name}: HTTP {status}, body {body[:200]!r}")
    else:
        print(f"ok  {name}: {status} {message[:110]}")


YAML = {"Content-Type": "application/yaml", **AUTH}
JSON = {"Content-Type": "application/json", **AUTH}
AGENT = {"Authorization": "Bearer " + JOIN, "Content-Type": "application/json"}
good = "name: t\ncommand: [\"true\"]\nresources: {gpus: 1}\n"

# Sizes: a whole body over the request limit, a spec over the spec limit.
check("body over 4 MiB", *request("POST", "/api/v1/jobs", b"a" * (4 << 20) + b"a", YAML),
      want_message=False, expect={413})
check("spec over 1 MiB", *request("POST", "/api/v1/jobs",
                                  good + "script: \"" + "x" * (1 << 20) + "\"\n", YAML))
# Encodings and structure.
check("invalid UTF-8", *request("POST", "/api/v1/jobs", good.encode() + b"labels: {a: \"\xff\xfe\"}\n", YAML))
check("NUL byte", *request("POST", "/api/v1/jobs", good.encode() + b"\x00", YAML))
check("YAML that never ends (yaml-cpp LoadAll)", *request("POST", "/api/v1/jobs", b",", YAML))
check("deeply nested JSON", *request("POST", "/api/v1/jobs", "[" * 100000 + "]" * 100000, JSON))
check("deeply nested YAML", *request("POST", "/api/v1/jobs", "name: " + "[" * 20000 + "]" * 20000, YAML))
check("deeply nested agent JSON", *request("POST", "/api/v1/agent/heartbeat", "{\"a\":" * 100000 + "1" + "}" * 100000, AGENT))
check("YAML alias bomb", *request("POST", "/api/v1/jobs",
                                  "a: &a [x, x, x, x, x, x, x, x, x]\n" +
                                  "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8)) +
                                  "name: t\ncommand: [\"true\"]\n", YAML))
# Numbers.
for label, value in [("1e400", "1e400"), ("2^64", "18446744073709551616"), ("-1", "-1"),
                     ("NaN", ".nan"), ("1e19", "10000000000000000000")]:
    check(f"gpus {label}", *request("POST", "/api/v1/jobs",
                                    f"name: t\ncommand: [\"true\"]\nresources: {{gpus: {value}}}\n", YAML))
check("memory 1e30 bytes", *request("POST", "/api/v1/jobs", good + "time_limit: 99999999999999999999h\n", YAML))
check("replicas 2^31", *request("POST", "/api/v1/jobs", good + "replicas: 2147483648\n", YAML))
check("array of 10^9", *request("POST", "/api/v1/jobs?array=0-1000000000", good, YAML))
check("list limit 10^12", *request("GET", "/api/v1/jobs?limit=1000000000000"))
check("list unknown parameter", *request("GET", "/api/v1/jobs?stat=Pending"))
check("job id 2^63", *request("GET", "/api/v1/jobs/9223372036854775808"))
check("job id negative", *request("GET", "/api/v1/jobs/-1"))
# Paths.
check("path traversal in job id", *request("GET", "/api/v1/jobs/..%2F..%2Fetc%2Fpasswd"))
check("path traversal in logs", *request("GET", "/api/v1/jobs/1/logs?rank=../../etc/passwd"))
check("path traversal in node", *request("GET", "/api/v1/nodes/..%2F..%2Fetc"))
status, body = raw(b"GET /api/v1/../../../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
check("raw path traversal", status, body, want_message=False)
# Tokens: none, malformed, forged, revoked, an agent's join token, oversized.
check("submit without a token", *request("POST", "/api/v1/jobs", good, {"Content-Type": "application/yaml"}),
      expect={401})
check("malformed token", *request("POST", "/api/v1/jobs", good,
                                  {**YAML, "Authorization": "Bearer tyt_../../etc"}), expect={401})
check("forged secret", *request("POST", "/api/v1/jobs", good,
                                {"Authorization": "Bearer " + TOKEN[:-1] + ("0" if TOKEN[-1] != "0" else "1"),
                                 "Content-Type": "application/yaml"}), expect={401})
check("join token as a user token", *request("POST", "/api/v1/jobs", good,
                                             {"Authorization": "Bearer " + JOIN,
                                              "Content-Type": "application/yaml"}), expect={401})
check("basic auth instead of a bearer token", *request("GET", "/api/v1/jobs", None,
                                                       {"Authorization": "Basic YWRtaW46YWRtaW4="}),
      expect={401})
check("token of 64 KiB", *request("GET", "/api/v1/jobs", None, {"Authorization": "Bearer " + "a" * 65536}))
status, body = request("POST", "/api/v1/tokens", json.dumps({"description": "to revoke"}), JSON)
if status != 201:
    failures.append(f"token create: {status} {body[:200]!r}")
else:
    made = json.loads(body)
    status, body = request("DELETE", "/api/v1/tokens/" + made["id"])
    if status != 200:
        failures.append(f"token revoke: {status} {body[:200]!r}")
    check("revoked token", *request("POST", "/api/v1/jobs", good,
                                    {"Authorization": "Bearer " + made["token"],
                                     "Content-Type": "application/yaml"}), expect={401})
check("token with a negative lifetime", *request("POST", "/api/v1/tokens",
                                                 json.dumps({"expires_in": "-1s"}), JSON), expect={400})
check("user with a path for a name", *request("POST", "/api/v1/users",
                                              json.dumps({"name": "../../etc", "tenant": "t"}), JSON),
      expect={400})
# Agents: a join token is needed, and a wrong one changes nothing.
check("register without token", *request("POST", "/api/v1/agent/register", "{}", JSON), expect={401, 403})
check("register with a wrong token", *request("POST", "/api/v1/agent/register", "{}",
                                              {"Authorization": "Bearer nope", **JSON}), expect={401, 403})
check("register with a bad node name", *request("POST", "/api/v1/agent/register", json.dumps(
    {"node": {"name": "../../x", "address": "127.0.0.1", "gpus": [], "cpus": 1, "memory_mib": 1}}), AGENT))
check("heartbeat of an unknown node", *request("POST", "/api/v1/agent/heartbeat",
                                               json.dumps({"node": "ghost", "seq": 1, "tasks": []}), AGENT))
# HTTP framing.
status, body = raw(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (256 << 10) + b"\r\n\r\n")
check("header of 256 KiB", status, body, want_message=False)
# A body announced far beyond the limit (or "negative", read as huge): the HTTP
# library discards what arrives until the read timeout instead of answering 413 at
# once, so the check is that nothing is allocated for it and others are served.
for label, length in [("Content-Length beyond the limit", b"99999999999"),
                      ("negative Content-Length", b"-5")]:
    with socket.create_connection((HOST, PORT), timeout=10) as held:
        held.sendall(b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: " + length +
                     b"\r\n\r\nname: t\n")
        time.sleep(0.2)
        if alive():
            print(f"ok  {label}: others still served while it is held open")
        else:
            failures.append(f"{label}: the server stopped answering")
status, body = raw(b"NOT-HTTP\r\n\r\n")
if not alive():
    failures.append("garbage request line: the server stopped answering")


def raw_answer(data):
    """raw(), with the body of the answer only."""
    status, reply = raw(data)
    return status, reply.split(b"\r\n\r\n", 1)[-1]


# Framing the HTTP layer refuses (src/http/server.h), each with a JSON error naming it.
JOBS = b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
for label, head, want in [
        ("Transfer-Encoding with Content-Length (smuggling)",
         b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400),
        ("Content-Length twice", b"Content-Length: 5\r\nContent-Length: 5\r\n", 400),
        ("Content-Length as a list", b"Content-Length: 5, 5\r\n", 400),
        ("Transfer-Encoding gzip", b"Transfer-Encoding: gzip\r\n", 400),
        ("Transfer-Encoding twice", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400),
        ("header line of 9 KiB", b"X-Big: " + b"a" * (9 << 10) + b"\r\n", 431),
        ("101 header fields", b"".join(b"X-%d: v\r\n" % i for i in range(101)), 431)]:
    check(label, *raw_answer(JOBS + head + b"\r\n0\r\n\r\n"), expect={want})
check("request target of 9 KiB", *raw_answer(b"GET /api/v1/jobs?name=" + b"a" * (9 << 10) +
                                             b" HTTP/1.1\r\nHost: x\r\n\r\n"), expect={414})
# A coding the server does not implement is 501, a server error by its class.
status, body = raw_answer(JOBS + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
try:
    message = json.loads(body).get("error", "")
except (ValueError, AttributeError):
    message = ""
if status != 501 or "gzip" not in message:
    failures.append(f"Transfer-Encoding gzip, chunked: HTTP {status}, body {body[:200]!r}")
else:
    print(f"ok  Transfer-Encoding gzip, chunked: {status} {message[:110]}")

# Nothing stored.
status, body = request("GET", "/api/v1/jobs?limit=10")
if status != 200 or json.loads(body).get("jobs", json.loads(body)) not in ([], {}):
    failures.append(f"jobs after the hostile requests: {status} {body[:300]!r}")
status, body = request("GET", "/api/v1/nodes")
if status != 200 or json.loads(body) not in ([], {"nodes": []}):
    failures.append(f"nodes after the hostile requests: {status} {body[:300]!r}")
status, body = request("GET", "/api/v1/users")
if status != 200 or [u["name"] for u in json.loads(body)["users"]] != ["admin"]:
    failures.append(f"users after the hostile requests: {status} {body[:300]!r}")
# The refused changes are on record, with who tried them.
status, body = request("GET", "/api/v1/audit?actor=anonymous&limit=1000")
if status != 200 or not any(e["status"] == 401 for e in json.loads(body)["entries"]):
    failures.append(f"audit of refused requests: {status} {body[:300]!r}")

server.send_signal(signal.SIGTERM)
try:
    server.wait(15)
except subprocess.TimeoutExpired:
    server.kill()
if failures:
    print("\n".join("FAIL " + f for f in failures), file=sys.stderr)
    print("--- server log", file=sys.stderr)
    print(open(os.path.join(WORK, "server.log"), errors="replace").read()[-3000:], file=sys.stderr)
shutil.rmtree(WORK, ignore_errors=True)
sys.exit(1 if failures else 0)
