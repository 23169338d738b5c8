import { afterAll, beforeAll, expect, it } from 'vitest';
import { applyPrices, type PricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { fullUsage, type TokenUsage } from '../src/models/provider';
import { parseUsd, sumMoney, toExactString } from '../src/money';
import { createTestContext, type TestContext } from './support/context';
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
  expect((await applyPrices(ctx.pool, file, 'exactness test')).added).toHaveLength(8);

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
