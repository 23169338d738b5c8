import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reserveBudget } from '../src/budgets/reserve';
import { applyBudgets } from '../src/budgets/budgets-store';
import { worstCaseOf } from '../src/budgets/worst-case';
import { MAX_TOKENS_PER_CALL } from '../src/constants';
import { bookingLags } from '../src/ledger/entries';
import { refuseUnpricedCall } from '../src/ledger/price-check';
import { applyPrices, loadPricesFile, NoPriceError, priceInForce, type PricesFile } from '../src/ledger/prices';
import { bookCallAndCompleteRun, LedgerConflictError, recordUsage } from '../src/ledger/record-usage';
import { claimRun } from '../src/db/runs';
import { stageEmbedding } from '../src/db/memories';
import { fullUsage, type TokenUsage } from '../src/models/provider';
import type { TestContext } from './support/context';
import { oracleCost, oracleCostAt, oracleWorstCase } from './support/cost-oracle';
import { atto, booking, ledgerContext, prng, randomPrice } from './support/ledger';

/**
 * The booking path is one statement (book_usage): the price lookup and the cost are SQL, the only place the cost rule
 * lives. Its cost must be the tests' independent oracle's (test/support/cost-oracle.ts) to the last of the 18 digits,
 * for every kind of price and count; its errors must stay the UserErrors the worker relies on; and
 * the row records when the booking committed, which the admin page's booking-lag histogram measures to.
 */

let ctx: TestContext;
beforeAll(async () => {
  ctx = await ledgerContext(import.meta.url);
});
afterAll(async () => ctx?.close());

/** A pool stand-in that counts the statements sent through it (each pool.query is one round trip). */
const counting = (pool: pg.Pool) => {
  const sent: string[] = [];
  const db = {
    query: (...args: Parameters<pg.Pool['query']>) => {
      const q = args[0] as string | { text: string };
      sent.push(typeof q === 'string' ? q : q.text);
      return (pool.query as (...a: unknown[]) => unknown)(...args);
    },
  } as unknown as pg.Pool;
  return { db, sent };
};

