import { ScheduleAlreadyRunning, type Client, type ScheduleDescription, type ScheduleOptions } from '@temporalio/client';
import { UserError } from '../errors';
import { describeOrUndefined } from './describe-schedule';
import { appliedFingerprintOf, isManagedSchedule } from './schedule-memos';

export type ReconcileResult =
  | { outcome: 'created' }
  /** The schedule as it was before this call (its pause state is left to the caller). */
  | { outcome: 'updated' | 'unchanged'; before: ScheduleDescription };

/**
 * Creates the schedule, or updates its spec, action and policies when the fingerprint applied to it differs from
 * `fingerprint`. Running it again with the same options changes nothing; concurrent callers converge (a create that
 * loses the race reconciles with what the winner made). A schedule with that ID that cronledger did not create (its
 * memo is not `kind`) is never touched: `notOurs` is the UserError's message, naming the fix. With `noteOf`, the
 * schedule's note is kept to what it returns for the schedule's state (paused or not, the note it has): a stale note
 * alone is an update.
 */
export async function reconcileSchedule(
  client: Client,
  wanted: {
    options: ScheduleOptions;
    fingerprint: string;
    kind: string;
    notOurs: string;
    noteOf?: (state: { paused: boolean; note?: string }) => string;
  },
): Promise<ReconcileResult> {
  const { options } = wanted;
  let current = await describeOrUndefined(client, options.scheduleId);
  if (!current) {
    try {
      await client.schedule.create(options);
      return { outcome: 'created' };
    } catch (err) {
      if (!(err instanceof ScheduleAlreadyRunning)) throw err;
      current = await client.schedule.getHandle(options.scheduleId).describe();
    }
  }
  if (!isManagedSchedule(current.memo, wanted.kind)) throw new UserError(wanted.notOurs);
  const { noteOf } = wanted;
  const noteStale = noteOf !== undefined && noteOf(current.state) !== current.state.note;
  if (appliedFingerprintOf(current) === wanted.fingerprint && !noteStale) return { outcome: 'unchanged', before: current };
  await client.schedule.getHandle(options.scheduleId).update((prev) => ({
    ...prev,
    spec: options.spec,
    action: options.action,
    policies: options.policies,
    ...(noteOf ? { state: { ...prev.state, note: noteOf(prev.state) } } : {}),
  }));
  return { outcome: 'updated', before: current };
}
