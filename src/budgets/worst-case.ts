import { encodeChat } from 'gpt-tokenizer/model/gpt-4o-mini';
import { countsKept } from '../models/counts-kept';
import { PLAIN_TEXT_TOKENS } from '../models/plain-text-tokens';
import type { SimulateProfile } from '../models/simulate-profile';
import type { ServiceTier, TokenUsage } from '../models/provider';

/**
 * The most a run's calls can be billed, in tokens, before they are made:
 * - chat: the prompt as the chat format sends it (one user message: the tokenizer's count of the text plus the
 *   format's per-message and reply-priming overhead), all of it at the uncached input price, plus maxOutputTokens of
 *   reply, which the provider is told as max_completion_tokens and never exceeds;
 * - embedding: the reply, which the embedding step cuts to at most maxOutputTokens tokens of the embedding model.
 * Both are priced in SQL (worst_case_call_cost, migrations/031_price_dimensions.sql): every prompt token at the dearest
 * prompt class of the chat's service tier (a cache write costs more than plain input), in either context when the count
 * is above the long-context threshold.
 * A task's `simulate` profile tells the mock provider what to report instead of counting, so it is part of the bound.
 * The chat encoding is o200k_base (gpt-4o-mini, gpt-4.1-nano). A model whose tokenizer differs (Claude's gives more
 * tokens for the same text) is counted by its provider (providerPromptTokens: Anthropic's count_tokens), and the
 * larger count stands.
 */
export interface WorstCase {
  chat: TokenUsage;
  embedding: TokenUsage;
}

export function worstCaseOf(input: {
  prompt: string;
  maxOutputTokens: number;
  simulate?: SimulateProfile;
  providerPromptTokens?: number;
  serviceTier?: ServiceTier;
}): WorstCase {
  const s = input.simulate ?? {};
  const promptTokens = Math.max(chatPromptTokens(input.prompt), s.promptTokens ?? 0, input.providerPromptTokens ?? 0);
  return {
    chat: {
      promptTokens,
      cachedPromptTokens: 0,
      cacheWrite5mTokens: 0,
      cacheWrite1hTokens: 0,
      completionTokens: input.maxOutputTokens,
      reasoningTokens: 0,
      serviceTier: input.serviceTier ?? null,
    },
    embedding: {
      promptTokens: Math.max(input.maxOutputTokens, s.embeddingTokens ?? 0),
      cachedPromptTokens: 0,
      cacheWrite5mTokens: 0,
      cacheWrite1hTokens: 0,
      completionTokens: 0,
      reasoningTokens: 0,
      serviceTier: null,
    },
  };
}

/** A prompt's count as one user message in the chat format, kept per prompt text (countsKept). */
export const chatPromptTokens = countsKept(
  (prompt) => encodeChat([{ role: 'user', content: prompt }], 'gpt-4o-mini', PLAIN_TEXT_TOKENS).length,
);
