'use strict';
// The whole data-driven evaluation suite (tests/data/eval/*.yaml, format in
// its README.md) through the public JS API, with the same comparison as the
// Rust runner (tests/src/case.rs): value, variation, reason, rule index and
// id, prerequisite key, error kind and schedule step.
//
// Files whose flags validate are served by a client (`Client.offlineFile`
// of their flags); the three whose flags deliberately do not are compiled
// unvalidated (`Snapshot.compile(set, {validate: false})`), as the Rust
// runner does. Every case is evaluated with the context as a plain object
// and as a prebuilt `Context`, through the typed detail accessor and the
// plain one.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const YAML = require('yaml');

const { Client, Context, Snapshot } = require('..');

const caseDir = process.env.FLAGSTREAM_EVAL_DIR || path.resolve(__dirname, '../../../tests/data/eval');

// YAML 1.2 (what serde_yaml reads) with exact 64-bit integers.
const parse = (text) => YAML.parse(text, { intAsBigInt: true });

// BigInts (exact integers from the YAML) as JS numbers, deeply: what a JS
// caller passes and gets back for JSON.
function plain(v) {
  if (typeof v === 'bigint') return Number(v);
  if (Array.isArray(v)) return v.map(plain);
  if (v !== null && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}

// The file form of a context as the JS object form. Attributes named `key`
// or `kind` cannot be written in the object form (those names are the
// context's own key and kind, and the Rust builder ignores them as
// attributes too): they are left out, and the case must still pass.
function single(c) {
  const out = {};
  for (const [name, value] of Object.entries(c.attributes || {})) {
    if (name !== 'key' && name !== 'kind') out[name] = plain(value);
  }
  if (c.key !== undefined) out.key = c.key;
  if (c.kind !== undefined) out.kind = c.kind;
  return out;
}

function jsContext(c) {
  // The file form: `contexts` makes a multi-kind context, with or without `kind: multi`.
  if (c.contexts === undefined) return single(c);
  const out = { kind: 'multi' };
  for (const k of c.contexts) {
    const { kind = 'user', ...rest } = single(k);
    out[kind] = rest;
  }
  return out;
}

const ACCESSORS = {
  bool: { detail: 'boolDetail', plain: 'bool', type: 'bool', def: (d) => d },
  string: { detail: 'stringDetail', plain: 'string', type: 'string', def: (d) => d },
  int: { detail: 'bigintDetail', plain: 'bigint', type: 'bigint', def: (d) => BigInt(d) },
  float: { detail: 'numberDetail', plain: 'number', type: 'number', def: (d) => Number(d) },
  json: { detail: 'jsonDetail', plain: 'json', type: 'json', def: (d) => plain(d) },
};

function observed(d) {
  const out = { value: d.value, reason: d.reason };
  for (const [from, to] of [
    ['variation', 'variation'],
    ['ruleIndex', 'rule_index'],
    ['ruleId', 'rule_id'],
    ['prerequisiteKey', 'prerequisite_key'],
    ['errorKind', 'error'],
    ['scheduleStep', 'schedule_step'],
  ]) {
    if (d[from] !== undefined) out[to] = d[from];
  }
  return out;
}

function wanted(c) {
  const e = c.expect;
  const out = { reason: e.reason };
  switch (c.type) {
    case 'int':
      out.value = BigInt(e.value);
      break;
    case 'float':
      out.value = Number(e.value); // 1 and 1.0 are the same float
      break;
    default:
      out.value = plain(e.value);
  }
  for (const k of ['variation', 'rule_index', 'schedule_step']) {
    if (e[k] !== undefined && e[k] !== null) out[k] = Number(e[k]);
  }
  for (const k of ['prerequisite_key', 'error']) {
    if (e[k] !== undefined && e[k] !== null) out[k] = e[k];
  }
  if (e.rule_id !== undefined && e.rule_id !== null && e.rule_id !== '') out.rule_id = e.rule_id;
  return out;
}

// The flags and segments of a case file as flag-file text, scalars exactly
// as written (YAML Document API: the other keys removed).
function flagFileText(text) {
  const doc = YAML.parseDocument(text, { intAsBigInt: true });
  for (const k of ['description', 'validate', 'cases']) doc.delete(k);
  return doc.toString();
}

const files = fs
  .readdirSync(caseDir)
  .filter((f) => f.endsWith('.yaml'))
  .sort();

test('the suite is there', () => {
  assert.ok(files.length >= 20, `only ${files.length} case files in ${caseDir}`);
});

let total = 0;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'flagstream-conformance-'));
test.after(() => fs.rmSync(tmp, { recursive: true, force: true }));

