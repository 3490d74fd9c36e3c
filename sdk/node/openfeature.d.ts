// Type definitions for the flagstream OpenFeature provider (openfeature.js).
import type { EvaluationContext, JsonValue, OpenFeatureEventEmitter, Provider, ResolutionDetails } from '@openfeature/server-sdk';
import type { Client, ContextObject } from './index';

export interface ProviderOptions {
  /** How long initialize() waits for the first data (default 5000 ms). */
  readyTimeoutMs?: number;
  /** Whether onClose() closes the client (default true). */
  closeClient?: boolean;
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
  hooks: [];
  initialize(): Promise<void>;
  onClose(): Promise<void>;
  resolveBooleanEvaluation(flagKey: string, defaultValue: boolean, context: EvaluationContext): Promise<ResolutionDetails<boolean>>;
  resolveStringEvaluation(flagKey: string, defaultValue: string, context: EvaluationContext): Promise<ResolutionDetails<string>>;
  resolveNumberEvaluation(flagKey: string, defaultValue: number, context: EvaluationContext): Promise<ResolutionDetails<number>>;
  resolveObjectEvaluation<T extends JsonValue>(flagKey: string, defaultValue: T, context: EvaluationContext): Promise<ResolutionDetails<T>>;
}

/** The flagstream context of an OpenFeature evaluation context. */
export function toContext(ctx?: EvaluationContext): ContextObject;
