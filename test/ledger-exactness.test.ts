import { afterAll, beforeAll, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { LedgerEntry } from '../src/ledger/entries';
import { applyPrices, NoPriceError, type ModelPrices, type PricesFile, type Rates } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { fullUsage, type TokenUsage } from '../src/models/provider';
import { parseUsd, sumMoney, toExactString } from '../src/money';
import { createTestContext, type TestContext } from './support/context';
import { oracleCostAt } from './support/cost-oracle';
import { atto, booking, prng, randomPrice } from './support/ledger';

/**
 * Exactness. A few thousand random calls are booked through the real booking function (recordUsage: validation,
 * price lookup by time, the SQL cost, insert). Each row's cost is checked against an oracle that shares no code with
 * cronledger: plain BigInt arithmetic on the price strings of the test's own price table. Then the SQL sum, the Dinero
 * sum and the BigInt sum must agree to the last of the 18 digits, and a float sum is shown to be wrong.
 */

let ctx: TestContext;
beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
});
afterAll(async () => ctx?.close());

/** The oracle: a per-million price string → exact atto-USD per token (10^-18 USD), by BigInt only. */
function attoPerToken(perMillion: string): bigint {
  const perMillionAtto = atto(perMillion);
  if (perMillionAtto % 1_000_000n !== 0n) throw new Error(`${perMillion} per million is not exact per token at 18 digits`);
  return perMillionAtto / 1_000_000n;
}

const ROWS = 3_000;
const USER = 'exactness-user';

