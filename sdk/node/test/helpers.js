'use strict';
// Real relay processes, flagctl and a TCP proxy for the Node tests. The
// binaries come from the environment (tests/tests/bindings/node_sdk.rs sets them
// from cargo): FLAGSTREAM_RELAY_BIN and FLAGSTREAM_FLAGCTL_BIN. Without
// them the relay tests fail, naming what to set.

const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');

function binary(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(
      `${name} is not set: run these tests through \`cargo test -p flagstream-tests --test bindings node_sdk\`, or set it to the built binary`,
    );
  }
  if (!fs.existsSync(v)) throw new Error(`${name}=${v} does not exist`);
  return v;
}

function tempDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `flagstream-node-${prefix}-`));
}

/** A running relay (`relay serve --demo true`), its addresses from its first line. */
async function startRelay(dir, { listen = '127.0.0.1:0', args = [] } = {}) {
  fs.mkdirSync(dir, { recursive: true });
  const log = fs.openSync(path.join(dir, 'relay.log'), 'a');
  const child = spawn(
    binary('FLAGSTREAM_RELAY_BIN'),
    ['serve', '--metrics-listen', '127.0.0.1:0', '--listen', listen, '--data-dir', path.join(dir, 'data'), '--demo', 'true', ...args],
    { stdio: ['ignore', 'pipe', log], env: { ...process.env, RUST_LOG: 'info' } },
  );
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const lines = readline.createInterface({ input: child.stdout });
  const line = await new Promise((resolve, reject) => {
    lines.on('line', (l) => {
      if (l.startsWith('flagstream-relay listening')) resolve(l);
    });
    exited.then(({ code, signal }) =>
      reject(new Error(`relay exited (${code ?? signal}) before listening; log:\n${fs.readFileSync(path.join(dir, 'relay.log'), 'utf8')}`)),
    );
  });
  // Keep draining stdout so the relay never blocks on a full pipe.
  lines.on('line', () => {});
  const field = (name) => {
    const w = line.split(/\s+/).find((x) => x.startsWith(name));
    if (!w) throw new Error(`no ${name} in ${JSON.stringify(line)}`);
    return w.slice(name.length);
  };
  const grpc = field('grpc=');
  const dataDir = path.join(dir, 'data');
  return {
    child,
    grpc,
    url: `http://${grpc}`,
    dataDir,
    exited,
    demoKey: () => fs.readFileSync(path.join(dataDir, 'demo-sdk-key'), 'utf8').trim(),
    adminToken: () => fs.readFileSync(path.join(dataDir, 'admin-token'), 'utf8').trim(),
    /** Stops the relay with `signal` and waits for it to exit. */
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** Runs flagctl against `relay` in the demo environment; returns stdout. */
function flagctl(relay, args) {
  const r = spawnSync(
    binary('FLAGSTREAM_FLAGCTL_BIN'),
    ['--relay', relay.url, '--token', relay.adminToken(), '--config', '/nonexistent/flagctl.toml', ...args],
    { env: { ...process.env, FLAGSTREAM_ENV: 'demo' }, encoding: 'utf8' },
  );
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`flagctl ${args.join(' ')} exited with ${r.status}: ${r.stderr}`);
  return r.stdout;
}

/** Creates (or updates) the bool flag `key` and turns it on: serves true. */
function putTrueFlag(relay, key) {
  flagctl(relay, ['flag', 'create', key, '--yes']);
  flagctl(relay, ['flag', 'on', key, '--yes']);
}

/**
 * Resolves once `check()` holds, testing it now and at every `change`
 * event of the client (no polling, no sleeps).
 */
function whenChanged(client, check, timeoutMs = 60_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.off('change', test);
      reject(new Error(`no change satisfied the check within ${timeoutMs} ms`));
    }, timeoutMs);
    const test = () => {
      if (check()) {
        clearTimeout(timer);
        client.off('change', test);
        resolve();
      }
    };
    client.on('change', test);
    test();
  });
}

/**
 * A TCP proxy to `upstream` ("host:port"). `blackholeExisting()` stops
 * forwarding on every open connection without closing it (no FIN, no
 * RST: a silent stall); later connections are forwarded as usual.
 * `whenOpen(n)` resolves once exactly `n` connections are open.
 */
async function startProxy(upstream) {
  const [host, port] = [upstream.slice(0, upstream.lastIndexOf(':')), Number(upstream.slice(upstream.lastIndexOf(':') + 1))];
  const pairs = new Set();
  let connections = 0;
  const waiting = new Set(); // {n, resolve}
  const settle = () => {
    for (const w of waiting) {
      if (pairs.size === w.n) {
        waiting.delete(w);
        w.resolve();
      }
    }
  };
  const server = net.createServer((client) => {
    connections++;
    const up = net.connect(port, host);
    const pair = { client, up };
    pairs.add(pair);
    settle();
    client.pipe(up);
    up.pipe(client);
    const drop = () => {
      if (pairs.delete(pair)) settle();
      client.destroy();
      up.destroy();
    };
    client.on('error', drop);
    up.on('error', drop);
    client.on('close', drop);
    up.on('close', drop);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  return {
    url: `http://127.0.0.1:${addr.port}`,
    connections: () => connections,
    open: () => pairs.size,
    whenOpen(n) {
      return new Promise((resolve) => {
        waiting.add({ n, resolve });
        settle();
      });
    },
    blackholeExisting() {
      for (const { client, up } of pairs) {
        client.unpipe(up);
        up.unpipe(client);
        // Read nothing more: the peers' windows fill and their pings go unanswered.
        client.pause();
        up.pause();
      }
    },
    close() {
      for (const { client, up } of pairs) {
        client.destroy();
        up.destroy();
      }
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

module.exports = { startRelay, flagctl, putTrueFlag, whenChanged, startProxy, tempDir };
