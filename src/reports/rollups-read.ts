import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
import { daysOf, shiftMonth, type Month } from './month';

/**
 * The read side of the daily rollups (see rollups-write.ts for how they are kept): the rows of a month, the
 * watermarks, the zones tracked, what waits in the queues, and the month's figures summed in SQL. Nothing here changes a row.
 */

/** How current the rows read must be: as the last refresh left them, or as a refresh now would leave them. */
export type Freshness = 'stored' | 'current';

/** Which cut a line of readMonthSums belongs to: all rows of a line type, or a report cut, or usage by status. */
export type SumCut = 'line' | 'user' | 'day' | 'model' | 'status';

/** Sums of the month's rollup rows, computed in SQL (exact numeric), as text; null where the cut has no such key. */
export interface SumRow {
  cut: SumCut;
  user_id: string | null;
  day: string | null;
  model: string | null;
  kind: 'chat' | 'embedding' | null;
  entry_type: 'usage' | 'adjustment' | 'credit' | 'reconciliation';
  status: 'ok' | 'failed' | null;
  entries: string;
  prompt_tokens: string;
  cached_prompt_tokens: string;
  completion_tokens: string;
  reasoning_tokens: string;
  cost_usd: string;
  /** Null when every entry of the line is still queued (rollup_pending keeps no entry ids). */
  first_entry_id: string | null;
  last_entry_id: string | null;
}

export interface MonthSums {
  lines: SumRow[];
  /** Runs that claimed their slot inside the month: by outcome, blocked by the budget guard, downgraded to the cheap tier. */
  runs: { completed: bigint; failed: bigint; blocked: bigint; downgraded: bigint };
  /** The lowest and highest ledger id of the month: with the entry count, a fingerprint of the month's rows. */
  span: { first: bigint | null; last: bigint | null };
  /** 'ledger' when the zone never built the month and its rows were aggregated from the raw ledger. */
  source: 'rollups' | 'ledger';
}
export interface Watermark {
  zone: string;
  refreshedAt: string | null;
  lastEntryId: string;
  entriesFolded: string;
}

export async function readWatermark(db: pg.Pool, zone: string): Promise<Watermark> {
  const { rows } = await db.query<{ refreshed_at: Date | null; last_entry_id: string; entries_folded: string }>(
    'select refreshed_at, last_entry_id, entries_folded from rollup_zones where zone = $1',
    [zone],
  );
  const w = rows[0];
  return {
    zone,
    refreshedAt: w?.refreshed_at ? w.refreshed_at.toISOString() : null,
    lastEntryId: w?.last_entry_id ?? '0',
    entriesFolded: w?.entries_folded ?? '0',
  };
}

export async function trackedZones(db: pg.Pool): Promise<string[]> {
  return (await db.query<{ zone: string }>('select zone from rollup_zones order by zone')).rows.map((r) => r.zone);
}

/** Ledger entries queued and not yet folded into the rollups (one queue for every zone). */
export async function pendingEntries(db: pg.Pool): Promise<number> {
  return Number((await db.query<{ n: string }>('select count(*) as n from rollup_queue')).rows[0].n);
}

/** Run changes (claims, closes, re-claims) queued and not yet folded into the run rollups. */
export async function pendingRunChanges(db: pg.Pool): Promise<number> {
  return Number((await db.query<{ n: string }>('select count(*) as n from run_rollup_queue')).rows[0].n);
}

/** Months of the zone that were built in full at least once, oldest first. */
export async function builtMonths(db: pg.Pool, zone: string): Promise<Month[]> {
  const { rows } = await db.query<{ month: string }>('select month from rollup_months where zone = $1 order by month', [zone]);
  return rows.map((m) => m.month);
}

/** Where the month starts and ends in the zone, as instants (ISO 8601, UTC), and whether it is over. */
export async function monthBounds(db: pg.Pool, zone: string, month: Month): Promise<{ from: string; to: string; complete: boolean }> {
  const m = monthBoundsSql('$2', '$1');
  const { rows } = await db.query<{ from: Date; to: Date; complete: boolean }>(
    `select ${m.from} as from, ${m.to} as to, now() >= ${m.to} as complete`,
    [zone, month],
  );
  return { from: rows[0].from.toISOString(), to: rows[0].to.toISOString(), complete: rows[0].complete };
}

