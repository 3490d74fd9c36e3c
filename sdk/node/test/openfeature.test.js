'use strict';
// The OpenFeature provider through @openfeature/server-sdk: values,
// variants, reasons and error codes as the Rust provider maps them.

const test = require('node:test');
const assert = require('node:assert/strict');
const { OpenFeature, ProviderEvents } = require('@openfeature/server-sdk');

const { Client } = require('..');
const { FlagstreamProvider, toContext } = require('../openfeature');

const FLAGS = {
  flags: [
    {
      key: 'beta',
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      rules: [{ id: 'us', clauses: [{ attribute: 'country', op: 'in', values: ['US'] }], serve: { variation: 0 } }],
      fallthrough: { variation: 1 },
    },
    { key: 'dark', type: 'bool', variations: [true, false], on: false, off_variation: 1, fallthrough: { variation: 0 } },
    {
      key: 'split',
      type: 'string',
      variations: ['a', 'b'],
      on: true,
      off_variation: 0,
      fallthrough: { rollout: { variations: [{ variation: 0, weight: 50000 }, { variation: 1, weight: 50000 }] } },
    },
    { key: 'limit', type: 'int', variations: [10, 20], on: true, off_variation: 0, fallthrough: { variation: 1 } },
    { key: 'ratio', type: 'float', variations: [0.5, 1.5], on: true, off_variation: 0, fallthrough: { variation: 1 } },
    { key: 'config', type: 'json', variations: [{ a: 1 }, [1, 2]], on: true, off_variation: 1, fallthrough: { variation: 0 } },
    { key: 'list', type: 'json', variations: [{ a: 1 }, [1, 2]], on: true, off_variation: 0, fallthrough: { variation: 1 } },
    {
      key: 'org-plan',
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      rules: [{ clauses: [{ context_kind: 'org', attribute: 'plan', op: 'in', values: ['enterprise'] }], serve: { variation: 0 } }],
      fallthrough: { variation: 1 },
    },
    {
      key: 'needs-dark',
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      prerequisites: [{ key: 'dark', variation: 0 }],
      fallthrough: { variation: 0 },
    },
  ],
};

test('reasons, variants and error codes as in Rust', async (t) => {
  const client = Client.testData(FLAGS);
  const provider = new FlagstreamProvider(client);
  await OpenFeature.setProviderAndWait(provider);
  t.after(() => OpenFeature.close());
  const of = OpenFeature.getClient();

  let d = await of.getBooleanDetails('beta', false, { targetingKey: 'u', country: 'US' });
  assert.deepEqual([d.value, d.variant, d.reason, d.errorCode], [true, '0', 'TARGETING_MATCH', undefined]);
  d = await of.getBooleanDetails('beta', true, { targetingKey: 'u', country: 'FR' });
  assert.deepEqual([d.value, d.variant, d.reason], [false, '1', 'DEFAULT']);
  d = await of.getBooleanDetails('dark', true, { targetingKey: 'u' });
  assert.deepEqual([d.value, d.reason], [false, 'DISABLED']);
  d = await of.getBooleanDetails('needs-dark', true, { targetingKey: 'u' });
  assert.deepEqual([d.value, d.reason], [false, 'DISABLED'], 'a failed prerequisite is DISABLED');
  d = await of.getStringDetails('split', 'z', { targetingKey: 'u' });
  assert.equal(d.reason, 'SPLIT');
  assert.ok(['a', 'b'].includes(d.value));
  assert.equal((await of.getNumberDetails('limit', 0, { targetingKey: 'u' })).value, 20);
  assert.equal((await of.getNumberDetails('ratio', 0, { targetingKey: 'u' })).value, 1.5);
  assert.deepEqual((await of.getObjectDetails('config', {}, { targetingKey: 'u' })).value, { a: 1 });

  // Errors: the caller's default, reason ERROR, the mapped code.
  d = await of.getBooleanDetails('missing', true, { targetingKey: 'u' });
  assert.deepEqual([d.value, d.reason, d.errorCode], [true, 'ERROR', 'FLAG_NOT_FOUND']);
  d = await of.getStringDetails('beta', 'x', { targetingKey: 'u' });
  assert.deepEqual([d.value, d.reason, d.errorCode], ['x', 'ERROR', 'TYPE_MISMATCH']);
  d = await of.getObjectDetails('list', { no: true }, { targetingKey: 'u' });
  assert.deepEqual([d.value, d.errorCode], [{ no: true }, 'TYPE_MISMATCH'], 'an array is not a structure');
  const tooMany = { targetingKey: 'u' };
  for (let i = 0; i < 1000; i++) tooMany[`a${i}`] = i;
  d = await of.getBooleanDetails('beta', true, tooMany);
  assert.deepEqual([d.value, d.errorCode], [true, 'INVALID_CONTEXT']);

  // Multi-kind contexts; an invalid kind name is ignored.
  d = await of.getBooleanDetails('org-plan', false, { kind: 'multi', user: { targetingKey: 'u' }, org: { key: 'acme', plan: 'enterprise' } });
  assert.deepEqual([d.value, d.reason], [true, 'TARGETING_MATCH']);
  assert.deepEqual(toContext({ targetingKey: 'u', kind: 'multi' }), { key: 'u' });
  assert.deepEqual(toContext({ targetingKey: 'u', kind: 'not a kind!', at: new Date(5) }), { key: 'u', at: 5 });
});

