import { ScheduleNotFoundError, type Client } from '@temporalio/client';
import type pg from 'pg';
import { recordTaskVersions } from '../db/task-versions';
import { BUDGET_SWEEP_SCHEDULE_ID, TASK_SCHEDULE_PREFIX, taskScheduleId } from '../constants';
import { mapWithConcurrency, TEMPORAL_CALL_CONCURRENCY } from './bounded-concurrency';
import { ensureBudgetSweepSchedule } from './budget-sweep-schedule';
import { describeOrUndefined } from './describe-schedule';
import { reconcileSchedule, type WantedSchedule } from './reconcile-schedule';
import { ensureReportSchedule } from './report-schedule';
import { ensureRollupSchedule } from './rollup-schedule';
import { appliedFingerprintOf, isManagedTaskSchedule } from './schedule-memos';
import { scheduleOptionsFor, taskFingerprint } from './task-schedule';
import { wantedTaskNote, wantedTaskState } from '../task-note';
import type { Task, TasksFile } from '../tasks/tasks-file';

export type Change = {
  action: 'created' | 'updated' | 'paused' | 'resumed' | 'deleted' | 'kept' | 'unchanged';
  scheduleId: string;
};

/**
 * What becomes of the cronledger task schedules whose task the file omits: all deleted (`--prune`), only the listed ones
 * deleted (those confirmed at a prompt), or none (each is reported as `kept`).
 */
export type Prune = 'all' | 'none' | readonly string[];

/**
 * The cronledger task schedules whose task this file omits, sorted. The candidates come from Temporal's schedule list,
 * which is eventually consistent, so each is described (which reads the schedule itself): one deleted a moment ago is
 * not reported. One created a moment ago may still be missing from the list.
 */
export async function omittedTaskSchedules(client: Client, file: TasksFile): Promise<string[]> {
  const wanted = new Set(file.tasks.map((t) => taskScheduleId(t.id)));
  const candidates: string[] = [];
  for await (const summary of client.schedule.list()) {
    if (!summary.scheduleId.startsWith(TASK_SCHEDULE_PREFIX) || wanted.has(summary.scheduleId)) continue;
    if (isManagedTaskSchedule(summary.memo)) candidates.push(summary.scheduleId);
  }
  const described = await mapWithConcurrency(candidates.sort(), TEMPORAL_CALL_CONCURRENCY, async (id) => ({
    id,
    description: await describeOrUndefined(client, id),
  }));
  return described.flatMap(({ id, description }) => (description && isManagedTaskSchedule(description.memo) ? [id] : []));
}

/**
 * Reconciles Temporal Schedules with a tasks file: creates what is missing, updates what changed, and never touches a
 * schedule cronledger did not create. The cronledger task schedules whose task is gone are deleted only as `prune`
 * says: a file that omits a task by mistake must not delete its schedule. Applying the same file again changes nothing;
 * two concurrent applies converge, because each step moves towards the same state. Every task's version is recorded in
 * task_versions first, so no schedule ever names a version a run can't load.
 */
export async function applyTasks(
  client: Client,
  file: TasksFile,
  taskQueue: string,
  pool: pg.Pool,
  prune: Prune = 'none',
): Promise<Change[]> {
  await recordTaskVersions(
    pool,
    file.tasks.map((task) => ({ taskId: task.id, fingerprint: taskFingerprint(task, taskQueue), definition: task })),
  );
  const changes: Change[] = [];
  for (const task of file.tasks) changes.push(...(await applyTask(client, task, taskQueue)));

  for (const scheduleId of await omittedTaskSchedules(client, file)) {
    if (prune !== 'all' && (prune === 'none' || !prune.includes(scheduleId))) {
      changes.push({ action: 'kept', scheduleId });
      continue;
    }
    try {
      await client.schedule.getHandle(scheduleId).delete();
      changes.push({ action: 'deleted', scheduleId });
    } catch (err) {
      if (!(err instanceof ScheduleNotFoundError)) throw err; // a concurrent apply deleted it first
    }
  }

  if (file.monthlyReport !== false) {
    const timezone = file.monthlyReport?.timezone ?? 'UTC';
    const outcome = await ensureReportSchedule(client, { timezone, taskQueue });
    changes.push({ action: outcome, scheduleId: 'report-monthly' });
    // the reports' rollups are kept current every minute, so no report (nor the admin page) folds a backlog
    changes.push({ action: await ensureRollupSchedule(client, { taskQueue }), scheduleId: 'rollup-refresh' });
  }
  if (file.budgetSweep !== false) {
    changes.push({ action: await ensureBudgetSweepSchedule(client, { taskQueue }), scheduleId: BUDGET_SWEEP_SCHEDULE_ID });
  }
  return changes;
}

/**
 * What `tasks apply` reconciles a task's schedule to. The pause state goes in the same update as the spec (see
 * reconcileSchedule), and resuming with an update stamps the schedule's lastUpdatedAt, where the missed-slot check
 * starts (see resume-schedule.ts).
 */
export function wantedTaskSchedule(task: Task, taskQueue: string): WantedSchedule {
  const options = scheduleOptionsFor(task, taskQueue);
  return {
    options,
    fingerprint: taskFingerprint(task, taskQueue),
    kind: 'task',
    notOurs: `schedule ${options.scheduleId} exists but was not created by cronledger; rename task "${task.id}" or delete that schedule yourself`,
    stateOf: (state) => wantedTaskState(task, state),
  };
}

async function applyTask(client: Client, task: Task, taskQueue: string): Promise<Change[]> {
  const wanted = wantedTaskSchedule(task, taskQueue);
  const { fingerprint } = wanted;
  const scheduleId = wanted.options.scheduleId;
  const reconciled = await reconcileSchedule(client, wanted);
  if (reconciled.outcome === 'created') return [{ action: 'created', scheduleId }];
  if (reconciled.outcome === 'unchanged') return [{ action: 'unchanged', scheduleId }];
  const { state } = reconciled.before;
  const changes: Change[] = [];
  if (appliedFingerprintOf(reconciled.before) !== fingerprint || wantedTaskNote(task, state) !== state.note) {
    changes.push({ action: 'updated', scheduleId });
  }
  const paused = wantedTaskState(task, state).paused;
  if (paused !== state.paused) changes.push({ action: paused ? 'paused' : 'resumed', scheduleId });
  return changes;
}
