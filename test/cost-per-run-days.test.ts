import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { anomaliesFromSeries, overview } from '../src/admin/admin-data';
import { findAnomalies, type Anomaly, type DailyPoint } from '../src/admin/anomalies';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { daysOf, shiftMonth } from '../src/reports/month';
import { costPerRunDaysHold } from '../src/reports/rollups-read';
import { ensureMonthRollups, rebuildMonth, refreshRollups } from '../src/reports/rollups-write';
import { createTestContext, type TestContext } from './support/context';

/**
 * The admin overview's anomalies from cost_per_run_days (migrations/039_cost_per_run_days.sql), the days the rollup
 * refresh found over their trailing median, against an oracle: the series summed from the raw ledger and runs and
 * handed to findAnomalies, the definition test/unit/anomalies.test.ts checks. Seeded: users with several tasks, entries
 * of no task, idle days, days with spend and no run, failed and blocked runs, credits, late evenings (another day in
 * Berlin), and the month before, whose last 7 days give June's first days their medians. Late entries queued after the
 * build leave the anomalies as the last refresh left them until a refresh folds them, in several batches, whose
 * touched users and tasks are recomputed once at the refresh's end.
 */

let ctx: TestContext;
let readonly: pg.Pool;
const MONTH = '2026-06';
const ZONES = ['UTC', 'Europe/Berlin'];
const TASKS: [string, string | null][] = [
  ['user-a', 'task-a1'],
  ['user-a', 'task-a2'],
  ['user-a', null],
  ['user-b', 'task-b1'],
  ['user-c', 'task-c1'],
  ['user-c', 'task-c2'],
  ['user-d', 'task-d1'],
];

/** A deterministic generator (a 31-bit LCG), so a failure reproduces. */
function generator(seed: number) {
  let state = seed;
  return (n: number) => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state % n;
  };
}

const usd = (atto: bigint) => `${atto / 10n ** 18n}.${(atto % 10n ** 18n).toString().padStart(18, '0')}`;

let entryNo = 0;
let runNo = 0;
async function entry(userId: string, taskId: string | null, at: Date, costAtto: bigint, type: 'usage' | 'credit' = 'usage') {
  const key = `cpr-${entryNo++}`;
  if (type === 'credit') {
    await ctx.ownerPool.query(
      `insert into usage_ledger (idempotency_key, entry_type, reason, user_id, cost_usd, created_at) values ($1, 'credit', 'goodwill', $2, $3, $4)`,
      [key, userId, `-${usd(costAtto)}`, at],
    );
    return;
  }
  await ctx.ownerPool.query(
    `insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, task_id, model, kind, status, attempt, prompt_tokens,
                              completion_tokens, cost_usd, price_version, created_at)
     values ($1, 'usage', $2, $1, $3, 'openai/gpt-4o-mini', 'chat', 'ok', 1, 100, 10, $4, 'v1', $5)`,
    [key, userId, taskId, usd(costAtto), at],
  );
}

async function run(userId: string, taskId: string, at: Date, status: string) {
  const key = `cpr-run-${runNo++}`;
  await ctx.ownerPool.query(
    `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by, claimed_at, finished_at)
     values ($1, $2, $3, $1, $1, $4, $5, 'seed', $4, $4)`,
    [key, taskId, userId, at, status],
  );
}

/**
 * Each task's days from `from` to `to`: most with a few runs at a cost per run near the task's own, some idle, some
 * with spend and no run, and spikes of 2-4x that last a day or a few.
 */
