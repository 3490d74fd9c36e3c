'use strict';
// An OpenFeature provider (`@openfeature/server-sdk`, a peer dependency)
// for a flagstream Client, mapping reasons and error codes exactly as the
// Rust provider does (sdk/src/openfeature.rs, docs/EVALUATION.md
// "OpenFeature"):
//
//   OFF, PREREQUISITE_FAILED -> DISABLED;  TARGET_MATCH, RULE_MATCH -> TARGETING_MATCH;
//   FALLTHROUGH -> SPLIT when a rollout or schedule chose, else DEFAULT;  stale data -> STALE;
//   FLAG_NOT_FOUND -> FLAG_NOT_FOUND;  WRONG_TYPE -> TYPE_MISMATCH;
//   MALFORMED_FLAG -> PARSE_ERROR;  NOT_READY -> PROVIDER_NOT_READY;
//   a context over the context limits -> INVALID_CONTEXT.
//
// The evaluation context: `targetingKey` is the key; a string `kind` sets
// the kind; booleans, numbers and strings are attributes, Dates become Unix
// milliseconds, objects and arrays JSON attributes. `kind: "multi"` makes a
// multi-kind context of every object field (its `targetingKey` or `key`
// member the kind's key). A kind name that is not valid is ignored, as in
// Rust.

const { OpenFeatureEventEmitter, ProviderEvents } = require('@openfeature/server-sdk');
const { Client, kindProblem } = require('./index.js');

const REASONS = {
  OFF: 'DISABLED',
  PREREQUISITE_FAILED: 'DISABLED',
  TARGET_MATCH: 'TARGETING_MATCH',
  RULE_MATCH: 'TARGETING_MATCH',
};

const ERROR_CODES = {
  FLAG_NOT_FOUND: 'FLAG_NOT_FOUND',
  WRONG_TYPE: 'TYPE_MISMATCH',
  MALFORMED_FLAG: 'PARSE_ERROR',
  NOT_READY: 'PROVIDER_NOT_READY',
};

function isStruct(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Date);
}

function validKind(kind) {
  return typeof kind === 'string' && kindProblem(kind) == null;
}

function attribute(v) {
  return v instanceof Date ? v.getTime() : v;
}

/** The flagstream context (object form) of an OpenFeature evaluation context. */
function toContext(ec = {}) {
  const key = typeof ec.targetingKey === 'string' ? ec.targetingKey : '';
  if (ec.kind === 'multi') {
    const out = { kind: 'multi' };
    let kinds = 0;
    for (const name of Object.keys(ec).sort()) {
      const v = ec[name];
      if (name === 'kind' || !isStruct(v) || !validKind(name)) continue;
      const k = typeof v.targetingKey === 'string' ? v.targetingKey : typeof v.key === 'string' ? v.key : '';
      const one = { key: k };
      for (const [m, x] of Object.entries(v)) {
        if (m !== 'targetingKey' && m !== 'key' && m !== 'kind') one[m] = attribute(x);
      }
      out[name] = one;
      kinds++;
    }
    // No kind at all: the single context of the targeting key.
    return kinds > 0 ? out : { key };
  }
  const out = { key };
  for (const [name, v] of Object.entries(ec)) {
    if (name === 'targetingKey') continue;
    if (name === 'kind') {
      if (validKind(v)) out.kind = v;
      continue;
    }
    if (name === 'key') continue; // the targeting key is the key
    out[name] = attribute(v);
  }
  return out;
}

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

function invalidContext(e, defaultValue) {
  return { value: defaultValue, reason: 'ERROR', errorCode: 'INVALID_CONTEXT', errorMessage: e.message };
}

/** A flagstream Client as an OpenFeature server provider. */
class FlagstreamProvider {
  metadata = { name: 'flagstream' };
  runsOn = 'server';
  hooks = [];
  events = new OpenFeatureEventEmitter();
  #client;
  #readyTimeoutMs;
  #closeClient;
  #failedInit = false;

  /**
   * @param {Client} client
   * @param {{readyTimeoutMs?: number, closeClient?: boolean}} [options]
   *   readyTimeoutMs: how long initialize() waits for data (default 5000);
   *   closeClient: whether onClose() closes the client (default true).
   */
  constructor(client, options = {}) {
    if (!(client instanceof Client)) throw new TypeError('FlagstreamProvider wraps a flagstream Client');
    this.#client = client;
    this.#readyTimeoutMs = options.readyTimeoutMs ?? 5000;
    this.#closeClient = options.closeClient ?? true;
    client.on('change', (e) => {
      if (this.#failedInit) {
        this.#failedInit = false;
        this.events.emit(ProviderEvents.Ready);
      }
      this.events.emit(ProviderEvents.ConfigurationChanged, { flagsChanged: e.flags });
    });
  }

  /** Waits for the first data; rejects (provider ERROR) when none came in time. */
  async initialize() {
    if (!(await this.#client.waitReady(this.#readyTimeoutMs))) {
      this.#failedInit = true;
      const s = this.#client.status();
      throw new Error(`flagstream: no flags after ${this.#readyTimeoutMs} ms (${s.state}${s.reason ? `: ${s.reason}` : ''})`);
    }
  }

  /** Closes the client (unless `closeClient: false`), its final usage summary sent or 2 s passed. */
  async onClose() {
    if (this.#closeClient) await this.#client.close();
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
      if (e instanceof TypeError) return invalidContext(e, defaultValue);
      throw e;
    }
  }

  async resolveBooleanEvaluation(flagKey, defaultValue, context) {
    return this.#resolve('boolDetail', flagKey, defaultValue, context);
  }

  async resolveStringEvaluation(flagKey, defaultValue, context) {
    return this.#resolve('stringDetail', flagKey, defaultValue, context);
  }

  /** Int and float flags alike (JS has one number type). */
  async resolveNumberEvaluation(flagKey, defaultValue, context) {
    return this.#resolve('numberDetail', flagKey, defaultValue, context);
  }

  /** A JSON flag whose value is an object (an OpenFeature structure). */
  async resolveObjectEvaluation(flagKey, defaultValue, context) {
    return this.#resolve('jsonDetail', flagKey, defaultValue, context, isStruct);
  }
}

module.exports = { FlagstreamProvider, toContext };
