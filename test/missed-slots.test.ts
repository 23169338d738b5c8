import { TestWorkflowEnvironment } from '@temporalio/testing';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { freePort } from '../src/dev/ports';
import { devServerTuningArgs } from '../src/dev/temporal-server';
import { applyTasks } from '../src/schedules/apply-tasks';
import { TASK_ID_KEY, TIER_KEY, USER_ID_KEY } from '../src/schedules/task-schedule';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';

const TEMPORAL_SCHEDULED_START_TIME = defineSearchAttributeKey('TemporalScheduledStartTime', SearchAttributeType.DATETIME);

/**
 * Slots that pass while nothing can run them. These wait for real minute boundaries (cron has minute resolution),
 * so each takes up to about two minutes; they run in parallel with the rest of the suite.
 */
let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.pool, loadPricesFile('prices/standard.json'), 'test');
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

it('with every worker down, the server still starts the slot, and it runs once a worker returns', async () => {
  await applyTasks(ctx.client, everyMinute('no-worker'), ctx.taskQueue);
  const started = `TaskId = 'no-worker'`;
  await waitFor(async () => (await ctx.client.workflow.count(started)).count > 0, 75_000, 'the schedule started a run');
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
});

it('with the Temporal server down across a slot, a restart on the same SQLite file catches the slot up', async () => {
  const dbFilename = join(mkdtempSync(join(tmpdir(), 'cronledger-restart-')), 'temporal.db');
  const port = await freePort();
  const server = {
    executable: { type: 'existing-path' as const, path: inject('stack').temporalCli },
    dbFilename,
    port,
    ip: '127.0.0.1',
    searchAttributes: [TASK_ID_KEY, USER_ID_KEY, TIER_KEY],
    log: { format: 'pretty', level: 'error' },
    // as `dev up` runs it (WAL, synchronous=normal): the catch-up must survive a restart on a WAL-mode file
    extraArgs: devServerTuningArgs(),
  };

  const first = await TestWorkflowEnvironment.createLocal({ server });
  await applyTasks(first.client as Client, everyMinute('server-down'), ctx.taskQueue);
  // a slot at least 10 s away, so the server is surely down (teardown takes about a second) before it arrives
  const upcoming = (await first.client.schedule.getHandle('cron-server-down').describe()).info.nextActionTimes;
  const next = upcoming.find((t) => t.getTime() - Date.now() > 10_000);
  if (!next) throw new Error(`no upcoming slot 10 s away among ${upcoming.map((t) => t.toISOString()).join(', ')}`);
  await first.teardown(); // the server is down before the next slot arrives

  await waitFor(async () => Date.now() > next.getTime() + 3_000, 90_000, 'the slot passed while the server was down');
  const restartedAt = new Date(); // the server is started after this instant (same machine, same clock)
  const second = await TestWorkflowEnvironment.createLocal({ server });
  try {
    const workflowId = `cron-server-down-${next.toISOString().replace('.000', '')}`;
    const fleet = await startWorkers({ ...ctx, temporalAddress: `127.0.0.1:${port}`, namespace: 'default' }, 1);
    await fleet.runWhile(async () => {
      await waitFor(async () => (await runOf(workflowId)).some((r) => r.status === 'completed'), 90_000, `${workflowId} completed`);
      // the run row completes one workflow task before the workflow itself closes: wait for that too
      await second.client.workflow.getHandle(workflowId).result();
    });
    await second.client.schedule.getHandle('cron-server-down').pause('test done');
    const described = await second.client.workflow.getHandle(workflowId).describe();
    expect(described.status.name).toBe('COMPLETED');
    // The slot was missed and caught up: its run started only after the restart, well past its nominal time.
    expect(described.startTime.getTime()).toBeGreaterThanOrEqual(restartedAt.getTime());
    expect(described.startTime.getTime()).toBeGreaterThan(next.getTime() + 3_000);
    // ...and it is the slot's own run, stamped with its nominal time, not some later slot
    const stamped = described.typedSearchAttributes.get(TEMPORAL_SCHEDULED_START_TIME);
    expect(stamped?.toISOString()).toBe(next.toISOString());
  } finally {
    await second.teardown();
  }
});
