"""Client side of burst_crash.sh (Python 3 standard library only).

  burst_crash.py submit URL JOBS CLIENTS KILL_PID KILL_AFTER ACKED_FILE
      Submits JOBS jobs from CLIENTS threads, each over one keep-alive connection.
      Once KILL_AFTER submissions have been acknowledged, sends SIGKILL to KILL_PID.
      Writes the id of every acknowledged (2xx) submission to ACKED_FILE, one a line.
  burst_crash.py check URL ACKED_FILE
      Lists every job with paging and checks that each acknowledged id is there
      exactly once and that no id is listed twice. Exit 1 on a violation.
"""

import http.client
import json
import os
import signal
import sys
import threading
import urllib.parse


def auth_header(url):
    """The admin token the server wrote beside server.url (TRAINYARD_DATA_DIR)."""
    path = os.path.join(os.environ.get("TRAINYARD_DATA_DIR", ""), "token")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {"Authorization": "Bearer " + f.read().strip()}


def connect(url):
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30)


def submit(url, jobs, clients, kill_pid, kill_after, acked_file):
    lock = threading.Lock()
    state = {"next": 0, "acked": [], "errors": 0, "rejected": 0, "killed": False}

    def take():
        with lock:
            if state["next"] >= jobs:
                return None
            state["next"] += 1
            return state["next"] - 1

    def worker():
        conn = connect(url)
        while (i := take()) is not None:
            body = json.dumps({"name": f"burst-{i}", "resources": {"gpus": 1},
                               "command": ["/bin/true"]})
            try:
                conn.request("POST", "/api/v1/jobs", body,
                             {"Content-Type": "application/json", **auth_header(url)})
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                # The server is gone: this submission was not acknowledged. Later
                # ones would only meet a refused connection.
                with lock:
                    state["errors"] += 1
                return
            if not 200 <= resp.status < 300:
                with lock:
                    state["rejected"] += 1
                continue
            reply = json.loads(data)
            with lock:
                state["acked"].extend(reply["ids"])
                if not state["killed"] and len(state["acked"]) >= kill_after:
                    state["killed"] = True
                    os.kill(kill_pid, signal.SIGKILL)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(acked_file, "w") as f:
        for i in state["acked"]:
            f.write(f"{i}\n")
    print(f"submitted: {jobs} planned from {clients} clients; acknowledged "
          f"{len(state['acked'])}; rejected {state['rejected']}; "
          f"cut off by the kill {state['errors']}; killed: {state['killed']}")
    if not state["killed"]:
        print("FAIL: the server was not killed during the burst", file=sys.stderr)
        return 1
    return 0


def list_all(url, limit):
    conn = connect(url)
    ids, after, pages = [], 0, 0
    while True:
        conn.request("GET", f"/api/v1/jobs?limit={limit}&after={after}", headers=auth_header(url))
        resp = conn.getresponse()
        page = json.loads(resp.read())
        if resp.status != 200:
            raise RuntimeError(f"GET /jobs: HTTP {resp.status}: {page}")
        pages += 1
        ids.extend(j["id"] for j in page["jobs"])
        if page["next_after"] is None:
            return ids, pages
        after = page["next_after"]


def check(url, acked_file):
    with open(acked_file) as f:
        acked = [int(line) for line in f if line.strip()]
    listed, pages = list_all(url, 97)
    counts = {}
    for i in listed:
        counts[i] = counts.get(i, 0) + 1
    dup_listed = sorted(i for i, n in counts.items() if n > 1)
    dup_acked = len(acked) - len(set(acked))
    missing = sorted(i for i in set(acked) if i not in counts)
    print(f"after restart: {len(listed)} jobs listed in {pages} pages; "
          f"{len(acked)} acknowledged; missing {len(missing)}; listed twice "
          f"{len(dup_listed)}; acknowledged ids given twice {dup_acked}; "
          f"stored but not acknowledged {len(counts) - len(set(acked))}")
    ok = not missing and not dup_listed and dup_acked == 0
    if not ok:
        print(f"FAIL: missing {missing[:20]} duplicated {dup_listed[:20]}", file=sys.stderr)
    return 0 if ok else 1


def main(argv):
    if len(argv) == 8 and argv[1] == "submit":
        return submit(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]), argv[7])
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
