import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetStatus } from '../src/budgets/budget-status';
import { applyBudgets } from '../src/budgets/budgets-store';
import { callsJson, reserveBudget, type ReserveRequest } from '../src/budgets/reserve';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { bookExactSpend } from './support/budget-spend';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { fullUsage } from '../src/models/provider';

/**
 * Month-to-date spend is one summary row per user, zone and month: each booking adds to it in its own
 * transaction, and the budget decision locks it. So a booking and a decision of the same month never overlap: whichever
 * comes second waits for the first to commit, and every call counts once, as spent or as reserved. Real PostgreSQL,
 * real concurrent transactions.
 */

let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => {
  await ctx?.close();
});

const exact = async (sql: string, values: unknown[]): Promise<string> => (await ctx.pool.query(sql, values)).rows[0].v as string;
const numeric = (usd: string): Promise<string> => exact('select $1::numeric(38, 18)::text as v', [usd]);
const ledgerTotal = (userId: string): Promise<string> =>
  exact('select coalesce(sum(cost_usd), 0)::numeric(38, 18)::text as v from usage_ledger where user_id = $1', [userId]);

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
      worstCase: fullUsage({ promptTokens: 0, cachedPromptTokens: 0, completionTokens: 1000, reasoningTokens: 0 }),
    },
  ],
});

/**
 * A connection whose statements pg_stat_activity names `appName`, so a test can see it wait on a lock. As the owner: a
 * booking held open mid-transaction is a ledger insert written directly, which only the owner may do.
 */
async function session(appName: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: ctx.ownerDatabaseUrl, application_name: appName });
  await client.connect();
  return client;
}

const waitingOnLock = (appName: string, what: string) =>
  waitFor(
    async () =>
      // as the owner, whose sessions these are: pg_stat_activity shows another role's wait events only to a superuser
      (await ctx.ownerPool.query(`select 1 from pg_stat_activity where application_name = $1 and wait_event_type = 'Lock'`, [appName]))
        .rowCount === 1,
    30_000,
    what,
  );

/** A booking of `usd` under the ledger key `key` (so it settles the reservation of that key), not committed yet. */
async function openBooking(client: pg.Client, key: string, userId: string, usd: string, seedEntry: string): Promise<void> {
  await client.query('begin');
  await client.query(
    `insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, cost_usd)
     values ($1, 'adjustment', $2, 'test booking', $3, $4)`,
    [key, seedEntry, userId, usd],
  );
}

async function userWithSpend(prefix: string): Promise<{ user: string; seedEntry: string }> {
  const user = `${prefix}-${randomUUID().slice(0, 6)}`;
  await applyBudgets(ctx.operatorPool, { budgets: [{ userId: user, monthlyLimitUsd: '100', timeZone: 'UTC' }] }, 'test');
  await bookExactSpend(ctx.ownerPool, `${user}-s0`, user, '1');
  const seedEntry = (await ctx.pool.query('select id from usage_ledger where user_id = $1 order by id limit 1', [user])).rows[0].id;
  return { user, seedEntry };
}

