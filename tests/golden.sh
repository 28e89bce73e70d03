#!/usr/bin/env bash
# golden.sh SCENARIO GOLDEN [REPLAY OPTIONS...]
#
# Runs `trainyard sched replay SCENARIO [OPTIONS...]` and compares what it prints
# with the golden file GOLDEN; fails with a unified diff when they differ, or when
# the replay exits non-zero (an invalid scenario, or a decision that broke the
# scheduler's contracts). With UPDATE_GOLDEN=1 it rewrites GOLDEN instead: review
# the diff (git diff tests/sched) before keeping it.
#
# The binary is $TRAINYARD, else build/trainyard in this repository.
set -u
if [[ $# -lt 2 ]]; then
  echo "usage: golden.sh SCENARIO GOLDEN [REPLAY OPTIONS...]" >&2
  exit 2
fi
scenario=$1
golden=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRAINYARD:-$root/build/trainyard}
if [[ ! -x $bin ]]; then
  echo "golden.sh: no trainyard binary at $bin; build it or set TRAINYARD" >&2
  exit 2
fi

actual=$(mktemp)
trap 'rm -f "$actual"' EXIT
"$bin" sched replay "$scenario" "$@" >"$actual"
status=$?
if [[ $status -ne 0 ]]; then
  cat "$actual"
  echo "golden.sh: trainyard sched replay $scenario exited with status $status" >&2
  exit 1
fi

if [[ ${UPDATE_GOLDEN:-0} == 1 ]]; then
  cp "$actual" "$golden"
  echo "golden.sh: wrote $golden"
  exit 0
fi
if [[ ! -f $golden ]]; then
  cat "$actual"
  echo "golden.sh: $golden does not exist; check the output above and create it with UPDATE_GOLDEN=1" >&2
  exit 1
fi
if ! diff -u --label "$golden (expected)" --label "$scenario (actual)" "$golden" "$actual"; then
  echo "golden.sh: the replay of $scenario differs from $golden" >&2
  echo "golden.sh: if the change is intended, rerun with UPDATE_GOLDEN=1 and review the diff" >&2
  exit 1
fi
