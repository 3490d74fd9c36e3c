'use strict';
// Per-evaluation cost from Node: flagstream against the peers a Node
// service would otherwise pick, every SDK fed the same flags from local
// data (no network): LaunchDarkly's server SDK (file data source),
// Unleash's (bootstrap) and flagd's in-process provider for the
// OpenFeature server SDK (offlineFlagSourcePath: a flagd flag-definition
// file, no flagd server; the rules as json-logic targeting). Run through
// bench/run.sh, which installs the peers and builds the release addon;
// prints a Markdown table. The rounds of all cases of all SDKs are
// interleaved, and each ratio is the median of the per-round ratios, so a
// load change on a shared machine moves every SDK alike.
//
//   node --expose-gc bench/eval.js [--quick]

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const v8 = require('node:v8');
const { PerformanceObserver } = require('node:perf_hooks');

const { Client, Context } = require('..');

const QUICK = process.argv.includes('--quick');
const N = QUICK ? 200_000 : 1_000_000;
const ROUNDS = QUICK ? 3 : 5;
const FLAGS = 10_000;

// --- the flags, in each SDK's own model ---------------------------------

const ctxObject = { key: 'user-42', country: 'US', plan: 'enterprise' };
// A new object per call, of one of 1,024 users: what a service building
// the context per request passes (flagstream cannot reuse the last one).
const userKeys = Array.from({ length: 1024 }, (_, i) => `user-${i}`);
const randomKeys = Array.from({ length: 1 << 16 }, () => `f${Math.floor(Math.random() * FLAGS)}`);

function flagstreamSet() {
  const flags = [
    { key: 'onoff', type: 'bool', variations: [true, false], on: true, off_variation: 1, fallthrough: { variation: 0 } },
    {
      key: 'rule2',
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      rules: [
        {
          id: 'us-enterprise',
          clauses: [
            { attribute: 'country', op: 'in', values: ['US'] },
            { attribute: 'plan', op: 'in', values: ['enterprise'] },
          ],
          serve: { variation: 0 },
        },
      ],
      fallthrough: { variation: 1 },
    },
  ];
  for (let i = 0; i < FLAGS; i++) {
    flags.push({
      key: `f${i}`,
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      rules: [{ id: 'r', clauses: [{ attribute: 'country', op: 'in', values: ['US'] }], serve: { variation: 0 } }],
      fallthrough: { variation: 1 },
    });
  }
  return { flags, segments: [] };
}

function ldFlag(key, rules) {
  return {
    key,
    version: 1,
    on: true,
    variations: [true, false],
    offVariation: 1,
    fallthrough: { variation: rules.length ? 1 : 0 },
    targets: [],
    contextTargets: [],
    prerequisites: [],
    rules,
    salt: key,
  };
}

function ldData() {
  const flags = {
    onoff: ldFlag('onoff', []),
    rule2: ldFlag('rule2', [
      {
        id: 'us-enterprise',
        variation: 0,
        clauses: [
          { contextKind: 'user', attribute: 'country', op: 'in', values: ['US'], negate: false },
          { contextKind: 'user', attribute: 'plan', op: 'in', values: ['enterprise'], negate: false },
        ],
      },
    ]),
  };
  for (let i = 0; i < FLAGS; i++) {
    flags[`f${i}`] = ldFlag(`f${i}`, [
      { id: 'r', variation: 0, clauses: [{ contextKind: 'user', attribute: 'country', op: 'in', values: ['US'], negate: false }] },
    ]);
  }
  return { flags, segments: {} };
}

function unleashToggle(name, constraints) {
  return {
    name,
    enabled: true,
    type: 'release',
    project: 'default',
    stale: false,
    impressionData: false,
    strategies: [{ name: 'default', parameters: {}, constraints }],
    variants: [],
  };
}

function unleashData() {
  const data = [
    unleashToggle('onoff', []),
    unleashToggle('rule2', [
      { contextName: 'country', operator: 'IN', values: ['US'], inverted: false, caseInsensitive: false },
      { contextName: 'plan', operator: 'IN', values: ['enterprise'], inverted: false, caseInsensitive: false },
    ]),
  ];
  for (let i = 0; i < FLAGS; i++) {
    data.push(unleashToggle(`f${i}`, [{ contextName: 'country', operator: 'IN', values: ['US'], inverted: false, caseInsensitive: false }]));
  }
  return data;
}

