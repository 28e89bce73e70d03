#!/usr/bin/env bash
# Runs one libFuzzer target over its checked-in seeds.
#
#   run.sh FUZZER SEEDS_DIR WORK_DIR [libFuzzer flags...]
#
# New inputs libFuzzer finds go to WORK_DIR (the seeds are only read); a crash, leak
# or timeout leaves its reproducer in WORK_DIR/findings and fails the run. The last
# lines of libFuzzer's report (executions, coverage) are printed either way.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3
shift 3
mkdir -p "$work/corpus" "$work/findings"
log="$work/last-run.log"
status=0
"$fuzzer" -artifact_prefix="$work/findings/" -max_len=65536 -timeout=20 -rss_limit_mb=2048 \
  -print_final_stats=1 "$@" "$work/corpus" "$seeds" >"$log" 2>&1 || status=$?
if ((status != 0)); then
  cat "$log"
  echo "run.sh: $(basename "$fuzzer") failed (exit $status); reproducers in $work/findings" >&2
  exit "$status"
fi
grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+.*DONE)' "$log" || tail -n 3 "$log"
