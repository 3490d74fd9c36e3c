'use strict';
// The Node client against real relay processes (the `relay` binary) and
// real sockets: first data, a change arriving as events, failover between
// two relays by delta, a silent stall recovered with default settings, the
// cache across a restart with every relay down, a process that exits
// once its client is closed, and usage summaries reaching the relay.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const { Client, Context } = require('..');
const { startRelay, flagctl, putTrueFlag, whenChanged, startProxy, tempDir } = require('./helpers');

// A guard against a hang, not a bound anything is asserted against.
const GUARD = { timeout: 180_000 };
// The demo environment's rule: US enterprise users get the new checkout.
const US_ENTERPRISE = { key: 'u', country: 'US', plan: 'enterprise' };

test('first data arrives, then a flag change arrives as events', GUARD, async (t) => {
  const dir = tempDir('first');
  const relay = await startRelay(dir);
  t.after(() => relay.stop());
  const client = new Client({ endpoints: [relay.url], sdkKey: relay.demoKey() });
  t.after(() => client.close());
  assert.equal(await client.waitReady(20_000), true);
  const status = client.status();
  assert.equal(status.state, 'ready');
  assert.equal(status.source, 'stream');
  assert.equal(client.bool('new-checkout', US_ENTERPRISE, false), true);
  assert.equal(client.bool('new-checkout', new Context(US_ENTERPRISE), false), true);
  const d = client.boolDetail('new-checkout', US_ENTERPRISE, false);
  assert.equal(d.reason, 'RULE_MATCH');
  assert.equal(d.stale, false);
  assert.ok(d.revision >= 1);
  assert.equal(client.stats().snapshotsApplied, 1);

  const revisions = [];
  client.on('change', (e) => revisions.push(e.revision));
  const launched = new Promise((resolve) => client.on('change:launch', resolve));
  // A listener's exception goes to the 'error' listeners, not into the addon.
  const reported = new Promise((resolve) => client.on('error', resolve));
  client.on('change:launch', () => {
    throw new Error('listener bug');
  });
  putTrueFlag(relay, 'launch');
  const event = await launched;
  assert.equal((await reported).message, 'listener bug');
  assert.equal(event.key, 'launch');
  assert.ok(event.revision > d.revision);
  await whenChanged(client, () => client.bool('launch', { key: 'anyone' }, false));
  // (The first data's own change event may arrive after waitReady too.)
  assert.ok(revisions.some((r) => r > d.revision), `${revisions}`);
  assert.equal(client.stats().snapshotsApplied, 1, 'changes arrive as deltas');
  assert.ok(client.stats().deltasApplied >= 1);
});

test('failover between two relays resumes by delta', GUARD, async (t) => {
  const aDir = tempDir('a');
  const bDir = tempDir('b');
  // Two relays of one store (one epoch): the first one's data, copied.
  let a = await startRelay(aDir);
  await a.stop();
  fs.cpSync(path.join(aDir, 'data'), path.join(bDir, 'data'), { recursive: true });
  a = await startRelay(aDir);
  const b = await startRelay(bDir);
  t.after(() => Promise.all([a.stop(), b.stop()]));
  const client = new Client({
    endpoints: [a.url, b.url],
    keepEndpointOrder: true,
    sdkKey: a.demoKey(),
    backoffBaseMs: 100,
  });
  t.after(() => client.close());
  assert.equal(await client.waitReady(20_000), true);
  assert.equal(client.stats().snapshotsApplied, 1);
  await a.stop('SIGKILL');
  putTrueFlag(b, 'after-failover');
  await whenChanged(client, () => client.bool('after-failover', { key: 'u' }, false));
  const s = client.stats();
  assert.equal(s.snapshotsApplied, 1, `resumed with a delta, not a snapshot: ${JSON.stringify(s)}`);
  assert.ok(s.endpointSwitches >= 1 && s.deltasApplied >= 1, JSON.stringify(s));
});

test('a silent stall is detected and recovered with default settings', GUARD, async (t) => {
  const dir = tempDir('stall');
  const relay = await startRelay(dir);
  const proxy = await startProxy(relay.grpc);
  t.after(async () => {
    await proxy.close();
    await relay.stop();
  });
  // Default settings: the HTTP/2 keepalive finds the stall.
  const client = new Client({ endpoints: [proxy.url], sdkKey: relay.demoKey() });
  t.after(() => client.close());
  assert.equal(await client.waitReady(20_000), true);
  assert.equal(proxy.connections(), 1);
  proxy.blackholeExisting();
  putTrueFlag(relay, 'after-stall');
  // Bounded as the Rust stall tests are (20 s): with default settings the
  // stall is found in ~5 s (keepalive 3 s + 2 s), then the write arrives.
  await whenChanged(client, () => client.bool('after-stall', { key: 'u' }, false), 20_000);
  const s = client.stats();
  assert.equal(s.stalls, 1, JSON.stringify(s));
  assert.ok(proxy.connections() >= 2, 'a new connection was made');
  assert.equal(s.snapshotsApplied, 1, `resumed with a delta: ${JSON.stringify(s)}`);
  // Known flags kept their values throughout.
  assert.equal(client.bool('new-checkout', US_ENTERPRISE, false), true);
});

