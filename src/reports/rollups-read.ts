import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
import type { Month } from './month';

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
  first_entry_id: string;
  last_entry_id: string;
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
const LEDGER_BUCKET = 'user_id, task_id, model, kind, entry_type, status';

/**
 * SQL of the ledger rollup rows of zone $1 for local days $2..$3 (one month's), with the columns of usage_rollups
 * from `day` on. Stored: the rows as kept. Current: as a refresh would leave them, without writing (the admin page's
 * role may only read): queued entries are added to their buckets. A month the zone never built is aggregated from the
 * raw ledger the way a build would.
 */
function ledgerRowsSql(built: boolean, freshness: Freshness): string {
  if (!built) {
    return `select ${localDay('l.created_at')} as day, ${LEDGER_BUCKET.replace(/(\w+)/g, 'l.$1')}, ${LEDGER_SUMS}
              from usage_ledger l where ${inDays('l.created_at')} group by 1, 2, 3, 4, 5, 6, 7`;
  }
  const stored = `select day, ${LEDGER_BUCKET}, entries, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens,
                         cost_usd, first_entry_id, last_entry_id
                    from usage_rollups r where r.zone = $1 and r.day between $2::date and $3::date`;
  if (freshness === 'stored') return stored;
  // Queued entries are added to their buckets, as a refresh would add them. With the queue empty (the rollup-refresh
  // schedule drains it every minute) the stored rows are read as they are: one-time filters pick the branch.
  return `select * from (${stored}) s where not exists (select 1 from rollup_queue)
          union all
          select day, ${LEDGER_BUCKET}, sum(entries) as entries, sum(prompt_tokens) as prompt_tokens,
                 sum(cached_prompt_tokens) as cached_prompt_tokens, sum(completion_tokens) as completion_tokens,
                 sum(reasoning_tokens) as reasoning_tokens, sum(cost_usd) as cost_usd,
                 min(first_entry_id) as first_entry_id, max(last_entry_id) as last_entry_id
            from (${stored}
                  union all
                  select ${localDay('l.created_at')}, ${LEDGER_BUCKET.replace(/(\w+)/g, 'l.$1')}, ${LEDGER_SUMS}
                    from rollup_queue q join usage_ledger l on l.id = q.entry_id
                   where ${localDay('l.created_at')} between $2::date and $3::date
                   group by 1, 2, 3, 4, 5, 6, 7) x
           where exists (select 1 from rollup_queue)
           group by day, ${LEDGER_BUCKET}`;
}

/** SQL of the run rollup rows (day, user_id, task_id, status, tier, runs) of zone $1 for local days $2..$3, like ledgerRowsSql. */
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

/**
 * The month's figures summed in SQL (numeric sums are exact): each report cut's lines, usage by status, all rows by
 * line type, the ledger id span and the run outcomes. A few hundred rows, whatever the size of the ledger; the report
 * turns them into money with Dinero.
 */
export async function readMonthSums(db: pg.Pool, zone: string, month: Month, freshness: Freshness): Promise<MonthSums> {
  const built = await isBuilt(db, zone, month);
  const params = await dayParams(db, zone, month);
  const { rows: lines } = await db.query<SumRow>(
    `with src as (${ledgerRowsSql(built, freshness)})
     select case when grouping(user_id) = 0 then 'user' when grouping(day) = 0 then 'day' when grouping(model) = 0 then 'model'
                 when grouping(status) = 0 then 'status' else 'line' end as cut,
            user_id, to_char(day, 'YYYY-MM-DD') as day, model, kind, entry_type, status,
            sum(entries)::text as entries, sum(prompt_tokens)::text as prompt_tokens,
            sum(cached_prompt_tokens)::text as cached_prompt_tokens, sum(completion_tokens)::text as completion_tokens,
            sum(reasoning_tokens)::text as reasoning_tokens, sum(cost_usd)::numeric(38, 18)::text as cost_usd,
            min(first_entry_id)::text as first_entry_id, max(last_entry_id)::text as last_entry_id
       from src
      group by grouping sets ((entry_type), (user_id, entry_type), (day, kind, entry_type), (model, kind, entry_type), (entry_type, status))`,
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
    if (l.cut !== 'line') continue;
    const f = BigInt(l.first_entry_id);
    const t = BigInt(l.last_entry_id);
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
  const { rows } = await db.query<{ day: string; key: string | null; cost_usd: string }>(
    `select to_char(day, 'YYYY-MM-DD') as day, ${key} as key, sum(cost_usd)::numeric(38, 18)::text as cost_usd
       from (${ledgerRowsSql(await isBuilt(db, q.zone, q.month), q.freshness)}) src
      where entry_type <> 'credit' ${q.userId !== undefined ? 'and user_id = $4' : ''}
      group by 1, 2 order by 1, 2`,
    params,
  );
  return rows;
}

/** Claimed runs per local day of the month (from `fromDay` on), user, task, status and tier, from the run rollups. */
export async function readRunCounts(
  db: pg.Pool,
  q: { zone: string; month: Month; freshness: Freshness; fromDay?: string },
): Promise<{ day: string; user_id: string; task_id: string; status: string; tier: string | null; runs: string }[]> {
  const { rows } = await db.query<{ day: string; user_id: string; task_id: string; status: string; tier: string | null; runs: string }>(
    `select to_char(day, 'YYYY-MM-DD') as day, user_id, task_id, status, tier, sum(runs)::text as runs
       from (${runRowsSql(await isBuilt(db, q.zone, q.month), q.freshness)}) s
      group by 1, 2, 3, 4, 5 order by 1, 2, 3, 4, 5`,
    await dayParams(db, q.zone, q.month, q.fromDay),
  );
  return rows;
}