test('a provider whose client has no data is not ready, and says so', async () => {
  const client = new Client({ endpoints: ['http://127.0.0.1:9'], sdkKey: 'sdk-none' });
  const provider = new FlagstreamProvider(client, { readyTimeoutMs: 0 });
  await assert.rejects(provider.initialize(), /no flags/);
  const r = await provider.resolveBooleanEvaluation('beta', true, { targetingKey: 'u' });
  assert.deepEqual([r.value, r.reason, r.errorCode], [true, 'ERROR', 'PROVIDER_NOT_READY']);
  let changed = false;
  provider.events.addHandler(ProviderEvents.ConfigurationChanged, () => (changed = true));
  await provider.onClose();
  assert.equal(changed, false);
  assert.equal(client.status().state, 'failed', 'onClose closed the client');
});

// Observing evaluations (onEvaluation) ------------------------------------

const BASE = { 'feature_flag.provider.name': 'flagstream' };
// Test data comes from no store: an empty epoch, revision 0.
const TEST_VERSION = ':0';

/** An OpenFeature client of its own domain over `provider`. */
async function domainClient(t, domain, provider) {
  await OpenFeature.setProviderAndWait(domain, provider);
  t.after(() => OpenFeature.clearProviders());
  return OpenFeature.getClient(domain);
}