it(`${ROWS.toLocaleString('en')} random calls booked through recordUsage: every row's cost equals a BigInt oracle; SQL, Dinero and BigInt sums agree to the last digit; a float sum does not`, async () => {
  const rand = prng(20261102);
  type Version = { version: string; from: string; until: string; model: string; kind: 'chat' | 'embedding'; rates: Record<string, string> };
  // Several price versions of a chat and an embedding model, with awkward 12-decimal prices, each in force for a month.
  const versions: Version[] = [];
  for (let i = 0; i < 5; i++) {
    const rates = { input: randomPrice(rand, 9), cachedInput: randomPrice(rand, 4), output: randomPrice(rand, 40) };
    versions.push({
      version: `x${i + 1}`,
      from: `2025-0${i + 1}-01T00:00:00Z`,
      until: `2025-0${i + 2}-01T00:00:00Z`,
      model: 'test/exact-chat',
      kind: 'chat',
      rates,
    });
  }
  for (let i = 0; i < 3; i++) {
    const rates = { embeddingInput: randomPrice(rand, 1) };
    versions.push({
      version: `e${i + 1}`,
      from: `2025-0${i + 1}-01T00:00:00Z`,
      until: `2025-0${i + 2}-01T00:00:00Z`,
      model: 'test/exact-embed',
      kind: 'embedding',
      rates,
    });
  }
  const file: PricesFile = {
    currency: 'USD',
    unit: 'per_million_tokens',
    versions: versions.map((v) => ({ version: v.version, effectiveFrom: v.from, models: { [v.model]: v.rates } })),
  };
  expect((await applyPrices(ctx.operatorPool, file, 'exactness test')).added).toHaveLength(8);

  const planned = Array.from({ length: ROWS }, (_, i) => {
    const v = versions[rand(versions.length)];
    const promptTokens = rand(2_000_001);
    const completionTokens = v.kind === 'chat' ? rand(500_001) : 0;
    const usage: TokenUsage = fullUsage({
      promptTokens,
      cachedPromptTokens: v.kind === 'chat' && rand(3) === 0 ? rand(promptTokens + 1) : 0,
      completionTokens,
      reasoningTokens: completionTokens > 0 && rand(4) === 0 ? rand(completionTokens + 1) : 0,
    });
    // a moment inside the version's month, so the version in force is known without asking cronledger
    const at = new Date(Date.parse(v.from) + rand(Date.parse(v.until) - Date.parse(v.from)));
    const r = v.rates;
    const expected =
      v.kind === 'embedding'
        ? BigInt(usage.promptTokens) * attoPerToken(r.embeddingInput)
        : BigInt(usage.promptTokens - usage.cachedPromptTokens) * attoPerToken(r.input) +
          BigInt(usage.cachedPromptTokens) * attoPerToken(r.cachedInput) +
          BigInt(usage.completionTokens) * attoPerToken(r.output);
    return { i, v, usage, at, expected };
  });

  // Booked through the real booking function, ten at a time (the pool's size).
  const booked: { cost: string; version: string | null }[] = [];
  for (let from = 0; from < ROWS; from += 10) {
    const rows = await Promise.all(
      planned
        .slice(from, from + 10)
        .map((p) =>
          recordUsage(
            ctx.ownerPool,
            booking({ runId: `exact-run-${p.i}`, userId: USER, model: p.v.model, kind: p.v.kind, usage: p.usage, occurredAt: p.at }),
          ),
        ),
    );
    booked.push(...rows.map((r) => ({ cost: r.cost_usd, version: r.price_version })));
  }

  // Row by row: the version in force and the exact cost.
  const wrong = planned.filter((p, i) => booked[i].version !== p.v.version || atto(booked[i].cost) !== p.expected);
  expect(wrong).toEqual([]);

  const expectedTotal = planned.reduce((sum, p) => sum + p.expected, 0n);
  const sql = await ctx.pool.query<{ total: string; n: string }>(
    'select sum(cost_usd)::text as total, count(*) as n from usage_ledger where user_id = $1',
    [USER],
  );
  expect(sql.rows[0].n).toBe(String(ROWS));
  const { rows } = await ctx.pool.query<{ cost_usd: string }>(
    'select cost_usd from usage_ledger where user_id = $1 order by idempotency_key',
    [USER],
  );
  const sqlTotal = sql.rows[0].total;
  const dineroTotal = toExactString(sumMoney(rows.map((r) => parseUsd(r.cost_usd))));
  const bigintTotal = rows.reduce((sum, r) => sum + atto(r.cost_usd), 0n);
  expect(dineroTotal).toBe(sqlTotal); // same text, all 18 fractional digits
  expect(atto(sqlTotal)).toBe(bigintTotal);
  expect(bigintTotal).toBe(expectedTotal);

  // The float hazard, at two precisions. The ledger's own (18 digits): a float sum of these very rows is already off.
  let floatTotal = 0;
  for (const r of rows) floatTotal += Number(r.cost_usd);
  const floatError = atto(floatTotal.toFixed(18)) - bigintTotal;
  expect(floatError).not.toBe(0n);
  // The one users see (6 decimals, the CLI's and the report's display): a year of such traffic, the same rows summed
  // 10,000 times (30 million calls), as a float, misstates the displayed total; the exact sum does not.
  const REPEAT = 10_000;
  let floatYear = 0;
  for (let k = 0; k < REPEAT; k++) for (const r of rows) floatYear += Number(r.cost_usd);
  const exactYear = bigintTotal * BigInt(REPEAT);
  const micro = (attoValue: bigint) => (attoValue + 500_000_000_000n) / 1_000_000_000_000n; // half-up to 10^-6 USD, values are positive
  const floatYearMicro = micro(atto(floatYear.toFixed(18)));
  expect(floatYearMicro).not.toBe(micro(exactYear));

  console.log(
    `exactness: ${ROWS} rows booked through recordUsage, total ${sqlTotal} USD, every row equal to the BigInt oracle; ` +
      `float sum off by ${floatError} × 10^-18 USD; over ${ROWS * REPEAT} calls the float total ${floatYear.toFixed(6)} ` +
      `differs from the exact ${(exactYear / 10n ** 18n).toString()}.${(exactYear % 10n ** 18n).toString().padStart(18, '0').slice(0, 6)}… ` +
      `by ${micro(atto(floatYear.toFixed(18))) - micro(exactYear)} × 10^-6 USD at display precision`,
  );
}, 180_000);