/** Whether the zone's month was built in full, i.e. whether its rollups (plus the queue) hold every row of it. */
async function isBuilt(db: pg.Pool, zone: string, month: Month): Promise<boolean> {
  return (await db.query('select 1 from rollup_months where zone = $1 and month = $2', [zone, month])).rowCount !== 0;
}

/** Local day of `at` in zone $1, within days $2..$3 (dates), with an instant range the indexes on `at` can use. */
const localDay = (at: string) => `(${at} at time zone $1)::date`;
const inDays = (at: string, first = '$2::date', last = '$3::date') =>
  `${at} >= (${first}::timestamp at time zone $1) - interval '3 hours'
   and ${at} < ((${last} + 1)::timestamp at time zone $1) + interval '3 hours'
   and ${localDay(at)} between ${first} and ${last}`;
const LEDGER_SUMS = `count(*) as entries, sum(l.prompt_tokens) as prompt_tokens, sum(l.cached_prompt_tokens) as cached_prompt_tokens,
  sum(l.completion_tokens) as completion_tokens, sum(l.reasoning_tokens) as reasoning_tokens, sum(l.cost_usd) as cost_usd,
  min(l.id) as first_entry_id, max(l.id) as last_entry_id`;
const ROLLUP_SUMS = `entries, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id`;
/**
 * The rollups a read may take, each with its bucket (columns of the ledger, `day` being the local day) and its rows of
 * zone $1 for local days $2..$3 (one month's). usage_rollups: the finest, per day, user, task, model and status. The
 * coarser three (usage_month_rollups, usage_day_totals, usage_day_users) hold the same sums in far fewer rows: per month and user,
 * per day, per day and user and task.
 */
const ROLLUPS = {
  daily: {
    bucket: ['day', 'user_id', 'task_id', 'model', 'kind', 'entry_type', 'status'],
    stored: `select day, user_id, task_id, model, kind, entry_type, status, ${ROLLUP_SUMS}
               from usage_rollups r where r.zone = $1 and r.day between $2::date and $3::date`,
  },
  monthByUser: {
    bucket: ['user_id', 'model', 'kind', 'entry_type', 'status'],
    stored: `select user_id, model, kind, entry_type, status, ${ROLLUP_SUMS}
               from usage_month_rollups r where r.zone = $1 and r.month = to_char($2::date, 'YYYY-MM')`,
  },
  dayTotals: {
    bucket: ['day', 'model', 'kind', 'entry_type', 'status'],
    stored: `select day, model, kind, entry_type, status, ${ROLLUP_SUMS}
               from usage_day_totals r where r.zone = $1 and r.day between $2::date and $3::date`,
  },
  dayByUser: {
    bucket: ['day', 'user_id', 'task_id', 'entry_type'],
    stored: `select day, user_id, task_id, entry_type, ${ROLLUP_SUMS}
               from usage_day_users r where r.zone = $1 and r.day between $2::date and $3::date`,
  },
} as const;

/**
 * SQL of the rows of one of the ROLLUPS for zone $1 and local days $2..$3, its bucket columns then its sums; every
 * caller sums them again by its own keys. Stored: the rows as kept. Current: the stored rows and, after them, the queued
 * entries summed per bucket, without writing (the admin page's role may only read): their sums are what a refresh
 * would leave, a bucket may come twice. A month the zone never built is aggregated from the raw ledger the way a build
 * would.
 */
function rollupRowsSql(
  rollup: keyof typeof ROLLUPS,
  built: boolean,
  freshness: Freshness,
  queuedFrom: 'ledger' | 'summary' = 'ledger',
): string {
  const { bucket, stored } = ROLLUPS[rollup];
  const fromLedger = (where: string) =>
    `select ${bucket.map((k) => (k === 'day' ? `${localDay('l.created_at')} as day` : `l.${k}`)).join(', ')}, ${LEDGER_SUMS}
       from usage_ledger l ${where} group by ${bucket.map((_, i) => i + 1).join(', ')}`;
  if (!built) return fromLedger(`where ${inDays('l.created_at')}`);
  if (freshness === 'stored') return stored;
  // The day totals have no user in their bucket: the queue's own summary holds the queued entries at that grain
  // (rollup_pending, migrations/038_queue_summary.sql), a few rows per 15 minutes however many entries wait, but no
  // entry ids (a read that needs the month's id span reads the queued entries from the ledger).
  if (queuedFrom === 'summary' && rollup === 'dayTotals') return `${stored} union all ${PENDING_DAY_TOTALS}`;
  // The queued entries are the newest of the ledger (the trigger queues each as it is written, a refresh drains them):
  // the id range of the queue bounds the ledger's rows to read to about the queue's size, through the primary key.
  // Without it the planner, which cannot estimate the join, may scan the month's ledger to hash it against the queue.
  const queued = fromLedger(
    `join rollup_queue q on q.entry_id = l.id
     where l.id between (select min(entry_id) from rollup_queue) and (select max(entry_id) from rollup_queue)
       and ${localDay('l.created_at')} between $2::date and $3::date`,
  );
  return `${stored} union all ${queued}`;
}

