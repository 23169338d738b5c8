import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createAnthropicProvider } from '../src/models/anthropic-provider';
import { BilledCallError, MissingUsageError, ProviderUnavailableError, type ModelProvider } from '../src/models/provider';
import { claudeTokens, startFakeAnthropic, type FakeAnthropic } from './support/fake-anthropic';

// The Anthropic provider through the official SDK over real HTTP, against a local fake of the Messages API.

let fake: FakeAnthropic;

beforeAll(async () => {
  fake = await startFakeAnthropic();
});

afterAll(async () => {
  await fake?.close();
});

beforeEach(() => fake.reset());

const provider = (extra: Record<string, string> = {}): ModelProvider =>
  createAnthropicProvider({ ANTHROPIC_BASE_URL: fake.baseURL, ANTHROPIC_API_KEY: 'sk-ant-test-fake', ...extra });

const chatRequest = { model: 'anthropic/claude-sonnet-4-6', prompt: 'Summarise my inbox', attempt: 1, maxOutputTokens: 500 };

const failureOf = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

/** Every usage field the fake can report, all different, so a field booked in another's place shows. */
const EVERY_FIELD = {
  input_tokens: 300,
  cache_read_input_tokens: 2000,
  cache_write_5m: 700,
  cache_write_1h: 50,
  output_tokens: 400,
  thinking_tokens: 120,
  service_tier: 'priority',
};
const EVERY_FIELD_BOOKED = {
  promptTokens: 300 + 2000 + 700 + 50,
  cachedPromptTokens: 2000,
  cacheWrite5mTokens: 700,
  cacheWrite1hTokens: 50,
  completionTokens: 400,
  reasoningTokens: 120,
  serviceTier: 'priority',
};

describe.each([
  ['non-streamed', 'false'],
  ['streamed', 'true'],
])('createAnthropicProvider, %s', (_how, stream) => {
  it('maps every usage field: promptTokens adds the cache reads and both cache writes to input_tokens', async () => {
    fake.script({ kind: 'ok', text: 'Inbox: 3 items', model: 'claude-sonnet-4-6-20260217', usage: EVERY_FIELD });
    const r = await provider({ ANTHROPIC_STREAM: stream }).chat(chatRequest);

    expect(r.text).toBe('Inbox: 3 items');
    expect(r.usage).toEqual(EVERY_FIELD_BOOKED);
    expect(r.providerModel).toBe('claude-sonnet-4-6-20260217');
    expect(r.requestId).toBe(fake.requests[0].billedId);
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0]).toMatchObject({ path: '/v1/messages', streamed: stream === 'true' });
    expect(fake.requests[0].body).toMatchObject({ model: 'claude-sonnet-4-6', max_tokens: 500 });
    expect(fake.requests[0].headers.authorization).toBe('Bearer sk-ant-test-fake');
  });

  it('never retries on its own: a 529 overloaded is one request, retry-worthy', async () => {
    fake.script({ kind: 'error', status: 529, message: 'Overloaded' }, { kind: 'ok' });
    const err = await failureOf(provider({ ANTHROPIC_STREAM: stream }).chat(chatRequest));

    expect(err).toBeInstanceOf(ProviderUnavailableError);
    expect(err).toMatchObject({ status: 529, retryAfterMs: null });
    expect(fake.requests.map((q) => q.status)).toEqual([529]);
  });

  it('a 429 is one request, refused with its retry-after for Temporal to honour; a 400 is final', async () => {
    fake.script({ kind: 'error', status: 429, retryAfter: '7' }, { kind: 'error', status: 400, message: 'bad model' });
    await expect(provider({ ANTHROPIC_STREAM: stream }).chat(chatRequest)).rejects.toMatchObject({
      name: 'ProviderUnavailableError',
      status: 429,
      retryAfterMs: 7000,
    });
    await expect(provider({ ANTHROPIC_STREAM: stream }).chat(chatRequest)).rejects.toMatchObject({
      name: 'ProviderRejectedError',
      status: 400,
    });
    expect(fake.requests.map((q) => q.status)).toEqual([429, 400]);
  });

  it('turns a billed reply without text into a BilledCallError carrying its usage', async () => {
    fake.script({ kind: 'empty', usage: { input_tokens: 50, output_tokens: 7 } });
    const err = await failureOf(provider({ ANTHROPIC_STREAM: stream }).chat(chatRequest));

    expect(err).toBeInstanceOf(BilledCallError);
    expect((err as BilledCallError).usage).toMatchObject({ promptTokens: 50, completionTokens: 7, serviceTier: 'standard' });
    expect((err as BilledCallError).requestId).toBe(fake.requests[0].billedId);
    expect((err as BilledCallError).message).toMatch(/max_tokens/);
  });

  it('refuses a reply without usage, naming it', async () => {
    fake.script({ kind: 'ok', usage: null });
    const err = await failureOf(provider({ ANTHROPIC_STREAM: stream }).chat(chatRequest));
    expect(err).toBeInstanceOf(MissingUsageError);
    expect((err as Error).message).toMatch(/no usage/);
  });

  it("passes the caller's abort signal to the request: an aborted call sends nothing", async () => {
    await expect(provider({ ANTHROPIC_STREAM: stream }).chat({ ...chatRequest, signal: AbortSignal.abort() })).rejects.toThrow(/abort/i);
    expect(fake.requests).toHaveLength(0);
  });
});