describe('book_usage', () => {
  it('costs every booking exactly as the oracle does: 600 varied usages over chat prices with and without a cached rate, embeddings, up to the largest counts', async () => {
    const rand = prng(20261201);
    // chat versions with a cached rate, without one (cached prompt then costs input), and embedding versions; prices from
    // fractions of a cent to six-figure whole parts, at 12 fractional digits or at a few
    const models: PricesFile['versions'][number]['models'] = {};
    for (let i = 0; i < 6; i++) {
      const whole = [0, 1, 9, 99, 9999, 999_999][i];
      models[`test/chat-cached-${i}`] = {
        input: randomPrice(rand, whole),
        cachedInput: randomPrice(rand, whole),
        output: randomPrice(rand, whole),
      };
      models[`test/chat-plain-${i}`] = { input: `${rand(whole + 1)}.${rand(100)}`, output: randomPrice(rand, whole) };
      models[`test/embed-${i}`] = { embeddingInput: randomPrice(rand, whole) };
    }
    const at = new Date('2026-06-15T12:00:00.123Z');
    await applyPrices(
      ctx.operatorPool,
      { currency: 'USD', unit: 'per_million_tokens', versions: [{ version: 'p1', effectiveFrom: '2026-06-01T00:00:00Z', models }] },
      'test',
    );

    const count = (): number => {
      const shape = rand(5);
      if (shape === 0) return 0;
      if (shape === 1) return MAX_TOKENS_PER_CALL - rand(3);
      return rand([100, 10_000, 1_000_000][shape - 2] + 1);
    };
    const names = Object.keys(models);
    const planned = Array.from({ length: 600 }, (_, i) => {
      const model = names[i % names.length];
      const kind = model.startsWith('test/embed') ? ('embedding' as const) : ('chat' as const);
      const promptTokens = count();
      const completionTokens = kind === 'chat' ? count() : 0;
      const usage: TokenUsage = fullUsage({
        promptTokens,
        cachedPromptTokens: kind === 'chat' && rand(2) === 0 ? (rand(3) === 0 ? promptTokens : rand(promptTokens + 1)) : 0,
        completionTokens,
        reasoningTokens: completionTokens > 0 ? rand(completionTokens + 1) : 0,
      });
      return { i, model, kind, usage };
    });

    const mismatches: string[] = [];
    for (let from = 0; from < planned.length; from += 10) {
      await Promise.all(
        planned.slice(from, from + 10).map(async (p) => {
          const row = await recordUsage(
            ctx.ownerPool,
            booking({ runId: `cost-${p.i}`, model: p.model, kind: p.kind, usage: p.usage, occurredAt: at }),
          );
          const price = await priceInForce(ctx.pool, p.model, at);
          const expected = oracleCost(p.kind, p.usage, price);
          if (atto(row.cost_usd) !== expected || row.price_version !== price.version) {
            mismatches.push(`${p.model} ${JSON.stringify(p.usage)}: SQL ${row.cost_usd}, oracle ${expected} × 10^-18`);
          }
        }),
      );
    }
    expect(mismatches).toEqual([]);
    // the largest counts were booked, at the largest prices (a figure of 20 whole digits fits numeric(38, 18))
    const { rows } = await ctx.pool.query<{ max: string }>(
      `select max(cost_usd)::text as max from usage_ledger where run_id like 'cost-%'`,
    );
    expect(atto(rows[0].max)).toBeGreaterThan(10n ** 18n * 1_000_000n);
  });

  it('is one round trip, and a retried booking returns the row already there', async () => {
    const { db, sent } = counting(ctx.pool);
    const b = booking({ runId: 'one-trip' });
    const first = await recordUsage(db, b);
    expect(sent).toHaveLength(1);
    const again = await recordUsage(db, b);
    expect(sent).toHaveLength(2);
    expect(again.id).toBe(first.id);
    expect(oracleCost('chat', b.usage, await priceInForce(ctx.pool, b.model, first.created_at))).toBe(atto(first.cost_usd));
  });

  it('keeps NoPriceError (a UserError) for a model without a price and for a price class the version lacks, with the same message', async () => {
    const at = new Date('2026-06-15T12:00:00.456Z');
    const unpriced = recordUsage(ctx.ownerPool, booking({ runId: 'no-price', model: 'test/unpriced', occurredAt: at }));
    await expect(unpriced).rejects.toThrow(NoPriceError);
    await expect(unpriced).rejects.toThrow(new NoPriceError('test/unpriced', at).message);
    // an embedding model used for chat: its version has no input price
    const wrongKind = recordUsage(ctx.ownerPool, booking({ runId: 'wrong-kind', model: 'test/embed-0', occurredAt: at }));
    await expect(wrongKind).rejects.toThrow(new NoPriceError('test/embed-0', at, 'input price (version p1)').message);
    // before the first version took effect
    const early = new Date('2026-05-31T23:59:59.999Z');
    await expect(
      recordUsage(ctx.ownerPool, booking({ runId: 'early', model: 'test/embed-0', kind: 'embedding', occurredAt: early })),
    ).rejects.toThrow(new NoPriceError('test/embed-0', early).message);
    const { rows } = await ctx.pool.query(`select 1 from usage_ledger where run_id in ('no-price', 'wrong-kind', 'early')`);
    expect(rows).toEqual([]);
  });
});

