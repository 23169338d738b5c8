import type { SimulateProfile } from './simulate-profile';

/** What a model call does, and so which prices it is billed at (call_cost in migrations/001_baseline.sql). */
export type CallKind = 'chat' | 'embedding';

/** The service tiers a price version may give rates for; a call is priced at the one the provider says served it. */
export const SERVICE_TIERS = ['standard', 'batch', 'flex', 'priority'] as const;
export type ServiceTier = (typeof SERVICE_TIERS)[number];

/**
 * What the provider reported for one call: everything its price depends on. Counts are plain integers (never money).
 * promptTokens is every prompt token billed; the cache parts are parts of it, and what remains is billed at input.
 */
export interface TokenUsage {
  /** Every prompt token billed, cache reads and cache writes included. */
  promptTokens: number;
  /** Part of promptTokens read from the provider's prompt cache, priced at the cached-input rate. */
  cachedPromptTokens: number;
  /** Part of promptTokens written to the prompt cache for 5 minutes, priced at the 5-minute cache-write rate. */
  cacheWrite5mTokens: number;
  /** Part of promptTokens written to the prompt cache for 1 hour, priced at the 1-hour cache-write rate. */
  cacheWrite1hTokens: number;
  completionTokens: number;
  /** Part of completionTokens spent reasoning: billed as completion, kept for insight. */
  reasoningTokens: number;
  /** The tier the provider says served the call ('standard', 'batch', 'flex', 'priority'...); null: standard, or not said. */
  serviceTier: string | null;
}

/**
 * TokenUsage as a model call's activity returns it into the run's history: the counts that are 0 and a null tier left
 * out, since history is kept small (at most 16 KB per run, issue 23) and most calls neither write a cache nor name a
 * tier. fullUsage gives back the whole TokenUsage; a count the provider sent as anything but 0 is kept as sent.
 */
export type UsageInHistory = Pick<TokenUsage, 'promptTokens' | 'completionTokens'> & Partial<TokenUsage>;

const LEFT_OUT_WHEN_NONE = ['cachedPromptTokens', 'cacheWrite5mTokens', 'cacheWrite1hTokens', 'reasoningTokens', 'serviceTier'] as const;

export function usageForHistory(usage: TokenUsage): UsageInHistory {
  const kept: UsageInHistory = { ...usage };
  for (const name of LEFT_OUT_WHEN_NONE) if (kept[name] === 0 || kept[name] === null) delete kept[name];
  return kept;
}

/** The whole TokenUsage of counts that leave out what is none (usageForHistory's form, or a test's few counts). */
export const fullUsage = (usage: UsageInHistory): TokenUsage => ({
  cachedPromptTokens: 0,
  cacheWrite5mTokens: 0,
  cacheWrite1hTokens: 0,
  reasoningTokens: 0,
  serviceTier: null,
  ...usage,
});

/** The token counts of TokenUsage (serviceTier aside), in the order the ledger lists them. */
export const TOKEN_COUNTS = [
  'promptTokens',
  'cachedPromptTokens',
  'cacheWrite5mTokens',
  'cacheWrite1hTokens',
  'completionTokens',
  'reasoningTokens',
] as const satisfies readonly (keyof TokenUsage)[];

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
  /** The service tier the task asks for, for providers that take one; unset: the provider's default. */
  serviceTier?: ServiceTier;
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

export interface PromptCountRequest {
  model: string;
  prompt: string;
  signal?: AbortSignal;
}

export interface ModelProvider {
  readonly name: string;
  chat(request: ChatRequest): Promise<ChatResult>;
  embed(request: EmbeddingRequest): Promise<EmbeddingResult>;
  /**
   * The prompt tokens the provider will bill for this prompt as a chat request, counted by the provider itself
   * (Anthropic's count_tokens), for a model whose tokenizer cronledger does not have. Absent, or undefined for a
   * model: the budget guard's o200k count stands.
   */
  countPromptTokens?(request: PromptCountRequest): Promise<number | undefined>;
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
