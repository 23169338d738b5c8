import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
import { budgetInForce, type BudgetInForce } from './budgets-store';
import { atto, usdOf, type Tier } from './tier';

/** One user's month as the guard sees it. Money is exact decimal strings (18 fractional digits). */
export interface BudgetStatus {
  userId: string;
  /** The budget's month, `YYYY-MM`, in its time zone. */
  month: string;
  timeZone: string;
  /** Null: no budget configured, so no limit. */
  limitUsd: string | null;
  /** Month-to-date ledger total (usage, adjustments, credits, reconciliation): the month's summary row. */
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
 * Spent, reserved and the tier for one user's month in one zone, as the decision reads them (budget_month_of,
 * budget_month_figures and budget_tier): the summary row and the open reservations, never a ledger scan.
 */
export async function monthFigures(
  db: pg.Pool | pg.PoolClient,
  userId: string,
  timeZone: string,
  at: Date,
  limitUsd: string | null = null,
): Promise<{ month: string; spentUsd: string; reservedUsd: string; tier: Tier }> {
  const { rows } = await db.query<{ month: string; spent: string; reserved: string; tier: Tier }>(
    `select to_char(m.month, 'YYYY-MM') as month, f.spent, f.reserved, budget_tier(f.spent + f.reserved, $4) as tier
       from budget_month_of($3, $2) m(month) cross join lateral budget_month_figures($1, $2, m.month, $3) f`,
    [userId, timeZone, at, limitUsd],
  );
  const r = rows[0];
  // the same exact text whatever PostgreSQL's scale for the sum (18 fractional digits)
  return { month: r.month, spentUsd: usdOf(atto(r.spent)), reservedUsd: usdOf(atto(r.reserved)), tier: r.tier };
}

/** The users budgets status lists: every user with a budget of their own, any month-to-date spend or an open reservation. */
const BUDGET_USERS = `select user_id from budgets where user_id is not null
  union select user_id from budget_months
  union select user_id from budget_reservations where status = 'open'`;

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
    : (await db.query<{ user_id: string }>(`${BUDGET_USERS} order by 1`)).rows.map((r) => r.user_id);
  const out: BudgetStatus[] = [];
  for (const userId of users) {
    const budget = await budgetInForce(db, userId, at);
    const figuresAt = opts.month === undefined ? at : await instantInMonth(db, opts.month, budget.timeZone, at);
    const figures = await monthFigures(db, userId, budget.timeZone, figuresAt, budget.limitUsd);
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
      tier: figures.tier,
      source: budget.source,
    });
  }
  return out;
}

/**
 * budgetStatus for every user in ONE statement (a report's budget section, `budgets status` without --user, the admin
 * page): per user the budget in force at `at`, the month-to-date spend and open reservations in that budget's zone, and
 * the tier, through the same SQL functions as budgetStatus, so the same figures (test/budget-status-all.test.ts).
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
    spent: string;
    reserved: string;
    tier: Tier;
  }>(
    `with p as (select coalesce($1::timestamptz, now()) as ref_at),
     users as (${BUDGET_USERS}),
     in_force as (
       select u.user_id, b.monthly_limit_usd as limit_usd, coalesce(b.time_zone, 'UTC') as time_zone,
              case when b.id is null then 'none' when b.user_id is null then 'default' else 'user' end as source
         from users u cross join p
         left join lateral budget_in_force(u.user_id, p.ref_at) b on true),
     -- the instant of the figures: at, or with a month, at moved into that month in the budget's zone (as instantInMonth)
     at_user as (
       select i.*, case when $2::text is null then p.ref_at
                        else least(greatest(p.ref_at, ${m.from}), ${m.to} - interval '1 microsecond') end as figures_at
         from in_force i cross join p),
     months as (select a.*, budget_month_of(a.figures_at, a.time_zone) as month from at_user a)
     select m.user_id, to_char(m.month, 'YYYY-MM') as month, m.time_zone, m.limit_usd::text as limit_usd, m.source,
            f.spent, f.reserved, budget_tier(f.spent + f.reserved, m.limit_usd) as tier
       from months m cross join lateral budget_month_figures(m.user_id, m.time_zone, m.month, m.figures_at) f
      order by m.user_id`,
    [opts.at ?? null, opts.month ?? null],
  );
  return rows.map((r) => {
    const limit = r.limit_usd === null ? null : atto(r.limit_usd);
    const spent = atto(r.spent);
    const reserved = atto(r.reserved);
    return {
      userId: r.user_id,
      month: r.month,
      timeZone: r.time_zone,
      limitUsd: limit === null ? null : usdOf(limit),
      spentUsd: usdOf(spent),
      reservedUsd: usdOf(reserved),
      remainingUsd: limit === null ? null : usdOf(limit > spent + reserved ? limit - spent - reserved : 0n),
      tier: r.tier,
      source: r.source,
    };
  });
}