describe('a streamed reply', () => {
  it('is booked from the final usage event (message_delta), never from message_start nor as zero', async () => {
    fake.script({ kind: 'ok', usage: { input_tokens: 80, output_tokens: 640 } });
    const r = await provider().chat(chatRequest);
    expect(fake.requests[0].streamed).toBe(true); // streaming is the default
    expect(r.usage.completionTokens).toBe(640); // message_start said 1
    expect(r.usage.promptTokens).toBe(80);
  });

  it('cut off after message_delta is a BilledCallError with the final usage', async () => {
    fake.script({ kind: 'cut', after: 'message_delta', usage: EVERY_FIELD });
    const err = await failureOf(provider().chat(chatRequest));

    expect(err).toBeInstanceOf(BilledCallError);
    expect((err as BilledCallError).usage).toEqual(EVERY_FIELD_BOOKED);
    expect((err as BilledCallError).requestId).toBe(fake.requests[0].billedId);
  });

  it('cut off mid-reply is a BilledCallError with the usage message_start reported (the prompt side, billed)', async () => {
    fake.script({ kind: 'cut', after: 'content_block_delta', usage: EVERY_FIELD });
    const err = await failureOf(provider().chat(chatRequest));

    expect(err).toBeInstanceOf(BilledCallError);
    expect((err as BilledCallError).usage).toEqual({ ...EVERY_FIELD_BOOKED, completionTokens: 1, reasoningTokens: 0 });
  });
});

describe('count_tokens', () => {
  it("counts a prompt with the provider's own count, more than o200k gives for the same text", async () => {
    const prompt = 'What changed in my repositories today? List every pull request merged.';
    const counted = await provider().countPromptTokens?.({ model: 'anthropic/claude-sonnet-4-6', prompt });

    expect(counted).toBe(claudeTokens(prompt));
    expect(fake.requests[0]).toMatchObject({ path: '/v1/messages/count_tokens', status: 200 });
    expect(fake.requests[0].body).toMatchObject({ model: 'claude-sonnet-4-6', messages: [{ role: 'user', content: prompt }] });
  });

  it('a 429 on count_tokens is retry-worthy with its retry-after', async () => {
    // the fake's script answers /v1/messages only; a count refused is shown through an unreachable endpoint instead
    const down = createAnthropicProvider({ ANTHROPIC_BASE_URL: 'http://127.0.0.1:1', ANTHROPIC_API_KEY: 'k' });
    await expect(down.countPromptTokens?.({ model: 'anthropic/claude-sonnet-4-6', prompt: 'hi' })).rejects.toBeInstanceOf(
      ProviderUnavailableError,
    );
  });
});
