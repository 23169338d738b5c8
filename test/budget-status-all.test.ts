import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetStatus, budgetStatusOfAll } from '../src/budgets/budget-status';
import { applyBudgets } from '../src/budgets/budgets-store';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { bookExactSpend } from './support/budget-spend';
import { createTestContext, type TestContext } from './support/context';

/**
 * The set-based budget status (one statement for every user: the report's budget section, `budgets status` without
 * --user, the admin page) gives exactly what budgetStatus gives user by user, over users of every kind: a budget in
 * Europe/Berlin whose month starts and ends at other instants than UTC's, the default budget, no budget at all (before
 * the default takes effect), blocked, exactly 80 % (cheap) with an open reservation, and expired or settled
 * reservations that must not count. Real PostgreSQL.
 */

let ctx: TestContext;
const tag = randomUUID().slice(0, 6);
const u = {
  berlin: `bs-berlin-${tag}`,
  defaulted: `bs-default-${tag}`,
  blocked: `bs-blocked-${tag}`,
  cheap: `bs-cheap-${tag}`,
  reservedOnly: `bs-reserved-${tag}`,
};
const MONTH = '2026-03';
const DEFAULT_FROM = new Date('2026-03-10T00:00:00Z');

async function reservation(key: string, userId: string, zone: string, month: string, amount: string, expires: Date, status = 'open') {
  await ctx.ownerPool.query(
    `insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, status, expires_at)
     values ($1, $2, $3, $4::date, $5, 'openai/gpt-4o-mini', 'default', $6, $7)`,
    [key, userId, zone, month, amount, status, expires],
  );
}

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  const from = new Date('2026-01-01T00:00:00Z');
  await applyBudgets(
    ctx.operatorPool,
    {
      budgets: [
        { userId: u.berlin, monthlyLimitUsd: '10', timeZone: 'Europe/Berlin', effectiveFrom: from },
        { userId: u.blocked, monthlyLimitUsd: '2.5', timeZone: 'UTC', effectiveFrom: from },
        { userId: u.cheap, monthlyLimitUsd: '10', timeZone: 'UTC', effectiveFrom: from },
        { userId: null, monthlyLimitUsd: '1.000000000000000001', timeZone: 'UTC', effectiveFrom: DEFAULT_FROM },
      ],
    },
    'test',
  );
  // Berlin: 00:30 on 1 March there is still February in UTC; 00:30 on 1 April there (CEST) is still March in UTC
  await bookExactSpend(ctx.ownerPool, `bs-b1-${tag}`, u.berlin, '1.25', new Date('2026-02-28T23:30:00Z'));
  await bookExactSpend(ctx.ownerPool, `bs-b2-${tag}`, u.berlin, '2.000000000000000003', new Date('2026-03-15T12:00:00Z'));
  await bookExactSpend(ctx.ownerPool, `bs-b3-${tag}`, u.berlin, '4', new Date('2026-03-31T22:30:00Z'));
  await bookExactSpend(ctx.ownerPool, `bs-d1-${tag}`, u.defaulted, '0.7', new Date('2026-03-05T08:00:00Z'));
  await bookExactSpend(ctx.ownerPool, `bs-x1-${tag}`, u.blocked, '2.5', new Date('2026-03-02T08:00:00Z'));
  await bookExactSpend(ctx.ownerPool, `bs-c1-${tag}`, u.cheap, '7.9', new Date('2026-03-03T08:00:00Z'));
  // the cheap user reaches exactly 80 % only with the open, unexpired reservation; the expired and settled ones never count
  const far = new Date('2030-01-01T00:00:00Z');
  await reservation(`bs-r1-${tag}`, u.cheap, 'UTC', '2026-03-01', '0.1', far);
  await reservation(`bs-r2-${tag}`, u.cheap, 'UTC', '2026-03-01', '5', new Date('2026-03-01T00:00:00Z'));
  await reservation(`bs-r3-${tag}`, u.cheap, 'UTC', '2026-03-01', '5', far, 'settled');
  await reservation(`bs-r4-${tag}`, u.reservedOnly, 'UTC', '2026-03-01', '0.3', far);
});

afterAll(async () => {
  await ctx?.close();
});

/** budgetStatus user by user, over the users it lists itself. */
async function perUser(opts: { at?: Date; month?: string }) {
  const users = (await budgetStatus(ctx.pool, opts)).map((s) => s.userId);
  const out = [];
  for (const userId of users) out.push(...(await budgetStatus(ctx.pool, { ...opts, userId })));
  return out;
}

describe('budgetStatusOfAll', () => {
  const cases: [string, { at?: Date; month?: string }][] = [
    ['a report of the month, taken inside it', { at: new Date('2026-03-20T12:00:00Z'), month: MONTH }],
    [
      'a report of the month, taken after it (moved to its last instant in each zone)',
      { at: new Date('2026-04-20T12:00:00Z'), month: MONTH },
    ],
    ['a report of the month, taken before the default budget took effect', { at: new Date('2026-03-09T12:00:00Z'), month: MONTH }],
    ['the status at an instant, no month', { at: new Date('2026-03-31T23:00:00Z') }],
    ['the status now', {}],
  ];
  for (const [what, opts] of cases) {
    it(`equals budgetStatus user by user: ${what}`, async () => {
      const all = await budgetStatusOfAll(ctx.pool, opts);
      expect(all.map((s) => s.userId)).toEqual(Object.values(u).sort());
      expect(all).toEqual(await perUser(opts));
    });
  }

  it('carries the figures of each kind of user', async () => {
    const all = await budgetStatusOfAll(ctx.pool, { at: new Date('2026-04-20T12:00:00Z'), month: MONTH });
    const of = (userId: string) => all.find((s) => s.userId === userId);
    // March in Berlin: the entry of 28 Feb 23:30Z and the one of 15 March (folded); 31 March 22:30Z is April there
    expect(of(u.berlin)).toMatchObject({ month: MONTH, timeZone: 'Europe/Berlin', spentUsd: '3.250000000000000003', source: 'user' });
    expect(of(u.defaulted)).toMatchObject({ source: 'default', limitUsd: '1.000000000000000001', spentUsd: '0.700000000000000000' });
    expect(of(u.blocked)).toMatchObject({ tier: 'blocked', remainingUsd: '0.000000000000000000' });
    expect(of(u.cheap)).toMatchObject({ tier: 'cheap', spentUsd: '7.900000000000000000', reservedUsd: '0.100000000000000000' });
    const before = await budgetStatusOfAll(ctx.pool, { at: new Date('2026-03-09T12:00:00Z'), month: MONTH });
    expect(before.find((s) => s.userId === u.defaulted)).toMatchObject({ source: 'none', limitUsd: null, tier: 'default' });
  });
});
