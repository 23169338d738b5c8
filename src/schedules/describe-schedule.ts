import { ScheduleNotFoundError, type Client, type ScheduleDescription } from '@temporalio/client';
import { taskScheduleId } from '../constants';
import { UserError } from '../errors';
import { retryDeadlineExceeded } from '../temporal-reads';
import { isManagedTaskSchedule } from './schedule-memos';

/** A schedule's description, asked again when a loaded server answers DEADLINE_EXCEEDED; a missing schedule throws. */
export const describeSchedule = (client: Client, scheduleId: string): Promise<ScheduleDescription> =>
  retryDeadlineExceeded(() => client.schedule.getHandle(scheduleId).describe());

export async function describeOrUndefined(client: Client, scheduleId: string): Promise<ScheduleDescription | undefined> {
  try {
    return await describeSchedule(client, scheduleId);
  } catch (err) {
    if (err instanceof ScheduleNotFoundError) return undefined;
    throw err;
  }
}

/** The description of a task's schedule, or a UserError saying how to create it. */
export async function describeTaskSchedule(client: Client, taskId: string): Promise<ScheduleDescription> {
  const d = await describeOrUndefined(client, taskScheduleId(taskId));
  if (!d || !isManagedTaskSchedule(d.memo)) {
    throw new UserError(
      `task "${taskId}" has no cronledger schedule (${taskScheduleId(taskId)}); add it to your tasks file and run \`cronledger tasks apply FILE\``,
    );
  }
  return d;
}