async function seed(from: string, to: string, seed: number) {
  const next = generator(seed);
  for (const [t, [userId, taskId]] of TASKS.entries()) {
    const base = 100_000_000_000_000n * BigInt(t + 1); // 0.0001 USD a run, per task
    let spike = 0;
    for (let day = new Date(`${from}T00:00:00Z`); day <= new Date(`${to}T00:00:00Z`); day = new Date(day.getTime() + 86_400_000)) {
      if (next(5) === 0) continue; // idle
      if (spike === 0 && next(9) === 0) spike = 1 + next(3);
      const factor = spike > 0 ? BigInt(2 + next(3)) : 1n;
      if (spike > 0) spike--;
      const runs = 1 + next(3);
      // late in the evening (UTC) now and then: the next day in Berlin
      const at = new Date(day.getTime() + (next(4) === 0 ? 22.5 : 11) * 3_600_000);
      for (let r = 0; r < runs; r++) {
        const cost = (base * factor * BigInt(90 + next(21))) / 100n + BigInt(next(1000));
        await entry(userId, taskId, new Date(at.getTime() + r * 60_000), cost);
        if (taskId !== null) await run(userId, taskId, new Date(at.getTime() + r * 60_000), next(6) === 0 ? 'failed' : 'completed');
      }
      if (taskId !== null && next(7) === 0) await run(userId, taskId, at, 'blocked'); // ran nothing: not counted
      if (next(11) === 0) await entry(userId, taskId, new Date(at.getTime() + 3_600_000), base); // spend with no run of its own
      if (next(13) === 0) await entry(userId, null, at, base / 3n, 'credit'); // credits are not spend
    }
  }
}

/** The month's anomalies by definition: the series summed from the raw ledger and runs, handed to findAnomalies. */
async function oracle(zone: string, month: string, factor = '1.5'): Promise<Anomaly[]> {
  const days = daysOf(month);
  const window = [...daysOf(shiftMonth(month, -1)).slice(-7), ...days];
  const series = new Map<string, Map<string, DailyPoint>>();
  const point = (kind: string, key: string, day: string) => {
    const perKey = series.get(`${kind}\u0000${key}`) ?? new Map<string, DailyPoint>();
    series.set(`${kind}\u0000${key}`, perKey);
    const p = perKey.get(day) ?? { day, costAtto: 0n, runs: 0n };
    perKey.set(day, p);
    return p;
  };
  const spend = await ctx.ownerPool.query<{ day: string; user_id: string; task_id: string | null; atto: string }>(
    `select to_char(created_at at time zone $1, 'YYYY-MM-DD') as day, user_id, task_id,
            (sum(cost_usd) * 1000000000000000000)::numeric(60, 0)::text as atto
       from usage_ledger where entry_type <> 'credit' group by 1, 2, 3`,
    [zone],
  );
  for (const r of spend.rows) {
    point('user', r.user_id, r.day).costAtto += BigInt(r.atto);
    if (r.task_id !== null) point('task', r.task_id, r.day).costAtto += BigInt(r.atto);
  }
  const ran = await ctx.ownerPool.query<{ day: string; user_id: string; task_id: string; runs: string }>(
    `select to_char(claimed_at at time zone $1, 'YYYY-MM-DD') as day, user_id, task_id, count(*)::text as runs
       from runs where status in ('completed', 'failed') group by 1, 2, 3`,
    [zone],
  );
  for (const r of ran.rows) {
    point('user', r.user_id, r.day).runs += BigInt(r.runs);
    point('task', r.task_id, r.day).runs += BigInt(r.runs);
  }
  return (['user', 'task'] as const).flatMap((kind) =>
    [...series.keys()]
      .filter((k) => k.startsWith(`${kind}\u0000`))
      .map((k) => k.slice(kind.length + 1))
      .sort((a, b) => (a < b ? -1 : 1))
      .flatMap((key) => {
        const perKey = series.get(`${kind}\u0000${key}`)!;
        const points = window.map((day) => perKey.get(day) ?? { day, costAtto: 0n, runs: 0n });
        return findAnomalies(kind, key, points, factor, days[0]);
      }),
  );
}

const anomaliesOf = async (zone: string, month: string, factor?: string) => (await overview(readonly, { month, zone }, factor)).anomalies;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seed('2026-05-18', '2026-06-30', 7);
  for (const zone of ZONES) {
    await ensureMonthRollups(ctx.pool, zone, '2026-05');
    await ensureMonthRollups(ctx.pool, zone, MONTH);
  }
  readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 4);
});

afterAll(async () => {
  await readonly?.end();
  await ctx?.close();
});

const storedRows = async () =>
  (await ctx.ownerPool.query('select * from cost_per_run_days order by zone, day, kind, key')).rows as Record<string, unknown>[];

