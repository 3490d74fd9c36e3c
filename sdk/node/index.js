'use strict';
// flagstream for Node.js: the Rust client behind a native addon
// (src/lib.rs), wrapped here in the JS idiom. See index.d.ts for the API.

const { EventEmitter } = require('node:events');
const path = require('node:path');

let native;
try {
  native = require(process.env.FLAGSTREAM_NODE_ADDON || path.join(__dirname, 'flagstream.node'));
} catch (e) {
  e.message = `flagstream: the native addon is not built (run \`npm install\` in ${__dirname}, which needs the Rust toolchain): ${e.message}`;
  throw e;
}
const { NativeClient, Snapshot, kindProblem, contextInfo } = native;
// The evaluation hot path: plain N-API functions taking ids (src/fast.rs).
const fast = native.fastApi();

// A Context's id in the addon's table; freed when the Context is collected.
const ID = Symbol('flagstream.contextId');
const contexts = new FinalizationRegistry((id) => fast.contextFree(id));

/**
 * A context read once, for hot paths: evaluating with it converts nothing
 * (the object form as for any evaluation; see index.d.ts).
 */
class Context {
  constructor(ctx) {
    if (ctx === null || typeof ctx !== 'object') throw new TypeError('a context is an object');
    const id = fast.contextNew(JSON.stringify(ctx));
    Object.defineProperty(this, ID, { value: id });
    contexts.register(this, id);
  }
  /** The targeting key (of a multi-kind context: of its first kind). */
  get key() {
    return contextInfo(this[ID]).key;
  }
  /** The kind; `multi` for a multi-kind context. */
  get kind() {
    return contextInfo(this[ID]).kind;
  }
  /** The file form (`{key, kind, attributes}` / `{kind: "multi", contexts}`). */
  toJSON() {
    return contextInfo(this[ID]).file;
  }
}

/**
 * What the addon takes for a context: a Context's id, or the JSON text of
 * an object context (read in Rust in one pass: a few times cheaper than
 * walking the object through N-API). So an object context is read as
 * JSON.stringify sees it: `undefined` and functions are left out (missing
 * attributes), Dates become ISO strings, `toJSON()` is honoured.
 */
function ctxArg(ctx) {
  if (ctx instanceof Context) return ctx[ID];
  if (ctx === null || typeof ctx !== 'object') throw new TypeError(`a context is an object or a Context, not ${ctx === null ? 'null' : typeof ctx}`);
  return JSON.stringify(ctx);
}

// The hot path's object contexts (`fastCtx`). A plain object whose own
// enumerable properties are all primitives is passed in a packed form
// (`packed()`), which the addon reads with no JSON and no allocation; the
// last one's own enumerable names and values are recorded. An object with
// exactly those names, in that order, and those values (`===`) — the same
// object again, or an equal one — is the same context: the second time in
// a row it is read once into the addon's context `LAST`, and from then on
// passed as `LAST`, with nothing converted. An object with exactly those
// names but other values (the next context built by the same code) is
// passed in the values form (`VALUES`, src/values.rs): the addon holds
// the names and values (`shapeSet`), and the call passes the changed
// values only (a bit mask of their positions, then one argument each), no
// string built. One record per thread, of primitives: no reference to the
// caller's objects is kept.
const LAST = fast.contextNew('{}');
const lastNames = [];
const lastValues = [];
let lastCount = -1; // -1: no record
let lastText; // the recorded object's packed form; undefined: not built
let lastSet = false; // whether LAST holds it
let packedCount = 0;
let reading = false;
const hasOwn = Object.hasOwn;
const getPrototypeOf = Object.getPrototypeOf;
const OBJECT_PROTOTYPE = Object.prototype;
const EMPTY = {};
// The values form: at most MAX_VALUES properties, all of values it takes
// (`recordTakes`, `takes()`); the changed ones in `vals` (`changedCount`
// of them, positions `changedMask`). `shapeSent`: the addon holds the
// record (names and values); false from a call in that form until it
// returns (a call that throws may not have updated the addon).
const VALUES = true;
const MAX_VALUES = 8;
const vals = new Array(MAX_VALUES).fill(undefined);
let changedMask = 0;
let changedCount = 0;
let recordTakes = false;
let shapeSent = false;
const DIFFERENT = 0; // not the recorded names (or a value the values form does not take)
const SAME = 1; // the recorded names and values
const NEW_VALUES = 2; // the recorded names, other values: now recorded, the changed in `vals`

