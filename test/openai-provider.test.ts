import { WorkflowFailedError } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { LedgerEntry } from '../src/ledger/entries';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createOpenAIProvider } from '../src/models/openai-provider';
import { fullUsage, BilledCallError, ProviderUnavailableError, type ModelProvider } from '../src/models/provider';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { appliedInput, runToEnd, type TestRun } from './support/applied';
import { createTestContext, type TestContext } from './support/context';
import { startFakeOpenAI, type FakeOpenAI } from './support/fake-openai';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';

// The OpenAI provider over real HTTP against a local fake of the OpenAI API; Temporal and PostgreSQL are real.

let ctx: TestContext;
let fake: FakeOpenAI;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  fake = await startFakeOpenAI();
});

afterAll(async () => {
  await fake?.close();
  await ctx?.close();
});

beforeEach(() => fake.reset());

const provider = (extra: Record<string, string> = {}): ModelProvider =>
  createOpenAIProvider({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'sk-test-fake', ...extra });

const chatRequest = { model: 'openai/gpt-4o-mini', prompt: 'Summarise my inbox', attempt: 1 };

describe('createOpenAIProvider over HTTP', () => {
  it('maps every usage field (cache reads and writes, reasoning, service tier) and keeps the request id and served model', async () => {
    fake.script('chat', {
      kind: 'ok',
      text: 'Inbox: 3 items',
      usage: {
        prompt_tokens: 1200,
        cached_tokens: 1024,
        cache_write_tokens: 150,
        completion_tokens: 300,
        reasoning_tokens: 128,
        service_tier: 'priority',
      },
    });
    const r = await provider().chat(chatRequest);

    expect(r.text).toBe('Inbox: 3 items');
    expect(r.usage).toEqual({
      promptTokens: 1200,
      cachedPromptTokens: 1024,
      cacheWrite5mTokens: 150,
      cacheWrite1hTokens: 0,
      completionTokens: 300,
      reasoningTokens: 128,
      serviceTier: 'priority',
    });
    expect(r.requestId).toBe(fake.requests[0].billedId);
    expect(r.requestId).toMatch(/^chatcmpl-fake-/);
    expect(r.providerModel).toBe('gpt-4o-mini-2024-07-18');
    // The API got the bare model name and the key.
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0].path).toBe('/v1/chat/completions');
    expect(fake.requests[0].body.model).toBe('gpt-4o-mini');
    expect(fake.requests[0].headers.authorization).toBe('Bearer sk-test-fake');
  });

  it("sends the task's service tier (standard: default, flex, priority, none: none); refuses batch before any request", async () => {
    for (const [serviceTier, sent] of [
      ['standard', 'default'],
      ['flex', 'flex'],
      ['priority', 'priority'],
      [undefined, undefined],
    ] as const) {
      fake.reset();
      fake.script('chat', { kind: 'ok', text: 'ok', usage: { prompt_tokens: 10, completion_tokens: 2 } });
      await provider().chat({ ...chatRequest, ...(serviceTier ? { serviceTier } : {}) });
      expect(fake.requests[0].body.service_tier, `serviceTier ${serviceTier}`).toBe(sent);
    }
    fake.reset();
    await expect(provider().chat({ ...chatRequest, serviceTier: 'batch' })).rejects.toThrow(/Batch API.*use standard, flex or priority/);
    expect(fake.requests).toHaveLength(0);
  });

  it('maps embedding usage and keeps x-request-id as the request id', async () => {
    fake.script('embeddings', { kind: 'ok', usage: { prompt_tokens: 37 } });
    const r = await provider().embed({
      model: 'openai/text-embedding-3-small',
      input: 'remember this',
      attempt: 1,
    });

    expect(r.usage).toEqual(fullUsage({ promptTokens: 37, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }));
    expect(r.requestId).toBe(fake.requests[0].requestId);
    expect(r.vector).toEqual([0.25, -0.5, 0.125, 1]);
    expect(fake.requests[0].body.model).toBe('text-embedding-3-small');
  });

  it('never retries on its own: a 429 is one request, refused with its Retry-After for Temporal to honour', async () => {
    fake.script('chat', { kind: 'error', status: 429, retryAfter: '7' }, { kind: 'ok' });
    const err = await provider()
      .chat(chatRequest)
      .then(
        () => undefined,
        (e: unknown) => e,
      );

    expect(err).toBeInstanceOf(ProviderUnavailableError);
    expect(err).toMatchObject({ status: 429, retryAfterMs: 7000 });
    expect(fake.requests.map((q) => q.status)).toEqual([429]);
  });

  it('a 5xx is one request and retry-worthy; a 400 is final (ProviderRejectedError)', async () => {
    fake.script('chat', { kind: 'error', status: 503, retryAfter: '0' }, { kind: 'error', status: 400, message: 'bad model' });
    await expect(provider().chat(chatRequest)).rejects.toMatchObject({ name: 'ProviderUnavailableError', status: 503, retryAfterMs: 0 });
    await expect(provider().chat(chatRequest)).rejects.toMatchObject({ name: 'ProviderRejectedError', status: 400 });
    expect(fake.requests.map((q) => q.status)).toEqual([503, 400]);
  });

  it("passes the caller's abort signal to the request: an aborted call sends nothing", async () => {
    await expect(provider().chat({ ...chatRequest, signal: AbortSignal.abort() })).rejects.toThrow(/abort/i);
    expect(fake.requests).toHaveLength(0);
  });

  it('turns a billed but unusable reply (usage, no choices) into a BilledCallError carrying the usage', async () => {
    fake.script('chat', { kind: 'empty', usage: { prompt_tokens: 50, completion_tokens: 7 } });
    const err = await provider()
      .chat(chatRequest)
      .then(
        () => undefined,
        (e: unknown) => e,
      );

    expect(err).toBeInstanceOf(BilledCallError);
    const billed = err as BilledCallError;
    expect(billed.usage).toEqual(fullUsage({ promptTokens: 50, cachedPromptTokens: 0, completionTokens: 7, reasoningTokens: 0 }));
    expect(billed.requestId).toBe(fake.requests[0].billedId);
    expect(billed.message).toMatch(/no choices/);
  });

  it('refuses a reply without usage, naming it', async () => {
    fake.script('chat', { kind: 'ok', usage: null });
    await expect(provider().chat(chatRequest)).rejects.toThrow(/no usage/);
  });
});