/**
 * The queued entries as day-total rows of zone $1 for local days $2..$3, from rollup_pending: each 15-minute slot lies
 * in one local day of the zone. No entry ids: the queue's summary keeps none (a queued entry leaves the span as read).
 */
const PENDING_DAY_TOTALS = `select ${localDay('p.slot')} as day, p.model, p.kind, p.entry_type, p.status, p.entries, p.prompt_tokens,
         p.cached_prompt_tokens, p.completion_tokens, p.reasoning_tokens, p.cost_usd, null::bigint as first_entry_id,
         null::bigint as last_entry_id
    from rollup_pending p where ${inDays('p.slot')}`;

/** SQL of the run rollup rows (day, user_id, task_id, status, tier, runs) of zone $1 for local days $2..$3, like rollupRowsSql. */
function runRowsSql(built: boolean, freshness: Freshness): string {
  if (!built) {
    return `select ${localDay('r.claimed_at')} as day, r.user_id, r.task_id, r.status, r.tier, count(*) as runs
              from runs r where ${inDays('r.claimed_at')} group by 1, 2, 3, 4, 5`;
  }
  const stored = `select day, user_id, task_id, status, tier, runs from run_rollups s
                   where s.zone = $1 and s.day between $2::date and $3::date`;
  if (freshness === 'stored') return stored;
  const touched = `select distinct ${localDay('q.claimed_at')} as day, q.user_id, q.task_id from run_rollup_queue q`;
  return `select * from (${stored}) s
           where not exists (select 1 from (${touched}) t where (t.day, t.user_id, t.task_id) = (s.day, s.user_id, s.task_id))
          union all
          select t.day, t.user_id, t.task_id, r.status, r.tier, count(*)
            from (${touched}) t
            join runs r on r.user_id = t.user_id and r.task_id = t.task_id and ${inDays('r.claimed_at', 't.day', 't.day')}
           where t.day between $2::date and $3::date
           group by 1, 2, 3, 4, 5`;
}

/** The days of `month` from `fromDay` (default its first) to its last, as SQL date parameters. */
async function dayParams(db: pg.Pool, zone: string, month: Month, fromDay?: string): Promise<[string, string, string]> {
  const m = monthBoundsSql('$1');
  const { rows } = await db.query<{ first: string; last: string }>(
    `select to_char(${m.firstDay}, 'YYYY-MM-DD') as first, to_char(${m.lastDay}, 'YYYY-MM-DD') as last`,
    [month],
  );
  return [zone, fromDay ?? rows[0].first, rows[0].last];
}

const SUMS_AS_TEXT = `sum(entries)::text as entries, sum(prompt_tokens)::text as prompt_tokens,
  sum(cached_prompt_tokens)::text as cached_prompt_tokens, sum(completion_tokens)::text as completion_tokens,
  sum(reasoning_tokens)::text as reasoning_tokens, sum(cost_usd)::numeric(38, 18)::text as cost_usd,
  min(first_entry_id)::text as first_entry_id, max(last_entry_id)::text as last_entry_id`;

/**
 * The month's figures summed in SQL (numeric sums are exact): each report cut's lines, usage by status, all rows by
 * line type, the ledger id span and the run outcomes. A few hundred rows, whatever the size of the ledger; the report
 * turns them into money with Dinero.
 */
