import { NativeConnection, Worker } from '@temporalio/worker';
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { releaseReservations } from '../src/budgets/reserve';
import { temporalConnectionOptions } from '../src/client';
import { reconcileTaskQueue } from '../src/constants';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createReconcileWorker } from '../src/worker-setup';
import { budgetSweep } from '../src/workflows/budget-sweep';
import { monthlyReport } from '../src/workflows/monthly-report';
import { reconcileDaily } from '../src/workflows/reconcile-daily';
import { rollupRefresh } from '../src/workflows/rollup-refresh';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { appliedInput, type TestRun } from './support/applied';
import { bookExactSpend } from './support/budget-spend';
import { createTestContext, type TestContext } from './support/context';
import { FAKE_ADMIN_KEY, FAKE_PROJECT_ID, startFakeOpenAI } from './support/fake-openai';
import { openReservationOfOneRun } from './support/open-reservation';
import { FIXTURE_NAMES, FIXTURES } from './support/histories';
import { waitFor } from './support/wait';
import { startWorkers, workflowBundle } from './support/workers';

/**
 * Fresh runs of today's code, one per path a run can take and one per other workflow, replay against the code that
 * made them (test/unit/replay.test.ts replays the committed ones without a server). With RECORD_HISTORIES=1 each is written
 * as the committed fixture of its name, with the temporal CLI (the JSON Worker.runReplayHistory reads back).
 */
let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await applyBudgets(
    ctx.operatorPool,
    {
      budgets: [
        { userId: 'u-blocked', monthlyLimitUsd: '0', timeZone: 'UTC' },
        { userId: 'u-cheap', monthlyLimitUsd: '1', timeZone: 'UTC' },
        // exactly one run's worst case (see blocked-again): after a billed chat call, calling again does not fit
        { userId: 'u-again', monthlyLimitUsd: '0.00077', timeZone: 'UTC' },
        // room for one such run, not for two: a run beside another's open reservation waits (see waited)
        { userId: 'u-wait', monthlyLimitUsd: '0.0012', timeZone: 'UTC' },
      ],
      downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
    },
    'replay',
  );
  await bookExactSpend(ctx.ownerPool, 'replay-cheap-spend', 'u-cheap', '0.9');
});

afterAll(async () => ctx?.close());

const task = (over: Partial<TestRun> = {}): TestRun => ({
  taskId: 'replayed',
  userId: 'u1',
  input: 'Summarise the day.',
  model: 'openai/gpt-4o-mini',
  embeddingModel: 'openai/text-embedding-3-small',
  ...over,
});

type Recorded = { name: string; workflowId: string; runId: string };
const recordOf = (name: string, run: { workflowId: string; firstExecutionRunId: string }): Recorded => ({
  name,
  workflowId: run.workflowId,
  runId: run.firstExecutionRunId,
});

