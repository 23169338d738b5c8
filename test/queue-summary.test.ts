import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { overview, type Overview } from '../src/admin/admin-data';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { buildReport } from '../src/reports/build-report';
import { verifyRollups } from '../src/reports/rollups-verify';
import { ensureMonthRollups, refreshRollups } from '../src/reports/rollups-write';
import type { UsageReport } from '../src/reports/types';
import { chatBooking } from './support/bookings';
import { createTestContext, type TestContext } from './support/context';
import { seedMonth } from './support/report-fixtures';

/**
 * The queue's summary (migrations/038_queue_summary.sql) and the admin overview that reads it: with entries queued
 * (a new user, a user whose only entry is on the month's last UTC evening, a credit, a bulk statement of 2,000), the
 * overview read as the read-only role gives what the CLI report gives after folding them, in UTC and in Berlin; the
 * summary holds a few rows for the 2,000 entries, `rollups verify` finds it equal to the queue, and the fold empties it.
 */

let ctx: TestContext;
let readonly: pg.Pool;
const MONTH = '2026-06';
const ZONES = ['UTC', 'Europe/Berlin'];

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.ownerPool, { month: MONTH, users: 3, callsPerUser: 6 });
  for (const zone of ZONES) await ensureMonthRollups(ctx.pool, zone, MONTH);
  readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 4);
});

afterAll(async () => {
  await readonly?.end();
  await ctx?.close();
});

const count = async (sql: string) => Number((await ctx.ownerPool.query<{ n: string }>(`select count(*) as n from ${sql}`)).rows[0].n);

/** What the overview shares with the report's unit economics and totals. */
const figures = (o: Overview) => ({
  spendUsd: o.spendUsd,
  totalUsd: o.totalUsd,
  creditsUsd: o.creditsUsd,
  activeUsers: o.activeUsers,
  completedRuns: o.runs.completed,
  costPerCompletedRunUsd: o.costPerCompletedRunUsd,
  costPerActiveUserUsd: o.costPerActiveUserUsd,
  completedRunsPerDollar: o.completedRunsPerDollar,
});
const reportFigures = (r: UsageReport) => ({
  spendUsd: r.unitEconomics.spendUsd,
  totalUsd: r.totals.costUsd,
  creditsUsd: r.totals.creditsUsd,
  activeUsers: r.unitEconomics.activeUsers,
  completedRuns: r.unitEconomics.completedRuns,
  costPerCompletedRunUsd: r.unitEconomics.costPerCompletedRunUsd,
  costPerActiveUserUsd: r.unitEconomics.costPerActiveUserUsd,
  completedRunsPerDollar: r.unitEconomics.completedRunsPerDollar,
});
const dailyOf = (o: Overview) => o.daily.map((d) => [d.day, d.costUsd]);

describe('the queue summary and the admin overview', () => {
  it('gives with entries queued what the report gives once they are folded, in few rows, equal to the queue', async () => {
    await recordUsage(ctx.ownerPool, chatBooking('queued-new-user', 'user-new', new Date(`${MONTH}-15T09:00:00Z`)));
    // June 30th 22:30 UTC is July 1st in Berlin: an active user of June in UTC only
    await recordUsage(ctx.ownerPool, chatBooking('queued-edge-user', 'user-edge', new Date(`${MONTH}-30T22:30:00Z`)));
    await ctx.ownerPool.query(
      `insert into usage_ledger (idempotency_key, entry_type, reason, user_id, cost_usd, created_at)
       values ('queued-credit', 'credit', 'late goodwill', 'user-01', '-0.000000000000000123', '${MONTH}-20T12:00:00Z')`,
    );
    // one statement of 2,000 entries within an hour of the 10th, as a bulk import of late entries would be
    await ctx.ownerPool.query(
      `insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, task_id, model, kind, status, attempt, prompt_tokens,
                                completion_tokens, cost_usd, price_version, created_at)
       select 'bulk-' || g, 'usage', 'user-0' || (1 + g % 3), 'bulk-run-' || g, 'task-user-0' || (1 + g % 3), 'openai/gpt-4o-mini',
              'chat', case when g % 7 = 0 then 'failed' else 'ok' end, 1, 100 + g, 10, (100 + g) * 0.00000015 + 10 * 0.0000006, 'v1',
              timestamptz '${MONTH}-10 08:00:00+00' + g * interval '1 second'
         from generate_series(1, 2000) g`,
    );
    const queued = await count('rollup_queue');
    expect(queued).toBe(2003);
    // 2,000 entries in 3 slots of 15 minutes, 2 statuses, 8 shards at most; the other three entries a row each
    expect(await count('rollup_pending')).toBeLessThanOrEqual(3 * 2 * 8 + 3);
    expect(await count('rollup_pending_users')).toBeLessThanOrEqual(5);
    const verified = await verifyRollups(ctx.pool);
    expect(verified.differences).toEqual([]);

    const before = new Map<string, Overview>();
    for (const zone of ZONES) before.set(zone, await overview(readonly, { month: MONTH, zone }));
    const activeBefore = ZONES.map((zone) => before.get(zone)!.activeUsers);
    expect(activeBefore).toEqual([5, 4]); // three seeded users and user-new; user-edge in UTC only

    expect((await refreshRollups(ctx.pool)).entries).toBe(queued);
    expect(await count('rollup_pending')).toBe(0);
    expect(await count('rollup_pending_users')).toBe(0);
    for (const zone of ZONES) {
      const report = await buildReport(ctx.pool, { month: MONTH, timeZone: zone });
      const o = before.get(zone)!;
      expect(figures(o), zone).toEqual(reportFigures(report));
      const after = await overview(readonly, { month: MONTH, zone });
      expect(figures(after), zone).toEqual(figures(o));
      expect(dailyOf(after), zone).toEqual(dailyOf(o));
    }
    expect((await verifyRollups(ctx.pool)).differences).toEqual([]);
  });
});
