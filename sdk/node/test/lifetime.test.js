'use strict';
// A client's lifetime: clients dropped without close() are garbage
// collected (their relay streams end, the memory they held returns), a
// client someone listens to is kept until its listeners go, and close()
// sends the usage counted since the last summary (awaited or not).
//
// The garbage collection tests run in a child process started with
// --expose-gc; the child reports one JSON line per step and waits for a
// line on stdin before the next, so the parent observes the relay's side
// (the proxy's open connections) while the child is still alive.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');

const { Client } = require('..');
const { startRelay, flagctl, putTrueFlag, startProxy, tempDir } = require('./helpers');

// A guard against a hang, not a bound anything is asserted against.
const GUARD = { timeout: 180_000 };

// What every child script starts with: `report(obj)` prints a step's
// JSON line, `next()` waits for the parent's go-ahead, `collect(done)`
// runs full collections (letting finalizers run after each) until
// `done()` or 100 rounds: a bound on rounds, not on time. The scripts
// make and drop their clients in plain functions, keeping them in
// script-level variables: a suspended async function's saved registers
// could hold one on. The child exits once the parent ends its stdin.
const PRELUDE = `
  const { Client } = require('.');
  const report = (o) => console.log(JSON.stringify(o));
  const lines = require('node:readline').createInterface({ input: process.stdin });
  const queued = [];
  const waiters = [];
  lines.on('line', (l) => (waiters.length ? waiters.shift()(l) : queued.push(l)));
  const next = () => new Promise((r) => (queued.length ? r(queued.shift()) : waiters.push(r)));
  async function collect(done) {
    for (let round = 0; round < 100 && !done(); round++) {
      global.gc();
      await new Promise((r) => setImmediate(r));
    }
  }
`;

/** A child Node process with --expose-gc running PRELUDE + `script`. */
function gcChild(t, script, env = {}) {
  const child = spawn(process.execPath, ['--expose-gc', '-e', PRELUDE + script], {
    cwd: path.resolve(__dirname, '..'),
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, stderr })));
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    return exited;
  });
  const queued = [];
  const waiters = [];
  readline.createInterface({ input: child.stdout }).on('line', (l) => {
    const v = JSON.parse(l);
    if (waiters.length) waiters.shift().resolve(v);
    else queued.push(v);
  });
  exited.then(({ code, signal }) => {
    for (const w of waiters.splice(0)) w.reject(new Error(`the child exited (${code ?? signal}): ${stderr}`));
  });
  return {
    /** The next line the child reported. */
    line: () =>
      new Promise((resolve, reject) => (queued.length ? resolve(queued.shift()) : waiters.push({ resolve, reject }))),
    /** Lets the child go on to its next step. */
    next: () => child.stdin.write('go\n'),
    /** Ends the child's stdin (it exits once idle); its exit. */
    finish() {
      child.stdin.end();
      return exited;
    },
  };
}

test('clients dropped without close() are collected and their relay streams end', GUARD, async (t) => {
  const relay = await startRelay(tempDir('gc-streams'));
  const proxy = await startProxy(relay.grpc);
  t.after(async () => {
    await proxy.close();
    await relay.stop();
  });
  const child = gcChild(
    t,
    `
    const N = 6;
    let collected = 0;
    const registry = new FinalizationRegistry(() => collected++);
    let clients;
    function start() {
      clients = [];
      for (let i = 0; i < N; i++) {
        const c = new Client({ endpoints: [process.env.URL], sdkKey: process.env.KEY });
        registry.register(c, i);
        clients.push(c);
      }
      return Promise.all(clients.map((c) => c.waitReady(60000)));
    }
    function drop() {
      clients = null; // dropped, never closed
    }
    (async () => {
      report({ ready: (await start()).every(Boolean) });
      await next();
      drop();
      await collect(() => collected === N);
      report({ collected });
      await next();
    })();`,
    { URL: proxy.url, KEY: relay.demoKey() },
  );
  assert.deepEqual(await child.line(), { ready: true });
  await proxy.whenOpen(6); // one stream per client
  child.next();
  assert.deepEqual(await child.line(), { collected: 6 }, 'every dropped client was collected');
  // Collected, each stopped: its stream ends while the process lives on.
  await proxy.whenOpen(0);
  assert.equal((await child.finish()).code, 0);
});