/**
 * The packed form of a plain flat object (src/fast.rs `with_packed`):
 * the count of entries, then `\0name\0` and the value tagged `s`, `n`, `t`
 * or `f` per string, number or boolean property, key and kind first (null
 * and undefined left out, as JSON.stringify leaves them missing). Records every own
 * enumerable property in lastNames/lastValues (packedCount of them) as it
 * goes. `undefined` for any other value (an object, array, function,
 * symbol, bigint), and for a key or kind that is not a string: the JSON
 * path reads those.
 */
function packed(ctx) {
  shapeSent = false; // a new record
  recordTakes = true;
  let head = ''; // key and kind: the addon reads them first
  let s = '';
  let n = 0;
  let i = 0;
  for (const k in ctx) {
    if (!hasOwn(ctx, k)) continue; // JSON.stringify reads own properties only
    const v = ctx[k];
    lastNames[i] = k;
    lastValues[i] = v;
    i++;
    switch (typeof v) {
      case 'string':
        if (k === 'key' || k === 'kind') head += '\0' + k + '\0s' + v;
        else s += '\0' + k + '\0s' + v;
        break;
      case 'number':
        if (k === 'key' || k === 'kind') return undefined;
        if (!Number.isSafeInteger(v)) recordTakes = false;
        s += '\0' + k + '\0n' + v;
        break;
      case 'boolean':
        if (k === 'key' || k === 'kind') return undefined;
        s += v ? '\0' + k + '\0t' : '\0' + k + '\0f';
        break;
      case 'undefined':
        continue;
      case 'object':
        if (v === null) continue;
        return undefined;
      default:
        return undefined;
    }
    n++;
  }
  if (i > MAX_VALUES) recordTakes = false;
  packedCount = i;
  return n + head + s;
}

/**
 * What the hot path (`fast.*`) takes for a context: a Context's id, `LAST`
 * or the packed form for a plain flat object, the JSON text (ctxArg) for
 * anything else. The addon gives `undefined` for a packed form it cannot
 * read as the JSON path would (`Client#bool` then passes the JSON text):
 * every object is read as its JSON text reads. Only objects without
 * `toJSON` whose properties are all primitives are packed; a getter (or a
 * Proxy's traps) may run more than once for one evaluation.
 */
function fastCtx(ctx) {
  if (ctx instanceof Context) return ctx[ID];
  // `reading`: a getter evaluating with another object while this one is
  // read takes the JSON path, leaving the record to this read.
  if (!reading && ctx !== null && typeof ctx === 'object' && ctx.toJSON === undefined) {
    reading = true;
    try {
      const m = compareToLast(ctx);
      if (m === SAME) {
        if (lastSet) return LAST;
        if (lastText === undefined) {
          // Recorded from the values form: the packed form, once.
          const p = packed(ctx);
          if (p === undefined) {
            lastCount = -1; // a getter's value changed type
            return ctxArg(ctx);
          }
          lastText = p;
          lastCount = packedCount;
        }
        lastSet = fast.contextSet(LAST, lastText);
        return lastSet ? LAST : lastText;
      }
      lastSet = false;
      if (m === NEW_VALUES) {
        lastText = undefined;
        if (shapeSent) return VALUES;
        // The addon takes the whole record: a packed form of it, once.
        fast.shapeSet(lastNames.slice(0, lastCount), lastValues.slice(0, lastCount));
        shapeSent = true;
        changedMask = 0;
        changedCount = 0;
        return VALUES;
      }
      lastCount = -1;
      const p = packed(ctx);
      if (p !== undefined) {
        lastText = p;
        lastCount = packedCount;
        return p;
      }
    } finally {
      reading = false;
    }
  }
  return ctxArg(ctx);
}

