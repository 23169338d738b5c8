import { displayUsd } from '../money';
import type { BudgetStatus } from './budget-status';

/**
 * Budget status as display rows, the one table `budgets status` and a report's budget section both show: money as
 * `$0.000996` (half-even, 6 decimals), "no limit" where no budget applies. `right` lists the money columns.
 */
export function budgetStatusTable(status: BudgetStatus[]): { headers: string[]; rows: string[][]; right: number[] } {
  return {
    headers: ['User', 'Month', 'Zone', 'Limit', 'Spent', 'Reserved', 'Remaining', 'Tier'],
    rows: status.map((s) => [
      s.userId,
      s.month,
      s.timeZone,
      s.limitUsd === null ? 'no limit' : displayUsd(s.limitUsd),
      displayUsd(s.spentUsd),
      displayUsd(s.reservedUsd),
      s.remainingUsd === null ? '-' : displayUsd(s.remainingUsd),
      s.tier,
    ]),
    right: [3, 4, 5, 6],
  };
}
