'use strict';
// What observing evaluations costs through the OpenFeature provider, and
// that it costs nothing when off. Three providers over one client (test
// data: a bool flag with a 2-clause rule, the context matching it),
// evaluated through @openfeature/server-sdk's client (getBooleanValue) and
// through the provider alone (resolveBooleanEvaluation):
//
//   before:  the provider's boolean path as it was before onEvaluation
//            existed (copied below: no hook, no metadata); "before, again"
//            is a second one timed as a case of its own: its ratio is the
//            noise floor;
//   off:     new FlagstreamProvider(client), no callback;
//   no-op:   new FlagstreamProvider(client, { onEvaluation: () => {} });
//   empty hook (reference): `before` with a provider hook that does
//            nothing: what the SDK spends on any one hook.
//
// Rounds of every case interleaved in one process; per case the median ns
// per evaluation over the rounds and the median of the per-round ratios to
// `before`. Needs only the package (its release addon for meaningful
// numbers: FLAGSTREAM_NODE_PROFILE=release node scripts/build.js) and its
// devDependency @openfeature/server-sdk:
//
//   node sdk/node/bench/openfeature-hooks.js [--quick]

const fs = require('node:fs');
const path = require('node:path');

const { OpenFeature, OpenFeatureEventEmitter } = require('@openfeature/server-sdk');
const { Client } = require('..');
const { FlagstreamProvider, toContext } = require('../openfeature');

const QUICK = process.argv.includes('--quick');
const ROUNDS = QUICK ? 7 : 21;
const N = QUICK ? 5_000 : 20_000;

// The provider's boolean path before onEvaluation (as released).
const REASONS = { OFF: 'DISABLED', PREREQUISITE_FAILED: 'DISABLED', TARGET_MATCH: 'TARGETING_MATCH', RULE_MATCH: 'TARGETING_MATCH' };
const ERROR_CODES = { FLAG_NOT_FOUND: 'FLAG_NOT_FOUND', WRONG_TYPE: 'TYPE_MISMATCH', MALFORMED_FLAG: 'PARSE_ERROR', NOT_READY: 'PROVIDER_NOT_READY' };
function resolution(d, defaultValue) {
  if (d.reason === 'ERROR') {
    return { value: defaultValue, reason: 'ERROR', errorCode: ERROR_CODES[d.errorKind] || 'GENERAL', errorMessage: d.errorKind };
  }
  let reason;
  if (d.stale) reason = 'STALE';
  else if (d.reason === 'FALLTHROUGH') reason = d.inRollout ? 'SPLIT' : 'DEFAULT';
  else reason = REASONS[d.reason];
  return { value: d.value, variant: String(d.variation), reason };
}
class BeforeProvider {
  metadata = { name: 'flagstream' };
  runsOn = 'server';
  hooks = [];
  events = new OpenFeatureEventEmitter();
  #client;
  constructor(client) {
    this.#client = client;
  }
  #resolve(method, key, defaultValue, ec, check) {
    let ctx;
    try {
      ctx = toContext(ec);
      const d = this.#client[method](key, ctx, defaultValue);
      if (check && d.reason !== 'ERROR' && !check(d.value)) {
        return { value: defaultValue, reason: 'ERROR', errorCode: 'TYPE_MISMATCH', errorMessage: "the flag's value is not a JSON object" };
      }
      return resolution(d, defaultValue);
    } catch (e) {
      if (e instanceof TypeError) return { value: defaultValue, reason: 'ERROR', errorCode: 'INVALID_CONTEXT', errorMessage: e.message };
      throw e;
    }
  }
  async resolveBooleanEvaluation(flagKey, defaultValue, context) {
    return this.#resolve('boolDetail', flagKey, defaultValue, context);
  }
}
class EmptyHookProvider extends BeforeProvider {
  hooks = [{}];
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

async function main() {
  const client = Client.testData({
    flags: [
      {
        key: 'rule',
        type: 'bool',
        variations: [true, false],
        on: true,
        off_variation: 1,
        rules: [
          {
            id: 'us-enterprise',
            clauses: [
              { attribute: 'country', op: 'in', values: ['US', 'CA'] },
              { attribute: 'plan', op: 'in', values: ['enterprise'] },
            ],
            serve: { variation: 0 },
          },
        ],
        fallthrough: { variation: 1 },
      },
    ],
  });
  const ctx = { targetingKey: 'user-42', country: 'US', plan: 'enterprise' };
  const providers = {
    before: new BeforeProvider(client),
    'before, again': new BeforeProvider(client),
    off: new FlagstreamProvider(client, { closeClient: false }),
    'no-op': new FlagstreamProvider(client, { closeClient: false, onEvaluation: () => {} }),
    'empty hook': new EmptyHookProvider(client),
  };
  const cases = {};
  for (const [name, p] of Object.entries(providers)) {
    await OpenFeature.setProviderAndWait(name, p);
    const of = OpenFeature.getClient(name);
    if ((await of.getBooleanValue('rule', false, ctx)) !== true) throw new Error(`${name}: wrong answer`);
    cases[`OpenFeature getBooleanValue, ${name}`] = () => of.getBooleanValue('rule', false, ctx);
  }
  for (const [name, p] of Object.entries(providers)) {
    if (name === 'empty hook') continue; // the same provider call as before
    if ((await p.resolveBooleanEvaluation('rule', false, ctx)).value !== true) throw new Error(`${name}: wrong answer`);
    cases[`provider.resolveBooleanEvaluation, ${name}`] = () => p.resolveBooleanEvaluation('rule', false, ctx);
  }
  // The observed provider really reports (checked once, off the clock).
  const seen = [];
  await OpenFeature.setProviderAndWait('check', new FlagstreamProvider(client, { closeClient: false, onEvaluation: (a) => seen.push(a) }));
  await OpenFeature.getClient('check').getBooleanValue('rule', false, ctx);
  if (seen[0]?.['feature_flag.result.reason'] !== 'targeting_match') throw new Error(`not observed: ${JSON.stringify(seen)}`);

  const names = Object.keys(cases);
  const times = Object.fromEntries(names.map((k) => [k, []]));
  // Warm-up: every case, before any timing.
  for (const k of names) for (let i = 0; i < N; i++) await cases[k]();
  for (let r = 0; r < ROUNDS; r++) {
    // A different order each round: no case always runs first.
    const order = names.slice(r % names.length).concat(names.slice(0, r % names.length));
    for (const k of order) {
      const f = cases[k];
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < N; i++) await f();
      times[k].push(Number(process.hrtime.bigint() - t0) / N);
    }
  }

  // The SDK's own package.json (not exported: read from its directory).
  const main = require.resolve('@openfeature/server-sdk');
  const pkg = path.join(main.slice(0, main.lastIndexOf(`${path.sep}dist${path.sep}`)), 'package.json');
  const sdk = JSON.parse(fs.readFileSync(pkg, 'utf8')).version;
  console.log(`Node ${process.version}, @openfeature/server-sdk ${sdk}; ${ROUNDS} interleaved rounds of ${N.toLocaleString('en-US')} evaluations per case\n`);
  console.log('| case | median ns/eval | min ns/eval | vs before (median of per-round ratios) |');
  console.log('|---|---:|---:|---:|');
  for (const k of names) {
    const base = times[`${k.split(', ')[0]}, before`];
    const ratios = times[k].map((t, i) => t / base[i]);
    const fmt = (x) => Math.round(x).toLocaleString('en-US');
    console.log(`| ${k} | ${fmt(median(times[k]))} | ${fmt(Math.min(...times[k]))} | ${median(ratios).toFixed(3)} |`);
  }
  await OpenFeature.close();
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