/**
 * `ctx` against the record: SAME (exactly the own enumerable names and
 * values recorded), NEW_VALUES (those names, and other values of a record
 * the values form takes: now recorded, the changed ones in `vals`), or
 * DIFFERENT.
 */
function compareToLast(ctx) {
  if (lastCount < 0) return DIFFERENT;
  // `for...in` also yields inherited enumerable properties; a plain
  // object's are Object.prototype's, and while it has none (`plain()`)
  // every name it yields is the object's own, so the `hasOwn` test (a
  // call per property) is left out.
  const own = getPrototypeOf(ctx) !== OBJECT_PROTOTYPE || !plain();
  let i = 0;
  let mask = 0;
  let n = 0;
  for (const k in ctx) {
    if (own && !hasOwn(ctx, k)) continue;
    if (i >= lastCount || lastNames[i] !== k) return DIFFERENT;
    const v = ctx[k];
    if (v !== lastValues[i]) {
      if (!recordTakes || !takes(k, v)) return DIFFERENT;
      mask |= 1 << i;
      vals[n++] = v;
    }
    i++;
  }
  if (i !== lastCount) return DIFFERENT;
  if (n === 0) return SAME;
  for (let j = 0, c = 0; c < n; j++) {
    if (mask & (1 << j)) lastValues[j] = vals[c++];
  }
  changedMask = mask;
  changedCount = n;
  return NEW_VALUES;
}

/** Whether Object.prototype has no enumerable property (`for...in` of an empty plain object yields nothing). */
function plain() {
  for (const _ in EMPTY) return false;
  return true;
}

/**
 * Whether the values form takes `v` as property `k` (src/values.rs):
 * strings, null, undefined; booleans and safe integers but as key or kind
 * (the JSON path's error). Other numbers are read from their JSON digits.
 */
function takes(k, v) {
  switch (typeof v) {
    case 'string':
    case 'undefined':
      return true;
    case 'number':
      return Number.isSafeInteger(v) && k !== 'key' && k !== 'kind';
    case 'boolean':
      return k !== 'key' && k !== 'kind';
    case 'object':
      return v === null;
    default:
      return false;
  }
}

/**
 * Calls the evaluation `f` with the values form: the changed values' mask
 * and values.
 */
function viaValues(f, id, key, defaultValue) {
  shapeSent = false; // until the addon has taken the values
  const v = changedCount === 1
    ? f(id, key, VALUES, defaultValue, changedMask, vals[0])
    : f(id, key, VALUES, defaultValue, changedMask, vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7]);
  shapeSent = true;
  return v;
}

const OPTIONS = new Set([
  'endpoints', 'sdkKey', 'cacheDir', 'cacheWriteIntervalMs', 'keepEndpointOrder', 'tlsCaPem',
  'tlsCertPem', 'tlsKeyPem', 'offlineFile', 'testData', 'connectTimeoutMs', 'keepaliveIntervalMs',
  'keepaliveTimeoutMs', 'tcpUserTimeoutMs', 'firstMessageTimeoutMs', 'heartbeatDefaultMs',
  'watchdogMisses', 'backoffBaseMs', 'backoffCapMs', 'healthyAfterMs', 'stallJitterMs', 'staleAfterMs',
  'usageReports', 'usageIntervalMs',
]);

// A flag set as flag-file text: a string as it is (YAML or JSON; keeps
// 64-bit integers exact), an object ({flags, segments}) as JSON.
function flagSetText(set) {
  if (typeof set === 'string') return set;
  if (set === null || typeof set !== 'object') throw new TypeError('a flag set is an object {flags, segments} or flag-file text');
  return JSON.stringify(set);
}

function nowOf(options) {
  if (options === undefined || options === null || options.now === undefined) return undefined;
  const now = options.now;
  if (now instanceof Date) return now.getTime();
  if (typeof now === 'number') return now;
  if (typeof now === 'string') {
    const t = Date.parse(now);
    if (Number.isNaN(t)) throw new TypeError(`now: ${JSON.stringify(now)} is not a date`);
    return t;
  }
  throw new TypeError('now must be a Date, Unix milliseconds or an ISO 8601 string');
}

