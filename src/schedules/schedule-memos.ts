import type { ScheduleDescription } from '@temporalio/client';
import { z } from 'zod';
import { MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE } from '../constants';
import { taskSchema } from '../tasks/tasks-file';

// What cronledger writes into its schedules' memos, read back. A leaf among the schedule files: describing,
// reconciling and building schedules all read memos, and this file imports none of them.

/** Whether a schedule's memo marks it as cronledger's, of this kind (`task`, `report`). */
export const isManagedSchedule = (memo: Record<string, unknown> | undefined, kind: string): boolean =>
  memo?.[MANAGED_BY_MEMO_KEY] === MANAGED_BY_VALUE && memo?.kind === kind;

export const isManagedTaskSchedule = (memo: Record<string, unknown> | undefined): boolean => isManagedSchedule(memo, 'task');

export const isManagedReportSchedule = (memo: Record<string, unknown> | undefined): boolean => isManagedSchedule(memo, 'report');

/** Every cronledger schedule's action memo carries the fingerprint of what was applied (Temporal can't give a cron back). */
const fingerprintMemo = z.object({ fingerprint: z.string() });

/** The fingerprint in a schedule's action memo, or undefined when it has none (an old or foreign schedule). */
export const appliedFingerprintOf = (description: ScheduleDescription): string | undefined =>
  fingerprintMemo.safeParse(description.action.memo).data?.fingerprint;

/**
 * The memo every scheduled run carries (visible in the Web UI): the task as applied without its prompt (`input`),
 * which only task_versions holds.
 */
const taskActionMemoSchema = z.object({ fingerprint: z.string(), task: taskSchema.omit({ input: true }) });
export type TaskActionMemo = z.infer<typeof taskActionMemoSchema>;

/** The task as last applied (its prompt aside), read back from a schedule's action memo; undefined when the memo holds no valid task. */
export const appliedTaskOf = (description: ScheduleDescription): TaskActionMemo | undefined =>
  taskActionMemoSchema.safeParse(description.action.memo).data;