describe('the overview anomalies from cost_per_run_days', () => {
  it.each(ZONES)('are the definition over the raw ledger, in %s, for June and for May, at several factors', async (zone) => {
    expect(await costPerRunDaysHold(readonly, zone, MONTH)).toBe(true);
    // May: April never built, but its last 7 days hold nothing
    expect(await costPerRunDaysHold(readonly, zone, '2026-05')).toBe(true);
    const june = await anomaliesOf(zone, MONTH);
    expect(june).toEqual(await oracle(zone, MONTH));
    // the seed gives both kinds, streaks of several days, and a streak through an idle day
    expect(june.some((a) => a.kind === 'user') && june.some((a) => a.kind === 'task')).toBe(true);
    expect(june.some((a) => a.days > 1)).toBe(true);
    const may = await anomaliesOf(zone, '2026-05');
    expect(may).toEqual(await oracle(zone, '2026-05'));
    expect(may.length).toBeGreaterThan(0); // May has anomalies of its own: an empty list can't pass for equal
    for (const factor of ['1.25', '2', '3.1']) expect(await anomaliesOf(zone, MONTH, factor)).toEqual(await oracle(zone, MONTH, factor));
    expect(june).toEqual((await anomaliesFromSeries(readonly, { month: MONTH, zone }, '1.5')).found);
  });

  it('stay as the last refresh left them while late entries are queued, and take them in when a refresh folds them', async () => {
    const before = Object.fromEntries(await Promise.all(ZONES.map(async (z) => [z, await anomaliesOf(z, MONTH)] as const)));
    // Late entries and runs all over June: a spike on the 8th of user-b's task, a cheap day that lowers task-a1's
    // medians, a new user with a week of runs and a spike, a credit.
    for (let r = 0; r < 3; r++) {
      await entry('user-b', 'task-b1', new Date(`${MONTH}-08T09:0${r}:00Z`), 4_000_000_000_000_000n);
      await run('user-b', 'task-b1', new Date(`${MONTH}-08T09:0${r}:00Z`), 'completed');
    }
    for (let r = 0; r < 5; r++) {
      await entry('user-a', 'task-a1', new Date(`${MONTH}-19T09:0${r}:00Z`), 10_000_000_000_000n);
      await run('user-a', 'task-a1', new Date(`${MONTH}-19T09:0${r}:00Z`), 'completed');
    }
    for (let day = 10; day <= 20; day++) {
      const at = new Date(`${MONTH}-${day}T12:00:00Z`);
      await entry('user-new', 'task-new', at, day === 18 ? 900_000_000_000_000n : 300_000_000_000_000n + BigInt(day));
      await run('user-new', 'task-new', at, 'completed');
    }
    await entry('user-c', null, new Date(`${MONTH}-12T12:00:00Z`), 5_000_000_000_000_000n, 'credit');

    for (const zone of ZONES) {
      expect(await anomaliesOf(zone, MONTH)).toEqual(before[zone]);
      expect(before[zone]).toEqual((await anomaliesFromSeries(readonly, { month: MONTH, zone }, '1.5')).found);
    }
    // batches of 4: several folds, each touching its users and tasks; the recompute after the last covers them all
    const refreshed = await refreshRollups(ctx.pool, { batchSize: 4 });
    expect(refreshed.entries).toBeGreaterThan(3 * 4);
    expect((await ctx.ownerPool.query('select * from cost_per_run_stale')).rows).toEqual([]);
    for (const zone of ZONES) {
      const after = await anomaliesOf(zone, MONTH);
      expect(after).toEqual(await oracle(zone, MONTH));
      expect(after).not.toEqual(before[zone]);
      expect(after.some((a) => a.id === 'task-new' && a.startedOn === `${MONTH}-18`)).toBe(true);
      expect(after).toEqual((await anomaliesFromSeries(readonly, { month: MONTH, zone }, '1.5')).found);
    }
  });

  it('hold the same rows after a rebuild of both months as the refreshes left', async () => {
    const refreshed = await storedRows();
    expect(refreshed.length).toBeGreaterThan(200);
    for (const zone of ZONES) {
      await rebuildMonth(ctx.pool, zone, '2026-05');
      await rebuildMonth(ctx.pool, zone, MONTH);
    }
    expect(await storedRows()).toEqual(refreshed);
  });
});