test('memory held by clients dropped without close() returns', GUARD, async (t) => {
  // Each round makes 8 clients of 2,000 flags (their snapshots are most of
  // what a client holds) and drops them. Were dropped clients kept, every
  // round would add what one round holds while alive; collected, the
  // rounds after the first reuse the first's memory.
  const child = gcChild(
    t,
    `
    const flags = Array.from({ length: 2000 }, (_, i) => ({
      key: 'flag-' + i, type: 'string', variations: ['a-' + i, 'b-' + i], on: true, off_variation: 0,
      rules: [{ id: 'r' + i, clauses: [{ attribute: 'email', op: 'ends_with', values: ['@example-' + i + '.com'] }], serve: { variation: 1 } }],
      fallthrough: { variation: 0 },
    }));
    const set = JSON.stringify({ flags, segments: [] });
    let made = 0;
    let collected = 0;
    const registry = new FinalizationRegistry(() => collected++);
    function round() {
      for (let i = 0; i < 8; i++) {
        const c = Client.testData(set);
        if (c.string('flag-' + i, { key: 'u' }, 'x') !== 'a-' + i) throw new Error('not served');
        registry.register(c, made++);
        alive.push(c);
      }
    }
    function drop() {
      alive = [];
    }
    let alive = [];
    const rss = () => process.memoryUsage().rss;
    (async () => {
      await collect(() => false);
      const base = rss();
      round();
      const held = rss() - base; // what one round holds
      drop();
      await collect(() => collected === made);
      const afterFirst = rss();
      for (let r = 0; r < 6; r++) {
        round();
        drop();
        await collect(() => collected === made);
      }
      report({ made, collected, held, grown: rss() - afterFirst });
    })();`,
  );
  const r = await child.line();
  assert.equal(r.collected, r.made, `every dropped client was collected: ${JSON.stringify(r)}`);
  assert.ok(r.held > 0, JSON.stringify(r));
  // Six more rounds added less than one round holds (a leak adds six).
  assert.ok(r.grown < r.held, `memory kept growing: ${JSON.stringify(r)}`);
  assert.equal((await child.finish()).code, 0);
});

test('a dropped client with change listeners lives until they are removed', GUARD, async (t) => {
  const relay = await startRelay(tempDir('gc-listened'));
  const proxy = await startProxy(relay.grpc);
  t.after(async () => {
    await proxy.close();
    await relay.stop();
  });
  const child = gcChild(
    t,
    `
    let collected = 0;
    const registry = new FinalizationRegistry(() => collected++);
    function start() {
      const c = new Client({ endpoints: [process.env.URL], sdkKey: process.env.KEY });
      registry.register(c, 0);
      // Only the listener, which removes itself, refers to the client.
      c.once('change:late-flag', (e) => report({ event: e.key }));
      return c.waitReady(60000);
    }
    (async () => {
      const ready = await start();
      await collect(() => collected > 0);
      report({ ready, collectedWhileListened: collected });
      await next();
      // The listener ran and went: nothing holds the client now.
      await collect(() => collected > 0);
      report({ collected });
      await next();
    })();`,
    { URL: proxy.url, KEY: relay.demoKey() },
  );
  assert.deepEqual(await child.line(), { ready: true, collectedWhileListened: 0 });
  putTrueFlag(relay, 'late-flag');
  assert.deepEqual(await child.line(), { event: 'late-flag' }, 'the listened client kept streaming');
  child.next();
  assert.deepEqual(await child.line(), { collected: 1 });
  await proxy.whenOpen(0);
  assert.equal((await child.finish()).code, 0);
});

/** `flagctl flag usage KEY -o json` at `relay`: the day's evaluations of the flag. */
function evaluations(relay, key) {
  const f = JSON.parse(flagctl(relay, ['flag', 'usage', key, '-o', 'json'])).flags[0];
  return f.day.evaluations.reduce((n, e) => n + e.evaluations, 0);
}

test('close() sends the usage counted since the last summary and resolves once the relay has it', GUARD, async (t) => {
  const relay = await startRelay(tempDir('close-usage'));
  t.after(() => relay.stop());
  putTrueFlag(relay, 'node-short-lived');
  // No regular summary is due for an hour (the first one may go a second
  // after the first evaluations): close() sends whatever was not sent.
  const client = new Client({ endpoints: [relay.url], sdkKey: relay.demoKey(), usageIntervalMs: 3_600_000 });
  assert.equal(await client.waitReady(20_000), true);
  for (let i = 0; i < 5; i++) assert.equal(client.bool('node-short-lived', { key: `u${i}` }, false), true);
  const closing = client.close();
  // At once: evaluations return defaults.
  assert.equal(client.bool('node-short-lived', { key: 'u' }, false), false);
  assert.equal(await closing, true, 'the relay confirmed the final summary');
  assert.equal(await client.close(), false, 'a second close has nothing to send');
  assert.equal(evaluations(relay, 'node-short-lived'), 5);
});

test('a process that calls close() without awaiting it sends its usage before it exits', GUARD, async (t) => {
  const relay = await startRelay(tempDir('close-exit'));
  t.after(() => relay.stop());
  putTrueFlag(relay, 'node-cli');
  const child = spawn(
    process.execPath,
    [
      '-e',
      `
      const { Client } = require('.');
      const c = new Client({ endpoints: [process.env.URL], sdkKey: process.env.KEY, usageIntervalMs: 3600000 });
      c.waitReady(20000).then((ready) => {
        if (!ready) throw new Error('not ready');
        for (let i = 0; i < 3; i++) c.bool('node-cli', { key: 'u' + i }, false);
        c.close(); // not awaited: the script ends here
      });`,
    ],
    { cwd: path.resolve(__dirname, '..'), env: { ...process.env, URL: relay.url, KEY: relay.demoKey() }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const { code } = await new Promise((resolve) => child.on('exit', (code) => resolve({ code })));
  assert.equal(code, 0, stderr);
  assert.equal(evaluations(relay, 'node-cli'), 3);
});