async function runEveryPath(): Promise<Recorded[]> {
  const out: Recorded[] = [];
  const start = async (workflowId: string, input: TestRun, reuse?: 'ALLOW_DUPLICATE' | 'ALLOW_DUPLICATE_FAILED_ONLY') =>
    ctx.client.workflow.start(scheduledRun, {
      workflowId,
      taskQueue: ctx.taskQueue,
      args: [await appliedInput(ctx.operatorPool, input)],
      ...(reuse ? { workflowIdReusePolicy: reuse } : {}),
    });

  // started by a Schedule (a backfill of one slot), so TemporalScheduledStartTime is stamped
  const schedule = await ctx.client.schedule.create({
    scheduleId: 'cron-replayed',
    spec: { cronExpressions: ['* * * * *'] },
    action: {
      type: 'startWorkflow',
      workflowType: scheduledRun,
      workflowId: 'cron-replayed',
      taskQueue: ctx.taskQueue,
      args: [await appliedInput(ctx.operatorPool, task())],
    },
    state: { paused: true },
  });
  await schedule.backfill({ start: new Date('2026-11-02T09:00:00Z'), end: new Date('2026-11-02T09:00:30Z'), overlap: 'ALLOW_ALL' });
  const slotId = 'cron-replayed-2026-11-02T09:00:00Z';
  const statusOf = () =>
    ctx.client.workflow
      .getHandle(slotId)
      .describe()
      .then(
        (d) => d.status.name,
        () => 'absent',
      );
  await waitFor(async () => (await statusOf()) === 'COMPLETED', 60_000, `${slotId} completed`);
  const started = await ctx.client.workflow.getHandle(slotId).describe();
  expect(started.raw.workflowExecutionInfo?.searchAttributes?.indexedFields?.TemporalScheduledStartTime).toBeDefined();
  await schedule.delete();
  out.push({ name: 'scheduled-run-schedule-started', workflowId: slotId, runId: started.runId });

  // the same slot again (a native backfill would do this): ends as duplicate
  const duplicate = await start(slotId, task(), 'ALLOW_DUPLICATE');
  expect(await duplicate.result()).toMatchObject({ status: 'duplicate' });
  out.push(recordOf('scheduled-run-duplicate', duplicate));

  // a model with no price fails before any call; a retry of the slot takes its claim over and completes
  const failed = await start('cron-replayed-2026-11-02T09:05:00Z', task({ model: 'acme/unpriced' }));
  await expect(failed.result()).rejects.toThrow();
  out.push(recordOf('scheduled-run-failed', failed));
  const retry = await start(
    failed.workflowId,
    task({ retry: { supersedesRunId: failed.firstExecutionRunId } }),
    'ALLOW_DUPLICATE_FAILED_ONLY',
  );
  expect(await retry.result()).toMatchObject({ status: 'completed', generation: 2 });
  out.push(recordOf('scheduled-run-retry-takes-over', retry));

  // a billed failure: booked as failed, called again as attempt 2
  const billed = await start('cron-replayed-2026-11-02T09:10:00Z', task({ simulate: { failFirstAttempts: 1 } }));
  expect(await billed.result()).toMatchObject({ status: 'completed' });
  out.push(recordOf('scheduled-run-billed-retry', billed));

  // under the budget guard: blocked before any call, downgraded to the cheap model, blocked before a call made again
  const blocked = await start('cron-replayed-2026-11-02T10:00:00Z', task({ userId: 'u-blocked' }));
  expect(await blocked.result()).toMatchObject({ status: 'blocked' });
  out.push(recordOf('scheduled-run-blocked', blocked));
  const cheap = await start('cron-replayed-2026-11-02T10:05:00Z', task({ userId: 'u-cheap' }));
  expect(await cheap.result()).toMatchObject({ status: 'completed', tier: 'cheap' });
  out.push(recordOf('scheduled-run-downgraded', cheap));
  // worst case 1000 prompt + 1000 reply tokens of gpt-4o-mini ($0.00075) + 1000 embedding tokens ($0.00002)
  const simulate = { promptTokens: 1000, completionTokens: 1000, embeddingTokens: 1000, failFirstAttempts: 1 };
  const again = await start('cron-replayed-2026-11-02T10:10:00Z', task({ userId: 'u-again', maxOutputTokens: 1000, simulate }));
  expect(await again.result()).toMatchObject({ status: 'blocked', budget: { blockedBefore: 'chat call 2' } });
  out.push(recordOf('scheduled-run-blocked-again', again));
  // a task that pauses its schedule when the budget runs out (no schedule here: the activity finds none to pause)
  const paused = await start('cron-replayed-2026-11-02T10:15:00Z', task({ userId: 'u-blocked', onBudgetExhausted: 'pause' }));
  expect(await paused.result()).toMatchObject({ status: 'blocked' });
  out.push(recordOf('scheduled-run-blocked-paused', paused));
  // beside another run's open reservation: waits on timers until it is released, then runs as it would alone
  const planned = { promptTokens: 1000, completionTokens: 1000, embeddingTokens: 1000 };
  const other = { prompt: 'Summarise the day.', maxOutputTokens: 1000, simulate: planned };
  expect(await openReservationOfOneRun(ctx.pool, 'u-wait', 'replay-other', other)).toMatchObject({ tier: 'default' });
  const waits = await start('cron-replayed-2026-11-02T10:20:00Z', task({ userId: 'u-wait', maxOutputTokens: 1000, simulate: planned }));
  await new Promise((r) => setTimeout(r, 2_500));
  await releaseReservations(ctx.pool, 'replay-other');
  expect(await waits.result()).toMatchObject({ status: 'completed', tier: 'default' });
  out.push(recordOf('scheduled-run-waited', waits));

  // the other workflows
  const report = await ctx.client.workflow.start(monthlyReport, {
    workflowId: 'report-monthly-2026-11-01T00:00:00Z',
    taskQueue: ctx.taskQueue,
    args: [{}],
  });
  expect((await report.result()).month).toBe('2026-10');
  out.push(recordOf('monthly-report', report));
  // every pass forecasts here, so the history holds the forecast step
  const sweep = await ctx.client.workflow.start(budgetSweep, {
    workflowId: 'budget-sweep-replayed',
    taskQueue: ctx.taskQueue,
    args: [{ forecastEveryMinutes: 1 }],
  });
  await sweep.result();
  out.push(recordOf('budget-sweep', sweep));
  const rollups = await ctx.client.workflow.start(rollupRefresh, { workflowId: 'rollup-refresh-replayed', taskQueue: ctx.taskQueue });
  await rollups.result();
  out.push(recordOf('rollup-refresh', rollups));
  // its import runs on the reconcile worker (see the test below), against the fake's empty admin reports
  const reconciled = await ctx.client.workflow.start(reconcileDaily, {
    workflowId: 'reconcile-daily-replayed',
    taskQueue: ctx.taskQueue,
    args: [{ providers: ['openai'], days: 2 }],
  });
  expect((await reconciled.result()).imports.map((i) => i.provider)).toEqual(['openai']);
  out.push(recordOf('reconcile-daily', reconciled));
  return out;
}

