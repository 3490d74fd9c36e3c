'use strict';
// Plain-object contexts on the hot path (index.js `fastCtx`): the last
// flat object read is reused while an object has the same own properties
// and values, and other flat objects are read in a packed form
// (src/js_context.rs `with_packed`; test/values-form.test.js covers the
// values form). Each case checks the value against the
// JSON path (a `Context` built from the same object, and the detail
// accessor) and against the value the flag must give, so a stale reuse or
// a misread packed form fails here.

const test = require('node:test');
const assert = require('node:assert/strict');

const { Client, Context } = require('..');

const FLAGS = {
  flags: [
    {
      key: 'us-ent',
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      rules: [
        {
          id: 'r',
          clauses: [
            { attribute: 'country', op: 'in', values: ['US'] },
            { attribute: 'plan', op: 'in', values: ['enterprise'] },
          ],
          serve: { variation: 0 },
        },
      ],
      fallthrough: { variation: 1 },
    },
    {
      key: 'n-one',
      type: 'string',
      variations: ['one', 'other'],
      on: true,
      off_variation: 1,
      rules: [{ id: 'r', clauses: [{ attribute: 'n', op: 'in', values: [1] }], serve: { variation: 0 } }],
      fallthrough: { variation: 1 },
    },
    {
      key: 'has-plan',
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      rules: [{ id: 'r', clauses: [{ attribute: 'plan', op: 'in', values: ['enterprise'], negate: false }], serve: { variation: 0 } }],
      fallthrough: { variation: 1 },
    },
    {
      key: 'alice',
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      rules: [{ id: 'r', clauses: [{ attribute: 'key', op: 'in', values: ['alice'] }], serve: { variation: 0 } }],
      fallthrough: { variation: 1 },
    },
    {
      key: 'org',
      type: 'bool',
      variations: [true, false],
      on: true,
      off_variation: 1,
      rules: [{ id: 'r', clauses: [{ context_kind: 'org', attribute: 'key', op: 'in', values: ['acme'] }], serve: { variation: 0 } }],
      fallthrough: { variation: 1 },
    },
  ],
  segments: [],
};

/** `client.<type>(flag, obj)`, checked against the JSON path, and returned. */
function evalBoth(client, type, flag, obj, def) {
  const fastValue = client[type](flag, obj, def);
  const viaContext = client[type](flag, new Context(obj), def);
  const viaDetail = client[`${type}Detail`](flag, obj, def).value;
  assert.deepEqual(fastValue, viaContext, `${flag} ${JSON.stringify(obj)}: object vs Context`);
  assert.deepEqual(fastValue, viaDetail, `${flag} ${JSON.stringify(obj)}: object vs detail`);
  return fastValue;
}

test('a reused object that changes is read again', () => {
  const client = Client.testData(FLAGS);
  const ctx = { key: 'u', country: 'US', plan: 'enterprise' };
  assert.equal(evalBoth(client, 'bool', 'us-ent', ctx, false), true);
  assert.equal(evalBoth(client, 'bool', 'us-ent', ctx, false), true);
  ctx.country = 'FR';
  assert.equal(evalBoth(client, 'bool', 'us-ent', ctx, false), false);
  ctx.country = 'US';
  assert.equal(evalBoth(client, 'bool', 'us-ent', ctx, false), true);
  delete ctx.plan;
  assert.equal(evalBoth(client, 'bool', 'us-ent', ctx, false), false);
  ctx.plan = 'enterprise';
  assert.equal(evalBoth(client, 'bool', 'us-ent', ctx, false), true);
  ctx.extra = 'x';
  assert.equal(evalBoth(client, 'bool', 'us-ent', ctx, false), true);
  ctx.plan = undefined;
  assert.equal(evalBoth(client, 'bool', 'has-plan', ctx, false), false);
  ctx.plan = null;
  assert.equal(evalBoth(client, 'bool', 'has-plan', ctx, false), false);
  ctx.key = 'alice';
  assert.equal(evalBoth(client, 'bool', 'alice', ctx, false), true);
  ctx.key = 'bob';
  assert.equal(evalBoth(client, 'bool', 'alice', ctx, false), false);
  client.close();
});

