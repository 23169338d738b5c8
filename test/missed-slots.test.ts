import { afterAll, beforeAll, inject, it } from 'vitest';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { applyTasks } from '../src/schedules/apply-tasks';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createTestContext, type TestContext } from './support/context';
import { startPrivateTemporal } from './support/private-temporal';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';
import { describeSchedule } from '../src/schedules/describe-schedule';

const TEMPORAL_SCHEDULED_START_TIME = defineSearchAttributeKey('TemporalScheduledStartTime', SearchAttributeType.DATETIME);

/**
 * Slots that pass while nothing can run them. These wait for real minute boundaries (cron has minute resolution),
 * so each takes up to about two minutes; they share nothing but the ledger database (distinct tasks, and the second
 * its own Temporal server), so they wait at the same time.
 */
let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => ctx?.close());

const everyMinute = (id: string) =>
  parseTasksFile({ tasks: [{ id, cron: '* * * * *', userId: 'u-missed', input: 'catch up' }], monthlyReport: false, budgetSweep: false });

const runOf = async (workflowId: string) =>
  (
    await ctx.pool.query<{ status: string; scheduled_minute: Date }>('select status, scheduled_minute from runs where workflow_id = $1', [
      workflowId,
    ])
  ).rows;

it.concurrent(
  'with every worker down, the server still starts the slot, and it runs once a worker returns',
  async ({ expect }) => {
    await applyTasks(ctx.client, everyMinute('no-worker'), ctx.taskQueue, ctx.operatorPool);
    const started = `TaskId = 'no-worker'`;
    // Up to a minute for the slot, then the start and its visibility record: on the Temporal server that is four processes
    // and PostgreSQL, which on this 2-core machine loaded by other jobs once missed the 75 s allowed here before.
    await waitFor(async () => (await ctx.client.workflow.count(started)).count > 0, 120_000, 'the schedule started a run');
    await ctx.client.schedule.getHandle('cron-no-worker').pause('test: one slot is enough');

    let workflowId = '';
    for await (const w of ctx.client.workflow.list({ query: started })) workflowId = w.workflowId;
    expect(workflowId).toMatch(/^cron-no-worker-\d{4}-\d\d-\d\dT\d\d:\d\d:00Z$/);
    const described = await ctx.client.workflow.getHandle(workflowId).describe();
    expect(described.status.name).toBe('RUNNING');
    expect(await runOf(workflowId)).toEqual([]); // nothing ran it yet

    const fleet = await startWorkers(ctx, 1);
    await fleet.runWhile(() => ctx.client.workflow.getHandle(workflowId).result());
    const [run] = await runOf(workflowId);
    expect(run.status).toBe('completed');
    expect(`${run.scheduled_minute.toISOString().slice(0, 19)}Z`).toBe(workflowId.slice('cron-no-worker-'.length));
  },
  240_000,
);

it.concurrent(
  'with the Temporal server down across a slot, a restart on the same persistence catches the slot up',
  async ({ expect }) => {
    // The suite's kind of server: the dev server as `dev up` runs it (a WAL-mode SQLite file, synchronous=normal), or with
    // CRONLEDGER_TEST_TEMPORAL=server the Temporal server (its four services stopped and started on the same databases).
    const { temporalMode, temporalCli } = inject('stack');
    const temporal = await startPrivateTemporal(temporalMode, temporalCli);
    try {
      await applyTasks(temporal.client, everyMinute('server-down'), ctx.taskQueue, ctx.operatorPool);
      const upcoming = (await describeSchedule(temporal.client, 'cron-server-down')).info.nextActionTimes;
      await temporal.stop();
      // the first slot after the server is down (its stop took 4 s idle, longer under load): nothing could start it
      const stoppedAt = Date.now();
      const next = upcoming.find((t) => t.getTime() > stoppedAt + 1_000);
      if (!next)
        throw new Error(
          `no upcoming slot after ${new Date(stoppedAt).toISOString()} among ${upcoming.map((t) => t.toISOString()).join(', ')}`,
        );

      await waitFor(async () => Date.now() > next.getTime() + 3_000, 90_000, 'the slot passed while the server was down');
      const restartedAt = new Date(); // the server is started after this instant (same machine, same clock)
      await temporal.start();
      const workflowId = `cron-server-down-${next.toISOString().replace('.000', '')}`;
      const fleet = await startWorkers(
        { ...ctx, temporalAddress: temporal.address, namespace: 'default', temporalTls: temporal.temporalTls },
        1,
      );
      await fleet.runWhile(async () => {
        await waitFor(async () => (await runOf(workflowId)).some((r) => r.status === 'completed'), 90_000, `${workflowId} completed`);
        // the run row completes one workflow task before the workflow itself closes: wait for that too
        await temporal.client.workflow.getHandle(workflowId).result();
      });
      await temporal.client.schedule.getHandle('cron-server-down').pause('test done');
      const described = await temporal.client.workflow.getHandle(workflowId).describe();
      expect(described.status.name).toBe('COMPLETED');
      // The slot was missed and caught up: its run started only after the restart, well past its nominal time.
      expect(described.startTime.getTime()).toBeGreaterThanOrEqual(restartedAt.getTime());
      expect(described.startTime.getTime()).toBeGreaterThan(next.getTime() + 3_000);
      // ...and it is the slot's own run, stamped with its nominal time, not some later slot
      const stamped = described.typedSearchAttributes.get(TEMPORAL_SCHEDULED_START_TIME);
      expect(stamped?.toISOString()).toBe(next.toISOString());
    } finally {
      await temporal.teardown();
    }
  },
  // A private stack up, down and up again (9 s of it idle on the Temporal server, and more under the suite's load: CI once
  // ran out of 120 s here), up to 61 s for the slot and up to 90 s for its run.
  240_000,
);
