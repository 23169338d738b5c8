import { ScheduleAlreadyRunning, type Client, type ScheduleDescription, type ScheduleOptions } from '@temporalio/client';
import { UserError } from '../errors';
import { describeOrUndefined, describeSchedule } from './describe-schedule';
import { appliedFingerprintOf, isManagedSchedule } from './schedule-memos';
import { keptChanging, MAX_DROPPED_UPDATES, updateIfUnchanged } from './update-if-unchanged';

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
 * and the update then writes its whole state over the pause. Each update is made from the latest describe and is
 * dropped if the schedule changed since (updateIfUnchanged); the schedule is then described again and the state
 * asked of `stateOf` for what it became, so a pause that came in between is judged, never written over.
 */
export async function reconcileSchedule(client: Client, wanted: WantedSchedule): Promise<ReconcileResult> {
  const { options } = wanted;
  let current = await describeOrUndefined(client, options.scheduleId);
  if (!current) {
    try {
      await client.schedule.create(options);
      return { outcome: 'created' };
    } catch (err) {
      if (!(err instanceof ScheduleAlreadyRunning)) throw err;
      current = await describeSchedule(client, options.scheduleId);
    }
  }
  return reconcileFrom(client, wanted, current);
}

export interface WantedSchedule {
  options: ScheduleOptions;
  fingerprint: string;
  kind: string;
  notOurs: string;
  stateOf?: (state: ScheduleState) => ScheduleState;
}

/** reconcileSchedule's update of an existing schedule, from `before`, its description (which may be out of date). */
export async function reconcileFrom(client: Client, wanted: WantedSchedule, before: ScheduleDescription): Promise<ReconcileResult> {
  const { options, stateOf } = wanted;
  let current = before;
  for (let sent = 0; ; sent++) {
    if (!isManagedSchedule(current.memo, wanted.kind)) throw new UserError(wanted.notOurs);
    const state = stateOf?.(current.state);
    if (appliedFingerprintOf(current) === wanted.fingerprint && (!state || sameState(state, current.state))) {
      return { outcome: sent === 0 ? 'unchanged' : 'updated', before };
    }
    if (sent === MAX_DROPPED_UPDATES) throw keptChanging(options.scheduleId);
    await updateIfUnchanged(client, current, {
      spec: options.spec,
      action: options.action,
      policies: options.policies,
      state: { ...current.state, ...state },
    });
    current = await describeSchedule(client, options.scheduleId);
  }
}

/** A schedule's pause state and note, as `stateOf` sees and returns them. */
export type ScheduleState = { paused: boolean; note?: string };

const sameState = (a: ScheduleState, b: ScheduleState): boolean => a.paused === b.paused && (a.note ?? '') === (b.note ?? '');