describe('a booking and a decision of the same month', () => {
  it('a decision waits for a booking in flight, then counts it as spent and its reservation no longer', async () => {
    const { user, seedEntry } = await userWithSpend('row-book-first');
    await reserveBudget(ctx.pool, request(user, `${user}-r1`)); // r1: $0.0006 reserved
    const booking = await session(`booking-${user}`);
    const appName = `decision-${user}`;
    const deciding = new pg.Pool({ connectionString: ctx.ownerDatabaseUrl, max: 1, application_name: appName }); // as the sessions whose waits it reads
    try {
      await openBooking(booking, `${user}-r1:chat:1`, user, '0.0004', seedEntry); // r1's booking, holding the month row
      const decision = reserveBudget(deciding, request(user, `${user}-r2`));
      await waitingOnLock(appName, 'the decision waiting for the booking');
      await booking.query('commit');
      expect(await decision).toMatchObject({ tier: 'default', spentUsd: await numeric('1.0004'), reservedUsd: await numeric('0') });
    } finally {
      await booking.query('rollback').catch(() => undefined);
      await Promise.all([booking.end(), deciding.end()]);
    }
  });

  it('a booking waits for a decision in flight, which counted its call as reserved: never as neither', async () => {
    const { user, seedEntry } = await userWithSpend('row-decide-first');
    await reserveBudget(ctx.pool, request(user, `${user}-r1`));
    const decision = await session(`decision-${user}`);
    const appName = `booking-${user}`;
    const booking = await session(appName);
    try {
      // The decision for r2, its transaction still open: it holds the month row.
      await decision.query('begin');
      const { rows } = await decision.query('select reserve_budget($1, $2, $3, $4, false, 600, null, null, true) as d', [
        user,
        `${user}-r2`,
        `${user}-r2`,
        callsJson(`${user}-r2`, request(user, `${user}-r2`).calls),
      ]);
      expect({ spent: rows[0].d.spentUsd, reserved: rows[0].d.reservedUsd }).toEqual({
        spent: await numeric('1'),
        reserved: await numeric('0.0006'),
      });
      const booked = openBooking(booking, `${user}-r1:chat:1`, user, '0.0004', seedEntry);
      await waitingOnLock(appName, 'the booking waiting for the decision');
      await decision.query('commit');
      await booked;
      await booking.query('commit');
      // What the decision counted (1 + 0.0006) covers what is booked now (1.0004): no under-count, so no overspend.
      expect(await exact('select 1.0006 >= $1::numeric as v', [await ledgerTotal(user)])).toBe(true);
      const next = await reserveBudget(ctx.pool, request(user, `${user}-r3`));
      expect({ spent: next.spentUsd, reserved: next.reservedUsd }).toEqual({
        spent: await numeric('1.0004'),
        reserved: await numeric('0.0006'), // r2's
      });
    } finally {
      await decision.query('rollback').catch(() => undefined);
      await booking.query('rollback').catch(() => undefined);
      await Promise.all([decision.end(), booking.end()]);
    }
  });
});

describe('many bookings and decisions of one user at once, in two zones', () => {
  it('add up exactly in every zone, without a deadlock', async () => {
    const user = `row-many-${randomUUID().slice(0, 6)}`;
    // A second tracked zone: every booking adds to the user's row in UTC and in Berlin, in that order.
    await applyBudgets(ctx.operatorPool, { budgets: [{ userId: user, monthlyLimitUsd: '100', timeZone: 'Europe/Berlin' }] }, 'test');
    // as the owner: bookExactSpend's adjustment is a fixture, written directly
    const pool = new pg.Pool({ connectionString: ctx.ownerDatabaseUrl, max: 8 });
    try {
      await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          i % 4 === 3
            ? reserveBudget(pool, request(user, `${user}-d${i}`))
            : bookExactSpend(pool, `${user}-b${i}`, user, `0.${String(i + 1).padStart(2, '0')}0000000000000001`),
        ),
      );
      const total = await ledgerTotal(user);
      expect(total).toBe(await numeric('6.000000000000000030')); // 0.01 to 0.40 but every 4th, each + 1 atto
      const zones = await ctx.pool.query(
        `select time_zone, sum(spent_usd)::numeric(38, 18)::text as spent from budget_months where user_id = $1 group by 1 order by 1`,
        [user],
      );
      expect(zones.rows).toEqual([
        { time_zone: 'Europe/Berlin', spent: total },
        { time_zone: 'UTC', spent: total },
      ]);
      const [status] = await budgetStatus(ctx.pool, { userId: user });
      expect(status).toMatchObject({ timeZone: 'Europe/Berlin', spentUsd: total, reservedUsd: await numeric('0.006') });
    } finally {
      await pool.end();
    }
  });
});
