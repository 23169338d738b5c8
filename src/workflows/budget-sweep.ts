import { log, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';

/**
 * The budget sweeper, started by the `budget-sweep` schedule (every minute): reservations whose expiry has passed
 * are closed in every user's month (they stopped counting at their expiry; nothing else closes them), tasks paused for
 * budget (onBudgetExhausted "pause") are resumed once their month turned over or their limit was raised, then threshold
 * events that no run delivered are posted again under their own event IDs. A delivery that fails is left to a later pass (the event backs off), never fatal.
 * Every FORECAST_EVERY_MINUTES (the passes that start on such a minute) it also forecasts every user's month
 * (src/forecast/), records the day's forecast and the `forecast-over-limit` event, and delivers that event at once.
 *
 * Deterministic: no Node imports; its only clock is the workflow's own (Date.now() in a workflow replays the same).
 */
export interface BudgetSweepResult {
  /** Reservations that stopped counting in this pass. */
  expired: number;
  /** Tasks paused for budget that this pass resumed. */
  resumed: number;
  /** Users forecast in this pass (0 when it was no forecast pass). */
  forecastUsers?: number;
  delivered: number;
  notDelivered: number;
}

const sweeping = proxyActivities<Activities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 5 },
});

/** One attempt per pass: the schedule's next pass is the retry, and the event's own backoff spaces them out. */
const delivering = proxyActivities<Activities>({ startToCloseTimeout: '30 seconds', retry: { maximumAttempts: 1 } });

/** A forecast reads every task's slots from the Temporal server: more time than a sweep step, and one retry. */
const forecasting = proxyActivities<Activities>({ startToCloseTimeout: '5 minutes', retry: { maximumAttempts: 2 } });

/** A forecast that fails (a model without a price, Temporal unreachable) is logged; the sweep's other work goes on. */
async function forecastOrNothing(): Promise<{ users: number; eventIds: string[] }> {
  try {
    return await forecasting.forecastBudgets();
  } catch (err) {
    const cause = err instanceof Error && err.cause instanceof Error ? err.cause : err;
    log.warn('forecast pass failed; the next one tries again', { error: cause instanceof Error ? cause.message : String(cause) });
    return { users: 0, eventIds: [] };
  }
}

/** How often the sweep forecasts: each forecast pass asks the Temporal server for every task's slots to the month's end. */
export const FORECAST_EVERY_MINUTES = 15;

export interface BudgetSweepInput {
  /** Forecast on the passes that start on a multiple of this many minutes (default FORECAST_EVERY_MINUTES; 1: every pass). */
  forecastEveryMinutes?: number;
}

export async function budgetSweep(input: BudgetSweepInput = {}): Promise<BudgetSweepResult> {
  const { expired } = await sweeping.sweepExpiredReservations();
  const { resumed } = await sweeping.resumeBudgetPausedTasks();
  // Date.now() is the workflow's clock (the workflow task's start), so the choice replays the same
  const every = input.forecastEveryMinutes ?? FORECAST_EVERY_MINUTES;
  const forecastPass = Math.floor(Date.now() / 60_000) % every === 0;
  const forecast = forecastPass ? await forecastOrNothing() : { users: 0, eventIds: [] };
  const redeliver = await sweeping.budgetEventsToRedeliver();
  const eventIds = [...new Set([...forecast.eventIds, ...redeliver.eventIds])];
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
  return { expired, resumed, ...(forecastPass ? { forecastUsers: forecast.users } : {}), delivered, notDelivered };
}