describe('through a real worker and the scheduledRun workflow', () => {
  const ledgerOf = async (runId: string) =>
    (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where workflow_id = $1 order by id', [runId])).rows;

  /** A real worker on a fresh task queue with the OpenAI provider pointed at the fake; starts one run and waits for it. */
  async function runOnce(taskId: string, extraEnv: Record<string, string> = {}) {
    const taskQueue = `${ctx.taskQueue}-openai-${randomUUID().slice(0, 8)}`;
    const workflowId = `cron-${taskId}-2026-11-02T09:00:00Z`;
    const input: TestRun = {
      taskId,
      userId: 'u-openai',
      input: 'What changed in my repositories today?',
      model: 'openai/gpt-4o-mini',
      embeddingModel: 'openai/text-embedding-3-small',
    };
    const fleet = await startWorkers({ ...ctx, taskQueue }, 1, { provider: provider(extraEnv) });
    const outcome = await fleet.runWhile(() => runToEnd(ctx, input, workflowId, taskQueue));
    return { workflowId, ...outcome };
  }

  it('books exactly the two calls the fake answered, every count and tier they reported, with their request ids and the standard prices', async () => {
    fake.script('chat', {
      kind: 'ok',
      usage: {
        prompt_tokens: 1000,
        cached_tokens: 400,
        cache_write_tokens: 100,
        completion_tokens: 200,
        reasoning_tokens: 50,
        service_tier: 'default',
      },
    });
    fake.script('embeddings', { kind: 'ok', usage: { prompt_tokens: 12 } });
    const { workflowId, runId, result, error } = await runOnce(`oa-e2e-${randomUUID().slice(0, 6)}`);

    expect(error).toBeUndefined();
    expect(result?.status).toBe('completed');
    const rows = await ledgerOf(workflowId);
    expect(rows).toHaveLength(2);
    const [chat, embed] = rows;
    const billed = fake.billedIds();
    expect(billed).toHaveLength(2);
    expect(chat).toMatchObject({
      idempotency_key: `${runId}:chat:1`,
      workflow_id: workflowId,
      kind: 'chat',
      status: 'ok',
      provider_request_id: billed[0],
      provider_model: 'gpt-4o-mini-2024-07-18',
      prompt_tokens: '1000',
      cached_prompt_tokens: '400',
      cache_write_5m_tokens: '100',
      cache_write_1h_tokens: '0',
      completion_tokens: '200',
      reasoning_tokens: '50',
      service_tier: 'default',
      price_version: 'v1',
      // 600 × 0.15 (the cache writes among them at input) + 400 × 0.075 + 200 × 0.60, per million
      cost_usd: '0.000240000000000000',
    });
    expect(embed).toMatchObject({
      idempotency_key: `${runId}:embed:1`,
      kind: 'embedding',
      status: 'ok',
      provider_request_id: billed[1],
      prompt_tokens: '12',
      cost_usd: '0.000000240000000000', // 12 × 0.02 per million
    });
    expect(result?.chatCostUsd).toBe(chat.cost_usd);
    expect(result?.embeddingCostUsd).toBe(embed.cost_usd);
  }, 60_000);

  it("keeps a real embedding out of history: 1,536 numbers reach the run's memory, none is in its history", async () => {
    const vector = Array.from({ length: 1536 }, (_, i) => Math.fround(Math.sin(i + 1) / 40));
    fake.script('embeddings', { kind: 'ok', vector });
    const { workflowId, runId, result } = await runOnce(`oa-vector-${randomUUID().slice(0, 6)}`);

    expect(result?.status).toBe('completed');
    const memory = await ctx.ownerPool.query<{ embedding: number[] }>('select embedding from memories where run_workflow_id = $1', [
      workflowId,
    ]);
    expect(memory.rows[0].embedding).toEqual(vector);
    const json = historyToJSON(await ctx.client.workflow.getHandle(workflowId, runId).fetchHistory());
    const payloads = [...json.matchAll(/"data": "([A-Za-z0-9+/=]+)"/g)].map((m) => Buffer.from(m[1], 'base64').toString('utf8')).join();
    expect(payloads).toContain('What changed in my repositories today?'); // the payloads are readable here
    expect(vector.slice(0, 50).filter((n) => payloads.includes(String(n)))).toEqual([]);
    // the bytes `temporal workflow show --output json` prints (issue 23: at most 16 KB); the vector would add about 43 KB
    expect(json.length).toBeLessThanOrEqual(16_384);
  }, 60_000);

  it('books an unusable but billed reply as failed, then the retried attempt as ok', async () => {
    fake.script('chat', { kind: 'empty', usage: { prompt_tokens: 80, completion_tokens: 0 } }, { kind: 'ok' });
    const { workflowId, runId, error } = await runOnce(`oa-empty-${randomUUID().slice(0, 6)}`);

    expect(error).toBeUndefined();
    const rows = await ledgerOf(workflowId);
    expect(rows.map((r) => [r.idempotency_key, r.status])).toEqual([
      [`${runId}:chat:1`, 'failed'],
      [`${runId}:chat:2`, 'ok'],
      [`${runId}:embed:1`, 'ok'],
    ]);
    expect(rows[0].cost_usd).toBe('0.000012000000000000'); // 80 prompt tokens × 0.15 per million
  }, 60_000);

  it('rides out a provider outage: three 503s, then the call is booked once; nothing was billed for the 503s', async () => {
    fake.script('chat', ...Array(3).fill({ kind: 'error', status: 503, retryAfter: '0' }), { kind: 'ok' });
    const { workflowId, runId, result, error } = await runOnce(`oa-503-${randomUUID().slice(0, 6)}`);

    expect(error).toBeUndefined();
    expect(result?.status).toBe('completed');
    // one request per activity attempt (the SDK retries nothing itself)
    expect(fake.requests.filter((q) => q.path === '/v1/chat/completions').map((q) => q.status)).toEqual([503, 503, 503, 200]);
    const rows = await ledgerOf(workflowId);
    expect(rows.map((r) => [r.idempotency_key, r.status])).toEqual([
      [`${runId}:chat:1`, 'ok'],
      [`${runId}:embed:1`, 'ok'],
    ]);
  }, 60_000);

  it('honours Retry-After: after a 429 saying 600 s, the next attempt is scheduled 10 minutes later, not after the 1 s backoff', async () => {
    fake.script('chat', { kind: 'error', status: 429, retryAfter: '600' });
    const taskQueue = `${ctx.taskQueue}-openai-${randomUUID().slice(0, 8)}`;
    const workflowId = `cron-oa-429-${randomUUID().slice(0, 6)}-2026-11-02T09:00:00Z`;
    const input: TestRun = {
      taskId: 'oa-429',
      userId: 'u-openai',
      input: 'hi',
      model: 'openai/gpt-4o-mini',
      embeddingModel: 'openai/text-embedding-3-small',
    };
    const fleet = await startWorkers({ ...ctx, taskQueue }, 1, { provider: provider() });
    const pending = await fleet.runWhile(async () => {
      const handle = await ctx.client.workflow.start(scheduledRun, {
        args: [await appliedInput(ctx.operatorPool, input)],
        workflowId,
        taskQueue,
      });
      const callChat = async () => (await handle.describe()).raw.pendingActivities?.find((a) => a.activityType?.name === 'callChat');
      await waitFor(
        async () => Boolean((await callChat())?.nextAttemptScheduleTime),
        30_000,
        'the 429 to be recorded on the pending activity',
      );
      const activity = await callChat();
      await handle.terminate('test done');
      return activity!;
    });
    const seconds = (t: { seconds?: unknown } | null | undefined) => Number(t?.seconds ?? 0);
    const delay = seconds(pending.nextAttemptScheduleTime) - seconds(pending.lastAttemptCompleteTime);
    expect(seconds(pending.lastAttemptCompleteTime)).toBeGreaterThan(0);
    expect(pending.lastFailure?.message).toMatch(/429/);
    expect(delay).toBeGreaterThanOrEqual(595);
    expect(delay).toBeLessThan(660);
    expect(fake.requests.map((q) => q.status)).toEqual([429]);
  }, 60_000);

  it('a request the provider rejects for good (400) fails the run at once, with no ledger row and the run failed', async () => {
    fake.setDefault('chat', { kind: 'error', status: 400, message: 'model not found' });
    const { workflowId, error } = await runOnce(`oa-400-${randomUUID().slice(0, 6)}`);

    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(fake.requests.filter((q) => q.path === '/v1/chat/completions').map((q) => q.status)).toEqual([400]);
    expect(await ledgerOf(workflowId)).toHaveLength(0);
    const run = await ctx.pool.query<{ status: string; error: string }>('select status, error from runs where workflow_id = $1', [
      workflowId,
    ]);
    expect(run.rows.map((r) => r.status)).toEqual(['failed']);
    expect(run.rows[0].error).toMatch(/400/);
  }, 60_000);
});