// flagd flag definitions: variants on/off, the clauses as json-logic
// targeting (`in` a list), "off" when they do not match.
function flagdFlag(defaultVariant, clauses) {
  const flag = { state: 'ENABLED', variants: { on: true, off: false }, defaultVariant };
  if (clauses.length) {
    const tests = clauses.map(([attr, values]) => ({ in: [{ var: attr }, values] }));
    flag.targeting = { if: [tests.length > 1 ? { and: tests } : tests[0], 'on', 'off'] };
  }
  return flag;
}

function flagdData() {
  const flags = {
    onoff: flagdFlag('on', []),
    rule2: flagdFlag('off', [
      ['country', ['US']],
      ['plan', ['enterprise']],
    ]),
  };
  for (let i = 0; i < FLAGS; i++) flags[`f${i}`] = flagdFlag('off', [['country', ['US']]]);
  return { flags };
}

function version(pkg) {
  return JSON.parse(fs.readFileSync(path.join(__dirname, 'node_modules', pkg, 'package.json'), 'utf8')).version;
}

// --- timing ---------------------------------------------------------------

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// Every case of every SDK is a task; the rounds are interleaved (round 1
// of every task, then round 2, ...), so that a load change on a busy
// machine hits every SDK alike and the per-round ratios stay comparable.
const tasks = [];

/** A case: `fn(i)` timed over N calls a round (`async`: awaited, N / `div` calls). */
function add(row, col, fn, { async = false, div = 10 } = {}) {
  tasks.push({ row, col, fn, async, n: async ? Math.floor(N / div) : N, rounds: [] });
}

let sink = 0;

function roundSync(task, n) {
  const { fn } = task;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) sink += fn(i) ? 1 : 0;
  return Number(process.hrtime.bigint() - t0) / n;
}

async function roundAsync(task, n) {
  const { fn } = task;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) sink += (await fn(i)) ? 1 : 0;
  return Number(process.hrtime.bigint() - t0) / n;
}

/** Warms every task up (a tenth of a round), then times ROUNDS interleaved rounds. */
async function runTasks() {
  for (const t of tasks) {
    if (t.async) await roundAsync(t, Math.floor(t.n / 10));
    else roundSync(t, Math.floor(t.n / 10));
  }
  for (let r = 0; r < ROUNDS; r++) {
    for (const t of tasks) t.rounds.push(t.async ? await roundAsync(t, t.n) : roundSync(t, t.n));
  }
  if (sink < 0) console.log(sink);
}

/**
 * JS heap bytes allocated per call and scavenges (young-generation GCs)
 * during 1,000,000 calls: new-space use before and after, with no GC in
 * between (a GC would be counted and void the byte figure).
 */
async function allocations(fn) {
  const calls = 1_000_000;
  for (let i = 0; i < 10_000; i++) fn(i); // compiled before measuring
  global.gc();
  // The forced GC's entry is delivered asynchronously: let it pass first.
  await new Promise((resolve) => setTimeout(resolve, 200));
  let gcs = 0;
  const obs = new PerformanceObserver((list) => (gcs += list.getEntries().length));
  obs.observe({ entryTypes: ['gc'] });
  const used = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_used_size;
  const before = used();
  let sink = 0;
  for (let i = 0; i < calls; i++) sink += fn(i) ? 1 : 0;
  const after = used();
  if (sink < 0) console.log(sink);
  // GC entries are delivered asynchronously: let them arrive first.
  await new Promise((resolve) => setTimeout(resolve, 200));
  obs.disconnect();
  return { perCall: (after - before) / calls, gcs };
}

// --- the run ---------------------------------------------------------------