/** Runs `script` in a fresh Node process; resolves to {code, stdout, stderr}. */
function node(script, env) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['-e', script], {
      cwd: path.resolve(__dirname, '..'),
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('exit', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

test('the cache serves the last flags after a restart with every relay down', GUARD, async (t) => {
  const dir = tempDir('cache');
  const cacheDir = path.join(dir, 'cache');
  const relay = await startRelay(path.join(dir, 'relay'));
  t.after(() => relay.stop());
  const key = relay.demoKey();
  // The debounced writer would wait an hour: only close() can write the flag.
  const first = new Client({ endpoints: [relay.url], sdkKey: key, cacheDir, cacheWriteIntervalMs: 3_600_000 });
  assert.equal(await first.waitReady(20_000), true);
  putTrueFlag(relay, 'cached-flag');
  await whenChanged(first, () => first.bool('cached-flag', { key: 'u' }, false));
  // Resolves once the newest revision is in the cache (after the final
  // usage summary, which the relay confirms).
  assert.equal(await first.close(), true);
  await relay.stop('SIGKILL');

  // The restarted service: a new process, the only relay down.
  const r = await node(
    `
    const { Client } = require('.');
    const c = new Client({ endpoints: [process.env.URL], sdkKey: process.env.KEY, cacheDir: process.env.CACHE });
    c.waitReady(20000).then((ready) => {
      console.log(JSON.stringify({
        ready,
        status: c.status(),
        cached: c.bool('cached-flag', { key: 'u' }, false),
        detail: c.boolDetail('cached-flag', { key: 'u' }, false),
      }));
      c.close();
    });`,
    { URL: relay.url, KEY: key, CACHE: cacheDir },
  );
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.equal(out.ready, true);
  assert.equal(out.status.source, 'cache');
  assert.equal(out.status.state, 'stale', 'cached data is stale until a relay confirms it');
  assert.equal(out.cached, true);
  assert.equal(out.detail.stale, true);
});

test('the process exits once its client is closed', GUARD, async (t) => {
  const dir = tempDir('exit');
  const relay = await startRelay(dir);
  t.after(() => relay.stop());
  const r = await node(
    `
    const { Client } = require('.');
    const c = new Client({ endpoints: [process.env.URL], sdkKey: process.env.KEY });
    c.on('change', () => {});
    c.on('change:new-checkout', () => {});
    c.waitReady(20000).then((ready) => {
      console.log(JSON.stringify({ ready, value: c.bool('new-checkout', { key: 'u', country: 'US', plan: 'enterprise' }, false) }));
      c.close();
      // Nothing else to do: the event loop must now be empty.
    });`,
    { URL: relay.url, KEY: relay.demoKey() },
  );
  assert.equal(r.code, 0, `exit ${r.code ?? r.signal}: ${r.stderr}`);
  assert.deepEqual(JSON.parse(r.stdout), { ready: true, value: true });
});

test('close() ends a pending waitReady and later evaluations return defaults', GUARD, async () => {
  // Nothing listens on port 9 (discard): the client keeps retrying.
  const client = new Client({ endpoints: ['http://127.0.0.1:9'], sdkKey: 'sdk-none', backoffBaseMs: 50 });
  const pending = client.waitReady(600_000);
  client.close();
  assert.equal(await pending, false);
  assert.equal(client.bool('anything', { key: 'u' }, true), true);
  assert.equal(client.boolDetail('anything', { key: 'u' }, true).errorKind, 'NOT_READY');
  assert.equal(client.status().state, 'failed');
});

/** `flagctl flag usage KEY -o json` at `relay`: the flag's entry. */
function usage(relay, key) {
  return JSON.parse(flagctl(relay, ['flag', 'usage', key, '-o', 'json'])).flags[0];
}

const evaluations = (f) => f.day.evaluations.reduce((n, e) => n + e.evaluations, 0);

/**
 * Polls `flag usage KEY` until `done(entry)`: usage has no change
 * notification to wait on; the deadline bounds the wait.
 */
async function waitUsage(relay, key, done) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const f = usage(relay, key);
    if (done(f)) return f;
    assert.ok(Date.now() < deadline, `${key} never arrived at the relay: ${JSON.stringify(f)}`);
    await new Promise((r) => setTimeout(r, 100)); // poll interval, bounded by the deadline
  }
}

test('usage summaries reach the relay: evaluations, a wrong default, a missing flag', GUARD, async (t) => {
  const dir = tempDir('usage');
  const relay = await startRelay(dir);
  t.after(() => relay.stop());
  putTrueFlag(relay, 'node-kill');
  const client = new Client({ endpoints: [relay.url], sdkKey: relay.demoKey(), usageIntervalMs: 200 });
  t.after(() => client.close());
  assert.equal(await client.waitReady(20_000), true);
  for (let i = 0; i < 7; i++) assert.equal(client.bool('node-kill', { key: `u${i}` }, false), true);
  for (let i = 0; i < 3; i++) assert.equal(client.bool('node-gone', { key: 'u' }, true), true);
  const f = await waitUsage(relay, 'node-kill', (f) => evaluations(f) >= 7);
  assert.equal(evaluations(f), 7, JSON.stringify(f));
  assert.equal(f.sdks, 1);
  assert.equal(f.default_mismatch, true);
  assert.deepEqual(f.defaults.map((d) => d.value), [false]);
  assert.match(f.warnings[0], /callers pass default false but the flag serves true/);
  const gone = await waitUsage(relay, 'node-gone', (g) => g.day.fallbacks.missing >= 3);
  assert.equal(gone.day.fallbacks.missing, 3);
  assert.equal(gone.exists, false);
});
