import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
import { budgetInForce, type BudgetInForce } from './budgets-store';
import { atto, tierFor, usdOf, type Tier } from './tier';

/** One user's month as the guard sees it. Money is exact decimal strings (18 fractional digits). */
export interface BudgetStatus {
  userId: string;
  /** The budget's month, `YYYY-MM`, in its time zone. */
  month: string;
  timeZone: string;
  /** Null: no budget configured, so no limit. */
  limitUsd: string | null;
  /** Month-to-date ledger total (usage, adjustments, credits, reconciliation): the summary row plus its unfolded deltas. */
  spentUsd: string;
  /** Open, unexpired reservations of calls that are allowed and not booked yet. */
  reservedUsd: string;
  /** limit - spent - reserved, never below 0; null without a limit. */
  remainingUsd: string | null;
  tier: Tier;
  /** Whose budget applies: the user's own, the default one, or none. */
  source: BudgetInForce['source'];
}

/**
 * Spent and reserved for one user's month in one zone, never a ledger scan: the summary row plus the deltas booked since
 * its last fold (the budget_month_spent view, migration 015), and the open reservations, in one statement (one snapshot).
 */
export async function monthFigures(
  db: pg.Pool | pg.PoolClient,
  userId: string,
  timeZone: string,
  at: Date,
): Promise<{ month: string; spentUsd: string; reservedUsd: string }> {
  const { rows } = await db.query<{ month: string; spent: string | null; reserved: string }>(
    `with m as (select (date_trunc('month', $3::timestamptz at time zone $2))::date as month)
     select to_char(m.month, 'YYYY-MM') as month,
            (select spent_usd from budget_month_spent b where b.user_id = $1 and b.time_zone = $2 and b.month = m.month) as spent,
            (select coalesce(sum(amount_usd), 0) from budget_reservations r
              where r.user_id = $1 and r.time_zone = $2 and r.month = m.month and r.status = 'open' and r.expires_at > $3) as reserved
       from m`,
    [userId, timeZone, at],
  );
  // the same exact text whatever PostgreSQL's scale for the sum (18 fractional digits)
  return { month: rows[0].month, spentUsd: usdOf(atto(rows[0].spent ?? '0')), reservedUsd: usdOf(atto(rows[0].reserved)) };
}

/**
 * The instant of `month` (`YYYY-MM`) in `timeZone` nearest to `at`: `at` itself when it falls in that month there, else
 * the month's first or last microsecond. A report's month ends at another instant in each budget's zone.
 */
async function instantInMonth(db: pg.Pool | pg.PoolClient, month: string, timeZone: string, at: Date): Promise<Date> {
  const m = monthBoundsSql('$1', '$2');
  const { rows } = await db.query<{ at: Date }>(
    `select least(greatest($3::timestamptz, ${m.from}), ${m.to} - interval '1 microsecond') as at`,
    [month, timeZone, at],
  );
  return rows[0].at;
}

/**
 * Limit, spent, reserved, remaining and tier per user at `at` (default: the database's now), for `budgets status`,
 * the admin page and reports. Without userId: every user with a budget of their own or any spend or reservation.
 * With `month`: the figures of that month in each user's budget zone (at `at`, moved into that month when it falls
 * outside it there), under the budget in force at `at`: a report's budget section.
 */
export async function budgetStatus(
  db: pg.Pool | pg.PoolClient,
  opts: { userId?: string; at?: Date; month?: string } = {},
): Promise<BudgetStatus[]> {
  const at = opts.at ?? (await db.query<{ now: Date }>('select now() as now')).rows[0].now;
  const users = opts.userId
    ? [opts.userId]
    : (
        await db.query<{ user_id: string }>(
          `select user_id from budgets where user_id is not null
           union select user_id from budget_months
           union select user_id from budget_month_deltas
           union select user_id from budget_reservations where status = 'open'
           order by 1`,
        )
      ).rows.map((r) => r.user_id);
  const out: BudgetStatus[] = [];
  for (const userId of users) {
    const budget = await budgetInForce(db, userId, at);
    const figuresAt = opts.month === undefined ? at : await instantInMonth(db, opts.month, budget.timeZone, at);
    const figures = await monthFigures(db, userId, budget.timeZone, figuresAt);
    const limit = budget.limitUsd === null ? null : atto(budget.limitUsd);
    const used = atto(figures.spentUsd) + atto(figures.reservedUsd);
    out.push({
      userId,
      month: figures.month,
      timeZone: budget.timeZone,
      limitUsd: limit === null ? null : usdOf(limit),
      spentUsd: usdOf(atto(figures.spentUsd)),
      reservedUsd: usdOf(atto(figures.reservedUsd)),
      remainingUsd: limit === null ? null : usdOf(limit > used ? limit - used : 0n),
      tier: tierFor(used, limit),
      source: budget.source,
    });
  }
  return out;
}
