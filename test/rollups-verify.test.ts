import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningAdmin } from '../src/admin/server';
import { WORKER_ROLE } from '../src/db/roles';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { ensureMonthRollups } from '../src/reports/rollups-write';
import { startTestAdmin } from './support/admin-server';
import { chatBooking } from './support/bookings';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { seedMonth } from './support/report-fixtures';

/**
 * `cronledger rollups verify`: clean rollups exit 0, a rollup row the owner changed behind the ledger's back exits 1 and
 * is named, and the admin page (as the read-only role) shows the last run and what it found.
 */

let ctx: TestContext;
let readonly: pg.Pool;
let admin: RunningAdmin;
const MONTH = '2026-06';

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.ownerPool, { month: MONTH, users: 3, callsPerUser: 6 });
  for (const zone of ['UTC', 'Europe/Berlin']) await ensureMonthRollups(ctx.pool, zone, MONTH);
  readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 2);
  admin = await startTestAdmin(ctx, readonly);
});

afterAll(async () => {
  await admin?.close();
  await readonly?.end();
  await ctx?.close();
});

const verify = () => runCli(['rollups', 'verify'], ctx.env);
const rebuild = () => runCli(['rollups', 'rebuild', '--month', MONTH], ctx.env);

/** The owner changes `sql` in a rollup table, as someone holding a writer's privileges could. */
const tamper = (sql: string) => ctx.ownerPool.query(sql);

async function overviewSection(): Promise<string> {
  const html = await (await fetch(`${admin.url}/?month=${MONTH}`)).text();
  return /<section id="rollups-verified"[\s\S]*?<\/section>/.exec(html)?.[0] ?? '';
}

describe('cronledger rollups verify', () => {
  it('exits 0 on rollups that match the ledger, also while entries wait in the queue', async () => {
    expect(await overviewSection()).toContain('Never verified');
    const clean = await verify();
    expect(clean.code, clean.stderr).toBe(0);
    expect(clean.stdout).toMatch(/^rollups match the ledger: 2 month\(s\), \d+ rollup row\(s\) checked\n$/);
    // booked now, dated in June by the owner: queued, not yet folded in
    await recordUsage(ctx.ownerPool, chatBooking('verify-queued', 'user-01', new Date(`${MONTH}-12T08:00:00Z`)));
    expect((await verify()).code).toBe(0);
    const section = await overviewSection();
    expect(section).toContain('data-differences="0"');
    expect(section).toContain(`by ${WORKER_ROLE}: no difference`);
  });

  it.each([
    ['usage_rollups', `update usage_rollups set cost_usd = cost_usd + 1 where zone = 'UTC' and user_id = 'user-02'`],
    [
      'usage_day_totals',
      `delete from usage_day_totals where ctid = (select ctid from usage_day_totals where zone = 'Europe/Berlin' limit 1)`,
    ],
    ['usage_month_rollups', `update usage_month_rollups set entries = entries + 1 where zone = 'UTC' and user_id = 'user-03'`],
    ['usage_day_users', `update usage_day_users set prompt_tokens = prompt_tokens - 1 where zone = 'UTC' and user_id = 'user-01'`],
    [
      'run_rollups',
      `insert into run_rollups (zone, day, user_id, task_id, status, tier, runs) values ('UTC', '${MONTH}-03', 'user-01', 'forged', 'completed', null, 7)`,
    ],
    [
      'rollup_pending',
      `insert into rollup_pending (slot, shard, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
                                   completion_tokens, reasoning_tokens, cost_usd)
       values ('${MONTH}-03T00:00:00Z', 0, 'openai/gpt-4o-mini', 'chat', 'usage', 'ok', 1, 100, 0, 10, 0, 0.000021)`,
    ],
    [
      'rollup_pending_users',
      `insert into rollup_pending_users (user_id, at, usage_entries) values ('user-01', '${MONTH}-03T00:00:00Z', 1)`,
    ],
  ])('exits 1 and names the row when the owner tampers with %s, and 0 again after a rebuild', async (table, sql) => {
    await tamper(sql);
    const r = await verify();
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toContain(`${table} `);
    expect(r.stdout).toMatch(/\d+ difference\(s\): 2 month\(s\)/);
    expect(r.stdout.split('\n').filter((l) => l.startsWith(`${table} `)).length).toBeGreaterThan(0);
    const section = await overviewSection();
    expect(section).toMatch(/data-differences="[1-9]\d*"/);
    expect(section).toContain(table);
    const { rows } = await ctx.ownerPool.query(
      'select created_by, months, differences > 0 as differs from rollup_verifications order by id desc limit 1',
    );
    expect(rows[0]).toEqual({ created_by: WORKER_ROLE, months: 2, differs: true });

    expect((await rebuild()).code).toBe(0);
    expect((await verify()).code).toBe(0);
  });

  it('keeps its record append-only, written by no role but through its function', async () => {
    await expect(
      ctx.pool.query(`insert into rollup_verifications (created_by, months, rows_checked, differences) values ('x', 0, 0, 0)`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(ctx.ownerPool.query('delete from rollup_verifications')).rejects.toMatchObject({ code: '23001' });
  });
});
