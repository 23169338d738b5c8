import { WorkflowExecutionAlreadyStartedError, type Client, type ScheduleDescription } from '@temporalio/client';
import type pg from 'pg';
import { TASK_SCHEDULE_PREFIX, taskScheduleId } from '../constants';
import { appliedTaskIds } from '../db/applied-tasks';
import { UserError } from '../errors';
import { manualKey } from '../workflows/scheduled-time';
import { appliedTask, nominalId, startRun } from './start-run';
import { latestRunsWithCostPerTask } from '../db/runs';
import { describeOrUndefined, describeTaskSchedule } from './describe-schedule';
import { resumeSchedule } from './resume-schedule';
import { appliedTaskOf, isManagedTaskSchedule } from './schedule-memos';
import { taskNoteOf } from '../task-note';
import { mapWithConcurrency, TEMPORAL_CALL_CONCURRENCY } from './bounded-concurrency';

export interface TaskListing {
  id: string;
  scheduleId: string;
  cron: string;
  timezone: string;
  userId: string;
  paused: boolean;
  nextFireTimes: string[];
  lastRuns: { scheduledMinute: string; status: string; workflowId: string }[];
}

/**
 * The IDs of every task that has a cronledger schedule right now, sorted. Temporal's schedule list reads visibility,
 * which is eventually consistent: a schedule created a moment ago may be missing from it, and one deleted a moment
 * ago may linger. So the candidates are the list together with the task IDs `tasks apply` recorded in PostgreSQL
 * (written before it returned), and each candidate is described, which reads the schedule itself.
 */
export async function managedTaskIds(client: Client, pool: pg.Pool): Promise<string[]> {
  return (await managedTaskSchedules(client, pool)).map((s) => s.taskId);
}

/** managedTaskIds with each schedule's description (one describe per candidate, at most 16 in flight), sorted by task ID. */
export async function managedTaskSchedules(client: Client, pool: pg.Pool): Promise<{ taskId: string; description: ScheduleDescription }[]> {
  const candidates = new Set(await appliedTaskIds(pool));
  for await (const s of client.schedule.list()) {
    if (s.scheduleId.startsWith(TASK_SCHEDULE_PREFIX)) candidates.add(s.scheduleId.slice(TASK_SCHEDULE_PREFIX.length));
  }
  const described = await mapWithConcurrency([...candidates].sort(), TEMPORAL_CALL_CONCURRENCY, async (taskId) => ({
    taskId,
    description: await describeOrUndefined(client, taskScheduleId(taskId)),
  }));
  return described.flatMap(({ taskId, description }) =>
    description && isManagedTaskSchedule(description.memo) ? [{ taskId, description }] : [],
  );
}

/** Every cronledger task schedule with its next fire times (from Temporal) and its last runs (from PostgreSQL). */
export async function listTasks(client: Client, pool: pg.Pool): Promise<TaskListing[]> {
  // The description that proved a schedule cronledger's is the one listed: no second describe per task.
  const schedules = await managedTaskSchedules(client, pool);
  const lastRuns = await latestRunsWithCostPerTask(
    pool,
    schedules.map((s) => s.taskId),
    3,
  );
  return schedules.map(({ taskId, description: d }) => {
    const task = appliedTaskOf(d)?.task;
    const runs = lastRuns.get(taskId) ?? [];
    return {
      id: taskId,
      scheduleId: taskScheduleId(taskId),
      cron: task?.cron ?? '?',
      timezone: task?.timezone ?? '?',
      userId: task?.userId ?? '?',
      paused: d.state.paused,
      nextFireTimes: d.info.nextActionTimes.slice(0, 3).map((t) => t.toISOString().replace('.000Z', 'Z')),
      lastRuns: runs.map((r) => ({
        scheduledMinute: r.scheduled_minute.toISOString(),
        status: r.status,
        workflowId: r.workflow_id,
      })),
    };
  });
}

export type TaskOperation = 'pause' | 'resume' | 'delete';

/** Pause, resume or delete one task's schedule. Refuses schedules cronledger did not create. */
export async function operateOnTask(client: Client, taskId: string, op: TaskOperation): Promise<void> {
  const described = await describeTaskSchedule(client, taskId); // throws a UserError with the fix if the task has no schedule
  const handle = client.schedule.getHandle(taskScheduleId(taskId));
  // the note keeps the task's cron line (task-note.ts); a schedule whose memo holds no task gets the bare reason
  const task = appliedTaskOf(described)?.task;
  switch (op) {
    case 'pause': {
      const reason = 'paused with cronledger tasks pause';
      return handle.pause(task ? taskNoteOf(task, reason) : reason);
    }
    case 'resume':
      // the note from the schedule as each describe finds it: an apply that came in between has the last word on the cron
      return resumeSchedule(client, described, (d) => {
        const applied = appliedTaskOf(d)?.task;
        return applied ? taskNoteOf(applied) : 'resumed with cronledger tasks resume';
      });
    case 'delete':
      return handle.delete();
  }
}

/**
 * Starts a manual run of a task now: not the schedule's trigger, which would claim the current minute's slot and so
 * collide with (or be swallowed by) a real slot of that minute. The run gets its own ID, `cron-<taskId>-manual-<now,
 * to the second>`, and `manual: true`, so it claims `manual:<taskId>:<now>`, a key no slot ever uses.
 */
export async function triggerManualRun(
  client: Client,
  taskId: string,
): Promise<{ workflowId: string; runId: string; idempotencyKey: string }> {
  const applied = await appliedTask(client, taskId);
  const now = new Date(Math.floor(Date.now() / 1000) * 1000);
  const workflowId = `${taskScheduleId(taskId)}-manual-${nominalId(now)}`;
  try {
    const handle = await startRun(client, applied, { workflowId, reusePolicy: 'REJECT_DUPLICATE', extra: { manual: true } });
    return { workflowId, runId: handle.firstExecutionRunId, idempotencyKey: manualKey(taskId, now) };
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) {
      throw new UserError(`a manual run of task "${taskId}" started this very second (${workflowId}); trigger it again in a second`);
    }
    throw err;
  }
}
