'use strict';
// The values form of object contexts (index.js `compareToLast`,
// src/values.rs): an object with the same own property names, in the
// same order, as the last flat object is passed as its changed values
// only, the addon keeping the names and the other values. Every case
// checks the value against the JSON path (the detail accessor) and the
// value the flag must give, so a value the addon kept stale (or one it
// read wrong) fails here.

const test = require('node:test');
const assert = require('node:assert/strict');

const { Client } = require('..');

const rule = (key, clauses, kind) => ({
  key,
  type: 'bool',
  variations: [true, false],
  on: true,
  off_variation: 1,
  rules: [{ id: 'r', clauses: clauses.map((c) => ({ ...c, context_kind: kind })), serve: { variation: 0 } }],
  fallthrough: { variation: 1 },
});

const FLAGS = {
  flags: [
    rule('alice-us', [
      { attribute: 'key', op: 'in', values: ['alice'] },
      { attribute: 'country', op: 'in', values: ['US'] },
    ]),
    rule('alice', [{ attribute: 'key', op: 'in', values: ['alice'] }]),
    rule('n-one', [{ attribute: 'n', op: 'in', values: [1] }]),
    rule('beta', [{ attribute: 'beta', op: 'in', values: [true] }]),
    rule('has-plan', [{ attribute: 'plan', op: 'in', values: ['enterprise'] }]),
    rule('h-last', [{ attribute: 'h', op: 'in', values: ['last'] }]),
    rule('org-acme', [{ attribute: 'key', op: 'in', values: ['acme'] }], 'org'),
    rule('long', [{ attribute: 'plan', op: 'in', values: ['p'.repeat(300)] }]),
  ],
  segments: [],
};

/** `client.bool(flag, obj)`, checked against the JSON path, and returned. */
function check(client, flag, obj) {
  const fast = client.bool(flag, obj, false);
  const viaDetail = client.boolDetail(flag, obj, false).value;
  assert.equal(fast, viaDetail, `${flag} ${JSON.stringify(obj)}: object vs detail`);
  return fast;
}

test('new objects of one shape: each value read, the others kept', () => {
  const client = Client.testData(FLAGS);
  const make = (key, country, n, beta) => ({ key, country, n, beta });
  for (let round = 0; round < 3; round++) {
    assert.equal(check(client, 'alice-us', make('bob', 'US', 1, true)), false);
    assert.equal(check(client, 'alice-us', make('alice', 'US', 1, true)), true);
    assert.equal(check(client, 'alice-us', make('alice', 'FR', 1, true)), false);
    assert.equal(check(client, 'n-one', make('alice', 'FR', 1, true)), true);
    assert.equal(check(client, 'n-one', make('alice', 'FR', 2, true)), false);
    assert.equal(check(client, 'n-one', make('alice', 'FR', '1', true)), false);
    assert.equal(check(client, 'n-one', make('alice', 'FR', -0, true)), false);
    assert.equal(check(client, 'n-one', make('alice', 'FR', 1.5, true)), false);
    assert.equal(check(client, 'n-one', make('alice', 'FR', 1, true)), true);
    assert.equal(check(client, 'beta', make('x', 'US', 1, false)), false);
    assert.equal(check(client, 'beta', make('y', 'US', 1, true)), true);
    assert.equal(check(client, 'beta', make('y', 'US', 1, null)), false);
    assert.equal(check(client, 'beta', make('y', 'US', 1, 'true')), false);
    assert.equal(check(client, 'beta', make('z', 'US', 1, true)), true);
    assert.equal(check(client, 'alice-us', make('alice', 'US', undefined, undefined)), true);
    assert.equal(check(client, 'alice-us', make(undefined, 'US', 1, true)), false);
    assert.equal(check(client, 'alice-us', make('alice', 'US', 1, true)), true);
    // Several values changed at once, all of them.
    assert.equal(check(client, 'alice-us', make('carol', 'FR', 3, false)), false);
    assert.equal(check(client, 'alice-us', make('alice', 'US', 1, true)), true);
  }
  client.close();
});

test('long strings, many properties, non-ASCII and surrogates', () => {
  const client = Client.testData(FLAGS);
  const long = 'p'.repeat(300);
  for (const plan of ['x', long, 'y', long + 'q', long, 'ü'.repeat(200), long]) {
    assert.equal(check(client, 'long', { key: 'u', plan }), plan === long);
  }
  // 8 values (the most this form passes) and 9 (the packed form).
  for (const n of [8, 9]) {
    const make = (last) => {
      const o = { key: 'u' };
      for (let i = 1; i < n - 1; i++) o[`a${i}`] = `v${i}`;
      o.h = last;
      return o;
    };
    for (const last of ['first', 'last', 'other', 'last', 'last']) {
      assert.equal(check(client, 'h-last', make(last)), last === 'last');
    }
  }
  assert.equal(check(client, 'alice', { key: 'bob', x: 'a' }), false);
  assert.equal(check(client, 'alice', { key: 'alice', x: '\uFFFD' }), true);
  assert.equal(check(client, 'alice', { key: 'alice', x: 'ü\u{1F600}' }), true);
  assert.equal(check(client, 'alice', { key: 'alice', x: 'a\0b' }), true);
  // A lone surrogate: the JSON path decides (it refuses it).
  assert.throws(() => client.bool('alice', { key: 'alice', x: '\uD800' }, false), TypeError);
  assert.equal(check(client, 'alice', { key: 'alice', x: 'b' }), true);
  client.close();
});

