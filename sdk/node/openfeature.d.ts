// Type definitions for the flagstream OpenFeature provider (openfeature.js).
import type { EvaluationContext, Hook, JsonValue, OpenFeatureEventEmitter, Provider, ResolutionDetails } from '@openfeature/server-sdk';
import type { Client, ContextObject } from './index';

/**
 * One evaluation's outcome under the OpenTelemetry semantic-convention
 * attribute names for feature-flag evaluation. The targeting key is never
 * included (personal data).
 */
export interface EvaluationAttributes {
  'feature_flag.key': string;
  'feature_flag.provider.name': 'flagstream';
  /** The variation index served, as a string; absent when none was (an error). */
  'feature_flag.result.variant'?: string;
  /** The OpenFeature reason in lower case. */
  'feature_flag.result.reason': 'targeting_match' | 'split' | 'default' | 'disabled' | 'stale' | 'error';
  /** `<epoch>:<revision>` of the data evaluated; absent when the client had no data. */
  'feature_flag.version'?: string;
  /**
   * On an error: the OpenFeature error code in lower case (flag_not_found,
   * type_mismatch, parse_error, provider_not_ready, invalid_context, general).
   */
  'error.type'?: string;
}

export interface ProviderOptions {
  /** How long initialize() waits for the first data (default 5000 ms). */
  readyTimeoutMs?: number;
  /** Whether onClose() closes the client (default true). */
  closeClient?: boolean;
  /**
   * Called once per evaluation, from the provider's own hook (its `after`
   * and `error` stages), with the evaluation's attributes; every result's
   * `flagMetadata` then also holds `feature_flag.version`. A callback that
   * throws does not change the evaluation (the first failure is reported
   * with process.emitWarning). Unset: no hook, no metadata.
   */
  onEvaluation?: (attributes: EvaluationAttributes) => void;
}

/**
 * A flagstream Client as an OpenFeature server provider: reasons and error
 * codes as the Rust provider maps them (docs/EVALUATION.md "OpenFeature").
 * Emits PROVIDER_CONFIGURATION_CHANGED per applied revision.
 */
export class FlagstreamProvider implements Provider {
  constructor(client: Client, options?: ProviderOptions);
  readonly metadata: { name: 'flagstream' };
  readonly runsOn: 'server';
  readonly events: OpenFeatureEventEmitter;
  /** Empty; with `onEvaluation`, the hook that calls it. */
  hooks: Hook[];
  initialize(): Promise<void>;
  onClose(): Promise<void>;
  resolveBooleanEvaluation(flagKey: string, defaultValue: boolean, context: EvaluationContext): Promise<ResolutionDetails<boolean>>;
  resolveStringEvaluation(flagKey: string, defaultValue: string, context: EvaluationContext): Promise<ResolutionDetails<string>>;
  resolveNumberEvaluation(flagKey: string, defaultValue: number, context: EvaluationContext): Promise<ResolutionDetails<number>>;
  resolveObjectEvaluation<T extends JsonValue>(flagKey: string, defaultValue: T, context: EvaluationContext): Promise<ResolutionDetails<T>>;
}

/** The flagstream context of an OpenFeature evaluation context. */
export function toContext(ctx?: EvaluationContext): ContextObject;
