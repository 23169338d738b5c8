import type { Client, ScheduleDescription } from '@temporalio/client';
import { describeSchedule } from './describe-schedule';
import { keptChanging, MAX_DROPPED_UPDATES, updateIfUnchanged } from './update-if-unchanged';

/**
 * Resumes a paused schedule with an update rather than Temporal's unpause patch. Both stop skipping slots from now on;
 * only an update stamps the schedule's `lastUpdatedAt` (an unpause leaves no time behind), and the missed-slot check
 * starts there, so the slots a pause skipped on purpose are never reported as missed. The update carries the
 * describe's conflict token (updateIfUnchanged), so a change that came in between, say a `tasks apply` with a new cron,
 * is never written over with what the describe showed: the schedule is described again and resumed from that, its
 * note made by `noteOf` from the schedule as it is then.
 */
export async function resumeSchedule(
  client: Client,
  described: ScheduleDescription,
  noteOf: (d: ScheduleDescription) => string,
): Promise<void> {
  let current = described;
  for (let sent = 0; sent < MAX_DROPPED_UPDATES; sent++) {
    const note = noteOf(current);
    await updateIfUnchanged(client, current, { ...current, state: { ...current.state, paused: false, note } });
    const after = await describeSchedule(client, current.scheduleId);
    const stamped = after.info.lastUpdatedAt?.getTime() !== current.info.lastUpdatedAt?.getTime();
    if (stamped && !after.state.paused && after.state.note === noteOf(after)) return;
    current = after;
  }
  throw keptChanging(described.scheduleId);
}