describe("a run's last booking, with its completion", () => {
  /** A claimed run whose embed call (attempt 1) staged its vector: what the completing booking books and closes. */
  const claimedRun = async (name: string) => {
    const runId = `${name}-${randomUUID().slice(0, 8)}`;
    const workflowId = `cron-${runId}-2026-11-02T09:00:00Z`;
    const idempotencyKey = `cron:${runId}:2026-11-02T09:00Z`;
    const who = { workflowId, taskId: runId, userId: 'completing-user' };
    await claimRun(ctx.pool, { ...who, idempotencyKey, temporalRunId: runId, scheduledMinute: '2026-11-02T09:00Z', workerId: 'test' });
    await stageEmbedding(ctx.pool, `${runId}:embed:1`, [0.5, -0.25]);
    const call = booking({ ...who, runId, step: 'embed', kind: 'embedding', model: 'openai/text-embedding-3-small' });
    const completion = { idempotencyKey, temporalRunId: runId, status: 'completed' as const, tier: 'default' as const };
    const memory = { ...who, temporalRunId: runId, content: 'the reply', embeddingKey: `${runId}:embed:1` };
    const state = async () => ({
      run: (await ctx.pool.query('select status, tier from runs where idempotency_key = $1', [idempotencyKey])).rows,
      ledger: (await ctx.pool.query('select kind from usage_ledger where run_id = $1', [runId])).rows,
      memories: (await ctx.ownerPool.query('select content, embedding from memories where temporal_run_id = $1', [runId])).rows,
    });
    return { runId, call, completion, memory, state };
  };

  it('books, stores the memory and closes the claim in one round trip; run again, it repeats none of them', async () => {
    const { call, completion, memory, state } = await claimedRun('completes');
    const { db, sent } = counting(ctx.pool);
    const first = await bookCallAndCompleteRun(db, call, completion, memory);
    expect(sent).toHaveLength(1);
    expect(await bookCallAndCompleteRun(db, call, completion, memory)).toEqual(first);
    expect(await state()).toEqual({
      run: [{ status: 'completed', tier: 'default' }],
      ledger: [{ kind: 'embedding' }],
      memories: [{ content: 'the reply', embedding: [0.5, -0.25] }],
    });
  });

  it('leaves the run open when the key is booked for another call (LedgerConflictError) or no price books it (NoPriceError)', async () => {
    const conflict = await claimedRun('conflict');
    await recordUsage(ctx.pool, { ...conflict.call, providerRequestId: 'another-request' });
    await expect(bookCallAndCompleteRun(ctx.pool, conflict.call, conflict.completion, conflict.memory)).rejects.toThrow(
      LedgerConflictError,
    );
    expect(await conflict.state()).toEqual({ run: [{ status: 'running', tier: null }], ledger: [{ kind: 'embedding' }], memories: [] });

    const unpriced = await claimedRun('unpriced');
    const call = { ...unpriced.call, model: 'acme/never-priced' };
    await expect(bookCallAndCompleteRun(ctx.pool, call, unpriced.completion, unpriced.memory)).rejects.toThrow(NoPriceError);
    expect(await unpriced.state()).toEqual({ run: [{ status: 'running', tier: null }], ledger: [], memories: [] });
  });
});

describe('booking lag', () => {
  it('runs from usage_received_at to booked_at, the clock of the booking statement, not to created_at (the price instant)', async () => {
    const { rows: now } = await ctx.pool.query<{ received: Date; started: Date }>(
      `select now() - interval '10 seconds' as received, now() as started`,
    );
    // a late entry: priced as of a day earlier, received 10 s before this booking
    const occurredAt = new Date(now[0].started.getTime() - 86_400_000);
    const row = await recordUsage(
      ctx.ownerPool,
      booking({ runId: 'lagging', userId: 'lag-user', occurredAt, usageReceivedAt: now[0].received }),
    );
    expect(row.created_at).toEqual(occurredAt);
    expect(row.booked_at).not.toBeNull();
    expect(row.booked_at!.getTime()).toBeGreaterThanOrEqual(now[0].started.getTime());
    const { rows: lag } = await ctx.pool.query<{ lag_ms: string }>(
      `select round(extract(epoch from (booked_at - usage_received_at)) * 1000)::bigint::text as lag_ms from usage_ledger where id = $1`,
      [row.id],
    );
    expect(Number(lag[0].lag_ms)).toBeGreaterThanOrEqual(10_000);
    // the metric's source: this row's lag is there (the other rows of this file carry no usage_received_at)
    expect(await bookingLags(ctx.pool)).toEqual([{ lag_ms: lag[0].lag_ms, entries: '1' }]);
    // a booking without a back-dated instant: created_at (the statement's now) comes first, booked_at after it
    const plain = await recordUsage(ctx.ownerPool, booking({ runId: 'plain', userId: 'lag-user' }));
    expect(plain.booked_at!.getTime()).toBeGreaterThanOrEqual(plain.created_at.getTime());
  });
});

describe('reserve_budget', () => {
  it('decides and reserves in one round trip when the month row is free (a synchronous commit, no barrier), at the worst case the oracle gives', async () => {
    await applyBudgets(ctx.operatorPool, { budgets: [{ userId: 'one-trip-user', monthlyLimitUsd: '100', timeZone: 'UTC' }] }, 'test');
    const worst = worstCaseOf({ prompt: 'Summarise the day.', maxOutputTokens: 512 });
    const { db, sent } = counting(ctx.pool);
    const decision = await reserveBudget(db, {
      userId: 'one-trip-user',
      runId: 'reserve-one-trip',
      workflowId: 'wf',
      calls: [
        { step: 'chat', attempt: 1, kind: 'chat', model: 'openai/gpt-4o-mini', worstCase: worst.chat },
        { step: 'embed', attempt: 1, kind: 'embedding', model: 'openai/text-embedding-3-small', worstCase: worst.embedding },
      ],
      mayDowngrade: true,
      expirySeconds: 600,
    });
    // one round trip: the decision commits synchronously, durable as it returns (test/decision-durability.test.ts)
    expect(sent).toHaveLength(1);
    expect(sent[0]).toContain('reserve_budget(');
    expect(decision.tier).toBe('default');
    const now = new Date();
    const expected =
      oracleCost('chat', worst.chat, await priceInForce(ctx.pool, 'openai/gpt-4o-mini', now)) +
      oracleCost('embedding', worst.embedding, await priceInForce(ctx.pool, 'openai/text-embedding-3-small', now));
    expect(atto(decision.worstCaseUsd)).toBe(expected);
  });
});

