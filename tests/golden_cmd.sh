#!/usr/bin/env bash
# golden_cmd.sh GOLDEN CMD...: runs CMD and compares its standard output with GOLDEN.
# UPDATE_GOLDEN=1 rewrites GOLDEN instead. Standard error is shown, not compared.
set -uo pipefail
golden=$1
shift
actual=$("$@")
status=$?
if [[ $status -ne 0 ]]; then
  echo "command failed with exit status $status: $*" >&2
  exit 1
fi
if [[ ${UPDATE_GOLDEN:-} == 1 ]]; then
  printf '%s\n' "$actual" >"$golden"
  exit 0
fi
if ! diff -u "$golden" <(printf '%s\n' "$actual"); then
  echo "output differs from $golden (UPDATE_GOLDEN=1 rewrites it after review)" >&2
  exit 1
fi