it('every price dimension booked exactly: cache reads and writes (5 minutes, 1 hour), service tiers, long context, a promotional version that ends; each row equals the oracle to the last digit', async () => {
  const rand = prng(20261203);
  const rates = (max: number): Rates => ({
    input: randomPrice(rand, max),
    cachedInput: randomPrice(rand, max),
    cacheWrite5m: randomPrice(rand, 2 * max),
    cacheWrite1h: randomPrice(rand, 3 * max),
    output: randomPrice(rand, 5 * max),
  });
  // d1: every dimension (flex without long-context rates); d2: a promotion in force for two weeks of February, after
  // which d1 is in force again; the embedding model has tiers and a threshold too.
  const d1: ModelPrices = {
    ...rates(9),
    longContext: { aboveInputTokens: 200_000, ...rates(18) },
    tiers: { batch: { ...rates(4), longContext: rates(9) }, flex: rates(4), priority: { ...rates(20), longContext: rates(30) } },
  };
  const d2: ModelPrices = { ...rates(5), longContext: { aboveInputTokens: 272_000, ...rates(9) } };
  const e1: ModelPrices = {
    embeddingInput: randomPrice(rand, 1),
    longContext: { aboveInputTokens: 8_000, embeddingInput: randomPrice(rand, 2) },
    tiers: { batch: { embeddingInput: randomPrice(rand, 1), longContext: { embeddingInput: randomPrice(rand, 1) } } },
  };
  const file: PricesFile = {
    currency: 'USD',
    unit: 'per_million_tokens',
    versions: [
      { version: 'd1', effectiveFrom: '2025-01-01T00:00:00Z', models: { 'test/dim-chat': d1, 'test/dim-embed': e1 } },
      { version: 'd2', effectiveFrom: '2025-02-01T00:00:00Z', effectiveTo: '2025-02-15T00:00:00Z', models: { 'test/dim-chat': d2 } },
      { version: 'o1', effectiveFrom: '2025-01-01T00:00:00Z', effectiveTo: '2025-01-10T00:00:00Z', models: { 'test/dim-ended': d2 } },
    ],
  };
  expect((await applyPrices(ctx.operatorPool, file, 'dimensions test')).added).toHaveLength(4);
  // applying it again adds nothing: the stored version, tiers and contexts included, equals the file's
  expect((await applyPrices(ctx.operatorPool, file, 'dimensions test')).unchanged).toHaveLength(4);

  const from = Date.parse('2025-01-01T00:00:00Z');
  const until = Date.parse('2025-03-01T00:00:00Z');
  const inPromotion = (at: Date) => at >= new Date('2025-02-01T00:00:00Z') && at < new Date('2025-02-15T00:00:00Z');
  const planned = Array.from({ length: 1_500 }, (_, i) => {
    const embedding = rand(5) === 0;
    const at = new Date(from + rand(until - from));
    const version = embedding ? 'd1' : inPromotion(at) ? 'd2' : 'd1';
    const prices = embedding ? e1 : version === 'd2' ? d2 : d1;
    const tiers: (string | null)[] = embedding
      ? [null, 'standard', 'batch']
      : version === 'd2'
        ? [null, 'standard']
        : [null, 'standard', 'batch', 'flex', 'priority'];
    const serviceTier = tiers[rand(tiers.length)];
    // flex has no long-context rates: its prompts stay at or below the threshold
    const promptTokens = embedding ? rand(16_001) : serviceTier === 'flex' ? rand(200_001) : rand(400_001);
    const cachedPromptTokens = embedding ? 0 : rand(promptTokens + 1);
    const cacheWrite5mTokens = embedding ? 0 : rand(promptTokens - cachedPromptTokens + 1);
    const cacheWrite1hTokens = embedding ? 0 : rand(promptTokens - cachedPromptTokens - cacheWrite5mTokens + 1);
    const completionTokens = embedding ? 0 : rand(100_001);
    const usage: TokenUsage = {
      promptTokens,
      cachedPromptTokens,
      cacheWrite5mTokens,
      cacheWrite1hTokens,
      completionTokens,
      reasoningTokens: rand(completionTokens + 1),
      serviceTier,
    };
    const kind = embedding ? ('embedding' as const) : ('chat' as const);
    return {
      i,
      kind,
      model: embedding ? 'test/dim-embed' : 'test/dim-chat',
      version,
      usage,
      at,
      expected: oracleCostAt(kind, usage, prices),
    };
  });
  const longCalls = planned.filter((p) => p.usage.promptTokens > (p.kind === 'embedding' ? 8_000 : p.version === 'd2' ? 272_000 : 200_000));
  const byTier = new Set(planned.map((p) => `${p.kind}:${p.usage.serviceTier ?? 'standard'}`));
  expect(longCalls.length).toBeGreaterThan(300);
  expect([...byTier].sort()).toEqual(
    ['chat:batch', 'chat:flex', 'chat:priority', 'chat:standard', 'embedding:batch', 'embedding:standard'].sort(),
  );

  const booked: LedgerEntry[] = [];
  for (let start = 0; start < planned.length; start += 10) {
    booked.push(
      ...(await Promise.all(
        planned.slice(start, start + 10).map((p) =>
          recordUsage(
            ctx.ownerPool,
            booking({
              runId: `dim-run-${p.i}`,
              userId: 'dimensions-user',
              model: p.model,
              kind: p.kind,
              usage: p.usage,
              occurredAt: p.at,
            }),
          ),
        ),
      )),
    );
  }
  const wrong = planned.filter((p, i) => {
    const row = booked[i];
    return (
      row.price_version !== p.version ||
      atto(row.cost_usd) !== p.expected ||
      row.service_tier !== p.usage.serviceTier ||
      row.cache_write_5m_tokens !== String(p.usage.cacheWrite5mTokens) ||
      row.cache_write_1h_tokens !== String(p.usage.cacheWrite1hTokens) ||
      row.reasoning_tokens !== String(p.usage.reasoningTokens)
    );
  });
  expect(wrong).toEqual([]);
  const total = await ctx.pool.query<{ total: string }>(
    `select sum(cost_usd)::text as total from usage_ledger where user_id = 'dimensions-user'`,
  );
  expect(atto(total.rows[0].total)).toBe(planned.reduce((sum, p) => sum + p.expected, 0n));

  // No price: a tier the version gives no rates for, a context its tier has no rates for, a version that has ended.
  const noPrice = async (model: string, usage: TokenUsage, at: string) =>
    recordUsage(
      ctx.ownerPool,
      booking({ runId: `dim-none-${randomUUID()}`, userId: 'dimensions-user', model, usage, occurredAt: new Date(at) }),
    );
  await expect(
    noPrice('test/dim-chat', fullUsage({ promptTokens: 10, completionTokens: 1, serviceTier: 'scale' }), '2025-01-20T00:00:00Z'),
  ).rejects.toThrow(/no scale tier input price \(version d1\) in force for model "test\/dim-chat"/);
  await expect(
    noPrice('test/dim-chat', fullUsage({ promptTokens: 200_001, completionTokens: 1, serviceTier: 'flex' }), '2025-01-20T00:00:00Z'),
  ).rejects.toThrow(/no flex tier long-context input price \(version d1\)/);
  await expect(
    noPrice('test/dim-chat', fullUsage({ promptTokens: 10, completionTokens: 1, serviceTier: 'batch' }), '2025-02-02T00:00:00Z'),
  ).rejects.toThrow(/no batch tier input price \(version d2\)/);
  await expect(
    noPrice('test/dim-ended', fullUsage({ promptTokens: 10, completionTokens: 1 }), '2025-01-05T00:00:00Z'),
  ).resolves.toMatchObject({ price_version: 'o1' });
  await expect(
    noPrice('test/dim-ended', fullUsage({ promptTokens: 10, completionTokens: 1 }), '2025-01-10T00:00:00Z'),
  ).rejects.toBeInstanceOf(NoPriceError);
  console.log(
    `dimensions: ${planned.length} rows (${longCalls.length} above a long-context threshold, tiers ${[...byTier].sort().join(', ')}), ` +
      `every row equal to the BigInt oracle; total ${total.rows[0].total} USD`,
  );
}, 180_000);
