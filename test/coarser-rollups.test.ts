import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { buildReport } from '../src/reports/build-report';
import { readDailySpend, readMonthSums, type MonthSums } from '../src/reports/rollups-read';
import { ensureMonthRollups, rebuildMonth, refreshRollups } from '../src/reports/rollups-write';
import { chatBooking } from './support/bookings';
import { seedMonth } from './support/report-fixtures';
import { createTestContext, type TestContext } from './support/context';
import { fullUsage } from '../src/models/provider';

/**
 * The rollups coarser than the daily ones (per month and user, per day, per day and user and task),
 * which the report and the admin page read, agree with the raw ledger after a build, after bookings and late entries
 * folded in by a refresh, and after a rebuild; and reading them current, before the refresh, gives what they hold after.
 */
let ctx: TestContext;
const MONTH = '2026-06';

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.ownerPool, { month: MONTH, users: 4, callsPerUser: 8 });
});

afterAll(async () => ctx?.close());

const SUMS = `entries::text, prompt_tokens::text, cached_prompt_tokens::text, completion_tokens::text, reasoning_tokens::text,
  cost_usd::text, first_entry_id::text, last_entry_id::text`;
const LEDGER_SUMS = `count(*)::text, sum(prompt_tokens)::text, sum(cached_prompt_tokens)::text, sum(completion_tokens)::text,
  sum(reasoning_tokens)::text, sum(cost_usd)::text, min(id)::text, max(id)::text`;

const rows = async (sql: string, zone: string) =>
  (await ctx.pool.query({ text: sql, values: [zone, MONTH], rowMode: 'array' })).rows.map((r) => JSON.stringify(r));

/** The zone's month in the three coarser rollups, in a fixed order. */
const stored = async (zone: string) => ({
  month: await rows(
    `select user_id, model, kind, entry_type, status, ${SUMS} from usage_month_rollups where zone = $1 and month = $2
      order by 1, 2 nulls first, 3 nulls first, 4, 5`,
    zone,
  ),
  days: await rows(
    `select day::text, model, kind, entry_type, status, ${SUMS} from usage_day_totals where zone = $1 and to_char(day, 'YYYY-MM') = $2
      order by 1, 2 nulls first, 3 nulls first, 4, 5`,
    zone,
  ),
  users: await rows(
    `select day::text, user_id, task_id, entry_type, ${SUMS} from usage_day_users where zone = $1 and to_char(day, 'YYYY-MM') = $2
      order by 1, 2, 3 nulls first, 4`,
    zone,
  ),
});

/** The same buckets straight from the raw ledger, by independent queries. */
const local = `(created_at at time zone $1)`;
const fromLedger = async (zone: string) => ({
  month: await rows(
    `select user_id, model, kind, entry_type, status, ${LEDGER_SUMS} from usage_ledger where to_char(${local}, 'YYYY-MM') = $2
      group by 1, 2, 3, 4, 5 order by 1, 2 nulls first, 3 nulls first, 4, 5`,
    zone,
  ),
  days: await rows(
    `select ${local}::date::text, model, kind, entry_type, status, ${LEDGER_SUMS} from usage_ledger where to_char(${local}, 'YYYY-MM') = $2
      group by 1, 2, 3, 4, 5 order by 1, 2 nulls first, 3 nulls first, 4, 5`,
    zone,
  ),
  users: await rows(
    `select ${local}::date::text, user_id, task_id, entry_type, ${LEDGER_SUMS} from usage_ledger where to_char(${local}, 'YYYY-MM') = $2
      group by 1, 2, 3, 4 order by 1, 2, 3 nulls first, 4`,
    zone,
  ),
});

/** The month's sums with their lines in a fixed order (SQL returns grouping sets in no particular order). */
const sorted = (s: MonthSums) => ({ ...s, lines: s.lines.map((l) => JSON.stringify(l)).sort() });

/** A chat call back-dated to `occurredAt`, with token counts whose cost carries digits far below a cent. */
const booking = (key: string, userId: string, taskId: string | null, occurredAt: Date, status: 'ok' | 'failed' = 'ok') => ({
  ...chatBooking(key, userId, occurredAt),
  taskId,
  status,
  usage: fullUsage({ promptTokens: 1234, cachedPromptTokens: 17, completionTokens: 89, reasoningTokens: 3 }),
});

describe.each(['UTC', 'Europe/Berlin'])('the month, day and day-user rollups in %s', (zone) => {
  it('agree with the raw ledger after bookings, late entries and a refresh, and read current before it', async () => {
    await ensureMonthRollups(ctx.pool, zone, MONTH);
    expect(await stored(zone)).toEqual(await fromLedger(zone));
    const built = await stored(zone);

    // Late entries: back-dated into buckets built already (one failed, one at a Berlin midnight), a user and a task
    // never seen, a credit; and an embedding in the last hour of the month.
    const late = `${zone}-late`;
    await recordUsage(ctx.ownerPool, booking(`${late}-a`, 'user-01', 'task-user-01', new Date('2026-06-10T12:00:00Z')));
    await recordUsage(ctx.ownerPool, booking(`${late}-b`, 'user-02', 'task-user-02', new Date('2026-06-15T22:30:00Z'), 'failed'));
    await recordUsage(ctx.ownerPool, booking(`${late}-c`, 'user-late', 'task-late', new Date('2026-06-20T08:00:00Z')));
    await recordUsage(ctx.ownerPool, {
      ...booking(`${late}-d`, 'user-03', null, new Date('2026-06-30T21:59:00Z')),
      model: 'openai/text-embedding-3-small',
      kind: 'embedding' as const,
      usage: fullUsage({ promptTokens: 4321, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }),
    });
    await ctx.ownerPool.query(
      `insert into usage_ledger (idempotency_key, entry_type, reason, user_id, cost_usd, created_at)
       values ($1, 'credit', 'goodwill credit', 'user-04', '-0.000000000000000123', '2026-06-12T10:00:00Z')`,
      [`${late}-credit`],
    );

    // Queued, not folded: the stored rows lag, the current reads add the queue.
    expect(await stored(zone)).toEqual(built);
    const current = sorted(await readMonthSums(ctx.pool, zone, MONTH, 'current'));
    const currentSpend = await readDailySpend(ctx.pool, { zone, month: MONTH, by: 'task', freshness: 'current' });
    expect(current).not.toEqual(sorted(await readMonthSums(ctx.pool, zone, MONTH, 'stored')));

    expect((await refreshRollups(ctx.pool)).entries).toBe(5);
    const refreshed = await stored(zone);
    expect(refreshed).toEqual(await fromLedger(zone));
    expect(refreshed.users.some((r) => r.includes('"task-late"'))).toBe(true);
    expect(sorted(await readMonthSums(ctx.pool, zone, MONTH, 'stored'))).toEqual(current);
    expect(await readDailySpend(ctx.pool, { zone, month: MONTH, by: 'task', freshness: 'stored' })).toEqual(currentSpend);

    // They are derived data: lost, a rebuild from the raw ledger gives the same rows, and the report is unchanged.
    const report = await buildReport(ctx.pool, { month: MONTH, timeZone: zone });
    for (const table of ['usage_month_rollups', 'usage_day_totals', 'usage_day_users']) {
      await ctx.ownerPool.query(`delete from ${table} where zone = $1`, [zone]);
    }
    await rebuildMonth(ctx.pool, zone, MONTH);
    expect(await stored(zone)).toEqual(refreshed);
    expect(await buildReport(ctx.pool, { month: MONTH, timeZone: zone })).toEqual(report);
  });
});
