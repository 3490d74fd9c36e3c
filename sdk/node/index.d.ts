// Type definitions for the flagstream Node package (index.js).
import { EventEmitter } from 'node:events';

/** An attribute value: scalars, arrays (lists) and objects (JSON attributes). */
export type AttributeValue = string | number | boolean | null | undefined | AttributeValue[] | { [k: string]: AttributeValue };

/**
 * One context kind: `key` is the targeting key (default `""`), `kind` the
 * kind (default `"user"`), every other property an attribute. `null` and
 * `undefined` attributes are missing ones. An object context is read as
 * `JSON.stringify` sees it (functions left out, Dates as ISO strings).
 */
export interface SingleContext {
  key?: string;
  kind?: string;
  [attribute: string]: AttributeValue;
}

/** Several kinds at once: `{kind: "multi", user: {key: ...}, org: {key: ...}}`. */
export interface MultiContext {
  kind: 'multi';
  [kind: string]: SingleContext | 'multi';
}

/**
 * A plain-object context, read at each call (a flat one with the same
 * properties and values as the last one read is not converted again).
 */
export type ContextObject = SingleContext | MultiContext;

/**
 * A context read once, for hot paths: evaluating with it converts nothing.
 * Throws a TypeError for an invalid kind name or more kinds or attributes
 * than the context limits allow.
 */
export class Context {
  constructor(ctx: ContextObject);
  /** The targeting key (of a multi-kind context: of its first kind). */
  readonly key: string;
  /** The kind; `multi` for a multi-kind context. */
  readonly kind: string;
  /** The file form (`{key, kind, attributes}` / `{kind: "multi", contexts}`). */
  toJSON(): unknown;
}

/** Either context form. */
export type EvalContext = ContextObject | Context;

export type Reason = 'OFF' | 'TARGET_MATCH' | 'RULE_MATCH' | 'FALLTHROUGH' | 'PREREQUISITE_FAILED' | 'ERROR';
export type ErrorKind = 'FLAG_NOT_FOUND' | 'WRONG_TYPE' | 'MALFORMED_FLAG' | 'NOT_READY';

/** An evaluation with its reason. Fields that do not apply are absent. */
export interface EvaluationDetail<T> {
  /** The flag's value, or the caller's default on ERROR. */
  value: T;
  /** The served variation index; absent when the default was returned. */
  variation?: number;
  reason: Reason;
  /** RULE_MATCH: the rule's index. */
  ruleIndex?: number;
  /** RULE_MATCH: the rule's id, when it has one. */
  ruleId?: string;
  /** PREREQUISITE_FAILED: the first prerequisite that failed. */
  prerequisiteKey?: string;
  /** ERROR: what went wrong. */
  errorKind?: ErrorKind;
  /** A schedule chose: its current step, 1-based (0 before the first). */
  scheduleStep?: number;
  /** A percentage rollout or schedule chose the variation (FALLTHROUGH; RULE_MATCH only for a schedule). */
  inRollout: boolean;
  flagVersion: number;
  /** The revision of the flags evaluated. */
  revision: number;
  /** The flags may be out of date (see `status()`). */
  stale: boolean;
}

export interface DetailOptions {
  /**
   * Evaluate schedules at this instant instead of now (a Date, Unix ms or
   * an ISO 8601 string). Such a call reads the snapshot directly and is
   * not counted in `stats()`.
   */
  now?: Date | number | string;
}

/** A flag set in the file form (`flagctl export`): see docs/EVALUATION.md. */
export interface FlagSet {
  flags?: unknown[];
  segments?: unknown[];
}

