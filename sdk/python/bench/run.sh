#!/usr/bin/env bash
# Builds the release wheel, installs it and the peer SDKs (pinned, from
# PyPI; flagd's in-process provider with the OpenFeature SDK) into a venv
# under target/, and runs bench.py. From the repo root:
#   bash sdk/python/bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
venv=target/bench-python-venv
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0 \
  launchdarkly-server-sdk==9.18.4 UnleashClient==6.9.1 \
  openfeature-sdk==0.10.0 openfeature-provider-flagd==0.6.1
CARGO_TARGET_DIR="$PWD/target/bindings" "$venv/bin/maturin" build --release \
  --manifest-path sdk/python/Cargo.toml --out target/bench-python-wheels
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
  target/bench-python-wheels/flagstream-*.whl
"$venv/bin/python" sdk/python/bench/bench.py
