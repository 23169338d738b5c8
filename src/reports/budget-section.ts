import type pg from 'pg';
import { budgetStatusOfAll } from '../budgets/budget-status';
import { anyBudget } from '../budgets/budgets-store';
import { budgetPauseFigures } from '../budgets/budget-pauses';
import { downgradeSavings } from '../budgets/downgrade-savings';
import { forecastAccuracy } from '../forecast/forecast-records';
import { parseUsd, toAttoUsd } from '../money';
import type { Month } from './month';
import type { MonthSums } from './rollups-read';
import type { BudgetSection, UsageReport } from './types';

/**
 * A report's budget section: per user the figures `cronledger budgets status` shows, for the report's month, taken at
 * the month's last instant (or now, while it runs); then the runs the guard blocked or downgraded in the month (by
 * claim time, as the unit economics count runs) and what the downgrades saved. Money stays exact decimal strings.
 */
export async function budgetSection(
  db: pg.Pool,
  opts: { month: Month; period: UsageReport['period']; runs: Pick<MonthSums['runs'], 'blocked' | 'downgraded'> },
): Promise<BudgetSection> {
  const { from, to } = opts.period;
  const now = (await db.query<{ now: Date }>('select now() as now')).rows[0].now;
  const end = new Date(new Date(to).getTime() - 1);
  const at = now < end ? now : end;
  const status = await budgetStatusOfAll(db, { at, month: opts.month }); // one statement for all users
  const runs = opts.runs; // from the run rollups, not a scan of the month's runs
  const savings = await downgradeSavings(db, from, to);
  const pauses = await budgetPauseFigures(db, new Date(from), new Date(to));
  return {
    configured: await anyBudget(db),
    users: status.filter((s) => s.source === 'user' || isNonZero(s.spentUsd) || isNonZero(s.reservedUsd)),
    blockedRuns: countOf(runs.blocked),
    downgradedRuns: countOf(runs.downgraded),
    skippedForBudget: { slots: pauses.skippedSlots, pausedTasks: pauses.pausedTasks },
    downgradeSavings: {
      savedUsd: savings.savedUsd,
      paidUsd: savings.paidUsd,
      atDefaultPriceUsd: savings.atDefaultPriceUsd,
      entries: savings.entries,
      unpricedEntries: savings.unpriced,
    },
    forecasts: await forecastAccuracy(db, opts.month),
  };
}

const isNonZero = (usd: string): boolean => toAttoUsd(parseUsd(usd)) !== 0n;

function countOf(n: bigint): number {
  if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`count ${n} is too large to report exactly`);
  return Number(n);
}
