import type { BookUsageResult } from '../activities/run-activities';
import type { RunDecision } from '../activities/budget-activities';
import type { BudgetReason, ScheduledRunResult } from './scheduled-run-types';

/** What a run reports of the pieces its steps return: pure functions, no workflow API. */

export const reasonOf = (d: RunDecision & { tier: 'blocked' }): BudgetReason => ({
  limitUsd: d.limitUsd,
  spentUsd: d.spentUsd,
  reservedUsd: d.reservedUsd,
  worstCaseUsd: d.worstCaseUsd,
  month: d.month,
  timeZone: d.timeZone,
  ...(d.reason ? { reason: d.reason } : {}),
  ...(d.maxCostPerRunUsd ? { maxCostPerRunUsd: d.maxCostPerRunUsd } : {}),
});

/** Why a run that runs was downgraded, when its budget's band alone did not: the task's cap, or a wait's end. */
export function downgradeOf(d: RunDecision, waitedSeconds: number | undefined): ScheduledRunResult['downgraded'] {
  if (d.tier !== 'cheap' || (d.reason !== 'max-cost-per-run' && d.reason !== 'waited-for-reservations')) return undefined;
  return {
    reason: d.reason,
    ...(d.maxCostPerRunUsd ? { maxCostPerRunUsd: d.maxCostPerRunUsd } : {}),
    ...(waitedSeconds === undefined ? {} : { waitedSeconds }),
  };
}

export const costOf = (b: BookUsageResult): string | undefined => (b.booked === 'ledger' ? b.costUsd : undefined);

/** The innermost message: an ActivityFailure's own message only names the activity. */
export function messageOf(err: unknown): string {
  let e: unknown = err;
  while (e instanceof Error && e.cause instanceof Error) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}