export async function readMonthSums(db: pg.Pool, zone: string, month: Month, freshness: Freshness): Promise<MonthSums> {
  const built = await isBuilt(db, zone, month);
  const params = await dayParams(db, zone, month);
  // The by-user cut from the month's rollup per user, every other cut from the day totals: a few thousand rows to
  // sum at 500 users, not the ~60,000 of the daily rollups (one per user, task, day, model and status).
  const { rows: lines } = await db.query<SumRow>(
    `with days as (${rollupRowsSql('dayTotals', built, freshness)}),
          users as (${rollupRowsSql('monthByUser', built, freshness)})
     select case when grouping(day) = 0 then 'day' when grouping(model) = 0 then 'model' when grouping(status) = 0 then 'status'
                 else 'line' end as cut,
            null::text as user_id, to_char(day, 'YYYY-MM-DD') as day, model, kind, entry_type, status, ${SUMS_AS_TEXT}
       from days
      group by grouping sets ((entry_type), (day, kind, entry_type), (model, kind, entry_type), (entry_type, status))
     union all
     select 'user', user_id, null, null, null, entry_type, null, ${SUMS_AS_TEXT}
       from users
      group by user_id, entry_type`,
    params,
  );
  const { rows: runs } = await db.query<{ completed: string; failed: string; blocked: string; downgraded: string }>(
    `select coalesce(sum(runs) filter (where status = 'completed'), 0)::text as completed,
            coalesce(sum(runs) filter (where status = 'failed'), 0)::text as failed,
            coalesce(sum(runs) filter (where status = 'blocked'), 0)::text as blocked,
            coalesce(sum(runs) filter (where tier = 'cheap'), 0)::text as downgraded
       from (${runRowsSql(built, freshness)}) s`,
    params,
  );
  let first: bigint | null = null;
  let last: bigint | null = null;
  for (const l of lines) {
    if (l.cut !== 'line' || l.first_entry_id === null) continue; // null: the line's entries are all queued
    const f = BigInt(l.first_entry_id);
    const t = BigInt(l.last_entry_id ?? l.first_entry_id);
    if (first === null || f < first) first = f;
    if (last === null || t > last) last = t;
  }
  return {
    lines,
    runs: {
      completed: BigInt(runs[0].completed),
      failed: BigInt(runs[0].failed),
      blocked: BigInt(runs[0].blocked),
      downgraded: BigInt(runs[0].downgraded),
    },
    span: { first, last },
    source: built ? 'rollups' : 'ledger',
  };
}

/**
 * Spend (every entry but credits) per local day of the month, from `fromDay` on, in total or per user or task:
 * the admin page's daily chart and anomaly series. Exact decimal strings.
 */
export async function readDailySpend(
  db: pg.Pool,
  q: { zone: string; month: Month; by: 'all' | 'user' | 'task'; freshness: Freshness; fromDay?: string; userId?: string },
): Promise<{ day: string; key: string | null; cost_usd: string }[]> {
  const key = q.by === 'user' ? 'user_id' : q.by === 'task' ? 'task_id' : 'null::text';
  const params: string[] = await dayParams(db, q.zone, q.month, q.fromDay);
  if (q.userId !== undefined) params.push(q.userId);
  const rollup = q.by === 'all' && q.userId === undefined ? 'dayTotals' : 'dayByUser';
  // Grouped by the date, formatted after: to_char on every row cost as much as the sums.
  const { rows } = await db.query<{ day: string; key: string | null; cost_usd: string }>(
    `select to_char(day, 'YYYY-MM-DD') as day, key, cost_usd::numeric(38, 18)::text as cost_usd
       from (select day, ${key} as key, sum(cost_usd) as cost_usd
               from (${rollupRowsSql(rollup, await isBuilt(db, q.zone, q.month), q.freshness)}) src
              where entry_type <> 'credit' ${q.userId !== undefined ? 'and user_id = $4' : ''}
              group by 1, 2) s
      order by s.day, 2`,
    params,
  );
  return rows;
}

/**
 * The admin page's anomaly series, per local day of the month (from `fromDay` on), user and task: spend (every entry
 * but credits) in atto-USD (10^-18 USD, exact) and the runs that ran (completed or failed). One row per day, user and
 * task with either; cost_atto is null where there are runs and no spend row; task_id is null for entries of no task.
 * The page adds them up per user and per task: one pass over the rollups for both cuts.
 */