test('equal objects, and values of another type', () => {
  const client = Client.testData(FLAGS);
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: 1 }, 'd'), 'one');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: 1 }, 'd'), 'one');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: '1' }, 'd'), 'other');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: true }, 'd'), 'other');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: 1.0000000000000002 }, 'd'), 'other');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: -0 }, 'd'), 'other');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: NaN }, 'd'), 'other');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: 1e21 }, 'd'), 'other');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: [1] }, 'd'), 'one');
  assert.equal(evalBoth(client, 'string', 'n-one', { key: 'u', n: 1 }, 'd'), 'one');
  client.close();
});

test('separators, surrogates and keys in values are data', () => {
  const client = Client.testData(FLAGS);
  // A NUL-separated entry inside a value must not become an attribute.
  assert.equal(evalBoth(client, 'bool', 'us-ent', { key: 'u', country: 'US\0plan\0senterprise' }, false), false);
  assert.equal(evalBoth(client, 'bool', 'us-ent', { key: 'u', 'country\0sUS\0plan': 'enterprise' }, false), false);
  assert.equal(evalBoth(client, 'bool', 'has-plan', { key: 'u', plan: 'enterprise\0' }, false), false);
  assert.equal(evalBoth(client, 'bool', 'us-ent', { key: 'ü\u{1F600}', country: 'US', plan: 'enterprise' }, false), true);
  assert.equal(evalBoth(client, 'bool', 'has-plan', { key: 'u', plan: 'enterprise', n: '\uFFFD' }, false), true);
  // A lone surrogate: the JSON path decides (it refuses it).
  assert.throws(() => client.bool('has-plan', { key: 'u', x: '\uD800' }, false), TypeError);
  assert.throws(() => client.boolDetail('has-plan', { key: 'u', x: '\uD800' }, false), TypeError);
  client.close();
});

test('key and kind as the JSON path reads them', () => {
  const client = Client.testData(FLAGS);
  assert.equal(evalBoth(client, 'bool', 'org', { kind: 'org', key: 'acme' }, false), true);
  assert.equal(evalBoth(client, 'bool', 'org', { key: 'acme', kind: 'org' }, false), true);
  assert.equal(evalBoth(client, 'bool', 'org', { key: 'acme' }, false), false);
  assert.equal(evalBoth(client, 'bool', 'alice', { key: null }, false), false);
  assert.equal(evalBoth(client, 'bool', 'alice', {}, false), false);
  assert.equal(evalBoth(client, 'bool', 'org', { kind: 'multi', org: { key: 'acme' } }, false), true);
  for (const bad of [{ key: 7 }, { kind: 'not a kind!' }, { kind: 'multi', key: 'x' }, { kind: 'multi' }, { kind: 5, key: 'x' }]) {
    assert.throws(() => client.bool('alice', bad, false), TypeError, JSON.stringify(bad));
    assert.throws(() => client.boolDetail('alice', bad, false), TypeError, JSON.stringify(bad));
    // The same object again: still refused (nothing of it was kept).
    assert.throws(() => client.bool('alice', bad, false), TypeError, JSON.stringify(bad));
  }
  client.close();
});

test('a closed client gives the default without reading the context', () => {
  const client = Client.testData(FLAGS);
  client.close();
  for (let i = 0; i < 3; i++) {
    assert.equal(client.bool('alice', { kind: 'not a kind!' }, true), true);
    assert.equal(client.string('n-one', { key: 'u', n: 1 }, 'd'), 'd');
  }
});

test('what JSON.stringify reads: own properties, toJSON', () => {
  const client = Client.testData(FLAGS);
  const proto = { plan: 'enterprise' };
  const child = Object.create(proto);
  child.key = 'u';
  child.country = 'US';
  assert.equal(evalBoth(client, 'bool', 'us-ent', child, false), false);
  const withToJSON = { key: 'u', toJSON: () => ({ key: 'alice' }) };
  assert.equal(evalBoth(client, 'bool', 'alice', withToJSON, false), true);
  const hidden = { key: 'alice' };
  Object.defineProperty(hidden, 'key', { value: 'alice', enumerable: false });
  assert.equal(evalBoth(client, 'bool', 'alice', hidden, false), false);
  client.close();
});

test('a getter that evaluates while the object is read', () => {
  const client = Client.testData(FLAGS);
  const inner = { key: 'alice' };
  const outer = {
    key: 'u',
    get country() {
      client.bool('alice', inner, false);
      return 'US';
    },
    plan: 'enterprise',
  };
  assert.equal(client.bool('us-ent', outer, false), true);
  assert.equal(client.bool('us-ent', outer, false), true);
  assert.equal(client.bool('alice', inner, false), true);
  assert.equal(client.bool('alice', outer, false), false);
  client.close();
});
