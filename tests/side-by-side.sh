#!/usr/bin/env bash
# Scenario 9 of docs/RESILIENCE.md: flags in Redis behind a 30 s local cache
# with a 2 s deadline, versus flagstream, under the same blackhole. Installs
# Debian's redis-server when it is missing (the tool starts its own server on
# a free port; the package's service is not used), then runs the comparison.
# Extra arguments go to `resilience side-by-side` (see `--help`).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y redis-server || { $sudo apt-get update && $sudo apt-get install -y redis-server; }
fi
# Every binary of the package: the tool starts the `relay` one next to it.
cargo build --release -p flagstream-tests --bins
exec target/release/resilience side-by-side --redis-server "$(command -v redis-server)" "$@"