test('onEvaluation reports each evaluation with the OpenTelemetry attribute names', async (t) => {
  const client = Client.testData(FLAGS);
  const seen = [];
  const provider = new FlagstreamProvider(client, { onEvaluation: (a) => seen.push(a) });
  assert.equal(provider.hooks.length, 1);
  const of = await domainClient(t, 'observed', provider);
  assert.equal(client.epoch(), '');
  const one = () => {
    assert.equal(seen.length, 1, JSON.stringify(seen));
    return seen.pop();
  };
  const ok = (key, variant, reason) => ({
    'feature_flag.key': key,
    ...BASE,
    'feature_flag.result.variant': variant,
    'feature_flag.result.reason': reason,
    'feature_flag.version': TEST_VERSION,
  });
  const failed = (key, type, version = TEST_VERSION) => ({
    'feature_flag.key': key,
    ...BASE,
    'feature_flag.result.reason': 'error',
    'error.type': type,
    ...(version === null ? {} : { 'feature_flag.version': version }),
  });

  let d = await of.getBooleanDetails('beta', false, { targetingKey: 'u', country: 'US' });
  assert.deepEqual([d.value, d.variant, d.reason], [true, '0', 'TARGETING_MATCH']);
  assert.deepEqual(d.flagMetadata, { 'feature_flag.version': TEST_VERSION }, 'any hook can read the version');
  assert.deepEqual(one(), ok('beta', '0', 'targeting_match'));
  d = await of.getBooleanDetails('beta', true, { targetingKey: 'u', country: 'FR' });
  assert.deepEqual([d.value, d.reason], [false, 'DEFAULT']);
  assert.deepEqual(one(), ok('beta', '1', 'default'));
  d = await of.getStringDetails('split', 'z', { targetingKey: 'u' });
  const split = String(client.stringDetail('split', toContext({ targetingKey: 'u' }), 'z').variation);
  assert.deepEqual([d.reason, d.variant], ['SPLIT', split]);
  assert.deepEqual(one(), ok('split', split, 'split'));
  assert.equal(await of.getBooleanValue('dark', true, { targetingKey: 'u' }), false);
  assert.deepEqual(one(), ok('dark', '1', 'disabled'));

  // Errors: no variant, reason error, the error code; the version of the
  // data that had no such flag (or not of that type), in the result's
  // metadata too.
  d = await of.getBooleanDetails('missing', true, { targetingKey: 'u' });
  assert.deepEqual([d.value, d.errorCode, d.flagMetadata], [true, 'FLAG_NOT_FOUND', { 'feature_flag.version': TEST_VERSION }]);
  assert.deepEqual(one(), failed('missing', 'flag_not_found'));
  d = await of.getStringDetails('beta', 'x', { targetingKey: 'u' });
  assert.deepEqual([d.value, d.errorCode], ['x', 'TYPE_MISMATCH']);
  assert.deepEqual(one(), failed('beta', 'type_mismatch'));
  d = await of.getObjectDetails('list', { no: true }, { targetingKey: 'u' });
  assert.deepEqual([d.value, d.errorCode], [{ no: true }, 'TYPE_MISMATCH']);
  assert.deepEqual(one(), failed('list', 'type_mismatch'));
  // A context the client refuses: nothing was evaluated, so no version.
  const tooMany = { targetingKey: 'u' };
  for (let i = 0; i < 1000; i++) tooMany[`a${i}`] = i;
  d = await of.getBooleanDetails('beta', true, tooMany);
  assert.equal(d.errorCode, 'INVALID_CONTEXT');
  assert.deepEqual(one(), failed('beta', 'invalid_context', null));
  // Numbers and objects go through the same hook.
  assert.equal(await of.getNumberValue('limit', 0, { targetingKey: 'u' }), 20);
  assert.deepEqual(one(), ok('limit', '1', 'default'));
  assert.deepEqual(await of.getObjectValue('config', {}, { targetingKey: 'u' }), { a: 1 });
  assert.deepEqual(one(), ok('config', '0', 'default'));
});

test('without onEvaluation: no hook and no flag metadata', async (t) => {
  const provider = new FlagstreamProvider(Client.testData(FLAGS));
  assert.deepEqual(provider.hooks, []);
  const r = await provider.resolveBooleanEvaluation('beta', false, { targetingKey: 'u', country: 'US' });
  assert.deepEqual(r, { value: true, variant: '0', reason: 'TARGETING_MATCH' });
  assert.equal(r.flagMetadata, undefined);
  const e = await provider.resolveBooleanEvaluation('missing', false, { targetingKey: 'u' });
  assert.equal(e.flagMetadata, undefined);
  const of = await domainClient(t, 'plain', provider);
  const d = await of.getBooleanDetails('beta', false, { targetingKey: 'u', country: 'US' });
  assert.deepEqual([d.value, d.reason, d.flagMetadata], [true, 'TARGETING_MATCH', {}]);
  assert.throws(() => new FlagstreamProvider(Client.testData(FLAGS), { onEvaluation: 'no' }), TypeError);
});

