import { WorkflowFailedError } from '@temporalio/client';
import { randomUUID } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_TOKENS_PER_CALL } from '../src/constants';
import { costOfUsage, type CallKind } from '../src/ledger/cost';
import type { LedgerEntry } from '../src/ledger/entries';
import { applyPrices, listPrices, loadPricesFile, type PricesFile } from '../src/ledger/prices';
import { recordUsage, type UsageBooking } from '../src/ledger/record-usage';
import { InvalidUsageError } from '../src/ledger/validate-usage';
import { MockProvider } from '../src/models/mock-provider';
import type { ChatRequest, EmbeddingRequest, ModelProvider, TokenUsage } from '../src/models/provider';
import { costAtPerMillion, parseUsd, sumMoney, toAttoUsd, toExactString } from '../src/money';
import type { SimulateProfile } from '../src/models/simulate-profile';
import { scheduledRun, type ScheduledRunInput, type ScheduledRunResult } from '../src/workflows/scheduled-run';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { startWorkers } from './support/workers';

let ctx: TestContext;
const STANDARD_PRICES = fileURLToPath(new URL('../prices/standard.json', import.meta.url));

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.pool, loadPricesFile(STANDARD_PRICES), 'test');
});

afterAll(async () => ctx?.close());

const count = async (sql: string, params: unknown[] = []): Promise<string> =>
  (await ctx.pool.query<{ n: string }>(`select count(*) as n from (${sql}) q`, params)).rows[0].n;