/** Whether `name` is an event the change forwarder emits. */
function isChangeEvent(name) {
  return typeof name === 'string' && (name === 'change' || name.startsWith('change:'));
}

// Lifetime. The addon's change forwarder calls into JS through a
// threadsafe function, which holds its callback for good; the callback
// holds its client only through a WeakRef, so a client that nothing
// references is garbage collected and its native half's finalizer stops
// it (its stream, tasks and memory go; src/lib.rs). A client with `change`
// or `change:<flagKey>` listeners is kept in this set until close() or
// until its last such listener is removed: whoever listens is using it,
// and collecting it would silently stop their events.
const listened = new Set();

/**
 * A flagstream client: streams flags from relays on the addon's own
 * threads and evaluates them synchronously in memory. Emits `change`
 * ({revision, flags}) per applied revision and `change:<flagKey>`
 * ({revision, key}) per changed flag.
 */
class Client extends EventEmitter {
  #n;
  #id;
  #closed = false;

  // Every way of adding or removing a listener updates `listened`.
  static {
    for (const method of ['addListener', 'on', 'prependListener', 'once', 'prependOnceListener',
      'removeListener', 'off', 'removeAllListeners']) {
      const base = EventEmitter.prototype[method];
      Object.defineProperty(Client.prototype, method, {
        value: function (...args) {
          const out = base.apply(this, args);
          Client.#keepWhileListened(this);
          return out;
        },
        writable: true,
        configurable: true,
      });
    }
  }

  static #keepWhileListened(client) {
    if (!client.#closed && client.eventNames().some(isChangeEvent)) listened.add(client);
    else listened.delete(client);
  }

