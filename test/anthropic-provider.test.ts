import { WorkflowFailedError } from '@temporalio/client';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { worstCaseOf } from '../src/budgets/worst-case';
import type { LedgerEntry } from '../src/ledger/entries';
import { applyPrices, loadPricesFile, priceInForce } from '../src/ledger/prices';
import { formatScaled, LEDGER_SCALE } from '../src/money';
import { createAnthropicProvider } from '../src/models/anthropic-provider';
import { createOpenAIProvider } from '../src/models/openai-provider';
import { BilledCallError, MissingUsageError, ProviderUnavailableError, type ModelProvider } from '../src/models/provider';
import { routeByModel } from '../src/models/select-provider';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { appliedInput, runToEnd, type TestRun } from './support/applied';
import { createTestContext, type TestContext } from './support/context';
import { oracleCost } from './support/cost-oracle';
import { claudeTokens, startFakeAnthropic, type FakeAnthropic } from './support/fake-anthropic';
import { startFakeOpenAI, type FakeOpenAI } from './support/fake-openai';
import { atto } from './support/ledger';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';

// The Anthropic provider through the official SDK over real HTTP, against a local fake of the Messages API; then real
// runs (Temporal and PostgreSQL real) with chat on the fake Anthropic and the embedding on the fake OpenAI.

const MODEL = 'anthropic/claude-sonnet-4-6';

let ctx: TestContext;
let fake: FakeAnthropic;
let fakeOpenAI: FakeOpenAI;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  // Anthropic's list price of Claude Sonnet 4.6 per 1M tokens (input, cache read, output), for these tests' runs.
  const sonnet = { [MODEL]: { input: '3', cachedInput: '0.30', output: '15' } };
  const version = { version: 'test-anthropic', effectiveFrom: '2026-01-01T00:00:00Z', source: 'anthropic-provider test', models: sonnet };
  await applyPrices(ctx.operatorPool, { currency: 'USD', unit: 'per_million_tokens', versions: [version] }, 'test');
  fake = await startFakeAnthropic();
  fakeOpenAI = await startFakeOpenAI();
}, 60_000);

afterAll(async () => {
  await fake?.close();
  await fakeOpenAI?.close();
  await ctx?.close();
});

beforeEach(() => {
  fake.reset();
  fakeOpenAI.reset();
});

const provider = (extra: Record<string, string> = {}): ModelProvider =>
  createAnthropicProvider({ ANTHROPIC_BASE_URL: fake.baseURL, ANTHROPIC_API_KEY: 'sk-ant-test-fake', ...extra });

const chatRequest = { model: MODEL, prompt: 'Summarise my inbox', attempt: 1, maxOutputTokens: 500 };

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

  it("sends the task's service tier (standard: standard_only, priority: auto, none: none); refuses flex before any request", async () => {
    for (const [serviceTier, sent] of [
      ['standard', 'standard_only'],
      ['priority', 'auto'],
      [undefined, undefined],
    ] as const) {
      fake.reset();
      fake.script({ kind: 'ok', text: 'ok', usage: EVERY_FIELD });
      await provider({ ANTHROPIC_STREAM: stream }).chat({ ...chatRequest, ...(serviceTier ? { serviceTier } : {}) });
      expect(fake.requests[0].body.service_tier, `serviceTier ${serviceTier}`).toBe(sent);
    }
    fake.reset();
    await expect(provider({ ANTHROPIC_STREAM: stream }).chat({ ...chatRequest, serviceTier: 'flex' })).rejects.toThrow(
      /serviceTier "flex" is not offered by Anthropic.*use standard or priority/,
    );
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
    const counted = await provider().countPromptTokens?.({ model: MODEL, prompt });

    expect(counted).toBe(claudeTokens(prompt));
    expect(fake.requests[0]).toMatchObject({ path: '/v1/messages/count_tokens', status: 200 });
    expect(fake.requests[0].body).toMatchObject({ model: 'claude-sonnet-4-6', messages: [{ role: 'user', content: prompt }] });
  });

  it('a 429 on count_tokens is retry-worthy with its retry-after', async () => {
    // the fake's script answers /v1/messages only; a count refused is shown through an unreachable endpoint instead
    const down = createAnthropicProvider({ ANTHROPIC_BASE_URL: 'http://127.0.0.1:1', ANTHROPIC_API_KEY: 'k' });
    await expect(down.countPromptTokens?.({ model: MODEL, prompt: 'hi' })).rejects.toBeInstanceOf(ProviderUnavailableError);
  });
});

