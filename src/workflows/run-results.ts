import type { BookUsageResult } from '../activities/run-activities';
import type { RunDecision } from '../activities/budget-activities';
import type { BudgetReason } from './scheduled-run-types';

/** What a run reports of the pieces its steps return: pure functions, no workflow API. */

export const reasonOf = (d: RunDecision & { tier: 'blocked' }): BudgetReason => ({
  limitUsd: d.limitUsd,
  spentUsd: d.spentUsd,
  reservedUsd: d.reservedUsd,
  worstCaseUsd: d.worstCaseUsd,
  month: d.month,
  timeZone: d.timeZone,
});

export const costOf = (b: BookUsageResult): string | undefined => (b.booked === 'ledger' ? b.costUsd : undefined);

/** The innermost message: an ActivityFailure's own message only names the activity. */
export function messageOf(err: unknown): string {
  let e: unknown = err;
  while (e instanceof Error && e.cause instanceof Error) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}
