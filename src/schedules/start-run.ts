import type { Client, WorkflowHandleWithFirstExecutionRunId, WorkflowIdReusePolicy } from '@temporalio/client';
import { UserError } from '../errors';
import { describeTaskSchedule } from './describe-schedule';
import { appliedTaskOf } from './schedule-memos';
import { runInputOf, scheduleOptionsFor } from './task-schedule';
import type { Task } from '../tasks/tasks-file';
import { scheduledRun, type ScheduledRunInput } from '../workflows/scheduled-run';

/** A task as last applied to its schedule, and the task queue its schedule starts runs on. */
export interface AppliedTask {
  task: Task;
  taskQueue: string;
}

/** Reads the task from its schedule's action memo: what the schedule itself would run. */
export async function appliedTask(client: Client, taskId: string): Promise<AppliedTask> {
  const description = await describeTaskSchedule(client, taskId);
  const applied = appliedTaskOf(description);
  if (!applied) throw new UserError(`schedule for task "${taskId}" has no task memo; run \`cronledger tasks apply FILE\` again`);
  return { task: applied.task, taskQueue: description.action.taskQueue };
}

/**
 * Starts `scheduledRun` exactly as the task's schedule would (its argument, memo and search attributes, its task
 * queue), under the given workflow ID and reuse policy, with `extra` input (manual, retry) on top.
 */
export async function startRun(
  client: Client,
  applied: AppliedTask,
  opts: { workflowId: string; reusePolicy: WorkflowIdReusePolicy; extra?: Pick<ScheduledRunInput, 'manual' | 'retry'> },
): Promise<WorkflowHandleWithFirstExecutionRunId<typeof scheduledRun>> {
  const action = scheduleOptionsFor(applied.task, applied.taskQueue).action;
  return client.workflow.start(scheduledRun, {
    workflowId: opts.workflowId,
    taskQueue: applied.taskQueue,
    args: [{ ...runInputOf(applied.task), ...opts.extra }],
    memo: action.memo,
    typedSearchAttributes: action.typedSearchAttributes,
    workflowIdReusePolicy: opts.reusePolicy,
  });
}
