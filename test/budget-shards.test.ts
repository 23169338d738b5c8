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
 * Bookings add their cost to their own session's shard of the user's month and never take the month row (migration
 * 019); the decision reads the row, the shards and the open reservations in one statement under its lock on that row.
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
const shardRows = async (userId: string): Promise<number> =>
  (await ctx.pool.query('select count(*)::int as n from budget_month_shards where user_id = $1', [userId])).rows[0].n as number;
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

/** A booking of `usd` under the ledger key `key`, inserted in an open transaction of its own connection. */
async function openBooking(key: string, userId: string, usd: string, seedEntry: string): Promise<pg.Client> {
  const booking = new pg.Client({ connectionString: ctx.databaseUrl });
  await booking.connect();
  await booking.query('begin');
  await booking.query(
    `insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, cost_usd)
     values ($1, 'adjustment', $2, 'test booking', $3, $4)`,
    [key, seedEntry, userId, usd],
  );
  return booking;
}

describe('a booking that commits while the decision is deciding', () => {
  it('counts once, as spent or as reserved, never as neither (spent and the reservations are one snapshot)', async () => {
    const user = `shards-race-${randomUUID().slice(0, 6)}`;
    await applyBudgets(ctx.pool, { budgets: [{ userId: user, monthlyLimitUsd: '100', timeZone: 'UTC' }] }, 'test');
    await bookExactSpend(ctx.pool, `${user}-s0`, user, '1');
    const first = await reserveBudget(ctx.pool, request(user, `${user}-r1`));
    expect(first).toMatchObject({ tier: 'default', spentUsd: await numeric('1'), worstCaseUsd: await numeric('0.0006') });
    const seedEntry = (await ctx.pool.query('select id from usage_ledger where user_id = $1 order by id limit 1', [user])).rows[0].id;
    await bookExactSpend(ctx.pool, `${user}-s1`, user, '0.25');

    // The booking that settles r1 (its cost $0.0004, under the $0.0006 reserved), held open.
    const booking = await openBooking(`${user}-r1:chat:1`, user, '0.0004', seedEntry);
    // The barrier: an uncommitted reservation under r2's key, so the decision for r2, once it has read spent and
    // the reservations, waits at its own insert of that key. (As the owner: the application role may not write
    // reservations outside the decision.)
    const barrier = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
    const appName = `shards-decision-${user}`;
    const deciding = new pg.Pool({ connectionString: ctx.databaseUrl, max: 1, application_name: appName });
    await barrier.connect();
    try {
      await barrier.query('begin');
      await barrier.query(
        `insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, expires_at)
         values ($1, $2, 'UTC', date_trunc('month', now() at time zone 'UTC'), 0, 'openai/gpt-4o-mini', 'default', now() + interval '1 hour')`,
        [`${user}-r2:chat:1`, user],
      );
      const decision = reserveBudget(deciding, request(user, `${user}-r2`));
      await waitFor(
        async () =>
          (await ctx.pool.query(`select 1 from pg_stat_activity where application_name = $1 and wait_event_type = 'Lock'`, [appName]))
            .rowCount === 1,
        30_000,
        'the decision waiting at its reservation insert',
      );
      // Now the booking commits: after the decision's snapshot, before its commit.
      await booking.query('commit');
      await barrier.query('rollback');
      const second = await decision;
      // r1 was open in the decision's snapshot: reserved at its worst case, its cost not in any shard yet (not spent).
      expect({ spent: second.spentUsd, reserved: second.reservedUsd }).toEqual({
        spent: await numeric('1.25'),
        reserved: await numeric('0.0006'),
      });
      // Never below what is booked now (1.25 + 0.0004): no under-count, so no overspend.
      const used = await exact('select ($1::numeric + $2::numeric)::text as v', [second.spentUsd, second.reservedUsd]);
      expect(await exact('select $1::numeric >= $2::numeric as v', [used, await ledgerTotal(user)])).toBe(true);
      // The next decision counts it as spent, and r1 no longer as reserved (r2 is).
      const third = await reserveBudget(ctx.pool, request(user, `${user}-r3`));
      expect({ spent: third.spentUsd, reserved: third.reservedUsd }).toEqual({
        spent: await numeric('1.2504'),
        reserved: await numeric('0.0006'),
      });
      const [status] = await budgetStatus(ctx.pool, { userId: user });
      expect(status.spentUsd).toBe(await ledgerTotal(user));
    } finally {
      await booking.query('rollback').catch(() => undefined);
      await barrier.query('rollback').catch(() => undefined);
      await Promise.all([booking.end(), barrier.end(), deciding.end()]);
    }
  });
});