test('a client without data reports no version', async (t) => {
  const client = new Client({ endpoints: ['http://127.0.0.1:9'], sdkKey: 'sdk-none' });
  t.after(() => client.close());
  const seen = [];
  const provider = new FlagstreamProvider(client, { readyTimeoutMs: 0, onEvaluation: (a) => seen.push(a) });
  // Its initialize() fails (provider status ERROR): evaluations still reach it.
  await assert.rejects(OpenFeature.setProviderAndWait('no-data', provider));
  t.after(() => OpenFeature.clearProviders());
  assert.equal(client.epoch(), '');
  const d = await OpenFeature.getClient('no-data').getBooleanDetails('beta', true, { targetingKey: 'u' });
  assert.deepEqual([d.value, d.errorCode], [true, 'PROVIDER_NOT_READY']);
  assert.deepEqual(seen, [{ 'feature_flag.key': 'beta', ...BASE, 'feature_flag.result.reason': 'error', 'error.type': 'provider_not_ready' }]);
});

test('a throwing callback changes no result and is reported once', async (t) => {
  const warnings = [];
  const onWarning = (w) => {
    if (w.code === 'FLAGSTREAM_ON_EVALUATION') warnings.push(w);
  };
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  let calls = 0;
  const results = [];
  for (const [domain, onEvaluation] of [
    ['plain-results', undefined],
    [
      'throwing',
      () => {
        calls++;
        throw new Error('observer down');
      },
    ],
    [
      'rejecting',
      async () => {
        calls++;
        throw new Error('async observer down');
      },
    ],
  ]) {
    const of = await domainClient(t, domain, new FlagstreamProvider(Client.testData(FLAGS), { onEvaluation }));
    results.push([
      await of.getBooleanDetails('beta', false, { targetingKey: 'u', country: 'US' }),
      await of.getStringDetails('split', 'z', { targetingKey: 'u' }),
      await of.getBooleanDetails('missing', true, { targetingKey: 'u' }),
      await of.getStringDetails('beta', 'x', { targetingKey: 'u' }),
    ]);
  }
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(calls, 8, 'called for every evaluation despite failing');
  const strip = (d) => [d.value, d.variant, d.reason, d.errorCode];
  assert.deepEqual(results[1].map(strip), results[0].map(strip));
  assert.deepEqual(results[2].map(strip), results[0].map(strip));
  assert.deepEqual(
    warnings.map((w) => /observer down/.test(w.message)),
    [true, true],
    'one warning per provider, not one per evaluation',
  );
});

test('the version is the relay epoch and revision', { timeout: 180_000 }, async (t) => {
  const { startRelay, tempDir } = require('./helpers');
  const relay = await startRelay(tempDir('openfeature'));
  t.after(() => relay.stop());
  const client = new Client({ endpoints: [relay.url], sdkKey: relay.demoKey() });
  t.after(() => client.close());
  assert.equal(await client.waitReady(20_000), true);
  const seen = [];
  const of = await domainClient(t, 'relay', new FlagstreamProvider(client, { closeClient: false, onEvaluation: (a) => seen.push(a) }));
  const epoch = client.epoch();
  assert.notEqual(epoch, '', "a relay's data has an epoch");
  const d = await of.getBooleanDetails('new-checkout', false, { targetingKey: 'u', country: 'US', plan: 'enterprise' });
  const version = `${epoch}:${client.status().revision}`;
  assert.deepEqual([d.value, d.flagMetadata], [true, { 'feature_flag.version': version }]);
  assert.deepEqual(seen, [
    {
      'feature_flag.key': 'new-checkout',
      ...BASE,
      'feature_flag.result.variant': '0',
      'feature_flag.result.reason': 'targeting_match',
      'feature_flag.version': version,
    },
  ]);
});
