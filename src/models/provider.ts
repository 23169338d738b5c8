import type { SimulateProfile } from './simulate-profile';

/** What a model call does, and so which prices it is billed at (call_cost in migrations/001_baseline.sql). */
export type CallKind = 'chat' | 'embedding';

/** Token counts as the provider reported them for one call. Plain integers (counts, never money). */
export interface TokenUsage {
  promptTokens: number;
  /** Part of promptTokens served from the provider's prompt cache, priced at the cached-input rate. */
  cachedPromptTokens: number;
  completionTokens: number;
  /** Part of completionTokens spent reasoning: billed as completion, kept for insight. */
  reasoningTokens: number;
}

export interface CallContext {
  /** Which call of this step this is (1, 2, ... after billed failures), so a mock can fail the first N after producing usage. */
  attempt: number;
  simulate?: SimulateProfile;
  /** Aborts the request when the caller is cancelled (the activity's cancellation signal). */
  signal?: AbortSignal;
}

export interface ChatRequest extends CallContext {
  /** Price-table model key, e.g. openai/gpt-4o-mini; providers strip their own prefix. */
  model: string;
  prompt: string;
  /** The reply's token cap, sent as max_completion_tokens: the provider never bills more completion tokens. */
  maxOutputTokens?: number;
}

export interface ChatResult {
  text: string;
  usage: TokenUsage;
  /** The model the provider says it ran, e.g. gpt-4o-mini-2024-07-18. */
  providerModel: string;
  requestId: string | null;
}

export interface EmbeddingRequest extends CallContext {
  model: string;
  input: string;
}

export interface EmbeddingResult {
  vector: number[];
  usage: TokenUsage;
  providerModel: string;
  requestId: string | null;
}

/**
 * The provider answered and billed, but the call failed anyway (a cut-off stream, an unusable reply, a mock told to fail).
 * The usage it carries must still be booked, with status failed, before the error propagates.
 */
export class BilledCallError extends Error {
  constructor(
    message: string,
    readonly usage: TokenUsage,
    readonly providerModel: string,
    readonly requestId: string | null,
  ) {
    super(message);
    this.name = 'BilledCallError';
  }
}

export interface ModelProvider {
  readonly name: string;
  chat(request: ChatRequest): Promise<ChatResult>;
  embed(request: EmbeddingRequest): Promise<EmbeddingResult>;
}

/**
 * The provider answered without usage, so the call cannot be booked. Not retried: a provider that omits usage keeps
 * omitting it, and each retry could be billed without a ledger row.
 */
export class MissingUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MissingUsageError';
  }
}

/** `openai/gpt-4o-mini` → `gpt-4o-mini`: price keys carry a provider prefix, APIs want the bare name. */
export const bareModel = (model: string): string => model.slice(model.indexOf('/') + 1);

/**
 * The provider refused or failed the request without billing it (a 429, a 5xx, a timeout). Worth retrying; the
 * provider may say when (Retry-After), which the activity hands to Temporal as the next retry's delay.
 */
export class ProviderUnavailableError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
    readonly retryAfterMs: number | null,
  ) {
    super(message);
    this.name = 'ProviderUnavailableError';
  }
}

/** The provider refused the request for good (400, 401, 403, 404...): retrying the same request can't help. */
export class ProviderRejectedError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
    this.name = 'ProviderRejectedError';
  }
}
