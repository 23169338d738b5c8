import type { Client, ScheduleDescription } from '@temporalio/client';
import type pg from 'pg';
import { budgetPauseIntervals, inPause } from '../budgets/budget-pauses';
import { slotClaimMinutes } from '../db/runs';
import { mapWithConcurrency, TEMPORAL_CALL_CONCURRENCY } from './bounded-concurrency';
import { managedTaskSchedules } from './manage-task';
import { matchingTimes } from './slot-times';

/**
 * Missed slots: times a task's schedule should have fired (from its spec, computed by the Temporal server) that have no
 * claim in PostgreSQL a grace period later. A schedule can stop firing, or fire into a task queue nobody polls, without
 * any error; this is how that shows. Reads only: Temporal's describe and ListScheduleMatchingTimes, and the runs table.
 */

/** 15 minutes: more than the default catch-up window (10m), so a slot caught up after a short outage is not flagged. */
export const DEFAULT_MISSED_SLOT_GRACE_MS = 15 * 60_000;
/** How far back slots are checked (and never before the schedule was created or last updated). */
export const DEFAULT_MISSED_SLOT_WINDOW_MS = 24 * 60 * 60_000;
/** The newest missed slots listed per task; the count covers them all. */
const LISTED = 20;
const MINUTE = 60_000;

export interface MissedSlotOptions {
  graceMs: number;
  windowMs: number;
  now?: Date;
  /** How many tasks are checked at once (default 16). */
  concurrency?: number;
}

export interface TaskSlotCheck {
  taskId: string;
  /** paused (or out of actions): nothing is expected of it, so nothing is checked */
  state: 'active' | 'paused';
  /** The slots checked fire in [checkedFrom, checkedTo]; null when nothing was checked. */
  checkedFrom: string | null;
  checkedTo: string | null;
  /** Slots due in the checked range, claimed or not. */
  dueSlots: number;
  /** Unclaimed slots that fell while cronledger had the task paused for budget (onBudgetExhausted "pause"): not missed. */
  skippedForBudget: number;
  missedCount: number;
  /** The newest missed slots (when each should have fired, UTC), newest first, at most 20. */
  missed: string[];
}

const iso = (d: Date) => d.toISOString().replace('.000Z', 'Z');

/**
 * Every cronledger task, sorted by ID, with its missed slots. Per task: one describe and the matching times (one call
 * per 1,000 times, and one that comes back empty), with at most `concurrency` tasks (default 16) in flight.
 */
export async function missedSlots(client: Client, pool: pg.Pool, opts: MissedSlotOptions): Promise<TaskSlotCheck[]> {
  const now = opts.now ?? new Date();
  const schedules = await managedTaskSchedules(client, pool);
  return mapWithConcurrency(schedules, opts.concurrency ?? TEMPORAL_CALL_CONCURRENCY, ({ taskId, description }) =>
    checkTask(client, pool, taskId, description, now, opts),
  );
}

async function checkTask(
  client: Client,
  pool: pg.Pool,
  taskId: string,
  d: ScheduleDescription,
  now: Date,
  opts: MissedSlotOptions,
): Promise<TaskSlotCheck> {
  const unchecked = { taskId, checkedFrom: null, checkedTo: null, dueSlots: 0, skippedForBudget: 0, missedCount: 0, missed: [] };
  if (d.state.paused || d.state.remainingActions === 0) return { ...unchecked, state: 'paused' };
  // The spec in force applies from the schedule's creation or last update (which is also how cronledger resumes a
  // pause, see resume-schedule.ts): the server itself drops slots before its last update.
  const from = new Date(Math.max(d.info.createdAt.getTime(), d.info.lastUpdatedAt?.getTime() ?? 0, now.getTime() - opts.windowMs));
  const to = new Date(now.getTime() - opts.graceMs);
  if (to < from) return { ...unchecked, state: 'active' };

  const jitterMs = d.spec.jitter ?? 0;
  const times = await matchingTimes(client, d.scheduleId, new Date(from.getTime() - jitterMs), to);
  const claims = await slotClaimMinutes(pool, taskId, new Date(from.getTime() - jitterMs - MINUTE), to);
  const { due, missed: unclaimed } = unclaimedSlots({ times, claims, from, createdAt: d.info.createdAt, jitterMs });
  // a budget pause is resumed with an unpause, which leaves lastUpdatedAt (and so `from`) where it was: the slots it
  // skipped are in range, and told apart here
  const pauses = unclaimed.length > 0 ? await budgetPauseIntervals(pool, taskId, unclaimed[0], to) : [];
  const missed = unclaimed.filter((t) => !inPause(t, pauses));
  return {
    taskId,
    state: 'active',
    checkedFrom: iso(from),
    checkedTo: iso(to),
    dueSlots: due,
    skippedForBudget: unclaimed.length - missed.length,
    missedCount: missed.length,
    missed: missed.reverse().slice(0, LISTED).map(iso),
  };
}

/**
 * The due slots among `times` (the schedule's fire times from `from - jitterMs` on, ascending) and those with no claim
 * among `claims` (claimed nominal minutes, ascending). Only times at or after `from` are slots; earlier ones are bounds.
 *
 * With jitter the server lists the jittered fire times, while claims name the nominal minute. A slot fires at or after
 * its nominal time, less than the jitter later and before the next nominal time (the server caps the jitter there), so
 * its nominal minute lies in (max(previous fire time, fire time - jitter), fire time], and so does its claim. The
 * server only fires nominal times after the schedule's creation, and a jittered slot that fires after it may have its
 * nominal minute before it: with jitter under a minute that interval holds one minute, which decides; with more, a slot
 * whose interval straddles the creation can't be told and is left unchecked.
 */
export function unclaimedSlots(s: { times: Date[]; claims: Date[]; from: Date; createdAt: Date; jitterMs: number }): {
  due: number;
  missed: Date[];
} {
  const missed: Date[] = [];
  let due = 0;
  let c = 0; // both lists are in time order, and so are the slots' lower bounds: one pass
  s.times.forEach((fires, i) => {
    if (fires < s.from) return;
    const after =
      s.jitterMs === 0 ? fires.getTime() - 1 : Math.max(i > 0 ? s.times[i - 1].getTime() : -Infinity, fires.getTime() - s.jitterMs);
    const earliestNominal = Math.floor(after / MINUTE) * MINUTE + MINUTE;
    if (earliestNominal <= s.createdAt.getTime()) return;
    due++;
    while (c < s.claims.length && s.claims[c].getTime() <= after) c++;
    if (!(c < s.claims.length && s.claims[c] <= fires)) missed.push(fires);
  });
  return { due, missed };
}
