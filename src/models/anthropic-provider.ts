import Anthropic from '@anthropic-ai/sdk';
import { secretSetting } from '../config';
import { DEFAULT_MAX_OUTPUT_TOKENS } from '../constants';
import { UserError } from '../errors';
import {
  bareModel,
  BilledCallError,
  MissingUsageError,
  ProviderRejectedError,
  type ChatRequest,
  type ChatResult,
  type ModelProvider,
  type PromptCountRequest,
  type TokenUsage,
} from './provider';
import { sdkClientOptions, refusal as sdkRefusal } from './sdk-client';

const DEFAULT_BASE_URL = 'https://api.anthropic.com';

/** Anthropic's usage object as a reply reports it (the SDK's Usage), every field optional, since a reply may omit any. */
type ReportedUsage = Partial<Omit<Anthropic.Usage, 'cache_creation'>> & {
  cache_creation?: Partial<Anthropic.CacheCreation> | null;
};

/**
 * Anthropic's Messages API through the official SDK, for `anthropic/<model>` chat models. ANTHROPIC_API_KEY (or
 * ANTHROPIC_API_KEY_FILE) and ANTHROPIC_BASE_URL say where. Anthropic has no embeddings API.
 *
 * As for OpenAI: the SDK never retries (maxRetries 0), so each activity attempt is one request and each billed answer
 * one ledger row; 408/409/429/5xx (529 overloaded included), a connection error or a timeout become
 * ProviderUnavailableError with the server's Retry-After, other 4xx ProviderRejectedError; the caller's signal aborts.
 *
 * Replies are streamed unless ANTHROPIC_STREAM=false. A streamed call is booked from the last usage the stream
 * reported: message_start gives the prompt side and the service tier, each message_delta the cumulative counts. A
 * stream cut off after message_start was billed, so it becomes a BilledCallError with the usage seen so far (booked
 * as failed), never a call booked at zero.
 */
export function createAnthropicProvider(env: NodeJS.ProcessEnv = process.env): ModelProvider {
  const client = new Anthropic(
    sdkClientOptions(
      { apiKey: secretSetting('ANTHROPIC_API_KEY', env), baseURL: env.ANTHROPIC_BASE_URL },
      DEFAULT_BASE_URL,
      'MODEL_PROVIDER=anthropic needs ANTHROPIC_API_KEY or ANTHROPIC_API_KEY_FILE (and ANTHROPIC_BASE_URL for an endpoint other than api.anthropic.com)',
    ),
  );
  const stream = streamSetting(env.ANTHROPIC_STREAM);

  return {
    name: 'anthropic',

    async chat(req: ChatRequest): Promise<ChatResult> {
      const params = {
        model: bareModel(req.model),
        messages: [{ role: 'user' as const, content: req.prompt }],
        max_tokens: req.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS,
        ...(req.serviceTier === undefined ? {} : { service_tier: anthropicServiceTier(req.model, req.serviceTier) }),
      };
      if (stream) return streamedChat(client, params, req.signal);
      const message = await client.messages.create(params, { signal: req.signal }).catch(refusal);
      const requestId = message.id || message._request_id || null;
      const usage = anthropicUsage(message.usage, requestId);
      return usableReply(textOf(message.content), message.stop_reason, usage, message.model, requestId);
    },

    async embed(req): Promise<never> {
      throw new ProviderRejectedError(`${req.model}: Anthropic has no embeddings API; give the task an openai/ embedding model`, null);
    },

    async countPromptTokens(req: PromptCountRequest): Promise<number> {
      const counted = await client.messages
        .countTokens(
          { model: bareModel(req.model), messages: [{ role: 'user', content: req.prompt }] },
          { signal: req.signal, timeout: 10_000 },
        )
        .catch(refusal);
      if (!Number.isSafeInteger(counted.input_tokens) || counted.input_tokens < 0) {
        throw new MissingUsageError(`Anthropic count_tokens for ${req.model} answered no input_tokens`);
      }
      return counted.input_tokens;
    },
  };
}

