import type pg from 'pg';

/**
 * Readers of the counters /metrics serves (migrations/025_metric_counters.sql): summary rows that the triggers on runs
 * and run_duplicates keep in the transaction of what they count, and that the rollup refresh's fold keeps for ledger
 * entries (migrations/045_metrics_counted_at_fold.sql). The ledger's counters are read together with the entries
 * still queued for that fold, in one statement, so each booked entry is counted exactly once. What an entry adds to
 * them is the view metric_entry_figures, which the fold reads too. Each reads a number of rows set by the statuses,
 * histogram buckets, models and users there are, and by the queue (the entries booked since the last refresh), never
 * by the ledger's size.
 */

/** The ledger entries the rollup refresh has not folded yet: not yet in the ledger's counters. */
const QUEUED_ENTRIES = 'rollup_queue q join metric_entry_figures f on f.id = q.entry_id';

/** Charges (positive entries) and credits (negative entries, as a positive amount) per model and kind, and per user when asked: exact decimal strings. */
export async function ledgerTotals(
  db: pg.Pool,
  perUser: boolean,
): Promise<{ model: string | null; kind: string | null; user_id: string | null; charges_usd: string; credits_usd: string }[]> {
  const user = perUser ? 'user_id' : 'null::text';
  const { rows } = await db.query<{
    model: string | null;
    kind: string | null;
    user_id: string | null;
    charges_usd: string;
    credits_usd: string;
  }>(
    `select model, kind, ${user} as user_id, sum(charges_usd)::numeric(38, 18)::text as charges_usd,
            sum(credits_usd)::numeric(38, 18)::text as credits_usd
       from (select model, kind, user_id, charges_usd, credits_usd from metric_ledger_totals
             union all
             select f.model, f.kind, f.user_id, f.charge_usd, f.credit_usd from ${QUEUED_ENTRIES}) t
      group by 1, 2, 3 order by 1, 2, 3`,
  );
  return rows;
}

/** Claimed runs per status and budget tier, and the executions that found their slot taken (status 'duplicate'). */
export async function runCounts(db: pg.Pool): Promise<{ status: string; tier: string | null; runs: string }[]> {
  const { rows } = await db.query<{ status: string; tier: string | null; runs: string }>(
    `select status, tier, sum(runs)::text as runs from metric_run_counts group by 1, 2 having sum(runs) <> 0 order by 1, 2`,
  );
  return rows;
}

/**
 * One histogram's buckets, in order: each bucket's upper bound in milliseconds (null: +Inf, the last), how many
 * observations fell there and their sum in milliseconds. The bounds are the database's (metric_bounds_ms).
 */
export async function histogramBuckets(
  db: pg.Pool,
  histogram: 'run_duration' | 'booking_lag',
): Promise<{ le_ms: string | null; count: string; sum_ms: string }[]> {
  const { rows } = await db.query<{ le_ms: string | null; count: string; sum_ms: string }>(
    `select b.le_ms::text as le_ms, coalesce(sum(h.observations), 0)::text as count, coalesce(sum(h.sum_ms), 0)::text as sum_ms
       from unnest(metric_bounds_ms($1) || null::bigint) with ordinality b(le_ms, n)
       left join (select bucket, observations, sum_ms from metric_histograms where histogram = $1
                  union all
                  select f.lag_bucket, 1, f.lag_ms from ${QUEUED_ENTRIES} where $1 = 'booking_lag' and f.lag_ms is not null) h
         on h.bucket = b.n - 1
      group by b.n, b.le_ms order by b.n`,
    [histogram],
  );
  return rows;
}
