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
  /** Month-to-date ledger total (usage, adjustments, credits, reconciliation): the summary row plus its unfolded shards and deltas. */
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
 * Spent and reserved for one user's month in one zone, never a ledger scan: the summary row plus what was booked since
 * its last fold (the budget_month_spent view: the bookings' shards, migration 019, and deltas from before them, 015),
 * and the open reservations, in one statement (one snapshot).
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
           union select user_id from budget_month_shards
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

/**
 * budgetStatus for every user in ONE statement (a report's budget section, `budgets status` without --user, the admin
 * page): per user the budget in force at `at` (their own, else the default one), the month-to-date spend (the summary
 * row plus its unfolded shards and deltas, through budget_month_spent as monthFigures reads it) and the open
 * reservations in that budget's zone, the same figures budgetStatus gives user by user (test/budget-status-all.test.ts).
 * The per-user path costs three round trips a user: 1.1 s for 500 users on a loaded machine (BENCHMARKS.md, P3).
 */
export async function budgetStatusOfAll(db: pg.Pool | pg.PoolClient, opts: { at?: Date; month?: string } = {}): Promise<BudgetStatus[]> {
  const m = monthBoundsSql('$2::text', 'i.time_zone');
  const { rows } = await db.query<{
    user_id: string;
    month: string;
    time_zone: string;
    limit_usd: string | null;
    source: BudgetInForce['source'];
    spent: string | null;
    reserved: string;
  }>(
    `with p as (select coalesce($1::timestamptz, now()) as ref_at),
     users as (select user_id from budgets where user_id is not null
               union select user_id from budget_months
               union select user_id from budget_month_deltas
               union select user_id from budget_month_shards
               union select user_id from budget_reservations where status = 'open'),
     default_budget as (select b.monthly_limit_usd, b.time_zone from budgets b, p
                         where b.user_id is null and b.effective_from <= p.ref_at order by b.effective_from desc limit 1),
     in_force as (
       select u.user_id,
              case when own.user_id is not null then own.monthly_limit_usd else d.monthly_limit_usd end as limit_usd,
              case when own.user_id is not null then own.time_zone else coalesce(d.time_zone, 'UTC') end as time_zone,
              case when own.user_id is not null then 'user' when d.time_zone is not null then 'default' else 'none' end as source
         from users u cross join p
         left join lateral (select b.user_id, b.monthly_limit_usd, b.time_zone from budgets b
                             where b.user_id = u.user_id and b.effective_from <= p.ref_at order by b.effective_from desc limit 1) own on true
         left join default_budget d on true),
     -- the instant of the figures: at, or with a month, at moved into that month in the budget's zone (as instantInMonth)
     at_user as (
       select i.*, case when $2::text is null then p.ref_at
                        else least(greatest(p.ref_at, ${m.from}), ${m.to} - interval '1 microsecond') end as figures_at
         from in_force i cross join p),
     months as (select a.*, (date_trunc('month', a.figures_at at time zone a.time_zone))::date as month from at_user a),
     -- spent of the months at hand, read in one pass (not a lookup per user, each visiting the month's unfolded
     -- shards and deltas again): the report's month, or the month of 'at' in UTC and each neighbour (every zone's
     -- month of an instant is one of those three)
     spent as materialized (
       select s.user_id, s.time_zone, s.month, s.spent_usd from budget_month_spent s
        where s.month between case when $2::text is null then (date_trunc('month', coalesce($1::timestamptz, now()) at time zone 'UTC') - interval '1 month')::date
                                   else to_date($2::text || '-01', 'YYYY-MM-DD') end
                          and case when $2::text is null then (date_trunc('month', coalesce($1::timestamptz, now()) at time zone 'UTC') + interval '1 month')::date
                                   else to_date($2::text || '-01', 'YYYY-MM-DD') end)
     select m.user_id, to_char(m.month, 'YYYY-MM') as month, m.time_zone, m.limit_usd::text as limit_usd, m.source,
            s.spent_usd as spent,
            (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
              where r.user_id = m.user_id and r.time_zone = m.time_zone and r.month = m.month and r.status = 'open'
                and r.expires_at > m.figures_at) as reserved
       from months m
       left join spent s on s.user_id = m.user_id and s.time_zone = m.time_zone and s.month = m.month
      order by m.user_id`,
    [opts.at ?? null, opts.month ?? null],
  );
  return rows.map((r) => {
    const limit = r.limit_usd === null ? null : atto(r.limit_usd);
    const spent = atto(r.spent ?? '0');
    const reserved = atto(r.reserved);
    return {
      userId: r.user_id,
      month: r.month,
      timeZone: r.time_zone,
      limitUsd: limit === null ? null : usdOf(limit),
      spentUsd: usdOf(spent),
      reservedUsd: usdOf(reserved),
      remainingUsd: limit === null ? null : usdOf(limit > spent + reserved ? limit - spent - reserved : 0n),
      tier: tierFor(spent + reserved, limit),
      source: r.source,
    };
  });
}
