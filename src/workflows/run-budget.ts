import {
  type LocalActivityOptions,
  log,
  proxyActivities,
  proxyLocalActivities,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
  type CancellationScope,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { ReserveRunInput, RunDecision } from '../activities/budget-activities';
import { SEARCH_ATTRIBUTES } from '../constants';
import { messageOf } from './run-results';
import type { BudgetReason, ScheduledRunResult } from './scheduled-run-types';

/**
 * What a run does about money besides its calls (scheduled-run.ts): the bookkeeping steps' placement, the wait for
 * other runs' reservations, ending blocked (and pausing the task's schedule), and delivering threshold events.
 */

/**
 * The database steps (claim with the first reservation, bookings, reservations for calls made again, release,
 * completion) are local activities: they run in the worker that runs the workflow task, with no round trip through
 * the server. A local activity's result is durable only once its workflow task completes, so a worker that dies first
 * makes the next one run the step again; each step is idempotent on a key the re-run repeats (the slot's claim key
 * and run ID, the ledger key `<runId>:<step>:<attempt>`, the reservation's key, the memory once per execution), and a
 * booking's input is a call result already in history, so a crash delays a booking and never loses it. Retried
 * without limit: a database outage is a wait, never a failed run or a repeated call. Backoffs under a minute wait in
 * the workflow task (the SDK heartbeats it), longer ones become durable timers.
 */
export const LOCAL_BOOKKEEPING_OPTIONS: LocalActivityOptions = {
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
};
export const bookkeeping = proxyLocalActivities<Activities>(LOCAL_BOOKKEEPING_OPTIONS);

/** Threshold events go to an outside webhook that may stay down for minutes: activities, off the run's path, 20 tries. */
const budgetEvents = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

/**
 * How a run whose first decision waits for other runs' open reservations asks again: after a durable timer, the first
 * 1 s, doubling to at most 30 s, until it has waited the worker's longest (waitMaxSeconds, CRONLEDGER_BUDGET_WAIT_MAX).
 */
export const BUDGET_WAIT_BACKOFF = { initialMs: 1_000, maximumMs: 30_000 };

/**
 * Pausing a task's schedule for budget talks to Temporal, so it is an activity; off the money path, a few tries, and a
 * failure only logged: the task's next blocked run pauses it.
 */
const schedulePausing = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 5 },
});

/** A claimed run, as its later steps need it. */
export interface Run {
  idempotencyKey: string;
  scheduledMinute: string;
  manual?: boolean;
  generation: number;
  who: { workflowId: string; runId: string; taskId: string; userId: string };
  /** The reservation request, on the models the decision picked; a call made again reserves with it. */
  budget: ReserveRunInput;
  /** Threshold events being delivered (none: undefined); awaited before the run returns. */
  deliveries: Promise<unknown> | undefined;
  /** The steps a cancel must not interrupt (claim, bookings, closing steps) run in this scope. */
  shield: CancellationScope;
  /** The task's onBudgetExhausted: 'pause' pauses its schedule when the budget blocks the run. */
  onBudgetExhausted?: 'block' | 'pause';
}

/**
 * Other runs' open reservations alone keep the run's first decision from its tier ('wait'): it asks again after a
 * durable timer, backing off (BUDGET_WAIT_BACKOFF), until they have settled and it is decided as it would be alone, or
 * until it has waited waitMaxSeconds; then it is decided counting them (reason 'waited-for-reservations'). Timers, not
 * the decision's local-activity retry: the wait's start and every timer are in history, so the bound holds across
 * worker restarts and a long wait holds no worker slot, where a retrying local activity keeps its attempts in the
 * worker's memory until it completes.
 */
export async function awaitReservations(
  budget: ReserveRunInput,
  first: RunDecision & { tier: 'wait' },
): Promise<{ decision: Exclude<RunDecision, { tier: 'wait' }>; waitedSeconds: number }> {
  const started = Date.now();
  const until = started + first.waitMaxSeconds * 1000;
  log.info("budget decision waits for other runs' open reservations", {
    reservedUsd: first.reservedUsd,
    waitMaxSeconds: first.waitMaxSeconds,
  });
  for (let delay = BUDGET_WAIT_BACKOFF.initialMs; ; delay = Math.min(delay * 2, BUDGET_WAIT_BACKOFF.maximumMs)) {
    if (Date.now() < until) await sleep(Math.min(delay, until - Date.now()));
    const decision = await bookkeeping.reserveBudget(Date.now() >= until ? { ...budget, waited: true } : budget);
    if (decision.tier !== 'wait') return { decision, waitedSeconds: Math.round((Date.now() - started) / 1000) };
  }
}

/**
 * The budget does not fit the run (before its first call) or a call made again: no further call. What the run still
 * holds goes back to the budget, the claim closes `blocked` with the reason, and the workflow completes. Calls already
 * made stay booked. A task with onBudgetExhausted "pause" whose money ran out (not its maxCostPerRun, which no month
 * changes) has its schedule paused until the budget sweeper resumes it.
 */
export async function endBlocked(run: Run, reason: BudgetReason): Promise<ScheduledRunResult> {
  log.warn('budget exhausted: run blocked, no further model call', { ...reason });
  if (reason.blockedBefore) upsertSearchAttributes([{ key: { name: SEARCH_ATTRIBUTES.tier, type: 'KEYWORD' }, value: 'blocked' }]);
  await run.shield.run(async () => {
    if (reason.blockedBefore) await bookkeeping.releaseBudget({ runId: workflowInfo().runId });
    await bookkeeping.completeRun({ idempotencyKey: run.idempotencyKey, status: 'blocked', tier: 'blocked', budget: { ...reason } });
  });
  if (run.onBudgetExhausted === 'pause' && reason.reason !== 'max-cost-per-run') {
    const { taskId, userId } = run.who;
    const { month, timeZone, limitUsd } = reason;
    await schedulePausing
      .pauseTaskForBudget({ taskId, userId, month, timeZone, limitUsd })
      .catch((err: unknown) =>
        log.error('task not paused for budget; its next blocked run tries again', { taskId, error: messageOf(err) }),
      );
  }
  await run.deliveries;
  const { idempotencyKey, scheduledMinute, manual, generation } = run;
  return { status: 'blocked', idempotencyKey, scheduledMinute, ...(manual ? { manual } : {}), generation, tier: 'blocked', budget: reason };
}

/**
 * Delivers the threshold events a decision recorded, beside the deliveries already under way; one that keeps failing
 * is logged, never fatal. No events (nearly every decision): no new promise, since the SDK records a stack trace for
 * every promise a workflow creates.
 */
export function deliverEvents(eventIds: string[] | undefined, underWay?: Promise<unknown>): Promise<unknown> | undefined {
  if (!eventIds?.length) return underWay;
  const these = Promise.all(
    eventIds.map((eventId) =>
      budgetEvents
        .deliverBudgetEvent({ eventId })
        .catch((err: unknown) => log.error('budget event not delivered', { eventId, error: messageOf(err) })),
    ),
  );
  return underWay ? Promise.all([underWay, these]) : these;
}
