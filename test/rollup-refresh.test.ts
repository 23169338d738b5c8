import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLLUP_SCHEDULE_ID } from '../src/constants';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { builtMonths } from '../src/reports/rollups-read';
import { ensureMonthRollups } from '../src/reports/rollups-write';
import { ensureRollupSchedule } from '../src/schedules/rollup-schedule';
import type { RollupRefreshResult } from '../src/reports/types';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';
import { fullUsage } from '../src/models/provider';
import { describeSchedule } from '../src/schedules/describe-schedule';

let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => ctx?.close());

const booking = (key: string, userId: string, occurredAt: Date) => ({
  runId: null,
  idempotencyKey: key,
  step: 'chat',
  attempt: 1,
  userId,
  taskId: `task-${userId}`,
  model: 'openai/gpt-4o-mini',
  kind: 'chat' as const,
  status: 'ok' as const,
  usage: fullUsage({ promptTokens: 1200, cachedPromptTokens: 0, completionTokens: 80, reasoningTokens: 0 }),
  providerModel: null,
  providerRequestId: null,
  workerId: 'test',
  occurredAt,
});

/** The UTC rollup rows of some users, and the same buckets straight from the ledger and the runs table. */
async function rollupsAndSources(users: string[]) {
  const q = async (sql: string) => (await ctx.pool.query(sql, [users])).rows.map((r) => JSON.stringify(r));
  return {
    rollups: await q(`select day::text, user_id, task_id, entries::text, cost_usd::text from usage_rollups
                       where zone = 'UTC' and user_id = any($1) order by 1, 2, 3`),
    ledger: await q(`select (created_at at time zone 'UTC')::date::text as day, user_id, task_id, count(*)::text as entries,
                            sum(cost_usd)::text as cost_usd
                       from usage_ledger where user_id = any($1) group by 1, 2, 3 order by 1, 2, 3`),
    runRollups: await q(`select day::text, user_id, task_id, status, runs::text from run_rollups
                          where zone = 'UTC' and user_id = any($1) order by 1, 2, 3, 4`),
    runs: await q(`select (claimed_at at time zone 'UTC')::date::text as day, user_id, task_id, status, count(*)::text as runs
                     from runs where user_id = any($1) group by 1, 2, 3, 4 order by 1, 2, 3, 4`),
  };
}

describe('the rollup-refresh schedule', () => {
  it('folds entries booked and runs closed into the rollups every minute, with no report running', async () => {
    expect(await ensureRollupSchedule(ctx.client, { taskQueue: ctx.taskQueue })).toBe('created');
    expect(await ensureRollupSchedule(ctx.client, { taskQueue: ctx.taskQueue })).toBe('unchanged');
    const handle = ctx.client.schedule.getHandle(ROLLUP_SCHEDULE_ID);
    const described = await describeSchedule(ctx.client, ROLLUP_SCHEDULE_ID);
    expect(described.spec.intervals).toEqual([expect.objectContaining({ every: 60_000 })]);
    expect(described.policies.overlap).toBe('SKIP');
    expect(described.action).toMatchObject({ type: 'startWorkflow', workflowType: 'rollupRefresh' });

    // Booked now and back-dated into last week; a run claimed, then closed.
    const users = ['refresh-a', 'refresh-b'];
    const now = new Date();
    const currentMonth = (await ctx.pool.query<{ m: string }>(`select to_char(now() at time zone 'UTC', 'YYYY-MM') as m`)).rows[0].m;
    await recordUsage(ctx.ownerPool, booking('refresh-1', users[0], now));
    await recordUsage(ctx.ownerPool, booking('refresh-2', users[1], new Date(now.getTime() - 6 * 86_400_000)));
    await ctx.ownerPool.query(
      `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by)
       values ('cron:refresh-a', 'task-refresh-a', $1, 'wf-refresh-a', 'run-refresh-a', now(), 'running', 'test')`,
      [users[0]],
    );
    await ctx.ownerPool.query(`update runs set status = 'completed', finished_at = now() where idempotency_key = 'cron:refresh-a'`);
    expect((await ctx.pool.query('select 1 from rollup_queue')).rowCount).toBe(2);

    const fleet = await startWorkers(ctx, 1);
    try {
      await fleet.runWhile(async () => {
        await handle.trigger(); // the minute's run now, rather than waiting up to a minute for it
        const query = `WorkflowType = 'rollupRefresh' AND TemporalScheduledById = '${ROLLUP_SCHEDULE_ID}' AND ExecutionStatus = 'Completed'`;
        // A minute boundary may have fired a run of its own beside the trigger's (one after the other: overlap SKIP),
        // so what was folded is summed over every completed run: each entry folded once, by one of them. Visibility
        // may list the second run before the first, so the sum is waited for, not the first completed run.
        let results: RollupRefreshResult[] = [];
        await waitFor(
          async () => {
            const runs = await collect(ctx.client.workflow.list({ query }));
            results = await Promise.all(
              runs.map(async (run) => (await ctx.client.workflow.getHandle(run.workflowId).result()) as RollupRefreshResult),
            );
            return results.reduce((n, r) => n + r.entries, 0) >= 2;
          },
          60_000,
          'scheduled rollupRefresh runs that folded both entries',
        );
        expect(results.reduce((n, r) => n + r.entries, 0)).toBe(2);
        expect(results.reduce((n, r) => n + r.runChanges, 0)).toBeGreaterThanOrEqual(1);
        // the month under way in UTC was not built: the schedule built it, so no report will
        expect(results.flatMap((r) => r.monthsBuilt)).toEqual([`UTC ${currentMonth}`]);
      });
    } finally {
      await handle.delete();
    }
    expect((await ctx.pool.query('select 1 from rollup_queue')).rowCount).toBe(0);
    expect((await ctx.pool.query('select 1 from run_rollup_queue')).rowCount).toBe(0);
    const folded = await rollupsAndSources(users);
    expect(folded.rollups).toHaveLength(2);
    expect(folded.rollups).toEqual(folded.ledger);
    expect(folded.runRollups).toEqual(folded.runs);
    expect(folded.runRollups).toEqual([expect.stringContaining('"status":"completed"')]);
    expect((await ctx.client.workflow.count(`WorkflowType = 'monthlyReport'`)).count).toBe(0);
    expect(await builtMonths(ctx.pool, 'UTC')).toEqual([currentMonth]);
    // A report of the month now finds it built and current: it builds nothing.
    expect((await ensureMonthRollups(ctx.pool, 'UTC', currentMonth)).built).toBe(false);
  });
});

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}
