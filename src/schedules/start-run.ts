import type { Client, WorkflowHandleWithFirstExecutionRunId, WorkflowIdReusePolicy } from '@temporalio/client';
import { UserError } from '../errors';
import { describeTaskSchedule } from './describe-schedule';
import { appliedTaskOf, type TaskActionMemo } from './schedule-memos';
import { runInputOf, TASK_ID_KEY, USER_ID_KEY } from './task-schedule';
import { scheduledRun, type ScheduledRunInput } from '../workflows/scheduled-run';

/** A task as last applied to its schedule (its prompt aside), its fingerprint, and the task queue its runs start on. */
export interface AppliedTask {
  task: TaskActionMemo['task'];
  fingerprint: string;
  taskQueue: string;
}

/** A slot's time in its workflow ID, to the second: cron-<task>-2026-11-02T09:00:00Z. */
export const nominalId = (slot: Date): string => slot.toISOString().replace(/\.\d{3}Z$/, 'Z');

/** Reads the task from its schedule's action memo: what the schedule itself would run. */
export async function appliedTask(client: Client, taskId: string): Promise<AppliedTask> {
  const description = await describeTaskSchedule(client, taskId);
  const applied = appliedTaskOf(description);
  if (!applied) throw new UserError(`schedule for task "${taskId}" has no task memo; run \`cronledger tasks apply FILE\` again`);
  return { task: applied.task, fingerprint: applied.fingerprint, taskQueue: description.action.taskQueue };
}

/**
 * Starts `scheduledRun` exactly as the task's schedule would (its argument, memo and search attributes, its task
 * queue), under the given workflow ID and reuse policy, with `extra` input (manual, retry) on top. The run checks the
 * task and fingerprint against task_versions like any other.
 */
export async function startRun(
  client: Client,
  applied: AppliedTask,
  opts: { workflowId: string; reusePolicy: WorkflowIdReusePolicy; extra?: Pick<ScheduledRunInput, 'manual' | 'retry'> },
): Promise<WorkflowHandleWithFirstExecutionRunId<typeof scheduledRun>> {
  const { task, fingerprint } = applied;
  const memo: TaskActionMemo = { fingerprint, task };
  return client.workflow.start(scheduledRun, {
    workflowId: opts.workflowId,
    taskQueue: applied.taskQueue,
    args: [{ ...runInputOf(task, fingerprint), ...opts.extra }],
    memo,
    typedSearchAttributes: [
      { key: TASK_ID_KEY, value: task.id },
      { key: USER_ID_KEY, value: task.userId },
    ],
    workflowIdReusePolicy: opts.reusePolicy,
  });
}
