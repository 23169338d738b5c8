import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { LedgerEntry } from '../../src/ledger/entries';
import { applyPrices, loadPricesFile } from '../../src/ledger/prices';
import type { UsageBooking } from '../../src/ledger/record-usage';
import { MockProvider } from '../../src/models/mock-provider';
import { fullUsage, type ChatRequest, type EmbeddingRequest, type ModelProvider } from '../../src/models/provider';
import type { SimulateProfile } from '../../src/models/simulate-profile';
import { scheduledRun, type ScheduledRunResult } from '../../src/workflows/scheduled-run';
import { appliedInput, type TestRun } from './applied';
import { createTestContext, type TestContext } from './context';
import { startWorkers } from './workers';

// Helpers shared by the ledger test files (exactness, retries, prices, append-only, bad input).

export const STANDARD_PRICES = fileURLToPath(new URL('../../prices/standard.json', import.meta.url));

export const count = async (ctx: TestContext, sql: string, params: unknown[] = []): Promise<string> =>
  (await ctx.pool.query<{ n: string }>(`select count(*) as n from (${sql}) q`, params)).rows[0].n;

/** Every ledger row of a slot (all its executions), in key order. */
export const entriesOf = async (ctx: TestContext, workflowId: string): Promise<LedgerEntry[]> =>
  (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where workflow_id = $1 order by idempotency_key', [workflowId])).rows;

/** A provider that counts calls before handing them to the mock (or to `inner`). */
export class CountingProvider implements ModelProvider {
  readonly name = 'counting-mock';
  calls = 0;
  constructor(private readonly inner: ModelProvider = new MockProvider()) {}
  chat(r: ChatRequest) {
    this.calls++;
    return this.inner.chat(r);
  }
  embed(r: EmbeddingRequest) {
    this.calls++;
    return this.inner.embed(r);
  }
}

/** Starts one scheduledRun on a fresh task queue with a real worker, waits for it, and returns result or failure. */
export async function runScheduled(
  ctx: TestContext,
  taskId: string,
  opts: {
    provider?: ModelProvider;
    model?: string;
    embeddingModel?: string;
    simulate?: SimulateProfile;
    input?: string;
    maxOutputTokens?: number;
  } = {},
) {
  const taskQueue = `${ctx.taskQueue}-ledger-${randomUUID().slice(0, 8)}`;
  const workflowId = `cron-${taskId}-2026-11-02T09:00:00Z`;
  const input: TestRun = {
    taskId,
    userId: `user-${taskId}`,
    input: opts.input ?? 'Summarise the overnight alerts and list the three most urgent.',
    model: opts.model ?? 'openai/gpt-4o-mini',
    embeddingModel: opts.embeddingModel ?? 'openai/text-embedding-3-small',
    ...(opts.simulate ? { simulate: opts.simulate } : {}),
    ...(opts.maxOutputTokens === undefined ? {} : { maxOutputTokens: opts.maxOutputTokens }),
  };
  const fleet = await startWorkers({ ...ctx, taskQueue }, 1, { provider: opts.provider ?? new MockProvider() });
  const outcome = await fleet.runWhile(async () => {
    const handle = await ctx.client.workflow.start(scheduledRun, {
      args: [await appliedInput(ctx.operatorPool, input)],
      workflowId,
      taskQueue,
    });
    return handle.result().then(
      (result: ScheduledRunResult) => ({ result, error: undefined as unknown, runId: handle.firstExecutionRunId }),
      (error: unknown) => ({ result: undefined, error, runId: handle.firstExecutionRunId }),
    );
  });
  return { workflowId, ...outcome };
}

/** Every message and failure type down an error's cause chain (WorkflowFailedError → ActivityFailure → ApplicationFailure). */
export function causeChain(err: unknown): { messages: string[]; types: string[] } {
  const messages: string[] = [];
  const types: string[] = [];
  for (let e = err as { message?: string; type?: string; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (e.message) messages.push(e.message);
    if (e.type) types.push(e.type);
  }
  return { messages, types };
}

/** A booking of one chat call by a fresh execution; override what a test needs. */
export const booking = (over: Partial<UsageBooking> = {}): UsageBooking => ({
  runId: `direct-${randomUUID()}`,
  workflowId: 'cron-direct-2026-11-02T09:00:00Z',
  step: 'chat',
  attempt: 1,
  userId: 'direct-user',
  taskId: null,
  model: 'openai/gpt-4o-mini',
  kind: 'chat',
  status: 'ok',
  usage: fullUsage({ promptTokens: 1000, cachedPromptTokens: 0, completionTokens: 100, reasoningTokens: 0 }),
  providerModel: 'gpt-4o-mini',
  providerRequestId: null,
  workerId: 'test',
  ...over,
});

/** Decimal string → integer units of 10^-18 USD, independent of money.ts: the plain BigInt oracle. */
export function atto(text: string): bigint {
  const m = /^(-?)(\d+)(?:\.(\d{0,18}))?$/.exec(text);
  if (!m) throw new Error(`not a ledger amount: ${text}`);
  const value = BigInt(m[2]) * 10n ** 18n + BigInt((m[3] ?? '').padEnd(18, '0'));
  return m[1] ? -value : value;
}

/** A test context (its own database and namespace) with the standard prices applied. */
export async function ledgerContext(importMetaUrl: string): Promise<TestContext> {
  const ctx = await createTestContext(importMetaUrl);
  await applyPrices(ctx.operatorPool, loadPricesFile(STANDARD_PRICES), 'test');
  return ctx;
}

/** mulberry32: a seeded 32-bit PRNG, so the rows are the same every run. Integers only (counts, indices). */
export function prng(seed: number) {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  /** A uniform whole number in [0, n) for n up to 2^32, from two draws (no float arithmetic). */
  return (n: number): number => Number(((BigInt(next()) << 32n) | BigInt(next())) % BigInt(n));
}

/** A per-million price string with 12 fractional digits, so per-token prices use all 18 digits of cost_usd. */
export const randomPrice = (rand: (n: number) => number, maxWhole: number): string =>
  `${rand(maxWhole + 1)}.${Array.from({ length: 12 }, () => rand(10)).join('')}`;
