import type { Client } from '@temporalio/client';
import type pg from 'pg';
import { taskScheduleId } from '../constants';
import type { TaskSchedules } from '../forecast/month-forecast';
import { mapWithConcurrency, TEMPORAL_CALL_CONCURRENCY } from './bounded-concurrency';
import { managedTaskSchedules } from './manage-task';
import { appliedFingerprintOf, appliedTaskOf } from './schedule-memos';
import { slotTimes } from './slot-times';

/**
 * Every cronledger task's schedule as the forecast reads it: its user, whether it is paused, the applied version it
 * names, and its nominal slot times in a range. The slot times are the Temporal server's, from the schedule's own
 * spec (slotTimes: paged, nominal even with jitter), the same rule backfill and the missed-slot check use.
 */
export async function taskSchedules(client: Client, pool: pg.Pool): Promise<TaskSchedules> {
  const described = await managedTaskSchedules(client, pool);
  return {
    tasks: described.flatMap(({ taskId, description: d }) => {
      const task = appliedTaskOf(d)?.task;
      if (!task) return [];
      return [
        { taskId, userId: task.userId, paused: d.state.paused || d.state.remainingActions === 0, fingerprint: appliedFingerprintOf(d) },
      ];
    }),
    async slots(ranges) {
      const lists = await mapWithConcurrency(ranges, TEMPORAL_CALL_CONCURRENCY, (r) =>
        r.to < r.from ? Promise.resolve([]) : slotTimes(client, taskScheduleId(r.taskId), r.from, r.to),
      );
      return new Map(ranges.map((r, i) => [r.taskId, lists[i]]));
    },
  };
}
