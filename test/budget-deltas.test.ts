import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetStatus } from '../src/budgets/budget-status';
import { applyBudgets } from '../src/budgets/budgets-store';
import { foldAllDeltas, reserveBudget, type ReserveRequest } from '../src/budgets/reserve';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { bookExactSpend } from './support/budget-spend';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';

/**
 * Bookings append month deltas and never take the month row (migration 015); the decision folds them under its lock.
 * Real PostgreSQL, real concurrent transactions.
 */

let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.pool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => {
  await ctx?.close();
});

const exact = async (sql: string, values: unknown[]): Promise<string> => (await ctx.pool.query(sql, values)).rows[0].v as string;
const numeric = (usd: string): Promise<string> => exact('select $1::numeric(38, 18)::text as v', [usd]);
const ledgerTotal = (userId: string): Promise<string> =>
  exact('select coalesce(sum(cost_usd), 0)::numeric(38, 18)::text as v from usage_ledger where user_id = $1', [userId]);
const deltaRows = async (userId: string): Promise<number> =>
  (await ctx.pool.query('select count(*)::int as n from budget_month_deltas where user_id = $1', [userId])).rows[0].n as number;

/** One chat call of 1,000 worst-case completion tokens of gpt-4o-mini ($0.60 per million): $0.0006 reserved. */
const request = (userId: string, runId: string): ReserveRequest => ({
  userId,
  runId,
  workflowId: runId,
  mayDowngrade: false,
  expirySeconds: 600,
  calls: [
    {
      step: 'chat',
      attempt: 1,
      kind: 'chat',
      model: 'openai/gpt-4o-mini',
      worstCase: { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 1000, reasoningTokens: 0 },
    },
  ],
});

describe('a booking that commits while the decision reads', () => {
  it('counts once, as spent or as reserved, never as neither (the fold and the reservations are one snapshot)', async () => {
    const user = `deltas-race-${randomUUID().slice(0, 6)}`;
    await applyBudgets(ctx.pool, { budgets: [{ userId: user, monthlyLimitUsd: '100', timeZone: 'UTC' }] }, 'test');
    await bookExactSpend(ctx.pool, `${user}-s0`, user, '1');
    const first = await reserveBudget(ctx.pool, request(user, `${user}-r1`));
    expect(first).toMatchObject({ tier: 'default', spentUsd: await numeric('1'), worstCaseUsd: await numeric('0.0006') });
    const seedEntry = (await ctx.pool.query('select id from usage_ledger where user_id = $1 order by id limit 1', [user])).rows[0].id;
    await bookExactSpend(ctx.pool, `${user}-s1`, user, '0.25'); // committed deltas for the next decision to fold

    const booking = new pg.Client({ connectionString: ctx.databaseUrl });
    // as the owner: the application role may not lock deltas (it only appends and folds them)
    const barrier = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
    const appName = `deltas-decision-${user}`;
    const deciding = new pg.Pool({ connectionString: ctx.databaseUrl, max: 1, application_name: appName });
    await Promise.all([booking.connect(), barrier.connect()]);
    try {
      // The booking that settles r1 (its cost $0.0004, under the $0.0006 reserved), held open.
      await booking.query('begin');
      await booking.query(
        `insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, cost_usd)
         values ($1, 'adjustment', $2, 'test booking of r1', $3, '0.0004')`,
        [`${user}-r1:chat:1`, seedEntry, user],
      );
      // The barrier holds the committed deltas, so the decision's fold stops on them after its snapshot is taken.
      await barrier.query('begin');
      await barrier.query('select 1 from budget_month_deltas where user_id = $1 for update', [user]);
      const decision = reserveBudget(deciding, request(user, `${user}-r2`));
      await waitFor(
        async () =>
          (await ctx.pool.query(`select 1 from pg_stat_activity where application_name = $1 and wait_event_type = 'Lock'`, [appName]))
            .rowCount === 1,
        30_000,
        'the decision waiting on the held deltas',
      );
      // Now the booking commits: between the fold's snapshot and any later statement of the decision.
      await booking.query('commit');
      await barrier.query('commit');
      const second = await decision;
      // r1 was open in the decision's snapshot: reserved at its worst case, its delta not folded (not spent).
      expect({ spent: second.spentUsd, reserved: second.reservedUsd }).toEqual({
        spent: await numeric('1.25'),
        reserved: await numeric('0.0006'),
      });
      // Never below what is booked now (1.25 + 0.0004): no under-count, so no overspend.
      const used = await exact('select ($1::numeric + $2::numeric)::text as v', [second.spentUsd, second.reservedUsd]);
      expect(await exact('select $1::numeric >= $2::numeric as v', [used, await ledgerTotal(user)])).toBe(true);
      // The booking's delta stays for the next fold, and every reader already counts it.
      expect(await deltaRows(user)).toBe(1);
      const [status] = await budgetStatus(ctx.pool, { userId: user });
      expect(status.spentUsd).toBe(await ledgerTotal(user));
    } finally {
      await booking.query('rollback').catch(() => undefined);
      await barrier.query('rollback').catch(() => undefined);
      await Promise.all([booking.end(), barrier.end(), deciding.end()]);
    }
  });
});

describe('month deltas', () => {
  it('are read with the summary row by every reader, and the sweep folds them into it exactly', async () => {
    const user = `deltas-sweep-${randomUUID().slice(0, 6)}`;
    await applyBudgets(ctx.pool, { budgets: [{ userId: user, monthlyLimitUsd: '10', timeZone: 'UTC' }] }, 'test');
    await bookExactSpend(ctx.pool, `${user}-a`, user, '0.333333333333333333');
    await bookExactSpend(ctx.pool, `${user}-b`, user, '1.000000000000000001');
    expect(await deltaRows(user)).toBeGreaterThan(0);
    const total = await ledgerTotal(user);
    expect(total).toBe(await numeric('1.333333333333333334'));
    const [before] = await budgetStatus(ctx.pool, { userId: user });
    expect(before.spentUsd).toBe(total);

    expect(await foldAllDeltas(ctx.pool)).toBeGreaterThan(0);
    expect(await deltaRows(user)).toBe(0);
    const [after] = await budgetStatus(ctx.pool, { userId: user });
    expect(after).toEqual(before);
    const row = await exact(`select spent_usd::text as v from budget_months where user_id = $1 and time_zone = 'UTC'`, [user]);
    expect(row).toBe(total);
  });
});
