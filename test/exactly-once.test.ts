import { afterAll, beforeAll, expect, it } from 'vitest';
import { backfill } from '../src/backfill/backfill';
import { applyTasks } from '../src/tasks/apply-tasks';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';

let ctx: TestContext;
const FROM = new Date('2026-11-03T10:00:00Z');
const TO = new Date('2026-11-03T10:59:00Z'); // 60 one-minute slots

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.pool, loadPricesFile('prices/standard.json'), 'test');
  await applyTasks(
    ctx.client,
    parseTasksFile({ tasks: [{ id: 'every-minute', cron: '* * * * *', userId: 'u1', input: 'tick' }], monthlyReport: false }),
    ctx.taskQueue,
  );
});

afterAll(async () => ctx?.close());

it('gives every slot exactly one completed run with three workers and overlapping backfills', async () => {
  const fleet = await startWorkers(ctx, 3);
  const outcomes = await fleet.runWhile(async () => {
    // Two cronledger backfills race over the same hour while Temporal's own backfill starts duplicates too.
    const races = await Promise.all([
      backfill(ctx.client, { taskIds: ['every-minute'], from: FROM, to: TO }),
      backfill(ctx.client, { taskIds: ['every-minute'], from: FROM, to: TO }),
      ctx.client.schedule.getHandle('cron-every-minute').backfill({ start: FROM, end: TO, overlap: 'ALLOW_ALL' }),
    ]);
    // The native backfill starts its 60 executions asynchronously (rate-limited by the server): wait for all to close.
    const nativeClosed = `TemporalScheduledById = 'cron-every-minute' AND ExecutionStatus != 'Running'`;
    await waitFor(async () => (await ctx.client.workflow.count(nativeClosed)).count === 60, 120_000, 'native backfill closed');
    await waitFor(async () => (await ctx.client.workflow.count(`ExecutionStatus = 'Running'`)).count === 0, 60_000, 'all runs closed');
    return races;
  });

  const [a, b] = outcomes;
  expect(a.summary.slots).toBe(60);
  expect(b.summary.slots).toBe(60);
  expect(a.summary.executed + b.summary.executed).toBeLessThanOrEqual(60);
  expect(a.summary.failed + b.summary.failed).toBe(0);

  const perSlot = await ctx.pool.query<{ idempotency_key: string; n: string; completed: string }>(
    `select idempotency_key, count(*) as n, count(*) filter (where status = 'completed') as completed from runs group by 1`,
  );
  expect(perSlot.rows).toHaveLength(60);
  expect(perSlot.rows.every((r) => r.n === '1' && r.completed === '1')).toBe(true);

  // Each model call was made and booked once, by one worker: one ledger row per (run, step).
  const perCall = await ctx.pool.query<{ run_id: string; kind: string; n: string; workers: string }>(
    `select run_id, kind, count(*) as n, count(distinct worker_id) as workers from usage_ledger group by 1, 2`,
  );
  expect(perCall.rows).toHaveLength(120);
  expect(perCall.rows.every((r) => r.n === '1' && r.workers === '1')).toBe(true);

  // The work was shared: more than one worker claimed slots.
  const claimers = await ctx.pool.query<{ claimed_by: string }>('select distinct claimed_by from runs');
  expect(claimers.rows.length).toBeGreaterThan(1);

  // Every execution beyond the first per slot was stopped by Temporal (rejected) or by the claim (duplicate).
  const executions = (await ctx.client.workflow.count(`WorkflowType = 'scheduledRun'`)).count;
  const duplicates = Number((await ctx.pool.query<{ n: string }>('select count(*) as n from run_duplicates')).rows[0].n);
  expect(executions).toBe(60 + duplicates);
});
