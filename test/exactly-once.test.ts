import { afterAll, beforeAll, expect, it } from 'vitest';
import { backfill } from '../src/schedules/backfill';
import { applyTasks } from '../src/schedules/apply-tasks';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';

let ctx: TestContext;
const FROM = new Date('2026-11-03T10:00:00Z');
const TO = new Date('2026-11-03T10:29:00Z'); // 30 one-minute slots
const SLOTS = 30;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await applyTasks(
    ctx.client,
    parseTasksFile({
      tasks: [{ id: 'every-minute', cron: '* * * * *', userId: 'u1', input: 'tick', paused: true }],
      monthlyReport: false,
      budgetSweep: false,
    }),
    ctx.taskQueue,
    ctx.operatorPool,
  );
});

afterAll(async () => ctx?.close());

it('gives every slot exactly one completed run with three workers, racing backfills and a native backfill', async () => {
  const fleet = await startWorkers(ctx, 3);
  const [a, b] = await fleet.runWhile(async () => {
    // Two cronledger backfills race over the same hour on three workers.
    const races = await Promise.all([
      backfill(ctx.client, ctx.pool, { taskIds: ['every-minute'], from: FROM, to: TO }),
      backfill(ctx.client, ctx.pool, { taskIds: ['every-minute'], from: FROM, to: TO }),
    ]);
    // Then Temporal's own backfill (ALLOW_DUPLICATE) really starts a second execution of each of the closed slots;
    // every one of them must stop at the PostgreSQL claim.
    const claimedInRace = await countRows('select count(*) as n from run_duplicates');
    await ctx.client.schedule.getHandle('cron-every-minute').backfill({ start: FROM, end: TO, overlap: 'ALLOW_ALL' });
    await waitFor(
      async () => (await countRows('select count(*) as n from run_duplicates')) === claimedInRace + SLOTS,
      180_000,
      'native backfill stopped',
    );
    await waitFor(async () => (await ctx.client.workflow.count(`ExecutionStatus = 'Running'`)).count === 0, 60_000, 'all runs closed');
    return races;
  });

  expect(a.summary.slots).toBe(SLOTS);
  expect(b.summary.slots).toBe(SLOTS);
  // between them the racing backfills ran each slot once; the loser of each race found it running or already run
  expect(a.summary.completed + b.summary.completed).toBe(SLOTS);
  expect(a.summary.alreadyRan + a.summary.running + b.summary.alreadyRan + b.summary.running).toBe(SLOTS);
  expect(a.summary.failed + b.summary.failed + a.summary.retried + b.summary.retried).toBe(0);

  const perSlot = await ctx.pool.query<{ idempotency_key: string; n: string; completed: string }>(
    `select idempotency_key, count(*) as n, count(*) filter (where status = 'completed') as completed from runs group by 1`,
  );
  expect(perSlot.rows).toHaveLength(SLOTS);
  expect(perSlot.rows.every((r) => r.n === '1' && r.completed === '1')).toBe(true);

  // Each model call was made and booked once, by one worker: one ledger row per (run, step).
  const perCall = await ctx.pool.query<{ run_id: string; kind: string; n: string; workers: string }>(
    `select run_id, kind, count(*) as n, count(distinct worker_id) as workers from usage_ledger group by 1, 2`,
  );
  expect(perCall.rows).toHaveLength(2 * SLOTS);
  expect(perCall.rows.every((r) => r.n === '1' && r.workers === '1')).toBe(true);

  // The work was shared: more than one worker claimed slots.
  const claimers = await ctx.pool.query<{ claimed_by: string }>('select distinct claimed_by from runs');
  expect(claimers.rows.length).toBeGreaterThan(1);

  // Every execution beyond the first per slot stopped at the claim; rejected starts never became executions.
  const executions = (await ctx.client.workflow.count(`WorkflowType = 'scheduledRun'`)).count;
  expect(executions).toBe(SLOTS + (await countRows('select count(*) as n from run_duplicates')));
}, 400_000);

const countRows = async (sql: string): Promise<number> => Number((await ctx.pool.query<{ n: string }>(sql)).rows[0].n);