describe('through a real worker and the scheduledRun workflow', () => {
  /** The chat requests the fake saw (the budget guard's count_tokens requests aside). */
  const messages = () => fake.requests.filter((q) => q.path === '/v1/messages');
  const ledgerOf = async (workflowId: string) =>
    (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where workflow_id = $1 order by id', [workflowId])).rows;

  /** The worker's provider as selectProvider builds it for MODEL_PROVIDER=openai,anthropic, on the two fakes. */
  const routed = (stream: string): ModelProvider =>
    routeByModel(
      new Map([
        ['anthropic', provider({ ANTHROPIC_STREAM: stream })],
        ['openai', createOpenAIProvider({ OPENAI_BASE_URL: fakeOpenAI.baseURL, OPENAI_API_KEY: 'sk-test-fake' })],
      ]),
      'openai,anthropic',
    );

  const runInput = (taskId: string, userId = 'u-anthropic', extra: Partial<TestRun> = {}): TestRun => ({
    taskId,
    userId,
    input: 'What changed in my repositories today?',
    model: MODEL,
    embeddingModel: 'openai/text-embedding-3-small',
    ...extra,
  });

  /** A real worker on a fresh task queue; starts one run and waits for it. */
  async function runOnce(input: TestRun, stream = 'true') {
    const taskQueue = `${ctx.taskQueue}-anthropic-${randomUUID().slice(0, 8)}`;
    const workflowId = `cron-${input.taskId}-2026-11-02T09:00:00Z`;
    const fleet = await startWorkers({ ...ctx, taskQueue }, 1, { provider: routed(stream) });
    const outcome = await fleet.runWhile(() => runToEnd(ctx, input, workflowId, taskQueue));
    return { workflowId, ...outcome };
  }

  const chatPrice = () => priceInForce(ctx.pool, MODEL, new Date());

  it.each([
    ['non-streamed', 'false'],
    ['streamed', 'true'],
  ])(
    '%s: books every usage field the reply reported, with its id, at the price in force',
    async (_how, stream) => {
      const usage = { ...EVERY_FIELD, service_tier: 'standard' };
      fake.script({ kind: 'ok', model: 'claude-sonnet-4-6-20260217', usage });
      const { workflowId, runId, result, error } = await runOnce(runInput(`an-e2e-${stream}-${randomUUID().slice(0, 6)}`), stream);

      expect(error).toBeUndefined();
      expect(result?.status).toBe('completed');
      const [chat, embed] = await ledgerOf(workflowId);
      expect(chat).toMatchObject({
        idempotency_key: `${runId}:chat:1`,
        kind: 'chat',
        status: 'ok',
        model: MODEL,
        provider_model: 'claude-sonnet-4-6-20260217',
        provider_request_id: messages()[0].billedId,
        prompt_tokens: String(EVERY_FIELD_BOOKED.promptTokens),
        cached_prompt_tokens: '2000',
        cache_write_5m_tokens: '700',
        cache_write_1h_tokens: '50',
        completion_tokens: '400',
        reasoning_tokens: '120',
        service_tier: 'standard',
        price_version: 'test-anthropic',
      });
      expect(messages()[0].streamed).toBe(stream === 'true');
      expect(atto(chat.cost_usd)).toBe(oracleCost('chat', { ...EVERY_FIELD_BOOKED, serviceTier: 'standard' }, await chatPrice()));
      expect(embed).toMatchObject({ kind: 'embedding', status: 'ok', provider_request_id: fakeOpenAI.billedIds()[0] });
    },
    60_000,
  );

  it('rides out a 529 overloaded: the next attempt is booked once; nothing was billed for the 529', async () => {
    fake.script({ kind: 'error', status: 529, message: 'Overloaded' }, { kind: 'ok' });
    const { workflowId, runId, result } = await runOnce(runInput(`an-529-${randomUUID().slice(0, 6)}`));

    expect(result?.status).toBe('completed');
    expect(messages().map((q) => q.status)).toEqual([529, 200]);
    expect((await ledgerOf(workflowId)).map((r) => [r.idempotency_key, r.status])).toEqual([
      [`${runId}:chat:1`, 'ok'],
      [`${runId}:embed:1`, 'ok'],
    ]);
  }, 60_000);

  it('honours retry-after: after a 429 saying 600 s, the next attempt is scheduled 10 minutes later', async () => {
    fake.script({ kind: 'error', status: 429, retryAfter: '600' });
    const taskQueue = `${ctx.taskQueue}-anthropic-${randomUUID().slice(0, 8)}`;
    const workflowId = `cron-an-429-${randomUUID().slice(0, 6)}-2026-11-02T09:00:00Z`;
    const fleet = await startWorkers({ ...ctx, taskQueue }, 1, { provider: routed('true') });
    const pending = await fleet.runWhile(async () => {
      const handle = await ctx.client.workflow.start(scheduledRun, {
        args: [await appliedInput(ctx.operatorPool, runInput('an-429'))],
        workflowId,
        taskQueue,
      });
      const callChat = async () => (await handle.describe()).raw.pendingActivities?.find((a) => a.activityType?.name === 'callChat');
      await waitFor(async () => Boolean((await callChat())?.nextAttemptScheduleTime), 30_000, 'the 429 on the pending activity');
      const activity = await callChat();
      await handle.terminate('test done');
      return activity!;
    });
    const seconds = (t: { seconds?: unknown } | null | undefined) => Number(t?.seconds ?? 0);
    const delay = seconds(pending.nextAttemptScheduleTime) - seconds(pending.lastAttemptCompleteTime);
    expect(pending.lastFailure?.message).toMatch(/429/);
    expect(delay).toBeGreaterThanOrEqual(595);
    expect(delay).toBeLessThan(660);
    expect(messages().map((q) => q.status)).toEqual([429]);
  }, 60_000);

  it('books a stream cut off after its usage as failed, with that usage, then the call made again as ok', async () => {
    fake.script({ kind: 'cut', after: 'message_delta', usage: { input_tokens: 80, output_tokens: 30 } }, { kind: 'ok' });
    const { workflowId, runId, error } = await runOnce(runInput(`an-cut-${randomUUID().slice(0, 6)}`));

    expect(error).toBeUndefined();
    const rows = await ledgerOf(workflowId);
    expect(rows.map((r) => [r.idempotency_key, r.status, r.provider_request_id])).toEqual([
      [`${runId}:chat:1`, 'failed', messages()[0].billedId],
      [`${runId}:chat:2`, 'ok', messages()[1].billedId],
      [`${runId}:embed:1`, 'ok', fakeOpenAI.billedIds()[0]],
    ]);
    expect(rows[0]).toMatchObject({ prompt_tokens: '80', completion_tokens: '30' });
    expect(rows[0].cost_usd).toBe('0.000690000000000000'); // 80 × 3 + 30 × 15, per million
  }, 60_000);

  it('refuses a reply without usage: the run fails, nothing is booked for the chat, and it is not called again', async () => {
    fake.script({ kind: 'ok', usage: null });
    const { workflowId, error } = await runOnce(runInput(`an-nousage-${randomUUID().slice(0, 6)}`));

    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(messages()).toHaveLength(1);
    expect((await ledgerOf(workflowId)).filter((r) => r.kind === 'chat')).toEqual([]);
    const run = await ctx.pool.query<{ status: string; error: string }>('select status, error from runs where workflow_id = $1', [
      workflowId,
    ]);
    expect(run.rows[0]).toMatchObject({ status: 'failed', error: expect.stringMatching(/no usage/) });
  }, 60_000);

  describe('the budget guard counts the prompt as Claude does (count_tokens), not with o200k', () => {
    // A prompt long enough that Claude's count (the fake's) exceeds o200k's by far more than rounding.
    const PROMPT = Array.from({ length: 40 }, (_, i) => `Item ${i + 1}: review the pull request and summarise its risk.`).join('\n');
    const MAX_OUTPUT = 100;
    const usd = (a: bigint): string => formatScaled(a, LEDGER_SCALE);

    /** A run's worst case at this prompt count (chat + embedding), in atto-USD, by the tests' oracle. */
    async function worstAt(promptTokens: number): Promise<bigint> {
      const w = worstCaseOf({ prompt: PROMPT, maxOutputTokens: MAX_OUTPUT, providerPromptTokens: promptTokens });
      const embedding = await priceInForce(ctx.pool, 'openai/text-embedding-3-small', new Date());
      return oracleCost('chat', w.chat, await chatPrice()) + oracleCost('embedding', w.embedding, embedding);
    }

    /** One run of a user whose limit is `limit`, billed at the worst the fakes may bill: Claude's prompt count, all the reply. */
    async function runAtLimit(limit: bigint) {
      const userId = `u-edge-${randomUUID().slice(0, 8)}`;
      const monthStart = (await ctx.pool.query<{ m: Date }>(`select date_trunc('month', now() at time zone 'UTC') at time zone 'UTC' as m`))
        .rows[0].m;
      await applyBudgets(
        ctx.operatorPool,
        { budgets: [{ userId, monthlyLimitUsd: usd(limit), timeZone: 'UTC', effectiveFrom: monthStart }] },
        'test',
      );
      fake.script({ kind: 'ok', usage: { output_tokens: MAX_OUTPUT } }); // input_tokens: the fake's count of the prompt
      fakeOpenAI.script('embeddings', { kind: 'ok', usage: { prompt_tokens: MAX_OUTPUT } });
      const run = await runOnce(runInput(`an-edge-${userId}`, userId, { input: PROMPT, maxOutputTokens: MAX_OUTPUT }));
      const spent = await ctx.pool.query<{ s: string }>(
        'select coalesce(sum(cost_usd), 0)::text as s from usage_ledger where user_id = $1',
        [userId],
      );
      return { ...run, spent: atto(spent.rows[0].s) };
    }

    it('a limit exactly at the worst case runs and spends at most the limit; one below it, yet above the o200k worst case, never runs', async () => {
      const o200k = worstCaseOf({ prompt: PROMPT, maxOutputTokens: MAX_OUTPUT }).chat.promptTokens;
      const claude = claudeTokens(PROMPT);
      expect(claude).toBeGreaterThan(o200k + 50);
      const worst = await worstAt(claude);

      const atEdge = await runAtLimit(worst);
      expect(atEdge.result?.status).toBe('completed');
      expect(atEdge.spent).toBe(worst); // billed at the worst case exactly, and not a token over
      const countedFirst = fake.requests.map((q) => q.path);
      fake.reset();
      fakeOpenAI.reset();

      // What an o200k count would reserve fits this limit; the bill would not.
      const below = await runAtLimit(worst - 1n);
      expect(await worstAt(o200k)).toBeLessThan(worst - 1n);
      expect(below.spent).toBeLessThanOrEqual(worst - 1n);
      expect(below.result?.status).toBe('blocked');
      expect(below.spent).toBe(0n);
      expect(messages()).toHaveLength(0);
      expect(countedFirst).toEqual(['/v1/messages/count_tokens', '/v1/messages']); // the guard asked before the call
    }, 120_000);
  });
});