for (const file of files) {
  test(file, async () => {
    const text = fs.readFileSync(path.join(caseDir, file), 'utf8');
    const data = parse(text);
    const validate = data.validate !== false;
    let evaluate;
    let plainEval;
    let client;
    if (validate) {
      const flagFile = path.join(tmp, file);
      fs.writeFileSync(flagFile, flagFileText(text));
      client = Client.offlineFile(flagFile);
      assert.equal(await client.waitReady(0), true);
      assert.equal(client.status().source, 'file');
      evaluate = (a, key, ctx, def, now) => client[a.detail](key, ctx, def, { now });
      plainEval = (a, key, ctx, def) => client[a.plain](key, ctx, def);
    } else {
      const snap = Snapshot.compile(flagFileText(text), { validate: false });
      evaluate = (a, key, ctx, def, now) => snap.detail(a.type, key, ctx, def, { now });
      plainEval = null;
    }
    const failures = [];
    for (const c of data.cases) {
      total++;
      const a = ACCESSORS[c.type];
      assert.ok(a, `${c.name}: unknown type ${c.type}`);
      const def = a.def(c.default);
      const now = c.now === undefined || c.now === null ? undefined : typeof c.now === 'bigint' ? Number(c.now) : c.now;
      const want = wanted(c);
      const objectCtx = jsContext(c.context);
      for (const [form, ctx] of [
        ['object', objectCtx],
        ['Context', new Context(objectCtx)],
      ]) {
        let got;
        try {
          got = observed(evaluate(a, c.flag, ctx, def, now));
        } catch (e) {
          failures.push(`${c.name} (${form} context): threw ${e.stack}`);
          continue;
        }
        try {
          assert.deepStrictEqual(got, want);
        } catch {
          failures.push(`${c.name} (${form} context):\n  expected ${fmt(want)}\n  got      ${fmt(got)}`);
          continue;
        }
        // The plain accessor returns the same value (without `now`: only
        // for cases whose result does not depend on the clock).
        if (plainEval && now === undefined) {
          const v = plainEval(a, c.flag, ctx, def);
          if (!valueEqual(v, got.value)) {
            failures.push(`${c.name} (${form} context): ${a.plain}() returned ${fmt(v)}, the detail ${fmt(got.value)}`);
          }
          if (c.type === 'int') {
            // int(): the same value as a JS number.
            const n = client.int(c.flag, ctx, Number(def));
            if (n !== Number(got.value)) failures.push(`${c.name}: int() returned ${n}, expected ${Number(got.value)}`);
          }
        }
      }
    }
    if (client) {
      // Every ERROR result of the client was counted, as in Rust.
      const s = client.stats();
      // (Cases with `now` read the snapshot directly and are not counted.)
      const errors = data.cases.filter((c) => c.expect.reason === 'ERROR' && c.now == null).length;
      const counted = s.defaultNotFound + s.defaultWrongType + s.defaultMalformed + s.defaultNotReady;
      if (errors > 0) assert.ok(counted >= errors, `${counted} fallbacks counted for ${errors} ERROR cases`);
      client.close();
    }
    assert.deepEqual(failures, [], `${failures.length} of ${data.cases.length} cases failed:\n${failures.join('\n')}`);
  });
}

test('at least 1,000 cases ran', () => {
  assert.ok(total >= 1000, `the suite should hold at least 1,000 cases, ran ${total}`);
});

function valueEqual(a, b) {
  try {
    assert.deepStrictEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

function fmt(v) {
  return JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? `${x}n` : x));
}
