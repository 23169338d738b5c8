import { log, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';

/**
 * The budget sweeper, started by the `budget-sweep` schedule (every minute): reservations whose expiry has passed
 * are closed in every user's month (they stopped counting at their expiry; nothing else closes them), tasks paused for
 * budget (onBudgetExhausted "pause") are resumed once their month turned over or their limit was raised, then threshold
 * events that no run delivered are posted again under their own event IDs. A delivery that fails is left to a later pass (the event backs off), never fatal.
 *
 * Deterministic: no Node imports, no clock.
 */
export interface BudgetSweepResult {
  /** Reservations that stopped counting in this pass. */
  expired: number;
  /** Tasks paused for budget that this pass resumed. */
  resumed: number;
  delivered: number;
  notDelivered: number;
}

const sweeping = proxyActivities<Activities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 5 },
});

/** One attempt per pass: the schedule's next pass is the retry, and the event's own backoff spaces them out. */
const delivering = proxyActivities<Activities>({ startToCloseTimeout: '30 seconds', retry: { maximumAttempts: 1 } });

export async function budgetSweep(): Promise<BudgetSweepResult> {
  const { expired } = await sweeping.sweepExpiredReservations();
  const { resumed } = await sweeping.resumeBudgetPausedTasks();
  const { eventIds } = await sweeping.budgetEventsToRedeliver();
  let delivered = 0;
  let notDelivered = 0;
  for (const eventId of eventIds) {
    try {
      if ((await delivering.deliverBudgetEvent({ eventId })).delivered) delivered++;
    } catch (err) {
      notDelivered++;
      // an ActivityFailure's own message only names the activity; its cause says what went wrong
      const cause = err instanceof Error && err.cause instanceof Error ? err.cause : err;
      log.warn('budget event not delivered; a later sweep tries again', {
        eventId,
        error: cause instanceof Error ? cause.message : String(cause),
      });
    }
  }
  return { expired, resumed, delivered, notDelivered };
}