export async function readDailySeries(
  db: pg.Pool,
  q: { zone: string; month: Month; freshness: Freshness; fromDay?: string },
): Promise<{ day: string; user_id: string; task_id: string | null; cost_atto: string | null; ran_runs: string }[]> {
  const built = await isBuilt(db, q.zone, q.month);
  const { rows } = await db.query<{ day: string; user_id: string; task_id: string | null; cost_atto: string | null; ran_runs: string }>(
    // One grouping over the spend rows and the run rows together, not a join of two aggregates.
    `select to_char(day, 'YYYY-MM-DD') as day, user_id, task_id,
            (sum(cost_usd) * 1000000000000000000)::numeric(60, 0)::text as cost_atto, coalesce(sum(runs), 0)::text as ran_runs
       from (select day, user_id, task_id, cost_usd, null::bigint as runs from (${rollupRowsSql('dayByUser', built, q.freshness)}) s
              where entry_type <> 'credit'
             union all
             select day, user_id, task_id, null, runs from (${runRowsSql(built, q.freshness)}) r where status in ('completed', 'failed')) u
      group by u.day, u.user_id, u.task_id`,
    await dayParams(db, q.zone, q.month, q.fromDay),
  );
  return rows;
}

/**
 * Claimed runs per local day of the month (from `fromDay` on), status and tier, in total or per user or task (`key`,
 * '' in total), from the run rollups.
 */
export async function readRunCounts(
  db: pg.Pool,
  q: { zone: string; month: Month; freshness: Freshness; by: 'all' | 'user' | 'task'; fromDay?: string },
): Promise<{ day: string; key: string; status: string; tier: string | null; runs: string }[]> {
  const key = q.by === 'user' ? 'user_id' : q.by === 'task' ? 'task_id' : `''::text`;
  const { rows } = await db.query<{ day: string; key: string; status: string; tier: string | null; runs: string }>(
    `select to_char(day, 'YYYY-MM-DD') as day, key, status, tier, runs::text as runs
       from (select day, ${key} as key, status, tier, sum(runs) as runs
               from (${runRowsSql(await isBuilt(db, q.zone, q.month), q.freshness)}) s
              group by 1, 2, 3, 4) s
      order by s.day, 2, 3, 4`,
    await dayParams(db, q.zone, q.month, q.fromDay),
  );
  return rows;
}

/**
 * Users with usage entries in the month (the report's active users), without the user cut: from the month's rollup per
 * user and, read current, the queue's per-user summary (rollup_pending_users). Its rows are whole UTC days, or
 * 15-minute slots on a month's first and last UTC day, so each lies inside the zone's month or outside it.
 */
export async function readActiveUsers(db: pg.Pool, zone: string, month: Month, freshness: Freshness): Promise<number> {
  const built = await isBuilt(db, zone, month);
  const m = monthBoundsSql('$2', '$1');
  const sql = !built
    ? `select count(distinct l.user_id) as n from usage_ledger l
        where l.entry_type = 'usage' and l.created_at >= ${m.from} and l.created_at < ${m.to}`
    : `select count(*) as n from (
         select r.user_id from usage_month_rollups r where r.zone = $1 and r.month = $2 and r.entry_type = 'usage'
         ${
           freshness === 'current'
             ? `union select p.user_id from rollup_pending_users p where p.at >= ${m.from} and p.at < ${m.to} and p.usage_entries > 0`
             : ''
         }) u`;
  const { rows } = await db.query<{ n: string }>(sql, [zone, month]);
  return Number(rows[0].n);
}

/**
 * The month's figures the admin overview shows, from the day totals alone: all rows by line type, usage by status, and
 * each local day by kind and line type. Read current, a few hundred stored rows plus the queue's summary, whatever the
 * size of the ledger and of the queue; no entry ids (first_entry_id and last_entry_id cover the stored rows only).
 */
export async function readDayTotalSums(
  db: pg.Pool,
  zone: string,
  month: Month,
  freshness: Freshness,
): Promise<{ lines: SumRow[]; source: MonthSums['source'] }> {
  const built = await isBuilt(db, zone, month);
  const { rows: lines } = await db.query<SumRow>(
    `select case when grouping(day) = 0 then 'day' when grouping(status) = 0 then 'status' else 'line' end as cut,
            null::text as user_id, to_char(day, 'YYYY-MM-DD') as day, null::text as model, kind, entry_type, status, ${SUMS_AS_TEXT}
       from (${rollupRowsSql('dayTotals', built, freshness, 'summary')}) days
      group by grouping sets ((entry_type), (day, kind, entry_type), (entry_type, status))`,
    await dayParams(db, zone, month),
  );
  return { lines, source: built ? 'rollups' : 'ledger' };
}