async function main() {
  if (typeof global.gc !== 'function') throw new Error('run with node --expose-gc');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'flagstream-bench-'));
  const rows = [];

  // flagstream
  const fsClient = Client.testData(flagstreamSet());
  if (!fsClient.bool('rule2', ctxObject, false)) throw new Error('flagstream: rule2 should be true');
  const prebuilt = new Context(ctxObject);
  const FS = 'flagstream (this package)';
  add(FS, 'onoff', () => fsClient.bool('onoff', ctxObject, false));
  add(FS, 'rule2', () => fsClient.bool('rule2', ctxObject, false));
  add(FS, 'fresh', (i) => fsClient.bool('rule2', { key: userKeys[i & 1023], country: 'US', plan: 'enterprise' }, false));
  add(FS, 'prebuilt', () => fsClient.bool('rule2', prebuilt, false));
  add(FS, 'random', (i) => fsClient.bool(randomKeys[i & 0xffff], prebuilt, false));


  // LaunchDarkly, file data source
  const ld = require('@launchdarkly/node-server-sdk');
  const ldFile = path.join(tmp, 'ld.json');
  fs.writeFileSync(ldFile, JSON.stringify(ldData()));
  const fds = new ld.integrations.FileDataSourceFactory({ paths: [ldFile] });
  const ldClient = ld.init('sdk-bench', {
    updateProcessor: fds.getFactory(),
    sendEvents: false,
    diagnosticOptOut: true,
    logger: ld.basicLogger({ level: 'error' }),
  });
  await ldClient.waitForInitialization({ timeout: 10 });
  const ldCtx = { kind: 'user', key: 'user-42', country: 'US', plan: 'enterprise' };
  if ((await ldClient.variation('rule2', ldCtx, false)) !== true) throw new Error('LaunchDarkly: rule2 should be true');
  const LD = `@launchdarkly/node-server-sdk ${version('@launchdarkly/node-server-sdk')} (file data, async \`variation\`)`;
  const async = { async: true };
  add(LD, 'onoff', () => ldClient.variation('onoff', ldCtx, false), async);
  add(LD, 'rule2', () => ldClient.variation('rule2', ldCtx, false), async);
  add(
    LD,
    'fresh',
    (i) => ldClient.variation('rule2', { kind: 'user', key: userKeys[i & 1023], country: 'US', plan: 'enterprise' }, false),
    async,
  );
  add(LD, 'prebuilt', () => ldClient.variation('rule2', ldCtx, false), async);
  add(LD, 'random', (i) => ldClient.variation(randomKeys[i & 0xffff], ldCtx, false), async);

  // Unleash, bootstrap
  const { Unleash, InMemStorageProvider } = require('unleash-client');
  const unleash = new Unleash({
    appName: 'bench',
    url: 'http://127.0.0.1:9/api/',
    refreshInterval: 0,
    disableMetrics: true,
    bootstrap: { data: unleashData() },
    storageProvider: new InMemStorageProvider(),
    skipInstanceCountWarning: true,
  });
  unleash.on('error', () => {}); // the url is not a server: bootstrap only
  unleash.on('warn', () => {});
  await new Promise((resolve) => (unleash.isSynchronized?.() ? resolve() : unleash.once('ready', resolve)));
  const unCtx = { userId: 'user-42', properties: { country: 'US', plan: 'enterprise' } };
  if (!unleash.isEnabled('rule2', unCtx)) throw new Error('Unleash: rule2 should be enabled');
  const UN = `unleash-client ${version('unleash-client')} (bootstrap)`;
  add(UN, 'onoff', () => unleash.isEnabled('onoff', unCtx));
  add(UN, 'rule2', () => unleash.isEnabled('rule2', unCtx));
  add(UN, 'fresh', (i) => unleash.isEnabled('rule2', { userId: userKeys[i & 1023], properties: { country: 'US', plan: 'enterprise' } }));
  add(UN, 'prebuilt', () => unleash.isEnabled('rule2', unCtx));
  add(UN, 'random', (i) => unleash.isEnabled(randomKeys[i & 0xffff], unCtx));

  // flagd, in-process provider with an offline flag source (the file)
  const { OpenFeature } = require('@openfeature/server-sdk');
  const { FlagdProvider } = require('@openfeature/flagd-provider');
  const flagdFile = path.join(tmp, 'flagd.json');
  fs.writeFileSync(flagdFile, JSON.stringify(flagdData()));
  await OpenFeature.setProviderAndWait(new FlagdProvider({ resolverType: 'in-process', offlineFlagSourcePath: flagdFile }));
  const fdClient = OpenFeature.getClient();
  const fdCtx = { targetingKey: 'user-42', country: 'US', plan: 'enterprise' };
  // The same answers as flagstream for the bench contexts (and a
  // non-matching one), before timing.
  const details = await fdClient.getBooleanDetails('rule2', false, fdCtx);
  if (details.value !== true || details.errorCode !== undefined || details.variant !== 'on') {
    throw new Error(`flagd: rule2 should be true: ${JSON.stringify(details)}`);
  }
  const fr = { key: 'user-42', country: 'FR', plan: 'enterprise' };
  const checks = [
    ['onoff', ctxObject, fdCtx, false],
    ['rule2', ctxObject, fdCtx, false],
    ['rule2', fr, { ...fdCtx, country: 'FR' }, true],
    ...randomKeys.slice(0, 4096).map((k) => [k, ctxObject, fdCtx, false]),
  ];
  for (const [key, fsCtx, ofCtx, def] of checks) {
    const want = fsClient.bool(key, fsCtx, def);
    const got = await fdClient.getBooleanValue(key, def, ofCtx);
    if (got !== want) throw new Error(`flagd: ${key} gave ${got}, flagstream ${want}`);
  }
  // ~40 us per call: a tenth of LaunchDarkly's call count per round.
  const FD = `@openfeature/flagd-provider ${version('@openfeature/flagd-provider')} in-process, offline file (@openfeature/server-sdk ${version('@openfeature/server-sdk')}, async)`;
  const slow = { async: true, div: 100 };
  add(FD, 'onoff', () => fdClient.getBooleanValue('onoff', false, fdCtx), slow);
  add(FD, 'rule2', () => fdClient.getBooleanValue('rule2', false, fdCtx), slow);
  add(
    FD,
    'fresh',
    (i) => fdClient.getBooleanValue('rule2', false, { targetingKey: userKeys[i & 1023], country: 'US', plan: 'enterprise' }),
    slow,
  );
  add(FD, 'prebuilt', () => fdClient.getBooleanValue('rule2', false, fdCtx), slow);
  add(FD, 'random', (i) => fdClient.getBooleanValue(randomKeys[i & 0xffff], false, fdCtx), slow);

  await runTasks();
  ldClient.close();
  unleash.destroy();
  await OpenFeature.close();
  const allocPrebuilt = await allocations(() => fsClient.bool('rule2', prebuilt, false));
  const allocObject = await allocations(() => fsClient.bool('rule2', ctxObject, false));

  // Rows: the median round of each case; ratios: the median of the
  // per-round ratios (the rounds of one index ran back to back).
  const COLS = ['onoff', 'rule2', 'fresh', 'prebuilt', 'random'];
  const byRow = new Map();
  for (const t of tasks) {
    if (!byRow.has(t.row)) byRow.set(t.row, {});
    byRow.get(t.row)[t.col] = t;
  }
  for (const [name, cases] of byRow) rows.push([name, Object.fromEntries(COLS.map((c) => [c, median(cases[c].rounds)]))]);
  const fs0 = byRow.get(FS);
  const ratio = (col, peers) =>
    median(fs0[col].rounds.map((x, r) => Math.min(...peers.map((p) => byRow.get(p)[col].rounds[r])) / x));

  const f = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
  console.log(
    `node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0].model}), ${N.toLocaleString('en')} calls x ${ROUNDS} interleaved rounds (median), ns per evaluation\n`,
  );
  console.log(
    '| SDK | on/off flag | 2-clause rule, object context | 2-clause rule, a new object per call | 2-clause rule, prebuilt context | random flag of 10,000 |',
  );
  console.log('|---|---|---|---|---|---|');
  for (const [name, r] of rows) {
    console.log(`| ${name} | ${f(r.onoff)} | ${f(r.rule2)} | ${f(r.fresh)} | ${f(r.prebuilt)} | ${f(r.random)} |`);
  }
  const peers = [LD, UN, FD];
  console.log('\nflagstream speed-up over the fastest peer per column (median of the per-round ratios; min, max):');
  for (const col of COLS) {
    const each = fs0[col].rounds.map((x, r) => Math.min(...peers.map((p) => byRow.get(p)[col].rounds[r])) / x);
    console.log(`  ${col}: ${ratio(col, peers).toFixed(1)}x (${Math.min(...each).toFixed(1)}, ${Math.max(...each).toFixed(1)})`);
  }
  console.log('\nflagstream speed-up over flagd in-process per column:');
  for (const col of COLS) console.log(`  ${col}: ${ratio(col, [FD]).toFixed(0)}x`);
  console.log(
    `\nJS heap allocation per flagstream evaluation (1,000,000 calls, new-space bytes, GCs during the loop):` +
      `\n  prebuilt Context: ${allocPrebuilt.perCall.toFixed(3)} B/call, ${allocPrebuilt.gcs} GCs` +
      `\n  object context:   ${allocObject.perCall.toFixed(3)} B/call, ${allocObject.gcs} GCs`,
  );
  fsClient.close();
  fs.rmSync(tmp, { recursive: true, force: true });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
