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
//
// Observing evaluations: `new FlagstreamProvider(client, { onEvaluation })`
// calls `onEvaluation(attributes)` once per evaluation, from the provider's
// own hook (`provider.hooks`: its `after` and `error` stages), with the
// OpenTelemetry semantic-convention attribute names for feature-flag
// evaluation: `feature_flag.key`, `feature_flag.provider.name`
// ("flagstream"), `feature_flag.result.variant` (the variation index served,
// absent when none was), `feature_flag.result.reason` (the OpenFeature
// reason in lower case: targeting_match, split, default, disabled, stale,
// error), `feature_flag.version` ("<epoch>:<revision>" of the data
// evaluated, absent when the client has no data yet) and, on an error,
// `error.type` (the OpenFeature error code in lower case: flag_not_found,
// type_mismatch, parse_error, provider_not_ready, invalid_context,
// general). The targeting key is never reported. Each result's
// `flagMetadata` then also holds `feature_flag.version`, for any other
// hook. A callback that throws (or returns a promise that rejects) does not
// change the evaluation: the first failure is reported with
// process.emitWarning, later ones are ignored. Without `onEvaluation` the
// provider has no hook and builds no metadata.

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

function notAStructure(defaultValue) {
  return { value: defaultValue, reason: 'ERROR', errorCode: 'TYPE_MISMATCH', errorMessage: "the flag's value is not a JSON object" };
}

// The OpenTelemetry semantic-convention attribute names for feature-flag evaluation.
const KEY = 'feature_flag.key';
const PROVIDER_NAME = 'feature_flag.provider.name';
const VARIANT = 'feature_flag.result.variant';
const REASON = 'feature_flag.result.reason';
const VERSION = 'feature_flag.version';
const ERROR_TYPE = 'error.type';

/**
 * The provider's own hook when `onEvaluation` is set: one call per
 * evaluation, from `after` or `error`. `errorVersions` maps the evaluation
 * context an erring evaluation resolved with (the object the OpenFeature
 * client also puts in the hook context) to the version of the data it
 * read: the error stage gets an error the client made, not the resolution.
 */
class ObserveHook {
  #callback;
  #errorVersions;
  #failed = false;

  constructor(callback, errorVersions) {
    this.#callback = callback;
    this.#errorVersions = errorVersions;
  }

  #call(attributes) {
    try {
      const r = this.#callback(attributes);
      if (r !== null && typeof r === 'object' && typeof r.then === 'function') r.then(undefined, (e) => this.#failure(e));
    } catch (e) {
      this.#failure(e);
    }
  }

  /** Never the evaluation's failure: reported once, not counted. */
  #failure(e) {
    if (this.#failed) return;
    this.#failed = true;
    process.emitWarning(
      `the OpenFeature onEvaluation callback threw (${e instanceof Error ? e.message : String(e)}); evaluations are unaffected (reported once)`,
      { type: 'FlagstreamWarning', code: 'FLAGSTREAM_ON_EVALUATION', detail: e instanceof Error ? e.stack : undefined },
    );
  }

  after(hookContext, details) {
    const attributes = { [KEY]: details.flagKey, [PROVIDER_NAME]: 'flagstream' };
    if (details.variant !== undefined) attributes[VARIANT] = details.variant;
    if (details.reason !== undefined) attributes[REASON] = String(details.reason).toLowerCase();
    const version = details.flagMetadata?.[VERSION];
    if (version !== undefined) attributes[VERSION] = version;
    this.#call(attributes);
  }

  error(hookContext, err) {
    const code = err !== null && typeof err === 'object' && typeof err.code === 'string' ? err.code : 'GENERAL';
    const attributes = {
      [KEY]: hookContext.flagKey,
      [PROVIDER_NAME]: 'flagstream',
      [REASON]: 'error',
      [ERROR_TYPE]: code.toLowerCase(),
    };
    const ctx = hookContext.context;
    if (ctx !== null && typeof ctx === 'object') {
      const version = this.#errorVersions.get(ctx);
      if (version !== undefined) {
        attributes[VERSION] = version;
        this.#errorVersions.delete(ctx);
      }
    }
    this.#call(attributes);
  }
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
  #errorVersions;

  /**
   * @param {Client} client
   * @param {{readyTimeoutMs?: number, closeClient?: boolean, onEvaluation?: (attributes: object) => void}} [options]
   *   readyTimeoutMs: how long initialize() waits for data (default 5000);
   *   closeClient: whether onClose() closes the client (default true);
   *   onEvaluation: called once per evaluation with its attributes (the
   *   OpenTelemetry names; see the top of this file).
   */
  constructor(client, options = {}) {
    if (!(client instanceof Client)) throw new TypeError('FlagstreamProvider wraps a flagstream Client');
    this.#client = client;
    this.#readyTimeoutMs = options.readyTimeoutMs ?? 5000;
    this.#closeClient = options.closeClient ?? true;
    const onEvaluation = options.onEvaluation;
    if (onEvaluation !== undefined && onEvaluation !== null) {
      if (typeof onEvaluation !== 'function') throw new TypeError('onEvaluation must be a function');
      this.#errorVersions = new WeakMap();
      this.hooks = [new ObserveHook(onEvaluation, this.#errorVersions)];
      // This instance's resolvers add the version; without a callback the
      // class's run, not even a test added to them.
      this.resolveBooleanEvaluation = async (k, d, c) => this.#resolveObserved('boolDetail', k, d, c);
      this.resolveStringEvaluation = async (k, d, c) => this.#resolveObserved('stringDetail', k, d, c);
      this.resolveNumberEvaluation = async (k, d, c) => this.#resolveObserved('numberDetail', k, d, c);
      this.resolveObjectEvaluation = async (k, d, c) => this.#resolveObserved('jsonDetail', k, d, c, isStruct);
    }
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

  /**
   * `#resolve` with observation on: the version of the data evaluated in
   * the flag metadata, and for an error also kept for the hook's error
   * stage (by the context object, which the OpenFeature client passes both
   * to the provider and in the hook context).
   */
  #resolveObserved(method, key, defaultValue, ec, check) {
    let d;
    try {
      d = this.#client[method](key, toContext(ec), defaultValue);
    } catch (e) {
      if (e instanceof TypeError) return invalidContext(e, defaultValue);
      throw e;
    }
    const r = check && d.reason !== 'ERROR' && !check(d.value) ? notAStructure(defaultValue) : resolution(d, defaultValue);
    // No data, no version. The epoch is read right after the evaluation
    // (a new epoch, a resync from another store, is rare).
    if (d.errorKind !== 'NOT_READY') {
      const version = `${this.#client.epoch()}:${d.revision}`;
      r.flagMetadata = { [VERSION]: version };
      if (r.errorCode !== undefined && ec !== null && typeof ec === 'object') this.#errorVersions.set(ec, version);
    }
    return r;
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
