#!/usr/bin/env bash
# ctest's entry to the browser tests: NODE TRAINYARD OUT [--scale]. Exits 77 (skipped)
# naming what is missing when Node.js, Chromium or web/node_modules are not there.
set -euo pipefail
node=$1 trainyard=$2 out=$3
shift 3
# Under CI (CI set) a missing piece is a failure: scripts/setup and `make web` provide it.
skip() { echo "skipped: $*"; if [[ -n ${CI:-} ]]; then echo "CI is set: failing"; exit 1; fi; exit 77; }
web=$(cd "$(dirname "$0")/.." && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
if [[ -z $node || $node == *NOTFOUND* || ! -x $node ]]; then
  skip "no node (scripts/setup installs Debian's nodejs)"
fi
if [[ ! -x $chromium ]]; then
  skip "no $chromium (scripts/setup installs Debian's chromium)"
fi
if [[ ! -d $web/node_modules/playwright-core ]]; then
  skip "no $web/node_modules/playwright-core (run \`make web\`: npm ci in web/)"
fi
exec "$node" "$web/tests/dashboard.test.mjs" --trainyard "$trainyard" --out "$out" "$@"
