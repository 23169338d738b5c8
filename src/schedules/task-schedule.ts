import type { ScheduleOptions } from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE, SEARCH_ATTRIBUTES, taskScheduleId } from '../constants';
import { fingerprintOf } from '../hash';
import { scheduledRun, type ScheduledRunInput } from '../workflows/scheduled-run';
import { parseDuration } from '../tasks/duration';
import type { Task } from '../tasks/tasks-file';
import type { TaskActionMemo } from './schedule-memos';

export const TASK_ID_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.taskId, SearchAttributeType.KEYWORD);
export const USER_ID_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.userId, SearchAttributeType.KEYWORD);
/** Set by the run itself (its budget tier); servers must register it, or the run's workflow task fails. */
export const TIER_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.tier, SearchAttributeType.KEYWORD);

/** What a scheduled run of this task receives as its argument. */
export const runInputOf = (task: Task): ScheduledRunInput => ({
  taskId: task.id,
  userId: task.userId,
  input: task.input,
  model: task.model,
  embeddingModel: task.embeddingModel,
  maxOutputTokens: task.maxOutputTokens,
  ...(task.simulate ? { simulate: task.simulate } : {}),
});

/**
 * Fingerprint of the whole task, nested keys (`simulate`) included, except `paused` (compared against the schedule's
 * state instead). Stored in the action memo, since Temporal compiles cron strings into calendars and can't give them back.
 */
export function taskFingerprint(task: Task, taskQueue: string): string {
  const { paused: _paused, ...fields } = task;
  return fingerprintOf({ taskQueue, ...fields });
}

/**
 * The schedule for a task. The action's workflow ID is `cron-<taskId>`; the server appends the nominal time, so each
 * slot's workflow is `cron-<taskId>-<RFC3339 time>`. Overlap ALLOW_ALL: slots are independent work, and a slow run
 * must not make the next slot (or a caught-up one) be skipped; duplicates are stopped by IDs and the slot claim.
 */
export function scheduleOptionsFor(task: Task, taskQueue: string): ScheduleOptions {
  const memo: TaskActionMemo = { fingerprint: taskFingerprint(task, taskQueue), task, input: task.input };
  return {
    scheduleId: taskScheduleId(task.id),
    spec: {
      cronExpressions: [task.cron],
      timezone: task.timezone,
      ...(task.jitter ? { jitter: parseDuration(task.jitter) } : {}),
    },
    action: {
      type: 'startWorkflow',
      workflowType: scheduledRun,
      workflowId: taskScheduleId(task.id),
      taskQueue,
      args: [runInputOf(task)],
      memo,
      typedSearchAttributes: [
        { key: TASK_ID_KEY, value: task.id },
        { key: USER_ID_KEY, value: task.userId },
      ],
    },
    policies: { catchupWindow: parseDuration(task.catchupWindow), overlap: 'ALLOW_ALL' },
    state: { paused: task.paused, note: 'managed by cronledger tasks apply' },
    memo: { [MANAGED_BY_MEMO_KEY]: MANAGED_BY_VALUE, kind: 'task', taskId: task.id },
  };
}