describe('the worst case of a priced tier', () => {
  const sonnet = loadPricesFile('prices/standard.json').versions.find((v) => v.version === 'v3')!.models['anthropic/claude-sonnet-4-5'];
  const decide = async (runId: string, promptTokens: number, completionTokens: number, serviceTier: string | null) => {
    await applyBudgets(ctx.operatorPool, { budgets: [{ userId: 'tier-user', monthlyLimitUsd: '1000', timeZone: 'UTC' }] }, 'test');
    return reserveBudget(ctx.pool, {
      userId: 'tier-user',
      runId,
      workflowId: runId,
      calls: [
        {
          step: 'chat',
          attempt: 1,
          kind: 'chat',
          model: 'anthropic/claude-sonnet-4-5',
          worstCase: fullUsage({ promptTokens, completionTokens, serviceTier }),
        },
      ],
      mayDowngrade: false,
      expirySeconds: 600,
    });
  };

  it.each([
    ['standard, every prompt token at the 1-hour cache write', 1_000, 500, null],
    ['batch, every prompt token at its 5-minute cache write', 1_000, 500, 'batch'],
    ['above 200,000 prompt tokens, the dearer context (long)', 250_000, 4_000, null],
    ['a prompt just above the threshold, the dearer context', 200_001, 64_000, 'standard'],
  ])("%s: the oracle's worst case, and no split of that prompt books more", async (_what, prompt, completion, tier) => {
    const decision = await decide(`worst-${prompt}-${tier}`, prompt, completion, tier);
    const worst = oracleWorstCase('chat', prompt, completion, tier, sonnet);
    expect(atto(decision.worstCaseUsd)).toBe(worst);
    // every way the provider can bill that prompt (any prompt up to it, any cache split, reply up to the cap) costs no more
    const rand = prng(prompt + completion);
    for (let i = 0; i < 500; i++) {
      const promptTokens = i === 0 ? prompt : rand(prompt + 1);
      const cachedPromptTokens = rand(promptTokens + 1);
      const cacheWrite5mTokens = rand(promptTokens - cachedPromptTokens + 1);
      const cacheWrite1hTokens = i % 2 === 0 ? promptTokens - cachedPromptTokens - cacheWrite5mTokens : 0;
      const usage = fullUsage({
        promptTokens,
        cachedPromptTokens,
        cacheWrite5mTokens,
        cacheWrite1hTokens,
        completionTokens: completion,
        serviceTier: tier,
      });
      expect(oracleCostAt('chat', usage, sonnet)).toBeLessThanOrEqual(worst);
    }
    // all of it written to the 1-hour cache (standard) is exactly the worst case below the threshold
    if (prompt <= 200_000 && tier === null) {
      expect(
        oracleCostAt('chat', fullUsage({ promptTokens: prompt, cacheWrite1hTokens: prompt, completionTokens: completion }), sonnet),
      ).toBe(worst);
    }
  });

  it('refuses a tier the version gives no rates for, naming it, before any call', async () => {
    await expect(decide('worst-flex', 1_000, 500, 'flex')).rejects.toThrow(
      /no flex tier input price \(version v3\) in force for model "anthropic\/claude-sonnet-4-5"/,
    );
    await expect(refuseUnpricedCall(ctx.pool, 'anthropic/claude-sonnet-4-5', 'chat', 'priority')).rejects.toThrow(
      /no priority tier input price \(version v3\)/,
    );
    await expect(refuseUnpricedCall(ctx.pool, 'anthropic/claude-sonnet-4-5', 'chat', 'batch')).resolves.toMatchObject({ version: 'v3' });
  });
});
