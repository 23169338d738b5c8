import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
import type { OnProgress } from '../progress-bar';
import type { Month } from './month';

/**
 * The read side of the daily rollups (see rollups-write.ts for how they are kept): the rows of a month, the
 * watermarks, the zones tracked and what waits in the queue. Nothing here changes a row.
 */

export interface RollupRow {
  day: string;
  user_id: string;
  model: string | null;
  kind: 'chat' | 'embedding' | null;
  entry_type: 'usage' | 'adjustment' | 'credit' | 'reconciliation';
  status: 'ok' | 'failed';
  entries: string;
  prompt_tokens: string;
  cached_prompt_tokens: string;
  completion_tokens: string;
  reasoning_tokens: string;
  cost_usd: string;
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

/** Ledger entries queued for the zone and not yet folded into its rollups. */
export async function pendingEntries(db: pg.Pool, zone: string): Promise<number> {
  return Number((await db.query<{ n: string }>('select count(*) as n from rollup_pending where zone = $1', [zone])).rows[0].n);
}

/** Months of the zone that were built in full at least once, oldest first. */
export async function builtMonths(db: pg.Pool, zone: string): Promise<Month[]> {
  const { rows } = await db.query<{ month: string }>('select month from rollup_months where zone = $1 order by month', [zone]);
  return rows.map((m) => m.month);
}

/** The month's rollup rows, read a day at a time (progress for large months), in a deterministic order. */
export async function readMonthRollups(db: pg.Pool, zone: string, month: Month, onProgress?: OnProgress): Promise<RollupRow[]> {
  const m = monthBoundsSql('$1');
  const days = await db.query<{ day: string }>(
    `select to_char(d, 'YYYY-MM-DD') as day from generate_series(${m.firstDay}, ${m.lastDay}, interval '1 day') d order by 1`,
    [month],
  );
  const rows: RollupRow[] = [];
  for (const [i, { day }] of days.rows.entries()) {
    const r = await db.query<RollupRow>(
      `select to_char(day, 'YYYY-MM-DD') as day, user_id, model, kind, entry_type, status, entries, prompt_tokens,
              cached_prompt_tokens, completion_tokens, reasoning_tokens, cost_usd
         from usage_rollups
        where zone = $1 and day = $2::date
        order by user_id, model nulls first, kind nulls first, entry_type, status`,
      [zone, day],
    );
    rows.push(...r.rows);
    onProgress?.({ phase: `reading rollups ${month}`, done: i + 1, total: days.rows.length });
  }
  return rows;
}

/** The lowest and highest ledger id in the month's rollups: with the entry count, a fingerprint of the month's rows. */
export async function entryIdSpan(db: pg.Pool, zone: string, month: Month): Promise<{ first: bigint | null; last: bigint | null }> {
  const m = monthBoundsSql('$2', '$1');
  const { rows } = await db.query<{ first: string | null; last: string | null }>(
    `select min(first_entry_id) as first, max(last_entry_id) as last from usage_rollups
      where zone = $1 and day between ${m.firstDay} and ${m.lastDay}`,
    [zone, month],
  );
  return { first: rows[0].first === null ? null : BigInt(rows[0].first), last: rows[0].last === null ? null : BigInt(rows[0].last) };
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

/**
 * The month's rollup rows as a refresh would leave them, without writing (the admin page's role may only read):
 * buckets that queued entries touch are recomputed from the raw ledger, the others read as stored. A month the zone
 * never built is aggregated from the raw ledger the way a build would. Rows in the order of readMonthRollups.
 */
export async function readMonthRollupsCurrent(
  db: pg.Pool,
  zone: string,
  month: Month,
): Promise<{ rows: RollupRow[]; span: { first: bigint | null; last: bigint | null }; source: 'rollups' | 'ledger' }> {
  const m = monthBoundsSql('$2', '$1');
  const built = await db.query('select 1 from rollup_months where zone = $1 and month = $2', [zone, month]);
  const localDay = `(l.created_at at time zone $1)::date`;
  const inMonth = `l.created_at >= ${m.from} - interval '3 hours' and l.created_at < ${m.to} + interval '3 hours'
      and ${localDay} between ${m.firstDay} and ${m.lastDay}`;
  const aggregates = `count(*)::text as entries, sum(l.prompt_tokens)::text as prompt_tokens,
      sum(l.cached_prompt_tokens)::text as cached_prompt_tokens, sum(l.completion_tokens)::text as completion_tokens,
      sum(l.reasoning_tokens)::text as reasoning_tokens, sum(l.cost_usd)::numeric(38, 18)::text as cost_usd,
      min(l.id) as first_entry_id, max(l.id) as last_entry_id`;
  const bucket = 'day, user_id, model, kind, entry_type, status';
  const sql =
    built.rowCount === 0
      ? `select to_char(${localDay}, 'YYYY-MM-DD') as day, l.user_id, l.model, l.kind, l.entry_type, l.status, ${aggregates}
           from usage_ledger l where ${inMonth}
          group by 1, 2, 3, 4, 5, 6`
      : `with touched as (
           select distinct ${localDay} as day, l.user_id, l.model, l.kind, l.entry_type, l.status
             from rollup_pending p join usage_ledger l on l.id = p.entry_id
            where p.zone = $1 and ${localDay} between ${m.firstDay} and ${m.lastDay}
         )
         select to_char(r.day, 'YYYY-MM-DD') as day, r.user_id, r.model, r.kind, r.entry_type, r.status, r.entries::text,
                r.prompt_tokens::text, r.cached_prompt_tokens::text, r.completion_tokens::text, r.reasoning_tokens::text,
                r.cost_usd::text, r.first_entry_id, r.last_entry_id
           from usage_rollups r
          where r.zone = $1 and r.day between ${m.firstDay} and ${m.lastDay}
            and not exists (select 1 from touched t where (t.${bucket.split(', ').join(', t.')}) is not distinct from
                                                          (r.${bucket.split(', ').join(', r.')}))
         union all
         select to_char(t.day, 'YYYY-MM-DD'), t.user_id, t.model, t.kind, t.entry_type, t.status, ${aggregates}
           from touched t
           join usage_ledger l
             on l.user_id = t.user_id and ${localDay} = t.day
            and l.created_at >= (t.day::timestamp at time zone $1) - interval '3 hours'
            and l.created_at < ((t.day + 1)::timestamp at time zone $1) + interval '3 hours'
            and l.model is not distinct from t.model and l.kind is not distinct from t.kind
            and l.entry_type = t.entry_type and l.status = t.status
          group by t.day, t.user_id, t.model, t.kind, t.entry_type, t.status`;
  const { rows } = await db.query<RollupRow & { first_entry_id: string; last_entry_id: string }>(
    `select * from (${sql}) x order by day, user_id, model nulls first, kind nulls first, entry_type, status`,
    [zone, month],
  );
  let first: bigint | null = null;
  let last: bigint | null = null;
  for (const r of rows) {
    const f = BigInt(r.first_entry_id);
    const l = BigInt(r.last_entry_id);
    if (first === null || f < first) first = f;
    if (last === null || l > last) last = l;
  }
  const plain = rows.map(({ first_entry_id: _f, last_entry_id: _l, ...r }) => r);
  return { rows: plain, span: { first, last }, source: built.rowCount === 0 ? 'ledger' : 'rollups' };
}
