import type { Client, ScheduleDescription } from '@temporalio/client';
import { retryDeadlineExceeded } from '../../src/temporal-reads';

/**
 * A schedule's description, asked again when the server answers DEADLINE_EXCEEDED, as the product's own reads are
 * (describeOrUndefined): the describe is a query to the scheduler workflow, which a dev server loaded by the suite's
 * other files answers late now and then. Any other error, a missing schedule included, is thrown.
 */
export const describeSchedule = (client: Client, scheduleId: string): Promise<ScheduleDescription> =>
  retryDeadlineExceeded(() => client.schedule.getHandle(scheduleId).describe());