  /** The forwarder's callback: holds the client weakly (see `listened`). */
  static #forwardTo(ref) {
    return (event) => {
      const client = ref.deref();
      if (client !== undefined) client.#onChange(event);
    };
  }

  constructor(options = {}) {
    super();
    if (options === null || typeof options !== 'object') throw new TypeError('options must be an object');
    for (const k of Object.keys(options)) {
      if (!OPTIONS.has(k)) throw new TypeError(`unknown option ${JSON.stringify(k)}`);
    }
    const o = { ...options };
    if (o.testData !== undefined) o.testData = flagSetText(o.testData);
    if (typeof o.endpoints === 'string') o.endpoints = [o.endpoints];
    this.#n = new NativeClient(o);
    this.#id = this.#n.id;
    this.#n.listen(Client.#forwardTo(new WeakRef(this)));
  }

  /** A client serving these flags (`{flags, segments}`, the file form): for unit tests. */
  static testData(set, options = {}) {
    return new Client({ ...options, testData: set });
  }

  /** A client serving a YAML/JSON flag file (`flagctl export`). */
  static offlineFile(file, options = {}) {
    return new Client({ ...options, offlineFile: file });
  }

  #onChange(event) {
    if (event.lagged > 0) {
      // More than 64 revisions behind: any flag may have changed.
      event = { revision: this.#n.revision(), flags: this.#n.flagKeys(), lagged: event.lagged };
    } else {
      delete event.lagged;
    }
    this.#emitSafely('change', event);
    for (const key of event.flags) {
      const name = `change:${key}`;
      if (this.listenerCount(name) > 0) this.#emitSafely(name, { revision: event.revision, key });
    }
  }

  #emitSafely(name, event) {
    try {
      this.emit(name, event);
    } catch (err) {
      // A listener's exception is not the client's: reported, not propagated.
      if (this.listenerCount('error') > 0) this.emit('error', err);
      else console.error(`flagstream: a "${name}" listener threw:`, err);
    }
  }

  /** Resolves to true as soon as flags are served, false after `timeoutMs`. */
  waitReady(timeoutMs = 5000) {
    return this.#n.waitReady(timeoutMs);
  }

  bool(key, ctx, defaultValue) {
    const c = fastCtx(ctx);
    const v = c === VALUES
      ? viaValues(fast.bool, this.#id, key, defaultValue)
      : fast.bool(this.#id, key, c, defaultValue);
    return v !== undefined ? v : fast.bool(this.#id, key, ctxArg(ctx), defaultValue);
  }
  string(key, ctx, defaultValue) {
    const c = fastCtx(ctx);
    const v = c === VALUES
      ? viaValues(fast.string, this.#id, key, defaultValue)
      : fast.string(this.#id, key, c, defaultValue);
    return v !== undefined ? v : fast.string(this.#id, key, ctxArg(ctx), defaultValue);
  }
  int(key, ctx, defaultValue) {
    const c = fastCtx(ctx);
    const v = c === VALUES
      ? viaValues(fast.int, this.#id, key, defaultValue)
      : fast.int(this.#id, key, c, defaultValue);
    return v !== undefined ? v : fast.int(this.#id, key, ctxArg(ctx), defaultValue);
  }
  bigint(key, ctx, defaultValue) {
    return this.#n.bigint(key, ctxArg(ctx), defaultValue);
  }
  number(key, ctx, defaultValue) {
    const c = fastCtx(ctx);
    const v = c === VALUES
      ? viaValues(fast.number, this.#id, key, defaultValue)
      : fast.number(this.#id, key, c, defaultValue);
    return v !== undefined ? v : fast.number(this.#id, key, ctxArg(ctx), defaultValue);
  }
  json(key, ctx, defaultValue = null) {
    return this.#n.json(key, ctxArg(ctx), defaultValue);
  }

  boolDetail(key, ctx, defaultValue, options) {
    return this.#n.detail('bool', key, ctxArg(ctx), defaultValue, nowOf(options));
  }
  stringDetail(key, ctx, defaultValue, options) {
    return this.#n.detail('string', key, ctxArg(ctx), defaultValue, nowOf(options));
  }
  intDetail(key, ctx, defaultValue, options) {
    return this.#n.detail('int', key, ctxArg(ctx), defaultValue, nowOf(options));
  }
  bigintDetail(key, ctx, defaultValue, options) {
    return this.#n.detail('bigint', key, ctxArg(ctx), defaultValue, nowOf(options));
  }
  numberDetail(key, ctx, defaultValue, options) {
    return this.#n.detail('number', key, ctxArg(ctx), defaultValue, nowOf(options));
  }
  jsonDetail(key, ctx, defaultValue = null, options) {
    return this.#n.detail('json', key, ctxArg(ctx), defaultValue, nowOf(options));
  }

  status() {
    return this.#n.status();
  }
  stats() {
    return this.#n.stats();
  }
  /** How old the served data may be (ms); null until a relay confirmed any. */
  dataAgeMs() {
    return this.#n.dataAgeMs();
  }
  /**
   * The store epoch of the flags served now ('' before data, for test data
   * and flag files, and after close): with an evaluation's `revision`, the
   * data's version (`<epoch>:<revision>`).
   */
  epoch() {
    return this.#n.epoch();
  }
  /** The flags served now, in the file form ({flags, segments}). */
  flagSet() {
    return this.#n.flagSet();
  }

  /**
   * Closes the client. At once: change events stop and evaluations return
   * their defaults. Then the usage counted since the last summary is sent
   * to the relay (waiting at most 2 s for it to confirm), the sync stops
   * and the cache is written. Returns a promise of whether the relay
   * confirmed the final summary (false without a relay stream, or when
   * closed already); until it settles it keeps the process alive, so a
   * short-lived process may call close() without awaiting it. Idempotent.
   */
  close() {
    this.#closed = true;
    listened.delete(this);
    const done = this.#n.close();
    this.emit('close');
    return done;
  }
}

/**
 * A compiled flag set evaluated without a client: `compile(set, {validate})`
 * then `detail(type, key, ctx, default, {now})`.
 */
class FlagSnapshot {
  #s;
  constructor(native) {
    this.#s = native;
  }
  static compile(set, options = {}) {
    return new FlagSnapshot(Snapshot.compile(flagSetText(set), options.validate !== false));
  }
  detail(type, key, ctx, defaultValue, options) {
    return this.#s.detail(type, key, ctxArg(ctx), defaultValue, nowOf(options));
  }
}

module.exports = { Client, Context, Snapshot: FlagSnapshot, kindProblem };