export interface ClientOptions {
  /** Relay URLs (`http://host:port` or `https://...`); shuffled per process unless keepEndpointOrder. */
  endpoints?: string[] | string;
  /** The environment's SDK key. */
  sdkKey?: string;
  /** Directory of the last-known-good cache (created if missing). */
  cacheDir?: string;
  /** How long a change waits before it is written to the cache (default 500). */
  cacheWriteIntervalMs?: number;
  /** Try endpoints in the given order. */
  keepEndpointOrder?: boolean;
  /** PEM CA bundle for https endpoints (instead of the public roots). */
  tlsCaPem?: string;
  /** PEM client certificate and key for mutual TLS (both or neither). */
  tlsCertPem?: string;
  tlsKeyPem?: string;
  /** Serve a YAML/JSON flag file instead of relays (see `Client.offlineFile`). */
  offlineFile?: string;
  /** Serve these flags instead of relays (see `Client.testData`). */
  testData?: FlagSet | string;
  /** Connect timeout per attempt (default 3000). */
  connectTimeoutMs?: number;
  /** HTTP/2 keepalive ping interval, also while idle (default 10000). */
  keepaliveIntervalMs?: number;
  /** HTTP/2 keepalive ping timeout (default 5000). */
  keepaliveTimeoutMs?: number;
  /** TCP_USER_TIMEOUT of the connection (default 20000). */
  tcpUserTimeoutMs?: number;
  /** Time allowed for a stream's first message (default 10000). */
  firstMessageTimeoutMs?: number;
  /** Heartbeat interval assumed until the relay states its own (default 15000). */
  heartbeatDefaultMs?: number;
  /** Missed heartbeats before the stream is declared stalled (default 3). */
  watchdogMisses?: number;
  /** First backoff ceiling (default 1000). */
  backoffBaseMs?: number;
  /** Largest backoff ceiling (default 30000). */
  backoffCapMs?: number;
  /** A stream up this long resets the backoff (default 60000). */
  healthyAfterMs?: number;
  /** Random delay before resubscribing after a stall, up to (default 2000). */
  stallJitterMs?: number;
  /** Without a stream this long, data is reported stale (default 5000). */
  staleAfterMs?: number;
  /**
   * Count evaluations per flag (variations served, fallbacks by cause,
   * defaults passed) and send a usage summary to the relay every
   * `usageIntervalMs` (default: on when following a relay, off for
   * `offlineFile` and `testData`).
   */
  usageReports?: boolean;
  /** How often a usage summary is sent (default 60000). */
  usageIntervalMs?: number;
}

export interface Attempt {
  endpoint: string;
  error: string;
  retryInMs: number;
}

export type Status =
  | { state: 'initializing'; attempts: Attempt[] }
  | { state: 'ready'; source: 'stream' | 'cache' | 'file' | 'test'; revision: number; since: number }
  | { state: 'stale'; source: 'stream' | 'cache' | 'file' | 'test'; revision: number; since: number; reason: string }
  | { state: 'failed'; reason: string };

/** The client's counters (flagstream::Stats). */
export interface Stats {
  defaultNotFound: number;
  defaultNotReady: number;
  defaultWrongType: number;
  defaultMalformed: number;
  connects: number;
  reconnects: number;
  endpointSwitches: number;
  stalls: number;
  resyncs: number;
  checksumMismatches: number;
  divergedHeads: number;
  retryHints: number;
  snapshotsApplied: number;
  deltasApplied: number;
  cacheWrites: number;
  cacheErrors: number;
  staleMs: number;
}

/** One applied revision and the flags it changed. */
export interface ChangeEvent {
  revision: number;
  flags: string[];
  /** Set when the listener fell more than 64 revisions behind: `flags` is then every flag. */
  lagged?: number;
}

export interface FlagChangeEvent {
  revision: number;
  key: string;
}

/**
 * A flagstream client. Its sync runs on the addon's own threads; every
 * evaluation is a synchronous in-memory call that never does I/O and never
 * throws for a missing or mistyped flag (the default, reason ERROR,
 * counted in `stats()`). It throws only for a caller's bug: a context that
 * is not an object (or has an invalid kind or too many attributes), or a
 * default of the wrong type.
 *
 * Events: `change` (ChangeEvent) per applied revision, `change:<flagKey>`
 * (FlagChangeEvent) per changed flag, `close`; a listener's exception goes
 * to `error` listeners if any, else to console.error. The client never
 * holds the process open (a pending `waitReady()` or `close()` promise
 * does, until it settles); `close()` sends the final usage summary, stops
 * it and writes the cache.
 *
 * Lifetime: a client that nothing references is garbage collected, and
 * collecting it stops it (its relay stream ends, its tasks and memory are
 * released, its final usage is sent without waiting). A client with
 * `change` or `change:<flagKey>` listeners is kept alive until `close()`
 * or until those listeners are removed.
 */
