import OpenAI from 'openai';
import { UserError } from '../errors';
import { bareModel } from './provider';
import {
  BilledCallError,
  MissingUsageError,
  type ChatRequest,
  type ChatResult,
  type EmbeddingRequest,
  type EmbeddingResult,
  type ModelProvider,
  type TokenUsage,
} from './provider';

const DEFAULT_BASE_URL = 'https://api.openai.com/v1';

/**
 * Any OpenAI-compatible endpoint through the official SDK. OPENAI_BASE_URL / OPENAI_API_KEY say where;
 * OPENAI_MAX_RETRIES (default 2) is how often the SDK itself retries 408/409/429/5xx and connection errors,
 * honouring retry-after. Those retries happen before any usage comes back, so nothing is billed twice;
 * Temporal's activity retries on top of them get their own ledger rows.
 */
export function createOpenAIProvider(env: NodeJS.ProcessEnv = process.env): ModelProvider {
  const apiKey = env.OPENAI_API_KEY;
  if (!apiKey) {
    throw new UserError('MODEL_PROVIDER=openai needs OPENAI_API_KEY (and OPENAI_BASE_URL for an endpoint other than api.openai.com)');
  }
  const client = new OpenAI({
    apiKey,
    baseURL: env.OPENAI_BASE_URL || DEFAULT_BASE_URL,
    maxRetries: maxRetriesFrom(env.OPENAI_MAX_RETRIES),
    timeout: 90_000, // below the chat activity's 2-minute startToCloseTimeout
  });

  return {
    name: 'openai',

    async chat(req: ChatRequest): Promise<ChatResult> {
      const response = await client.chat.completions.create({
        model: bareModel(req.model),
        messages: [{ role: 'user', content: req.prompt }],
      });
      const requestId = response.id || response._request_id || null;
      const usage = chatUsage(response.usage, requestId);
      const text = response.choices?.[0]?.message?.content;
      if (!text) {
        const why = response.choices?.length ? `finish_reason ${response.choices[0].finish_reason}, no content` : 'no choices';
        throw new BilledCallError(`OpenAI chat reply ${requestId ?? '(no id)'} is unusable (${why}) although it reported usage`, usage, response.model, requestId);
      }
      return { text, usage, providerModel: response.model, requestId };
    },

    async embed(req: EmbeddingRequest): Promise<EmbeddingResult> {
      const response = await client.embeddings.create({ model: bareModel(req.model), input: req.input, encoding_format: 'float' });
      const requestId = response._request_id ?? null;
      if (!response.usage || response.usage.prompt_tokens === undefined) {
        throw new MissingUsageError(`OpenAI embedding response ${requestId ?? '(no id)'} carries no usage (usage.prompt_tokens); its cost cannot be booked`);
      }
      const usage: TokenUsage = { promptTokens: response.usage.prompt_tokens, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 };
      const vector = response.data?.[0]?.embedding;
      if (!vector?.length) {
        throw new BilledCallError(`OpenAI embedding reply ${requestId ?? '(no id)'} carries no vector although it reported usage`, usage, response.model, requestId);
      }
      return { vector, usage, providerModel: response.model, requestId };
    },
  };
}

function chatUsage(u: OpenAI.CompletionUsage | undefined, requestId: string | null): TokenUsage {
  if (!u || u.prompt_tokens === undefined || u.completion_tokens === undefined) {
    throw new MissingUsageError(`OpenAI chat response ${requestId ?? '(no id)'} carries no usage (prompt_tokens/completion_tokens); its cost cannot be booked`);
  }
  // Counts only: validateUsage rejects anything that is not a whole number in range before it is booked.
  return {
    promptTokens: u.prompt_tokens,
    cachedPromptTokens: u.prompt_tokens_details?.cached_tokens ?? 0,
    completionTokens: u.completion_tokens,
    reasoningTokens: u.completion_tokens_details?.reasoning_tokens ?? 0,
  };
}

function maxRetriesFrom(value: string | undefined): number {
  if (value === undefined || value === '') return 2;
  if (!/^\d{1,2}$/.test(value)) throw new UserError(`OPENAI_MAX_RETRIES=${JSON.stringify(value)} must be a whole number from 0 to 99`);
  return Number.parseInt(value, 10);
}
