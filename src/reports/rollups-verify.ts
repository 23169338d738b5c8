import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
import { AGGREGATES, COARSER_ROLLUPS, DAY_BUCKET, dayRange, localDay, SUM_COLUMNS } from './rollups-write';

/**
 * `cronledger rollups verify`: every rollup row of every built (zone, month) against the same aggregate recomputed
 * from the raw ledger and runs, in one snapshot. Rollups lag the ledger by what the queues still hold, so queued
 * entries are left out of the recomputation and run buckets with a queued change are left out of both sides; what
 * remains must match exactly. Months only refreshed into (never built) hold part of their entries by design and are
 * not compared. The queue's summary (rollup_pending, rollup_pending_users) is compared with the queued entries. Each run is recorded in rollup_verifications (record_rollup_verification), which the admin page shows.
 */

export interface RollupDifference {
  table: string;
  zone: string;
  month: string;
  /** `ledger`: the row the ledger gives, missing or different in the rollup; `rollup`: a row the ledger does not give. */
  side: 'ledger' | 'rollup';
  row: Record<string, unknown>;
}

export interface VerifyResult {
  months: number;
  rowsChecked: number;
  differences: RollupDifference[];
  verifiedAt: Date;
}

type Compared = { checked: string; ledger_only: Record<string, unknown>[]; rollup_only: Record<string, unknown>[] };

/** How many differences are kept in rollup_verifications.sample. */
const SAMPLE = 20;

const rollupColumns = (bucket: string[]) => [...bucket, ...SUM_COLUMNS, 'first_entry_id', 'last_entry_id'].join(', ');

/** The comparisons of one (zone = $1, month = $2): per table, the rows the ledger gives and the rows stored. */
function comparisons(): { table: string; expected: string; actual: string }[] {
  const { firstDay: first, lastDay: last } = monthBoundsSql('$2', '$1');
  const monthDays = `zone = $1 and day between ${first} and ${last}`;
  // AGGREGATES' columns take the rollup's names (the derived table's column list), so the coarser rollups can sum them.
  const ledger = `with e as (
    select * from (
      select $1::text, ${localDay('$1')}, l.user_id, l.task_id, l.model, l.kind, l.entry_type, l.status, ${AGGREGATES}
        from usage_ledger l
       where ${dayRange(first, last)} and not exists (select 1 from rollup_queue q where q.entry_id = l.id)
       group by 2, 3, 4, 5, 6, 7, 8) g(${rollupColumns(DAY_BUCKET)}))`;
  const runBucketQueued = (t: string) =>
    `exists (select 1 from run_rollup_queue q where q.user_id = ${t}.user_id and q.task_id = ${t}.task_id and ${localDay('$1', 'q.claimed_at')} = ${t}.day)`;
  return [
    {
      table: 'usage_rollups',
      expected: `${ledger} select ${rollupColumns(DAY_BUCKET)} from e`,
      actual: `select ${rollupColumns(DAY_BUCKET)} from usage_rollups where ${monthDays}`,
    },
    ...COARSER_ROLLUPS.map((c) => ({
      table: c.table,
      expected: `${ledger} ${c.from('e', 'true')}`,
      actual: `select ${rollupColumns(c.bucket)} from ${c.table} where ${c.table === 'usage_month_rollups' ? 'zone = $1 and month = $2' : monthDays}`,
    })),
    {
      table: 'run_rollups',
      expected: `select * from (select $1::text as zone, ${localDay('$1', 'r.claimed_at')} as day, r.user_id, r.task_id, r.status, r.tier, count(*) as runs
                   from runs r where ${dayRange(first, last, '$1', 'r.claimed_at')} group by 2, 3, 4, 5, 6) x where not ${runBucketQueued('x')}`,
      actual: `select zone, day, user_id, task_id, status, tier, runs from run_rollups a where ${monthDays} and not ${runBucketQueued('a')}`,
    },
  ];
}

/**
 * The queue's summary (migrations/038_queue_summary.sql) against the queued entries it sums, per row: it names no zone
 * or month, and holds exactly what waits in the queue.
 */