test('key and kind of a shape as the JSON path reads them', () => {
  const client = Client.testData(FLAGS);
  assert.equal(check(client, 'org-acme', { kind: 'org', key: 'x' }), false);
  assert.equal(check(client, 'org-acme', { kind: 'org', key: 'acme' }), true);
  assert.equal(check(client, 'org-acme', { kind: 'user', key: 'acme' }), false);
  assert.equal(check(client, 'org-acme', { kind: undefined, key: 'acme' }), false);
  assert.equal(check(client, 'org-acme', { kind: 'org', key: 'acme' }), true);
  for (const bad of [{ kind: 'not a kind!', key: 'acme' }, { kind: 'multi', key: 'acme' }, { kind: 'org', key: 7 }, { kind: true, key: 'acme' }]) {
    assert.throws(() => client.bool('org-acme', bad, false), TypeError, JSON.stringify(bad));
    assert.throws(() => client.boolDetail('org-acme', bad, false), TypeError, JSON.stringify(bad));
    assert.equal(check(client, 'org-acme', { kind: 'org', key: 'acme' }), true);
  }
  client.close();
});

test('the addon keeps the values of a call to a closed client', () => {
  const open = Client.testData(FLAGS);
  const closed = Client.testData(FLAGS);
  closed.close();
  assert.equal(check(open, 'alice-us', { key: 'u', country: 'US' }), false);
  assert.equal(check(open, 'alice-us', { key: 'v', country: 'US' }), false);
  // The values form, key changed, to a closed client: its default.
  assert.equal(closed.bool('alice-us', { key: 'alice', country: 'US' }, true), true);
  // Only the country changes now: the addon must hold key 'alice'.
  assert.equal(open.bool('alice-us', { key: 'alice', country: 'FR' }, true), false);
  assert.equal(open.bool('alice-us', { key: 'alice', country: 'US' }, false), true);
  open.close();
});

test('after a call that throws, the addon takes the whole record again', () => {
  const client = Client.testData(FLAGS);
  assert.equal(check(client, 'alice-us', { key: 'u', country: 'US' }), false);
  assert.equal(check(client, 'alice-us', { key: 'v', country: 'US' }), false);
  // A default of the wrong type throws before the addon reads the values.
  assert.throws(() => client.bool('alice-us', { key: 'alice', country: 'US' }, 'no'), TypeError);
  assert.equal(client.bool('alice-us', { key: 'alice', country: 'FR' }, true), false);
  assert.equal(client.bool('alice-us', { key: 'alice', country: 'US' }, false), true);
  // Every typed evaluation takes the values form.
  assert.equal(client.string('alice-us', { key: 'bob', country: 'US' }, 'd'), 'd');
  assert.equal(client.number('alice-us', { key: 'carol', country: 'US' }, 1), 1);
  assert.equal(client.int('alice-us', { key: 'dave', country: 'US' }, 2), 2);
  assert.equal(client.bool('alice-us', { key: 'alice', country: 'US' }, false), true);
  client.close();
});

test('inherited properties are not read, after a record of the same names', () => {
  const client = Client.testData(FLAGS);
  // The record: own `key` and `plan`, twice (values form from the second).
  assert.equal(check(client, 'has-plan', { key: 'a', plan: 'enterprise' }), true);
  assert.equal(check(client, 'has-plan', { key: 'b', plan: 'enterprise' }), true);
  // The same names in the same order, `plan` inherited: JSON.stringify
  // leaves it out, so the flag does not match.
  const child = Object.create({ plan: 'enterprise' });
  child.key = 'c';
  assert.equal(JSON.stringify(child), '{"key":"c"}');
  assert.equal(check(client, 'has-plan', child), false);
  assert.equal(check(client, 'has-plan', { key: 'd', plan: 'enterprise' }), true);
  assert.equal(check(client, 'has-plan', child), false);
  client.close();
});

test('an enumerable property added to Object.prototype is not read', () => {
  const client = Client.testData(FLAGS);
  assert.equal(check(client, 'has-plan', { key: 'a' }), false);
  assert.equal(check(client, 'has-plan', { key: 'b' }), false);
  // eslint-disable-next-line no-extend-native
  Object.prototype.plan = 'enterprise';
  try {
    assert.equal(check(client, 'has-plan', { key: 'c' }), false);
    assert.equal(check(client, 'has-plan', { key: 'd' }), false);
    // A record of own `key` and `plan`, then an object with `key` only:
    // `for...in` yields the inherited `plan` where the record has it.
    assert.equal(check(client, 'has-plan', { key: 'e', plan: 'enterprise' }), true);
    assert.equal(check(client, 'has-plan', { key: 'f', plan: 'enterprise' }), true);
    assert.equal(check(client, 'has-plan', { key: 'c' }), false);
    assert.equal(check(client, 'has-plan', { key: 'd' }), false);
  } finally {
    delete Object.prototype.plan;
  }
  assert.equal(check(client, 'has-plan', { key: 'g' }), false);
  assert.equal(check(client, 'has-plan', { key: 'h', plan: 'enterprise' }), true);
  client.close();
});