async function streamedChat(
  client: Anthropic,
  params: Anthropic.MessageCreateParamsNonStreaming,
  signal: AbortSignal | undefined,
): Promise<ChatResult> {
  const { data: events, request_id } = await client.messages
    .create({ ...params, stream: true }, { signal })
    .withResponse()
    .catch(refusal);
  let reported: ReportedUsage | undefined;
  let model = params.model;
  let requestId: string | null = request_id ?? null;
  let stopReason: string | null = null;
  let text = '';
  let stopped = false;
  try {
    for await (const event of events) {
      if (event.type === 'message_start') {
        reported = { ...event.message.usage };
        model = event.message.model || model;
        requestId = event.message.id || requestId;
      } else if (event.type === 'message_delta') {
        // Cumulative totals: a field the delta carries replaces the one from message_start; one it omits stays.
        const delta = Object.fromEntries(Object.entries(event.usage ?? {}).filter(([, v]) => v !== null && v !== undefined));
        reported = { ...reported, ...delta };
        stopReason = event.delta.stop_reason;
      } else if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') {
        text += event.delta.text;
      } else if (event.type === 'message_stop') {
        stopped = true;
      }
    }
  } catch (err) {
    if (!reported) refusal(err);
    const usage = anthropicUsage(reported, requestId);
    throw new BilledCallError(
      `Anthropic stream ${requestId ?? '(no id)'} was cut off after it reported usage (${(err as Error).message}); booked with the usage it reported`,
      usage,
      model,
      requestId,
    );
  }
  const usage = anthropicUsage(reported, requestId);
  if (!stopped) {
    throw new BilledCallError(
      `Anthropic stream ${requestId ?? '(no id)'} ended without message_stop after it reported usage`,
      usage,
      model,
      requestId,
    );
  }
  return usableReply(text, stopReason, usage, model, requestId);
}

function usableReply(text: string, stopReason: string | null, usage: TokenUsage, model: string, requestId: string | null): ChatResult {
  if (!text) {
    throw new BilledCallError(
      `Anthropic reply ${requestId ?? '(no id)'} is unusable (stop_reason ${stopReason ?? 'none'}, no text) although it reported usage`,
      usage,
      model,
      requestId,
    );
  }
  return { text, usage, providerModel: model, requestId };
}

const textOf = (content: Anthropic.ContentBlock[] | undefined): string =>
  (content ?? []).map((block) => (block.type === 'text' ? block.text : '')).join('');

/**
 * Anthropic's usage in the ledger's terms. Its input_tokens are only the uncached part: promptTokens adds the cache
 * reads and writes, which are billed too. Cache writes are split by lifetime (cache_creation); a reply without the
 * split wrote for 5 minutes, the default lifetime.
 */
export function anthropicUsage(u: ReportedUsage | null | undefined, requestId: string | null): TokenUsage {
  if (!u || typeof u.input_tokens !== 'number' || typeof u.output_tokens !== 'number') {
    throw new MissingUsageError(
      `Anthropic reply ${requestId ?? '(no id)'} carries no usage (input_tokens/output_tokens); its cost cannot be booked`,
    );
  }
  const cacheRead = u.cache_read_input_tokens ?? 0;
  const write1h = u.cache_creation?.ephemeral_1h_input_tokens ?? 0;
  const write5m = u.cache_creation?.ephemeral_5m_input_tokens ?? Math.max(0, (u.cache_creation_input_tokens ?? 0) - write1h);
  // Counts only: validateUsage rejects anything that is not a whole number in range before it is booked.
  const usage = {
    promptTokens: u.input_tokens + cacheRead + write5m + write1h,
    cachedPromptTokens: cacheRead,
    cacheWrite5mTokens: write5m,
    cacheWrite1hTokens: write1h,
    completionTokens: u.output_tokens,
    reasoningTokens: u.output_tokens_details?.thinking_tokens ?? 0,
    serviceTier: u.service_tier ?? null,
  };
  return usage;
}

const refusal = (err: unknown): never => sdkRefusal('Anthropic', Anthropic, err);

function streamSetting(value: string | undefined): boolean {
  if (value === undefined || value === '' || value === 'true' || value === '1') return true;
  if (value === 'false' || value === '0') return false;
  throw new UserError(`ANTHROPIC_STREAM=${JSON.stringify(value)} is not a switch; use true (the default) or false`);
}

/**
 * The service_tier a Messages request sends for the tier its task asks for: `standard_only` keeps it on standard
 * capacity, `auto` lets Anthropic serve it at priority where the organization has priority capacity (the reply's
 * usage.service_tier says which, and that is the tier it is priced at). Anthropic has no flex or batch tier on the
 * Messages API, so a task asking for one is refused before any request.
 */
function anthropicServiceTier(model: string, tier: NonNullable<ChatRequest['serviceTier']>): 'auto' | 'standard_only' {
  if (tier === 'standard') return 'standard_only';
  if (tier === 'priority') return 'auto';
  throw new ProviderRejectedError(
    `${model}: serviceTier "${tier}" is not offered by Anthropic's Messages API; use standard or priority`,
    null,
  );
}
