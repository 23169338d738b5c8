import { countTokens as countEmbeddingTokens } from 'gpt-tokenizer/model/text-embedding-3-small';
import { countTokens as countChatTokens } from 'gpt-tokenizer/model/gpt-4o-mini';
import {
  bareModel,
  BilledCallError,
  type ChatRequest,
  type ChatResult,
  type EmbeddingRequest,
  type EmbeddingResult,
  type ModelProvider,
  type TokenUsage,
} from './provider';
import { sha256 } from '../hash';
import { countsKept } from './counts-kept';
import { PLAIN_TEXT_TOKENS } from './plain-text-tokens';

const EMBEDDING_DIMENSIONS = 16;
// A reply is a pure function of (model, prompt), so each text's count is kept
const chatTokens = countsKept((text) => countChatTokens(text, PLAIN_TEXT_TOKENS));
const embeddingTokens = countsKept((text) => countEmbeddingTokens(text, PLAIN_TEXT_TOKENS));

/**
 * The offline default. Replies are a pure function of (model, prompt), and usage is the actual token count of the
 * prompt and reply under the model's own tokenizer, unless the task's `simulate` profile overrides it to cost a
 * planned workload. `simulate.failFirstAttempts: N` makes the first N attempts fail after usage was produced.
 */
export class MockProvider implements ModelProvider {
  readonly name = 'mock';

  async chat(req: ChatRequest): Promise<ChatResult> {
    const digest = sha256(`${req.model}\n${req.prompt}`);
    const text = `[mock ${bareModel(req.model)}] Done: ${summarise(req.prompt)} (ref ${digest.slice(0, 8)})`;
    const s = req.simulate ?? {};
    // Like a real provider told max_completion_tokens: the reply (reasoning included) stops at the cap.
    const cap = (n: number): number => (req.maxOutputTokens === undefined ? n : Math.min(n, req.maxOutputTokens));
    const usage: TokenUsage = {
      promptTokens: s.promptTokens ?? chatTokens(req.prompt),
      cachedPromptTokens: s.cachedPromptTokens ?? 0,
      cacheWrite5mTokens: s.cacheWrite5mTokens ?? 0,
      cacheWrite1hTokens: s.cacheWrite1hTokens ?? 0,
      completionTokens: cap(s.completionTokens ?? chatTokens(text)),
      reasoningTokens: cap(s.reasoningTokens ?? 0),
      serviceTier: s.serviceTier ?? req.serviceTier ?? null,
    };
    const requestId = `mock-chat-${sha256(`${digest}:${req.attempt}`).slice(0, 16)}`;
    failIfAsked(req.attempt, req.simulate?.failFirstAttempts, usage, bareModel(req.model), requestId);
    return { text, usage, providerModel: bareModel(req.model), requestId };
  }

  async embed(req: EmbeddingRequest): Promise<EmbeddingResult> {
    const digest = Buffer.from(sha256(`${req.model}\n${req.input}`), 'hex');
    // Deterministic unit-range components from the digest bytes: a stand-in vector, not money.
    const s = req.simulate ?? {};
    const vector = Array.from({ length: EMBEDDING_DIMENSIONS }, (_, i) => (digest[i] - 127.5) / 127.5);
    const usage: TokenUsage = {
      promptTokens: s.embeddingTokens ?? embeddingTokens(req.input),
      cachedPromptTokens: 0,
      cacheWrite5mTokens: 0,
      cacheWrite1hTokens: 0,
      completionTokens: 0,
      reasoningTokens: 0,
      serviceTier: s.serviceTier ?? null,
    };
    const requestId = `mock-embed-${sha256(`${digest.toString('hex')}:${req.attempt}`).slice(0, 16)}`;
    failIfAsked(req.attempt, req.simulate?.failFirstAttempts, usage, bareModel(req.model), requestId);
    return { vector, usage, providerModel: bareModel(req.model), requestId };
  }
}

function failIfAsked(attempt: number, failFirst: number | undefined, usage: TokenUsage, model: string, requestId: string): void {
  if (failFirst !== undefined && attempt <= failFirst) {
    throw new BilledCallError(`mock failure on attempt ${attempt} of the first ${failFirst} (usage was produced)`, usage, model, requestId);
  }
}

function summarise(prompt: string): string {
  const oneLine = prompt.replace(/\s+/g, ' ').trim();
  return oneLine.length > 80 ? `${oneLine.slice(0, 77)}...` : oneLine;
}
