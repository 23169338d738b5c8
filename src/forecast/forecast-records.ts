import type pg from 'pg';
import { atto, usdOf } from '../budgets/tier';
import type { UserForecast } from './month-forecast';
import { localDay, type DaySpend } from './projection';

/**
 * Records a user's forecast of `at`'s day (the day in the budget's zone) in budget_forecasts, unless one is recorded
 * for that day already (the day's first stands: the table is append-only), and, when every slot left at the median
 * cost would go over the limit, the month's `forecast-over-limit` budget event (once per user and month). Returns the
 * IDs of events recorded now.
 */
export async function recordForecast(db: pg.Pool, u: UserForecast, at: Date): Promise<string[]> {
  const { rows } = await db.query<{ event_ids: string[] }>(
    `select record_forecast($1, $2, to_date($3 || '-01', 'YYYY-MM-DD'), $4::date, $5, $6, $7, $8, $9, $10, $11, $12::jsonb) as event_ids`,
    [
      u.userId,
      u.timeZone,
      u.month,
      localDay(at, u.timeZone),
      u.medianUsd,
      u.highUsd,
      u.limitUsd,
      u.spentUsd,
      u.reservedUsd,
      u.allSlotsMedianUsd,
      u.allSlotsHighUsd,
      JSON.stringify(u.spendByDay),
    ],
  );
  return rows[0].event_ids;
}

/** A past month's forecast against what it spent: the forecast recorded on its first recorded day, and the month's spend. */
export interface ForecastAccuracy {
  userId: string;
  timeZone: string;
  month: string;
  /** The first day a forecast was recorded (the month's first day when the sweeper ran that day). */
  forecastDay: string;
  limitUsd: string | null;
  medianUsd: string;
  highUsd: string;
  /** The month's ledger total in that zone (budget_months). */
  spentUsd: string;
  /** (median - spent) / spent in percent, to one decimal (half away from zero); null when nothing was spent. */
  medianErrorPercent: string | null;
  /** spent <= high: the month ended inside the forecast's band. */
  withinHigh: boolean;
}

/** Every user's first recorded forecast of `month` (`YYYY-MM`) next to the month's spend, in the zone it was made in. */
export async function forecastAccuracy(db: pg.Pool, month: string, userId?: string): Promise<ForecastAccuracy[]> {
  const { rows } = await db.query<{
    user_id: string;
    time_zone: string;
    day: string;
    limit_usd: string | null;
    median_usd: string;
    high_usd: string;
    spent: string;
  }>(
    `select distinct on (f.user_id, f.time_zone) f.user_id, f.time_zone, to_char(f.day, 'YYYY-MM-DD') as day,
            f.limit_usd::text as limit_usd, f.median_usd::text as median_usd, f.high_usd::text as high_usd,
            coalesce(m.spent_usd, 0)::text as spent
       from budget_forecasts f
       left join budget_months m on m.user_id = f.user_id and m.time_zone = f.time_zone and m.month = f.month
      where f.month = to_date($1 || '-01', 'YYYY-MM-DD') and ($2::text is null or f.user_id = $2)
      order by f.user_id, f.time_zone, f.day`,
    [month, userId ?? null],
  );
  return rows.map((r) => {
    const spent = atto(r.spent);
    const median = atto(r.median_usd);
    return {
      userId: r.user_id,
      timeZone: r.time_zone,
      month,
      forecastDay: r.day,
      limitUsd: r.limit_usd === null ? null : usdOf(atto(r.limit_usd)),
      medianUsd: usdOf(median),
      highUsd: usdOf(atto(r.high_usd)),
      spentUsd: usdOf(spent),
      medianErrorPercent: spent === 0n ? null : percentToOneDecimal((median - spent) * 1000n, spent),
      withinHigh: spent <= atto(r.high_usd),
    };
  });
}

/** numerator / denominator (numerator already × 1000 for one decimal of a percent), rounded half away from zero, as text. */
function percentToOneDecimal(numerator: bigint, denominator: bigint): string {
  const negative = numerator < 0n;
  const abs = negative ? -numerator : numerator;
  const tenths = (abs * 2n + denominator) / (denominator * 2n);
  const text = `${tenths / 10n}.${tenths % 10n}`;
  return negative && tenths !== 0n ? `-${text}` : text;
}

/** A forecast as the budget sweep recorded it (budget_forecasts), exact decimal strings. */
export interface RecordedForecast {
  userId: string;
  timeZone: string;
  month: string;
  /** The day (in the budget's zone) it was made. */
  day: string;
  limitUsd: string | null;
  spentUsd: string;
  reservedUsd: string;
  /** What can be spent: spent + reserved + the slots the guard and the tasks' policies would let run. */
  medianUsd: string;
  highUsd: string;
  /** spent + reserved + every slot left at its cost per run. */
  allSlotsMedianUsd: string;
  allSlotsHighUsd: string;
  /** What can be spent by the end of each day with a slot that runs (running totals); null when recorded without. */
  spendByDay: DaySpend[] | null;
  computedAt: string;
  /** Every slot left at the high cost would go over the limit: slots may be blocked or skipped this month. */
  highOverLimit: boolean;
}

/**
 * Each user's newest recorded forecast of `month` (`YYYY-MM`), in the zone of their newest one: what the admin page
 * shows, read-only (the page's role may not read the task versions a live forecast's worst cases need).
 */
export async function latestForecasts(db: pg.Pool, month: string): Promise<RecordedForecast[]> {
  const { rows } = await db.query<{
    user_id: string;
    time_zone: string;
    day: string;
    limit_usd: string | null;
    spent_usd: string;
    reserved_usd: string;
    median_usd: string;
    high_usd: string;
    all_median_usd: string;
    all_high_usd: string;
    spend_by_day: DaySpend[] | null;
    computed_at: Date;
  }>(
    `select distinct on (user_id) user_id, time_zone, to_char(day, 'YYYY-MM-DD') as day, limit_usd::text as limit_usd,
            spent_usd::text as spent_usd, reserved_usd::text as reserved_usd, median_usd::text as median_usd,
            high_usd::text as high_usd, coalesce(all_slots_median_usd, median_usd)::text as all_median_usd,
            coalesce(all_slots_high_usd, high_usd)::text as all_high_usd, spend_by_day, computed_at
       from budget_forecasts where month = to_date($1 || '-01', 'YYYY-MM-DD')
      order by user_id, day desc, computed_at desc`,
    [month],
  );
  return rows.map((r) => {
    const limit = r.limit_usd === null ? null : atto(r.limit_usd);
    return {
      userId: r.user_id,
      timeZone: r.time_zone,
      month,
      day: r.day,
      limitUsd: limit === null ? null : usdOf(limit),
      spentUsd: usdOf(atto(r.spent_usd)),
      reservedUsd: usdOf(atto(r.reserved_usd)),
      medianUsd: usdOf(atto(r.median_usd)),
      highUsd: usdOf(atto(r.high_usd)),
      allSlotsMedianUsd: usdOf(atto(r.all_median_usd)),
      allSlotsHighUsd: usdOf(atto(r.all_high_usd)),
      spendByDay: r.spend_by_day,
      computedAt: r.computed_at.toISOString(),
      highOverLimit: limit !== null && atto(r.all_high_usd) > limit,
    };
  });
}
