import type { ScheduleOptions } from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE, SEARCH_ATTRIBUTES, taskScheduleId } from '../constants';
import { fingerprintOf } from '../hash';
import { scheduledRun, type ScheduledRunInput } from '../workflows/scheduled-run';
import { parseDuration } from '../tasks/duration';
import type { Task } from '../tasks/tasks-file';
import type { TaskActionMemo } from './schedule-memos';
import { PAUSED_BY_APPLY, taskNoteOf } from '../task-note';

export const TASK_ID_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.taskId, SearchAttributeType.KEYWORD);
export const USER_ID_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.userId, SearchAttributeType.KEYWORD);
/** Set by the run itself (its budget tier); servers must register it, or the run's workflow task fails. */
export const TIER_KEY = defineSearchAttributeKey(SEARCH_ATTRIBUTES.tier, SearchAttributeType.KEYWORD);

/**
 * What a scheduled run of this task receives as its argument: the task and the fingerprint of the version applied,
 * nothing else. The run loads the definition (user, prompt, models, output cap) from task_versions, so the prompt is
 * in neither the schedule nor the workflow's input, and a start that names no applied version is rejected.
 */
export const runInputOf = (task: Pick<Task, 'id'>, fingerprint: string): ScheduledRunInput => ({ taskId: task.id, fingerprint });

/** The shape of the schedule's action (its argument and memo); part of every fingerprint, see taskFingerprint. */
const ACTION_SHAPE = 'task-and-fingerprint';

/**
 * Fingerprint of the whole task, nested keys (`simulate`) included, except `paused` (compared against the schedule's
 * state instead), with its task queue and the action's shape, so a schedule whose action has another shape is updated
 * by the next apply. Stored in the action memo, since Temporal compiles cron strings into calendars and can't give
 * them back, and in task_versions, where a run finds the definition its schedule names.
 */
export function taskFingerprint(task: Task, taskQueue: string): string {
  const { paused: _paused, ...fields } = task;
  return fingerprintOf({ taskQueue, ...fields, actionShape: ACTION_SHAPE });
}

/** The memo of a task's schedule and of the runs started like its schedule's: the task as applied, its prompt aside. */
export const taskActionMemoOf = (task: Task, fingerprint: string): TaskActionMemo => {
  const { input: _prompt, ...shown } = task;
  return { fingerprint, task: shown };
};

/**
 * The schedule for a task. The action's workflow ID is `cron-<taskId>`; the server appends the nominal time, so each
 * slot's workflow is `cron-<taskId>-<RFC3339 time>`. Overlap ALLOW_ALL: slots are independent work, and a slow run
 * must not make the next slot (or a caught-up one) be skipped; duplicates are stopped by IDs and the slot claim.
 */
export function scheduleOptionsFor(task: Task, taskQueue: string): ScheduleOptions {
  const fingerprint = taskFingerprint(task, taskQueue);
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
      args: [runInputOf(task, fingerprint)],
      memo: taskActionMemoOf(task, fingerprint),
      typedSearchAttributes: [
        { key: TASK_ID_KEY, value: task.id },
        { key: USER_ID_KEY, value: task.userId },
      ],
    },
    policies: { catchupWindow: parseDuration(task.catchupWindow), overlap: 'ALLOW_ALL' },
    state: { paused: task.paused, note: task.paused ? taskNoteOf(task, PAUSED_BY_APPLY) : taskNoteOf(task) },
    memo: { [MANAGED_BY_MEMO_KEY]: MANAGED_BY_VALUE, kind: 'task', taskId: task.id },
  };
}