export class Client extends EventEmitter {
  constructor(options: ClientOptions);
  /** A client serving these flags: for unit tests. */
  static testData(set: FlagSet | string, options?: ClientOptions): Client;
  /** A client serving a YAML/JSON flag file. */
  static offlineFile(path: string, options?: ClientOptions): Client;

  /** True as soon as flags are served; false after `timeoutMs` (default 5000) or on close. */
  waitReady(timeoutMs?: number): Promise<boolean>;

  bool(key: string, ctx: EvalContext, defaultValue: boolean): boolean;
  string(key: string, ctx: EvalContext, defaultValue: string): string;
  /** An int flag as a JS number (exact up to 2^53; use `bigint` for all 64 bits). */
  int(key: string, ctx: EvalContext, defaultValue: number): number;
  /** An int flag, exact. */
  bigint(key: string, ctx: EvalContext, defaultValue: bigint): bigint;
  /** A float flag, or an int flag converted. */
  number(key: string, ctx: EvalContext, defaultValue: number): number;
  /** Any flag as JSON. */
  json(key: string, ctx: EvalContext, defaultValue?: unknown): unknown;

  boolDetail(key: string, ctx: EvalContext, defaultValue: boolean, options?: DetailOptions): EvaluationDetail<boolean>;
  stringDetail(key: string, ctx: EvalContext, defaultValue: string, options?: DetailOptions): EvaluationDetail<string>;
  intDetail(key: string, ctx: EvalContext, defaultValue: number, options?: DetailOptions): EvaluationDetail<number>;
  bigintDetail(key: string, ctx: EvalContext, defaultValue: bigint, options?: DetailOptions): EvaluationDetail<bigint>;
  numberDetail(key: string, ctx: EvalContext, defaultValue: number, options?: DetailOptions): EvaluationDetail<number>;
  jsonDetail(key: string, ctx: EvalContext, defaultValue?: unknown, options?: DetailOptions): EvaluationDetail<unknown>;

  /** The client's state; `failed` ("closed") after close(). */
  status(): Status;
  /** Counters (as of close() once closed). */
  stats(): Stats;
  /** How old the served data may be (ms); null until a relay confirmed any. */
  dataAgeMs(): number | null;
  /**
   * The store epoch of the flags served now ('' before data, for test data
   * and flag files, and after close): with an evaluation's `revision`, the
   * data's version (`<epoch>:<revision>`).
   */
  epoch(): string;
  /** The flags served now, in the file form. */
  flagSet(): FlagSet;
  /**
   * Closes the client. At once: change events stop, evaluations return
   * their defaults, `stats()` is frozen. Then the usage counted since the
   * last summary is sent to the relay (waiting at most 2 s for it to
   * confirm), the sync stops and the cache is written. Resolves to whether
   * the relay confirmed the final summary (false without a relay stream,
   * or when closed already); until it settles the process stays alive, so
   * a short-lived process may call it without awaiting it. Await it before
   * another process reads the same cache directory. Idempotent.
   */
  close(): Promise<boolean>;

  on(event: 'change', listener: (e: ChangeEvent) => void): this;
  on(event: `change:${string}`, listener: (e: FlagChangeEvent) => void): this;
  on(event: 'close', listener: () => void): this;
  on(event: 'error', listener: (err: unknown) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

export type TypeName = 'bool' | 'string' | 'int' | 'bigint' | 'number' | 'json';

/** A compiled flag set evaluated without a client (tools, and flags that do not validate). */
export class Snapshot {
  /** Compiles `{flags, segments}` or flag-file text; `validate: false` skips validation. */
  static compile(set: FlagSet | string, options?: { validate?: boolean }): Snapshot;
  detail(type: TypeName, key: string, ctx: EvalContext, defaultValue: unknown, options?: DetailOptions): EvaluationDetail<unknown>;
}

/** Why `kind` cannot name a context kind, or null when it can. */
export function kindProblem(kind: string): string | null;
