import type { Client } from '@temporalio/client';
import type pg from 'pg';
import type { RunDefinition } from '../../src/activities/budget-activities';
import { recordTaskVersions } from '../../src/db/task-versions';
import { fingerprintOf } from '../../src/hash';
import type { Task } from '../../src/tasks/tasks-file';
import { scheduledRun, type ScheduledRunInput, type ScheduledRunResult } from '../../src/workflows/scheduled-run';

/** A run as a test describes it: the definition it should run, and how it is started (manual, retry). */
export type TestRun = RunDefinition & Omit<ScheduledRunInput, 'fingerprint'>;

/**
 * Records the run's definition as an applied version (task_versions, as `tasks apply` does) and returns the input that
 * names it: the only input a run accepts. The definition's fingerprint is its own digest, unique per definition.
 */
export async function appliedInput(pool: pg.Pool, run: TestRun): Promise<ScheduledRunInput> {
  const { taskId, manual, retry, ...fields } = run;
  const definition = { id: taskId, cron: '* * * * *', timezone: 'UTC', catchupWindow: '10m', paused: false, ...fields };
  const fingerprint = fingerprintOf(definition);
  await recordTaskVersions(pool, [{ taskId, fingerprint, definition: definition as Task }]);
  return { taskId, fingerprint, ...(manual ? { manual } : {}), ...(retry ? { retry } : {}) };
}

/** Starts the run under `workflowId` on `taskQueue` and waits for its end: its result or its error, and its run ID. */
export async function runToEnd(ctx: { client: Client; operatorPool: pg.Pool }, run: TestRun, workflowId: string, taskQueue: string) {
  const handle = await ctx.client.workflow.start(scheduledRun, {
    args: [await appliedInput(ctx.operatorPool, run)],
    workflowId,
    taskQueue,
  });
  return handle.result().then(
    (result: ScheduledRunResult) => ({ result, error: undefined, runId: handle.firstExecutionRunId }),
    (error: unknown) => ({ result: undefined, error, runId: handle.firstExecutionRunId }),
  );
}
