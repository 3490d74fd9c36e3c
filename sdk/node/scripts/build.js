#!/usr/bin/env node
// Builds the native addon with the Rust toolchain and copies it next to
// index.js as `flagstream.node` (what `npm install` runs; no download).
//
//   FLAGSTREAM_NODE_PROFILE  `release` (default) or `debug` (the tests)
//   CARGO_TARGET_DIR         where cargo builds (default: the workspace's target/)
//   CARGO                    the cargo binary (default: `cargo` on PATH)
'use strict';

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const pkgDir = path.resolve(__dirname, '..');
const profile = process.env.FLAGSTREAM_NODE_PROFILE || 'release';
if (profile !== 'release' && profile !== 'debug') {
  fail(`FLAGSTREAM_NODE_PROFILE must be "release" or "debug", not ${JSON.stringify(profile)}`);
}
const cargo = process.env.CARGO || 'cargo';

function fail(msg) {
  console.error(`flagstream: ${msg}`);
  process.exit(1);
}

function run(args, capture) {
  const r = spawnSync(cargo, args, {
    cwd: pkgDir,
    stdio: capture ? ['ignore', 'pipe', 'inherit'] : 'inherit',
    encoding: 'utf8',
  });
  if (r.error) {
    fail(`could not run ${cargo} (${r.error.message}): building this package needs the Rust toolchain (https://rustup.rs)`);
  }
  if (r.status !== 0) fail(`${cargo} ${args.join(' ')} exited with ${r.status}`);
  return r.stdout;
}

const buildArgs = ['build', '-p', 'flagstream-node'];
if (profile === 'release') buildArgs.push('--release');
run(buildArgs, false);

const meta = JSON.parse(run(['metadata', '--format-version', '1', '--no-deps'], true));
const libName = {
  linux: 'libflagstream_node.so',
  darwin: 'libflagstream_node.dylib',
  win32: 'flagstream_node.dll',
}[process.platform] || 'libflagstream_node.so';
const built = path.join(meta.target_directory, profile, libName);
if (!fs.existsSync(built)) fail(`cargo reported success but ${built} is missing`);
const out = path.join(pkgDir, 'flagstream.node');
// Copy to a temporary name and rename: a running process may have the old
// addon mapped.
fs.copyFileSync(built, `${out}.tmp`);
fs.renameSync(`${out}.tmp`, out);
console.log(`flagstream: built ${path.relative(process.cwd(), out)} (${profile}) from ${built}`);
