#!/usr/bin/env bash
# expect_exit.sh STATUS CMD...: runs CMD and fails unless it exits with STATUS.
# Prints what CMD printed either way, so a failing check shows why.
want=$1
shift
"$@"
got=$?
if [[ $got -ne $want ]]; then
  echo "expected exit status $want, got $got: $*" >&2
  exit 1
fi
