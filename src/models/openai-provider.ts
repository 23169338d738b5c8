import OpenAI from 'openai';
import { secretSetting } from '../config';
import {
  bareModel,
  BilledCallError,
  MissingUsageError,
  ProviderRejectedError,
  type ChatRequest,
  type ChatResult,
  type EmbeddingRequest,
  type EmbeddingResult,
  type ModelProvider,
  type TokenUsage,
} from './provider';
import { sdkClientOptions, refusal as sdkRefusal } from './sdk-client';

const DEFAULT_BASE_URL = 'https://api.openai.com/v1';

/**
 * Any OpenAI-compatible endpoint through the official SDK. OPENAI_BASE_URL / OPENAI_API_KEY say where.
 *
 * The SDK never retries on its own (maxRetries 0): Temporal owns retries, so each activity attempt is exactly one
 * request, and each billed answer one ledger row. A refusal that is worth retrying (408, 409, 429, 5xx, a connection
 * error or timeout) becomes ProviderUnavailableError with the server's Retry-After, which the activity turns into the
 * next retry's delay; other 4xx become ProviderRejectedError, which is not retried. The request is aborted when the
 * caller's signal fires (the activity was cancelled, or its worker lost the activity).
 */
export function createOpenAIProvider(env: NodeJS.ProcessEnv = process.env): ModelProvider {
  const client = new OpenAI(
    sdkClientOptions(
      { apiKey: secretSetting('OPENAI_API_KEY', env), baseURL: env.OPENAI_BASE_URL },
      DEFAULT_BASE_URL,
      'MODEL_PROVIDER=openai needs OPENAI_API_KEY or OPENAI_API_KEY_FILE (and OPENAI_BASE_URL for an endpoint other than api.openai.com)',
    ),
  );

  return {
    name: 'openai',

    async chat(req: ChatRequest): Promise<ChatResult> {
      const response = await client.chat.completions
        .create(
          {
            model: bareModel(req.model),
            messages: [{ role: 'user', content: req.prompt }],
            ...(req.maxOutputTokens === undefined ? {} : { max_completion_tokens: req.maxOutputTokens }),
            ...(req.serviceTier === undefined ? {} : { service_tier: openAiServiceTier(req.model, req.serviceTier) }),
          },
          { signal: req.signal },
        )
        .catch(refusal);
      const requestId = response.id || response._request_id || null;
      const usage = chatUsage(response, requestId);
      const text = response.choices?.[0]?.message?.content;
      if (!text) {
        const why = response.choices?.length ? `finish_reason ${response.choices[0].finish_reason}, no content` : 'no choices';
        throw new BilledCallError(
          `OpenAI chat reply ${requestId ?? '(no id)'} is unusable (${why}) although it reported usage`,
          usage,
          response.model,
          requestId,
        );
      }
      return { text, usage, providerModel: response.model, requestId };
    },

    async embed(req: EmbeddingRequest): Promise<EmbeddingResult> {
      const response = await client.embeddings
        .create({ model: bareModel(req.model), input: req.input, encoding_format: 'float' }, { signal: req.signal })
        .catch(refusal);
      const requestId = response._request_id ?? null;
      if (!response.usage || response.usage.prompt_tokens === undefined) {
        throw new MissingUsageError(
          `OpenAI embedding response ${requestId ?? '(no id)'} carries no usage (usage.prompt_tokens); its cost cannot be booked`,
        );
      }
      const usage: TokenUsage = {
        promptTokens: response.usage.prompt_tokens,
        cachedPromptTokens: 0,
        cacheWrite5mTokens: 0,
        cacheWrite1hTokens: 0,
        completionTokens: 0,
        reasoningTokens: 0,
        serviceTier: null,
      };
      const vector = response.data?.[0]?.embedding;
      if (!vector?.length) {
        throw new BilledCallError(
          `OpenAI embedding reply ${requestId ?? '(no id)'} carries no vector although it reported usage`,
          usage,
          response.model,
          requestId,
        );
      }
      return { vector, usage, providerModel: response.model, requestId };
    },
  };
}

/**
 * The chat usage in the ledger's terms. prompt_tokens counts every prompt token, cached or not; the cache reads are
 * prompt_tokens_details.cached_tokens and the cache writes prompt_tokens_details.cache_write_tokens (the name the
 * official SDK gives them), booked as 5-minute writes since OpenAI reports no lifetime. service_tier is the tier that
 * served the call, as OpenAI names it ('default', 'flex', 'priority', ...).
 */
function chatUsage(response: OpenAI.ChatCompletion, requestId: string | null): TokenUsage {
  const u = response.usage;
  if (!u || u.prompt_tokens === undefined || u.completion_tokens === undefined) {
    throw new MissingUsageError(
      `OpenAI chat response ${requestId ?? '(no id)'} carries no usage (prompt_tokens/completion_tokens); its cost cannot be booked`,
    );
  }
  // Counts only: validateUsage rejects anything that is not a whole number in range before it is booked.
  return {
    promptTokens: u.prompt_tokens,
    cachedPromptTokens: u.prompt_tokens_details?.cached_tokens ?? 0,
    cacheWrite5mTokens: u.prompt_tokens_details?.cache_write_tokens ?? 0,
    cacheWrite1hTokens: 0,
    completionTokens: u.completion_tokens,
    reasoningTokens: u.completion_tokens_details?.reasoning_tokens ?? 0,
    serviceTier: response.service_tier ?? null,
  };
}

const refusal = (err: unknown): never => sdkRefusal('OpenAI', OpenAI, err);

/**
 * The service_tier a chat request sends for the tier its task asks for: `default` is OpenAI's standard processing. The
 * batch tier is the Batch API's, which a scheduled run does not use, so a task asking for it is refused before any
 * request rather than served (and billed) at another tier than its budget reserved for.
 */
function openAiServiceTier(model: string, tier: NonNullable<ChatRequest['serviceTier']>): 'default' | 'flex' | 'priority' {
  if (tier === 'batch') {
    throw new ProviderRejectedError(
      `${model}: serviceTier "batch" is OpenAI's Batch API, which scheduled runs don't use; use standard, flex or priority`,
      null,
    );
  }
  return tier === 'standard' ? 'default' : tier;
}
