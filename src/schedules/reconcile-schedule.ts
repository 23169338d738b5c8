import { ScheduleAlreadyRunning, type Client, type ScheduleDescription, type ScheduleOptions } from '@temporalio/client';
import { UserError } from '../errors';
import { describeOrUndefined } from './describe-schedule';
import { appliedFingerprintOf, isManagedSchedule } from './schedule-memos';

export type ReconcileResult =
  | { outcome: 'created' }
  /** The schedule as it was before this call. */
  | { outcome: 'updated' | 'unchanged'; before: ScheduleDescription };

/**
 * Creates the schedule, or updates its spec, action and policies when the fingerprint applied to it differs from
 * `fingerprint`. Running it again with the same options changes nothing; concurrent callers converge (a create that
 * loses the race reconciles with what the winner made). A schedule with that ID that cronledger did not create (its
 * memo is not `kind`) is never touched: `notOurs` is the UserError's message, naming the fix. With `stateOf`, the
 * schedule's state (paused or not, and its note) is kept to what it returns for the state the schedule is in: a stale
 * state alone is an update. The state goes in the same update as the spec, never as a separate pause or unpause:
 * Temporal's scheduler applies a pause (a patch) received in the same workflow task as an update before that update,
 * and the update then writes its whole state over the pause.
 */
export async function reconcileSchedule(
  client: Client,
  wanted: {
    options: ScheduleOptions;
    fingerprint: string;
    kind: string;
    notOurs: string;
    stateOf?: (state: ScheduleState) => ScheduleState;
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
  const { stateOf } = wanted;
  const stateStale = stateOf !== undefined && !sameState(stateOf(current.state), current.state);
  if (appliedFingerprintOf(current) === wanted.fingerprint && !stateStale) return { outcome: 'unchanged', before: current };
  await client.schedule.getHandle(options.scheduleId).update((prev) => ({
    ...prev,
    spec: options.spec,
    action: options.action,
    policies: options.policies,
    ...(stateOf ? { state: { ...prev.state, ...stateOf(prev.state) } } : {}),
  }));
  return { outcome: 'updated', before: current };
}

/** A schedule's pause state and note, as `stateOf` sees and returns them. */
export type ScheduleState = { paused: boolean; note?: string };

const sameState = (a: ScheduleState, b: ScheduleState): boolean => a.paused === b.paused && (a.note ?? '') === (b.note ?? '');