describe('bookings for one user', () => {
  it('never wait for each other or for a decision: each session adds to its own shard, and none takes the month row', async () => {
    const user = `shards-wait-${randomUUID().slice(0, 6)}`;
    await applyBudgets(ctx.pool, { budgets: [{ userId: user, monthlyLimitUsd: '100', timeZone: 'UTC' }] }, 'test');
    await bookExactSpend(ctx.pool, `${user}-s0`, user, '1');
    await reserveBudget(ctx.pool, request(user, `${user}-r0`)); // the month row exists
    const seedEntry = (await ctx.pool.query('select id from usage_ledger where user_id = $1 order by id limit 1', [user])).rows[0].id;
    // A decision's lock on the month row, held.
    const decision = await ctx.pool.connect();
    const open: pg.Client[] = [];
    try {
      await decision.query('begin');
      await decision.query(`select 1 from budget_months where user_id = $1 for update`, [user]);
      // Three bookings of the same user and month, in three sessions, all in flight at once: each must get through
      // its insert while the others (and the decision) hold what they hold. A wait would hit the lock timeout.
      for (const [i, usd] of ['0.1', '0.2', '0.3'].entries()) {
        const client = new pg.Client({ connectionString: ctx.databaseUrl, options: '-c lock_timeout=3000' });
        await client.connect();
        open.push(client);
        await client.query('begin');
        await client.query(
          `insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, cost_usd)
           values ($1, 'adjustment', $2, 'test booking', $3, $4)`,
          [`${user}-b${i}`, seedEntry, user, usd],
        );
      }
      await Promise.all(open.map((c) => c.query('commit')));
      await decision.query('commit');
      expect(await shardRows(user)).toBeGreaterThanOrEqual(3);
      const [status] = await budgetStatus(ctx.pool, { userId: user });
      expect(status.spentUsd).toBe(await ledgerTotal(user));
      expect(status.spentUsd).toBe(await numeric('1.6'));
    } finally {
      await decision.query('rollback').catch(() => undefined);
      decision.release();
      await Promise.all(open.map((c) => c.end()));
    }
  });

  it('booked again and again from one session keep one row per zone and month: the shard is updated, not appended to', async () => {
    const user = `shards-one-${randomUUID().slice(0, 6)}`;
    const session = new pg.Pool({ connectionString: ctx.databaseUrl, max: 1 });
    try {
      for (let i = 0; i < 20; i++) await bookExactSpend(session, `${user}-s${i}`, user, '0.05');
      const zones = (await ctx.pool.query('select count(*)::int as n from budget_zones')).rows[0].n as number;
      expect(await shardRows(user)).toBe(zones);
      expect(await deltaRows(user)).toBe(0);
      const [status] = await budgetStatus(ctx.pool, { userId: user });
      expect(status.spentUsd).toBe(await numeric('1'));
    } finally {
      await session.end();
    }
  });
});

describe('the sweep', () => {
  it('folds shards, and deltas booked before migration 019, into the summary row exactly, and every reader agrees before and after', async () => {
    const user = `shards-sweep-${randomUUID().slice(0, 6)}`;
    await applyBudgets(ctx.pool, { budgets: [{ userId: user, monthlyLimitUsd: '10', timeZone: 'UTC' }] }, 'test');
    await bookExactSpend(ctx.pool, `${user}-a`, user, '0.333333333333333333');
    await bookExactSpend(ctx.pool, `${user}-b`, user, '1.000000000000000001');
    // A delta as 015's trigger appended it (one in flight while 019 was applied), for the same month: as the owner.
    const owner = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
    await owner.connect();
    try {
      await owner.query(
        `insert into budget_month_deltas (user_id, time_zone, month, amount_usd)
         values ($1, 'UTC', date_trunc('month', now() at time zone 'UTC'), '0.000000000000000001')`,
        [user],
      );
    } finally {
      await owner.end();
    }
    expect(await shardRows(user)).toBeGreaterThan(0);
    expect(await deltaRows(user)).toBe(1);
    const total = await exact('select ($1::numeric + 0.000000000000000001)::numeric(38, 18)::text as v', [await ledgerTotal(user)]);
    expect(total).toBe(await numeric('1.333333333333333335'));
    const [before] = await budgetStatus(ctx.pool, { userId: user });
    expect(before.spentUsd).toBe(total);

    expect(await foldAllDeltas(ctx.pool)).toBeGreaterThan(0);
    expect(await shardRows(user)).toBe(0);
    expect(await deltaRows(user)).toBe(0);
    const [after] = await budgetStatus(ctx.pool, { userId: user });
    expect(after).toEqual(before);
    const row = await exact(`select spent_usd::text as v from budget_months where user_id = $1 and time_zone = 'UTC'`, [user]);
    expect(row).toBe(total);
  });

  it('skips a shard whose booking is still in flight, without waiting for it, and folds it on its next pass', async () => {
    const user = `shards-skip-${randomUUID().slice(0, 6)}`;
    await bookExactSpend(ctx.pool, `${user}-a`, user, '2');
    const seedEntry = (await ctx.pool.query('select id from usage_ledger where user_id = $1 order by id limit 1', [user])).rows[0].id;
    await foldAllDeltas(ctx.pool);
    // One session books twice: the first booking commits its shard row, the second updates that row and stays open,
    // so the row is committed (the sweep sees it) and locked (by the booking in flight).
    const booking = await openBooking(`${user}-b`, user, '0.5', seedEntry);
    await booking.query('commit');
    await booking.query('begin');
    await booking.query(
      `insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, cost_usd)
       values ($1, 'adjustment', $2, 'test booking', $3, '0.25')`,
      [`${user}-c`, seedEntry, user],
    );
    const sweeper = new pg.Pool({ connectionString: ctx.databaseUrl, max: 1, options: '-c lock_timeout=3000' });
    try {
      await foldAllDeltas(sweeper); // a wait on the booking's row would fail at the lock timeout
      expect(await shardRows(user)).toBe(1); // not folded: its booking holds it
      await booking.query('commit');
      await foldAllDeltas(sweeper);
      expect(await shardRows(user)).toBe(0);
      const [status] = await budgetStatus(ctx.pool, { userId: user });
      expect(status.spentUsd).toBe(await numeric('2.75'));
    } finally {
      await booking.query('rollback').catch(() => undefined);
      await Promise.all([booking.end(), sweeper.end()]);
    }
  });
});
