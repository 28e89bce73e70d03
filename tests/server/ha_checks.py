#!/usr/bin/python3
"""Checks the fail-over and partition tests make of the state after the fact.

  ha_checks.py acked ACKED_FILE NAME TRAINYARD [MIN]
      every id in ACKED_FILE (one a line: acknowledged submissions of jobs named NAME)
      is present exactly once; at most one job of that name nobody saw acknowledged
      (the one in flight when the server went); at least MIN acknowledged (default 1).
  ha_checks.py gpus TRAINYARD
      no GPU is held by two running jobs now, and over the whole history no two
      attempts held one GPU at the same time (each attempt opened by one Bound event).

TRAINYARD is the CLI to run (a script that runs it in the right network namespace, say);
it finds the server through the environment (TRAINYARD_SERVER, TRAINYARD_TOKEN, or
TRAINYARD_DATA_DIR). Exits 1 with what is wrong.
"""

import json
import subprocess
import sys


def cli(trainyard, *args):
    return json.loads(subprocess.check_output([trainyard, *args, "-o", "json"]))


def check_acked(acked_file, name, trainyard, minimum):
    acked = [int(x) for x in open(acked_file).read().split()]
    jobs = cli(trainyard, "jobs", "--all", "--limit", "10000")
    ids = [j["id"] for j in jobs]
    assert len(acked) >= minimum, f"only {len(acked)} submissions acknowledged"
    missing = [i for i in acked if i not in ids]
    assert not missing, f"acknowledged but missing: {missing}"
    assert len(ids) == len(set(ids)), "a job listed twice"
    named = sorted(j["id"] for j in jobs if j["name"] == name)
    extra = [i for i in named if i not in acked]
    # A submission whose answer was lost with its server may exist unacknowledged (at
    # most the one in flight); one that was acknowledged is never missing or doubled.
    assert len(extra) <= 1, f"jobs nobody submitted: {extra}"
    print(f"{len(acked)} acknowledged submissions, all present once")


def check_gpus(trainyard):
    seen = {}
    for j in cli(trainyard, "jobs", "--state", "Running,Starting"):
        full = cli(trainyard, "job", "show", str(j["id"]))
        for p in full["placement"]:
            for g in p["gpus"]:
                key = (p["node"], g)
                assert key not in seen, f"GPU {key} held by jobs {seen[key]} and {j['id']}"
                seen[key] = j["id"]
    held = {}  # (node, gpu) -> [(start, end, job)]
    for j in cli(trainyard, "jobs", "--all", "--limit", "10000"):
        full = cli(trainyard, "job", "show", str(j["id"]))
        bound = sum(1 for e in full["events"] if e["kind"] == "Bound")
        assert bound == len(full["attempts"]), \
            f"job {j['id']}: {bound} Bound events, {len(full['attempts'])} attempts"
        for a in full["attempts"]:
            end = a["end_time_ms"] if a["end_time_ms"] is not None else float("inf")
            for node, gpus in zip(a["nodes"], a["gpus"]):
                for g in gpus:
                    for (s0, e0, other) in held.get((node, g), []):
                        assert end <= s0 or a["start_time_ms"] >= e0, \
                            f"GPU {node}/{g} held by jobs {other} and {j['id']} at once"
                    held.setdefault((node, g), []).append((a["start_time_ms"], end, j["id"]))
    print(f"{len(seen)} GPUs held now, none twice; "
          f"{sum(len(v) for v in held.values())} GPU holdings in the history, none overlapping")


def main():
    try:
        if sys.argv[1] == "acked":
            check_acked(sys.argv[2], sys.argv[3], sys.argv[4],
                        int(sys.argv[5]) if len(sys.argv) > 5 else 1)
        elif sys.argv[1] == "gpus":
            check_gpus(sys.argv[2])
        else:
            sys.exit(f"ha_checks.py: unknown check {sys.argv[1]!r}; expected acked or gpus")
    except AssertionError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