const QUEUE_SUMMARIES: { table: string; expected: string; actual: string }[] = [
  {
    table: 'rollup_pending',
    expected: `select rollup_pending_slot(l.created_at) as slot, q.shard, l.model, l.kind, l.entry_type, l.status, count(*) as entries,
                      sum(l.prompt_tokens)::bigint as prompt_tokens, sum(l.cached_prompt_tokens)::bigint as cached_prompt_tokens,
                      sum(l.completion_tokens)::bigint as completion_tokens, sum(l.reasoning_tokens)::bigint as reasoning_tokens,
                      sum(l.cost_usd) as cost_usd
                 from rollup_queue q join usage_ledger l on l.id = q.entry_id group by 1, 2, 3, 4, 5, 6`,
    actual: `select slot, shard, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens, completion_tokens,
                    reasoning_tokens, cost_usd from rollup_pending`,
  },
  {
    table: 'rollup_pending_users',
    expected: `select l.user_id, rollup_pending_user_at(l.created_at) as at, count(*) as usage_entries
                 from rollup_queue q join usage_ledger l on l.id = q.entry_id where l.entry_type = 'usage' group by 1, 2`,
    actual: 'select user_id, at, usage_entries from rollup_pending_users',
  },
];

/** Rows of `expected` missing from `actual` and the reverse, and how many rows `actual` has; params as given. */
const DIFFERENCE_SQL = (expected: string, actual: string) =>
  `with x as (${expected}), a as (${actual})
   select (select count(*) from a) as checked,
          coalesce((select jsonb_agg(to_jsonb(m)) from (select * from x except all select * from a) m), '[]') as ledger_only,
          coalesce((select jsonb_agg(to_jsonb(r)) from (select * from a except all select * from x) r), '[]') as rollup_only`;

/** Compares every built month's rollups, and the queue's summary, with the ledger (one read-only snapshot), then records the run. */
export async function verifyRollups(db: pg.Pool): Promise<VerifyResult> {
  const c = await db.connect();
  let months: { zone: string; month: string }[];
  const differences: RollupDifference[] = [];
  let rowsChecked = 0;
  try {
    await c.query('begin isolation level repeatable read read only');
    months = (await c.query<{ zone: string; month: string }>('select zone, month from rollup_months order by zone, month')).rows;
    for (const { zone, month } of months) {
      for (const { table, expected, actual } of comparisons()) {
        const { rows } = await c.query<Compared>(DIFFERENCE_SQL(expected, actual), [zone, month]);
        rowsChecked += Number(rows[0].checked);
        for (const row of rows[0].ledger_only) differences.push({ table, zone, month, side: 'ledger', row });
        for (const row of rows[0].rollup_only) differences.push({ table, zone, month, side: 'rollup', row });
      }
    }
    for (const { table, expected, actual } of QUEUE_SUMMARIES) {
      const { rows } = await c.query<Compared>(DIFFERENCE_SQL(expected, actual));
      rowsChecked += Number(rows[0].checked);
      for (const row of rows[0].ledger_only) differences.push({ table, zone: '*', month: '*', side: 'ledger', row });
      for (const row of rows[0].rollup_only) differences.push({ table, zone: '*', month: '*', side: 'rollup', row });
    }
    await c.query('commit');
  } catch (err) {
    await c.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    c.release();
  }
  const recorded = await db.query<{ verified_at: Date }>('select verified_at from record_rollup_verification($1, $2, $3, $4)', [
    months.length,
    rowsChecked,
    differences.length,
    JSON.stringify(differences.slice(0, SAMPLE)),
  ]);
  return { months: months.length, rowsChecked, differences, verifiedAt: recorded.rows[0].verified_at };
}

export interface LastVerification {
  verifiedAt: Date;
  createdBy: string;
  months: number;
  rowsChecked: string;
  differences: string;
  sample: RollupDifference[];
}

/** The latest `rollups verify`, or null when none ran. */
export async function lastVerification(db: pg.Pool): Promise<LastVerification | null> {
  const { rows } = await db.query<{
    verified_at: Date;
    created_by: string;
    months: number;
    rows_checked: string;
    differences: string;
    sample: RollupDifference[];
  }>('select * from rollup_verifications order by id desc limit 1');
  const r = rows[0];
  if (!r) return null;
  return {
    verifiedAt: r.verified_at,
    createdBy: r.created_by,
    months: r.months,
    rowsChecked: r.rows_checked,
    differences: r.differences,
    sample: r.sample,
  };
}
