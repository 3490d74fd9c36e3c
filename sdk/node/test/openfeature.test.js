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
