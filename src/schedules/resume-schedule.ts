import type { ScheduleHandle } from '@temporalio/client';

/**
 * Resumes a paused schedule with an update rather than Temporal's unpause patch. Both stop skipping slots from now on;
 * only an update stamps the schedule's `lastUpdatedAt` (an unpause leaves no time behind), and the missed-slot check
 * starts there, so the slots a pause skipped on purpose are never reported as missed.
 */
export async function resumeSchedule(handle: ScheduleHandle, note: string): Promise<void> {
  await handle.update((prev) => ({ ...prev, state: { ...prev.state, paused: false, note } }));
}
