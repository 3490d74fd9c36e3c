#!/usr/bin/env bash
# Node per-evaluation benchmark (docs/BENCHMARKS.md "Node SDK"): builds the
# release addon, installs the peers pinned in bench/package.json from the
# npm registry into bench/node_modules, then runs bench/eval.js.
#   sdk/node/bench/run.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
FLAGSTREAM_NODE_PROFILE=release node scripts/build.js
npm install --prefix bench --no-audit --no-fund --no-package-lock
node --expose-gc bench/eval.js "$@"