it("fresh runs of every path replay against today's code (RECORD_HISTORIES=1 commits them)", async () => {
  const fleet = await startWorkers(ctx, 1, {
    reportsDir: await mkdtemp(join(tmpdir(), 'cronledger-replay-reports-')),
    reportWebhookUrl: '',
    budgetWebhookUrl: '',
  });
  const openai = await startFakeOpenAI();
  const connection = await NativeConnection.connect(temporalConnectionOptions(ctx));
  const reconcileWorker = await createReconcileWorker({
    connection,
    namespace: ctx.namespace,
    taskQueue: reconcileTaskQueue(ctx.taskQueue),
    identity: 'reconcile-worker',
    deps: {
      operatorPool: ctx.operatorPool,
      env: { OPENAI_BASE_URL: openai.baseURL, OPENAI_ADMIN_KEY: FAKE_ADMIN_KEY, CRONLEDGER_OPENAI_PROJECT_IDS: FAKE_PROJECT_ID },
      wholeOrganization: false,
    },
  });
  const recorded = await reconcileWorker.runUntil(fleet.runWhile(runEveryPath)).finally(async () => {
    await connection.close();
    await openai.close();
  });
  expect(recorded.map((r) => r.name).sort()).toEqual([...FIXTURE_NAMES].sort());
  for (const r of recorded) {
    const history = await ctx.client.workflow.getHandle(r.workflowId, r.runId).fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, `${r.name}-${r.runId}`);
    if (process.env.RECORD_HISTORIES === '1') {
      const cli = inject('stack').temporalCli;
      const args = ['--workflow-id', r.workflowId, '--run-id', r.runId, '--output', 'json'];
      const json = execFileSync(cli, ['workflow', 'show', ...args, '--address', ctx.temporalAddress, '--namespace', ctx.namespace]);
      writeFileSync(join(FIXTURES, `${r.name}.json`), json);
    }
  }
}, 240_000);