const entriesOf = async (workflowId: string): Promise<LedgerEntry[]> =>
  (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where workflow_id = $1 order by idempotency_key', [workflowId])).rows;

/** A provider that counts calls before handing them to the mock. */
class CountingProvider implements ModelProvider {
  readonly name = 'counting-mock';
  calls = 0;
  private readonly inner = new MockProvider();
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
async function runScheduled(
  taskId: string,
  opts: { provider?: ModelProvider; model?: string; embeddingModel?: string; simulate?: SimulateProfile } = {},
) {
  const taskQueue = `${ctx.taskQueue}-ledger-${randomUUID().slice(0, 8)}`;
  const workflowId = `cron-${taskId}-2026-11-02T09:00:00Z`;
  const input: ScheduledRunInput = {
    taskId,
    userId: `user-${taskId}`,
    input: 'Summarise the overnight alerts and list the three most urgent.',
    model: opts.model ?? 'openai/gpt-4o-mini',
    embeddingModel: opts.embeddingModel ?? 'openai/text-embedding-3-small',
    ...(opts.simulate ? { simulate: opts.simulate } : {}),
  };
  const fleet = await startWorkers({ ...ctx, taskQueue }, 1, { provider: opts.provider ?? new MockProvider() });
  const outcome = await fleet.runWhile(async () => {
    const handle = await ctx.client.workflow.start(scheduledRun, { args: [input], workflowId, taskQueue });
    return handle.result().then(
      (result: ScheduledRunResult) => ({ result, error: undefined as unknown, runId: handle.firstExecutionRunId }),
      (error: unknown) => ({ result: undefined, error, runId: handle.firstExecutionRunId }),
    );
  });
  return { workflowId, ...outcome };
}

/** Every message and failure type down an error's cause chain (WorkflowFailedError → ActivityFailure → ApplicationFailure). */
function causeChain(err: unknown): { messages: string[]; types: string[] } {
  const messages: string[] = [];
  const types: string[] = [];
  for (let e = err as { message?: string; type?: string; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (e.message) messages.push(e.message);
    if (e.type) types.push(e.type);
  }
  return { messages, types };
}

// ---------------------------------------------------------------------------------------------------------------
// Exactness
// ---------------------------------------------------------------------------------------------------------------

/** mulberry32: a seeded 32-bit PRNG, so the 100,000 rows are the same every run. Integers only (counts, indices). */
function prng(seed: number) {
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
const randomPrice = (rand: (n: number) => number, maxWhole: number): string =>
  `${rand(maxWhole + 1)}.${Array.from({ length: 12 }, () => rand(10)).join('')}`;

/** Decimal string → integer units of 10^-18 USD, independent of money.ts: the plain BigInt cross-check. */
function atto(text: string): bigint {
  const m = /^(-?)(\d+)(?:\.(\d{0,18}))?$/.exec(text);
  if (!m) throw new Error(`not a ledger amount: ${text}`);
  const value = BigInt(m[2]) * 10n ** 18n + BigInt((m[3] ?? '').padEnd(18, '0'));
  return m[1] ? -value : value;
}

const ROWS = 100_000;
const BATCH = 10_000;
const EXACT_USER = 'exactness-user';

describe('exactness', () => {
  it(`SQL sum, Dinero sum and BigInt sum of ${ROWS.toLocaleString('en')} random entries agree to the last digit; a float sum does not`, async () => {
    const started = performance.now();
    const rand = prng(20261102);

    // Several price versions of a chat and an embedding model, with awkward 12-decimal prices.
    const versions = (model: string, kind: CallKind, n: number, day: string): PricesFile['versions'] =>
      Array.from({ length: n }, (_, i) => ({
        version: `x${i + 1}`,
        effectiveFrom: `2025-${String(1 + i * 2).padStart(2, '0')}-${day}T00:00:00Z`,
        models: {
          [model]:
            kind === 'chat'
              ? { input: randomPrice(rand, 9), cachedInput: randomPrice(rand, 4), output: randomPrice(rand, 40) }
              : { embeddingInput: randomPrice(rand, 1) },
        },
      }));
    const file: PricesFile = {
      currency: 'USD',
      unit: 'per_million_tokens',
      versions: [...versions('test/exact-chat', 'chat', 5, '01'), ...versions('test/exact-embed', 'embedding', 3, '02')],
    };
    const applied = await applyPrices(ctx.pool, file, 'exactness test');
    expect(applied.added).toHaveLength(8);

    // Draw each row's price version from the table itself, as PostgreSQL returns it.
    const table = (await listPrices(ctx.pool)).filter((p) => p.model.startsWith('test/exact-'));
    expect(table).toHaveLength(8);

    const cols = {
      key: [] as string[],
      run: [] as string[],
      model: [] as string[],
      kind: [] as string[],
      prompt: [] as number[],
      cached: [] as number[],
      completion: [] as number[],
      reasoning: [] as number[],
      cost: [] as string[],
      version: [] as string[],
      at: [] as string[],
    };
    let expected = 0n;
    for (let i = 0; i < ROWS; i++) {
      const price = table[rand(table.length)];
      const kind: CallKind = price.embedding_input_per_million === null ? 'chat' : 'embedding';
      const promptTokens = rand(2_000_001);
      const completionTokens = kind === 'chat' ? rand(500_001) : 0;
      const usage: TokenUsage = {
        promptTokens,
        cachedPromptTokens: kind === 'chat' && rand(3) === 0 ? rand(promptTokens + 1) : 0,
        completionTokens,
        reasoningTokens: completionTokens > 0 && rand(4) === 0 ? rand(completionTokens + 1) : 0,
      };
      const at = new Date(price.effective_from.getTime() + rand(86_400_000));
      const cost = costOfUsage(kind, usage, price, at);
      expected += toAttoUsd(cost);
      cols.key.push(`exact:${i}`);
      cols.run.push(`exact-run-${i % 997}`);
      cols.model.push(price.model);
      cols.kind.push(kind);
      cols.prompt.push(usage.promptTokens);
      cols.cached.push(usage.cachedPromptTokens);
      cols.completion.push(usage.completionTokens);
      cols.reasoning.push(usage.reasoningTokens);
      cols.cost.push(toExactString(cost));
      cols.version.push(price.version);
      cols.at.push(at.toISOString());
    }
    const generated = performance.now();

    // Bulk insert: one unnest() insert per batch of 10,000 rows.
    for (let from = 0; from < ROWS; from += BATCH) {
      const slice = <T>(a: T[]) => a.slice(from, from + BATCH);
      await ctx.pool.query(
        `insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, model, kind, status, attempt, prompt_tokens,
                                   cached_prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, price_version,
                                   worker_id, created_at)
         select k, 'usage', $1, r, m, kd, 'ok', 1, pt, cpt, ct, rt, c, pv, 'exactness', at
           from unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[], $8::int8[], $9::int8[],
                       $10::numeric[], $11::text[], $12::timestamptz[]) as t(k, r, m, kd, pt, cpt, ct, rt, c, pv, at)`,
        [EXACT_USER, slice(cols.key), slice(cols.run), slice(cols.model), slice(cols.kind), slice(cols.prompt), slice(cols.cached),
          slice(cols.completion), slice(cols.reasoning), slice(cols.cost), slice(cols.version), slice(cols.at)],
      );
    }
    const inserted = performance.now();

    const sql = await ctx.pool.query<{ total: string; n: string }>(
      'select sum(cost_usd)::text as total, count(*) as n from usage_ledger where user_id = $1',
      [EXACT_USER],
    );
    const { rows } = await ctx.pool.query<{ cost_usd: string }>('select cost_usd from usage_ledger where user_id = $1', [EXACT_USER]);
    expect(sql.rows[0].n).toBe(String(ROWS));
    expect(rows).toHaveLength(ROWS);

    const sqlTotal = sql.rows[0].total;
    const dineroTotal = toExactString(sumMoney(rows.map((r) => parseUsd(r.cost_usd))));
    const bigintTotal = rows.reduce((sum, r) => sum + atto(r.cost_usd), 0n);

    expect(dineroTotal).toBe(sqlTotal); // same text, all 18 fractional digits
    expect(atto(sqlTotal)).toBe(bigintTotal);
    expect(toAttoUsd(parseUsd(dineroTotal))).toBe(bigintTotal);
    expect(bigintTotal).toBe(expected); // and what was computed before writing

    // The one float in the codebase, to prove the hazard: adding the same rows as JS numbers loses digits.
    let floatTotal = 0;
    for (const r of rows) floatTotal += Number(r.cost_usd);
    const floatAsDecimal = floatTotal.toFixed(18);
    expect(floatAsDecimal).not.toBe(sqlTotal);
    expect(atto(floatAsDecimal)).not.toBe(bigintTotal);

    const done = performance.now();
    console.log(
      `exactness: ${ROWS} rows, total ${sqlTotal} USD; float sum ${floatAsDecimal} (off by ${atto(floatAsDecimal) - bigintTotal} × 10^-18 USD); ` +
        `generate+price ${Math.round(generated - started)} ms, insert ${Math.round(inserted - generated)} ms, ` +
        `sum+check ${Math.round(done - inserted)} ms, total ${Math.round(done - started)} ms`,
    );
  }, 120_000);
});

// ---------------------------------------------------------------------------------------------------------------
// Booking through the real workflow
// ---------------------------------------------------------------------------------------------------------------

describe('booking model calls of a scheduled run', () => {
  it('one scheduledRun books exactly two usage rows, chat and embedding, keyed <temporal run id>:<step>:1', async () => {
    const { workflowId, runId, result, error } = await runScheduled(`ledger-one-${randomUUID().slice(0, 6)}`);
    expect(error).toBeUndefined();
    expect(result?.status).toBe('completed');

    const rows = await entriesOf(workflowId);
    expect(rows.map((r) => [r.idempotency_key, r.entry_type, r.kind, r.status, r.attempt, r.price_version])).toEqual([
      [`${runId}:chat:1`, 'usage', 'chat', 'ok', 1, 'v1'],
      [`${runId}:embed:1`, 'usage', 'embedding', 'ok', 1, 'v1'],
    ]);
    for (const r of rows) expect(toAttoUsd(parseUsd(r.cost_usd))).toBeGreaterThan(0n);
    // The cost on the row is the standard price applied to the row's own token counts.
    const [chat, embed] = rows;
    const chatCost = sumMoney([
      costAtPerMillion(parseUsd('0.15'), BigInt(chat.prompt_tokens) - BigInt(chat.cached_prompt_tokens)),
      costAtPerMillion(parseUsd('0.075'), BigInt(chat.cached_prompt_tokens)),
      costAtPerMillion(parseUsd('0.60'), BigInt(chat.completion_tokens)),
    ]);
    expect(chat.cost_usd).toBe(toExactString(chatCost));
    expect(embed.cost_usd).toBe(toExactString(costAtPerMillion(parseUsd('0.02'), BigInt(embed.prompt_tokens))));
    expect(result?.chatCostUsd).toBe(chat.cost_usd);
  }, 60_000);

  it('failFirstAttempts: 1 books attempt 1 as failed and attempt 2 as ok for each call, all billed', async () => {
    const { workflowId, runId, result, error } = await runScheduled(`ledger-retry-${randomUUID().slice(0, 6)}`, {
      simulate: { failFirstAttempts: 1, promptTokens: 1234, completionTokens: 321, embeddingTokens: 77 },
    });
    expect(error).toBeUndefined();
    expect(result?.status).toBe('completed');

    const rows = await entriesOf(workflowId);
    expect(rows.map((r) => [r.idempotency_key, r.status, r.attempt])).toEqual([
      [`${runId}:chat:1`, 'failed', 1],
      [`${runId}:chat:2`, 'ok', 2],
      [`${runId}:embed:1`, 'failed', 1],
      [`${runId}:embed:2`, 'ok', 2],
    ]);
    for (const r of rows) expect(toAttoUsd(parseUsd(r.cost_usd))).toBeGreaterThan(0n);
    // 1234 × 0.15 + 321 × 0.60 per million; 77 × 0.02 per million. The failed attempt cost the same as the good one.
    expect(rows.map((r) => r.cost_usd)).toEqual([
      '0.000377700000000000',
      '0.000377700000000000',
      '0.000001540000000000',
      '0.000001540000000000',
    ]);
    // Distinct provider requests: each attempt was a separate billed call.
    expect(new Set(rows.map((r) => r.provider_request_id)).size).toBe(4);
  }, 60_000);

  it('an unpriced model fails the run with NoPriceError before any call: no provider call, no ledger row, run failed', async () => {
    const provider = new CountingProvider();
    const { workflowId, error } = await runScheduled(`ledger-noprice-${randomUUID().slice(0, 6)}`, {
      provider,
      model: 'openai/gpt-imaginary-9',
    });

    expect(error).toBeInstanceOf(WorkflowFailedError);
    const chain = causeChain(error);
    expect(chain.types).toContain('NoPriceError');
    expect(chain.messages.join('\n')).toMatch(/no price in force for model "openai\/gpt-imaginary-9"/);
    expect(provider.calls).toBe(0);
    expect(await entriesOf(workflowId)).toHaveLength(0);
    const run = await ctx.pool.query<{ status: string; error: string }>('select status, error from runs where workflow_id = $1', [workflowId]);
    expect(run.rows).toHaveLength(1);
    expect(run.rows[0].status).toBe('failed');
    expect(run.rows[0].error).toMatch(/openai\/gpt-imaginary-9/);
  }, 60_000);

  it('a model priced only for another kind of call (an embedding model used for chat) is refused before any call too', async () => {
    const provider = new CountingProvider();
    const { workflowId, error } = await runScheduled(`ledger-wrongkind-${randomUUID().slice(0, 6)}`, {
      provider,
      model: 'openai/text-embedding-3-small',
    });

    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(causeChain(error).types).toContain('NoPriceError');
    expect(causeChain(error).messages.join('\n')).toMatch(/no input price \(version v1\) in force for model "openai\/text-embedding-3-small"/);
    expect(provider.calls).toBe(0);
    expect(await entriesOf(workflowId)).toHaveLength(0);
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------------------------
// recordUsage directly
// ---------------------------------------------------------------------------------------------------------------

const booking = (over: Partial<UsageBooking> = {}): UsageBooking => ({
  runId: `direct-${randomUUID()}`,
  step: 'chat',
  attempt: 1,
  userId: 'direct-user',
  taskId: null,
  model: 'openai/gpt-4o-mini',
  kind: 'chat',
  status: 'ok',
  usage: { promptTokens: 1000, cachedPromptTokens: 0, completionTokens: 100, reasoningTokens: 0 },
  providerModel: 'gpt-4o-mini',
  providerRequestId: null,
  workerId: 'test',
  ...over,
});

describe('recordUsage', () => {
  it('booking the same call twice (one after the other, and racing) yields one row', async () => {
    const b = booking();
    const first = await recordUsage(ctx.pool, b);
    const second = await recordUsage(ctx.pool, b);
    expect(second.id).toBe(first.id);
    expect(await count('select 1 from usage_ledger where run_id = $1', [b.runId])).toBe('1');

    const c = booking();
    const raced = await Promise.all([recordUsage(ctx.pool, c), recordUsage(ctx.pool, c), recordUsage(ctx.pool, c)]);
    expect(new Set(raced.map((r) => r.id)).size).toBe(1);
    expect(await count('select 1 from usage_ledger where run_id = $1', [c.runId])).toBe('1');
  });

  it('a price change mid-month: the old row keeps its cost and version, the new row uses the new version', async () => {
    const model = 'test/midmonth-model';
    const v1 = { version: 'v1', effectiveFrom: '2026-11-01T00:00:00Z', models: { [model]: { input: '0.40', output: '1.60' } } };
    const v2 = { version: 'v2', effectiveFrom: '2026-11-15T00:00:00Z', models: { [model]: { input: '0.25', cachedInput: '0.125', output: '1.00' } } };
    await applyPrices(ctx.pool, { currency: 'USD', unit: 'per_million_tokens', versions: [v1] }, 'test');

    const usage = { promptTokens: 10_000, cachedPromptTokens: 2_000, completionTokens: 3_000, reasoningTokens: 0 };
    const before = await recordUsage(ctx.pool, booking({ model, usage, occurredAt: new Date('2026-11-10T12:00:00Z') }));
    // v1 has no cached rate, so cached tokens are billed at input: 10,000 × 0.40 + 3,000 × 1.60 per million.
    expect(before.price_version).toBe('v1');
    expect(before.cost_usd).toBe('0.008800000000000000');

    const both = await applyPrices(ctx.pool, { currency: 'USD', unit: 'per_million_tokens', versions: [v1, v2] }, 'test');
    expect(both.unchanged).toEqual([{ model, version: 'v1' }]);
    expect(both.added).toEqual([{ model, version: 'v2' }]);

    const after = await recordUsage(ctx.pool, booking({ model, usage, occurredAt: new Date('2026-11-20T12:00:00Z') }));
    // 8,000 × 0.25 + 2,000 × 0.125 + 3,000 × 1.00 per million
    expect(after.price_version).toBe('v2');
    expect(after.cost_usd).toBe('0.005250000000000000');

    const reread = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where id = $1', [before.id])).rows[0];
    expect(reread.cost_usd).toBe('0.008800000000000000');
    expect(reread.price_version).toBe('v1');
    // A late entry for a moment before v2 still gets v1: the price in force when the usage happened.
    const late = await recordUsage(ctx.pool, booking({ model, usage, occurredAt: new Date('2026-11-14T23:59:59Z') }));
    expect(late.price_version).toBe('v1');
  });

  const bad: [string, Partial<TokenUsage>][] = [
    ['negative', { promptTokens: -1 }],
    ['fractional', { completionTokens: 2.5 }],
    ['NaN', { promptTokens: Number.NaN }],
    ['infinite', { completionTokens: Number.POSITIVE_INFINITY }],
    ['absurdly large', { promptTokens: MAX_TOKENS_PER_CALL + 1 }],
    ['cached above prompt', { promptTokens: 10, cachedPromptTokens: 11 }],
  ];
  it.each(bad)('rejects %s token counts with InvalidUsageError and writes nothing', async (_what, wrong) => {
    const before = await count('select 1 from usage_ledger');
    const b = booking({ usage: { promptTokens: 100, cachedPromptTokens: 0, completionTokens: 10, reasoningTokens: 0, ...wrong } });
    await expect(recordUsage(ctx.pool, b)).rejects.toBeInstanceOf(InvalidUsageError);
    await expect(recordUsage(ctx.pool, { ...b, kind: 'embedding', model: 'openai/text-embedding-3-small' })).rejects.toThrow(
      /nothing was booked|exceeds/,
    );
    expect(await count('select 1 from usage_ledger')).toBe(before);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Append-only, and corrections through the CLI
// ---------------------------------------------------------------------------------------------------------------

describe('append-only ledger', () => {
  it('refuses UPDATE, DELETE and TRUNCATE with the append-only error even to the owner, and the row is untouched', async () => {
    // The application role is refused by privilege (test/grants.test.ts); the triggers are the second guard, which
    // holds even for the owner of the tables.
    const row = await recordUsage(ctx.pool, booking());
    const total = await count('select 1 from usage_ledger');
    const owner = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
    await owner.connect();
    try {
      await expect(owner.query(`update usage_ledger set cost_usd = 0 where id = $1`, [row.id])).rejects.toThrow(
        /usage_ledger is append-only: UPDATE is not allowed/,
      );
      await expect(owner.query('delete from usage_ledger where id = $1', [row.id])).rejects.toThrow(
        /usage_ledger is append-only: DELETE is not allowed/,
      );
      // A plain TRUNCATE is refused before any trigger runs, by PostgreSQL's check of the foreign keys that point at
      // the ledger from another table (rollup_pending.entry_id); with CASCADE the append-only trigger refuses it.
      await expect(owner.query('truncate usage_ledger')).rejects.toThrow(/cannot truncate a table referenced in a foreign key constraint/);
      await expect(owner.query('truncate usage_ledger cascade')).rejects.toThrow(/usage_ledger is append-only: TRUNCATE is not allowed/);
      await expect(owner.query('truncate model_prices')).rejects.toThrow(/model_prices is append-only: TRUNCATE is not allowed/);
    } finally {
      await owner.end();
    }
    const again = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where id = $1', [row.id])).rows[0];
    expect(again.cost_usd).toBe(row.cost_usd);
    expect(await count('select 1 from usage_ledger')).toBe(total);
  });

  it('ledger adjust and ledger credit append entries pointing at the original; the listing shows them', async () => {
    const original = await recordUsage(ctx.pool, booking({ userId: 'cli-user' }));

    const adjusted = await runCli(
      ['ledger', 'adjust', '--entry', original.id, '--amount', '-0.000000000000000001', '--reason', 'provider invoice was lower', '--json'],
      ctx.env,
    );
    expect(adjusted.stderr).toBe('');
    expect(adjusted.code).toBe(0);
    const adj = JSON.parse(adjusted.stdout).entry;
    expect(adj).toMatchObject({
      entryType: 'adjustment',
      originalEntryId: original.id,
      costUsd: '-0.000000000000000001',
      reason: 'provider invoice was lower',
      userId: 'cli-user',
      runId: original.run_id,
    });

    const credited = await runCli(
      ['ledger', 'credit', '--user', 'cli-user', '--amount', '5.00', '--reason', 'outage goodwill', '--entry', original.id, '--json'],
      ctx.env,
    );
    expect(credited.code).toBe(0);
    const credit = JSON.parse(credited.stdout).entry;
    expect(credit).toMatchObject({ entryType: 'credit', originalEntryId: original.id, costUsd: '-5.000000000000000000', userId: 'cli-user' });

    const listed = await runCli(['ledger', '--user', 'cli-user', '--json'], ctx.env);
    expect(listed.code).toBe(0);
    const entries = JSON.parse(listed.stdout).entries as { id: string; entryType: string; costUsd: string }[];
    expect(entries.map((e) => [e.id, e.entryType])).toEqual([
      [original.id, 'usage'],
      [adj.id, 'adjustment'],
      [credit.id, 'credit'],
    ]);
    // The user's net, exact: the usage minus 1e-18 minus 5.
    const net = sumMoney(entries.map((e) => parseUsd(e.costUsd)));
    expect(toAttoUsd(net)).toBe(toAttoUsd(parseUsd(original.cost_usd)) - 1n - 5n * 10n ** 18n);
    // The original is as it was.
    const reread = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where id = $1', [original.id])).rows[0];
    expect(reread.cost_usd).toBe(original.cost_usd);

    const table = await runCli(['ledger', '--run', original.run_id as string], ctx.env);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/ID\s+CREATED\s+TYPE\s+USER\s+RUN\s+MODEL\s+KIND\s+STATUS\s+ATTEMPT\s+TOKENS\s+COST/);
    const adjustmentLine = table.stdout.split('\n').find((l) => l.startsWith(`${adj.id} `) || l.trimStart().startsWith(`${adj.id} `));
    expect(adjustmentLine).toContain(`adjustment→${original.id}`);
    expect(adjustmentLine).toMatch(/ \$0\.000000$/); // the -1e-18 adjustment, rounded half-even only for display
  }, 60_000);

  it.each([
    ['adjust', 'abc', /--amount "abc" is not a decimal number/],
    ['adjust', '1e-3', /--amount "1e-3" is not a decimal number/],
    ['adjust', '0.0000000000000000001', /--amount .* 19 fractional digits/],
    ['credit', '-5', /must be positive/],
    ['credit', '$5', /--amount "\$5" is not a decimal number/],
  ])('ledger %s with --amount %s fails with a clear message and writes nothing', async (sub, amount, message) => {
    const original = await recordUsage(ctx.pool, booking({ userId: 'cli-bad' }));
    const before = await count('select 1 from usage_ledger');
    const args =
      sub === 'adjust'
        ? ['ledger', 'adjust', '--entry', original.id, `--amount=${amount}`, '--reason', 'typo']
        : ['ledger', 'credit', '--user', 'cli-bad', `--amount=${amount}`, '--reason', 'typo'];
    const r = await runCli(args, ctx.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /); // a message, not a stack trace
    expect(await count('select 1 from usage_ledger')).toBe(before);
  }, 30_000);

  it('ledger adjust of an entry that does not exist says so and writes nothing', async () => {
    const before = await count('select 1 from usage_ledger');
    const r = await runCli(['ledger', 'adjust', '--entry', '999999999', '--amount', '1', '--reason', 'x'], ctx.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/ledger entry 999999999 does not exist/);
    expect(await count('select 1 from usage_ledger')).toBe(before);
  }, 30_000);
});

describe('prices CLI', () => {
  it('apply reports unchanged versions, refuses an edited one, and list prints exact decimal strings', async () => {
    const again = await runCli(['prices', 'apply', STANDARD_PRICES], ctx.env);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/unchanged\s+openai\/gpt-4o-mini v1/);
    expect(again.stdout).toMatch(/0 added, 2 unchanged/);

    const dir = await mkdtemp(join(tmpdir(), 'cronledger-prices-'));
    const edited = join(dir, 'edited.json');
    const file = loadPricesFile(STANDARD_PRICES);
    file.versions[0].models['openai/gpt-4o-mini'].input = '0.10';
    await writeFile(edited, JSON.stringify(file));
    const refused = await runCli(['prices', 'apply', edited], ctx.env);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/price version "v1" of openai\/gpt-4o-mini already exists with different prices/);

    const added = join(dir, 'v2.json');
    await writeFile(
      added,
      JSON.stringify({
        currency: 'USD',
        unit: 'per_million_tokens',
        versions: [{ version: 'cli-v1', effectiveFrom: '2027-01-01T00:00:00Z', models: { 'test/cli-model': { input: '0.000000000001', output: '123.456' } } }],
      }),
    );
    const applied = await runCli(['prices', 'apply', added, '--json'], ctx.env);
    expect(applied.code).toBe(0);
    expect(JSON.parse(applied.stdout)).toEqual({ added: [{ model: 'test/cli-model', version: 'cli-v1' }], unchanged: [] });

    const listed = await runCli(['prices', 'list', '--json'], ctx.env);
    expect(listed.code).toBe(0);
    const prices = JSON.parse(listed.stdout).prices as Record<string, unknown>[];
    expect(prices).toContainEqual(
      expect.objectContaining({ model: 'openai/gpt-4o-mini', version: 'v1', inputPerMillion: '0.15', cachedInputPerMillion: '0.075', outputPerMillion: '0.6' }),
    );
    expect(prices).toContainEqual(
      expect.objectContaining({ model: 'test/cli-model', inputPerMillion: '0.000000000001', outputPerMillion: '123.456', embeddingInputPerMillion: null }),
    );
    const table = await runCli(['prices', 'list'], ctx.env);
    expect(table.stdout).toMatch(/openai\/text-embedding-3-small\s+v1\s+2024-07-18T00:00:00.000Z/);
  }, 60_000);
});