/**
 * Whether cost_per_run_days (migrations/039_cost_per_run_days.sql) holds the zone's anomaly series for the month and
 * the 7 days before it: the month is built, and so is the month before, or those 7 days have no ledger entry and no run
 * (a month never built has partial rollups, if any, where the series read the raw ledger).
 */
export async function costPerRunDaysHold(db: pg.Pool, zone: string, month: Month): Promise<boolean> {
  const prev = shiftMonth(month, -1);
  const prevDays = daysOf(prev);
  const { rows } = await db.query<{ holds: boolean }>(
    `select exists (select 1 from rollup_months where zone = $1 and month = $2)
        and (exists (select 1 from rollup_months where zone = $1 and month = $3)
             or (not exists (select 1 from usage_ledger l where ${inDays('l.created_at', '$4::date', '$5::date')})
                 and not exists (select 1 from runs r where ${inDays('r.claimed_at', '$4::date', '$5::date')}))) as holds`,
    [zone, month, prev, prevDays[prevDays.length - 7], prevDays[prevDays.length - 1]],
  );
  return rows[0].holds;
}

/**
 * A day of a user or task whose cost per run is over a factor times its trailing median (the median a ratio of
 * integers), with the key's previous day with runs (null when it has none).
 */
export interface CostPerRunDay {
  kind: 'user' | 'task';
  id: string;
  day: string;
  costAtto: bigint;
  runs: bigint;
  median: { num: bigint; den: bigint };
  previousDay: string | null;
}

const BIGINT_MAX = 9223372036854775807n;

/**
 * The least over_median_micro of a day over the factor: its cost per run over its median is below floor(factor x
 * 10^6) millionths otherwise (the column is truncated, and capped where this is).
 */
const overMedianMicroAtLeast = (factor: { num: bigint; den: bigint }): string => {
  const micro = (factor.num * 1_000_000n) / factor.den;
  return (micro < BIGINT_MAX ? micro : BIGINT_MAX).toString();
};

/**
 * The month's days (local days of the zone) on which a user's or a task's cost per run is over `factor` times its
 * trailing 7-day median, from cost_per_run_days as the last refresh left them: the test of findAnomalies, cross-
 * multiplied in SQL (exact), with the key's previous day with runs. A few rows where the month holds thousands.
 */
export async function readCostPerRunOver(
  db: pg.Pool,
  q: { zone: string; month: Month; factor: { num: bigint; den: bigint } },
): Promise<CostPerRunDay[]> {
  const days = daysOf(q.month);
  const { rows } = await db.query<{
    kind: CostPerRunDay['kind'];
    key: string;
    day: string;
    cost_atto: string;
    runs: string;
    median_num: string;
    median_den: string;
    previous_day: string | null;
  }>(
    `select c.kind, c.key, to_char(c.day, 'YYYY-MM-DD') as day, c.cost_atto::text as cost_atto, c.runs::text as runs,
            c.median_num::text as median_num, c.median_den::text as median_den, to_char(p.day, 'YYYY-MM-DD') as previous_day
       from cost_per_run_days c
       cross join lateral (select max(e.day) as day from cost_per_run_days e
                            where e.zone = c.zone and e.kind = c.kind and e.key = c.key and e.day < c.day) p
      where c.zone = $1 and c.day between $2::date and $3::date and c.median_num is not null
        and (c.over_median_micro is null or c.over_median_micro >= $6::bigint)
        and c.cost_atto * $5::numeric * c.median_den > $4::numeric * c.median_num * c.runs`,
    [q.zone, days[0], days[days.length - 1], q.factor.num.toString(), q.factor.den.toString(), overMedianMicroAtLeast(q.factor)],
  );
  return rows.map((r) => ({
    kind: r.kind,
    id: r.key,
    day: r.day,
    costAtto: BigInt(r.cost_atto),
    runs: BigInt(r.runs),
    median: { num: BigInt(r.median_num), den: BigInt(r.median_den) },
    previousDay: r.previous_day,
  }));
}
