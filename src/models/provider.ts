import type { SimulateProfile } from './simulate-profile';

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
  taskId: string | null;
  userId: string;
  /** Temporal activity attempt, so a mock can fail the first N attempts after producing usage. */
  attempt: number;
  simulate?: SimulateProfile;
}

export interface ChatRequest extends CallContext {
  /** Price-table model key, e.g. openai/gpt-4o-mini; providers strip their own prefix. */
  model: string;
  prompt: string;
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
