import type pg from 'pg';
import { inTransaction } from '../db/pool';
import { UserError } from '../errors';
import type { OnProgress } from '../progress-bar';
import { daysOf, shiftMonth, type Month } from './month';
import { pendingEntries, readWatermark, type Watermark } from './rollups-read';

/**
 * The write side of the daily rollups: the ledger per (zone, local day, user, task, model, kind, entry_type, status)
 * and the claimed runs per (zone, local day, user, task, status, tier). The rollups' comment in
 * migrations/001_baseline.sql says why queues filled by triggers, not the id sequence, decide what a refresh must
 * recompute, and why the queues name no zone. The coarser ledger rollups (per month and user, per day, per day and
 * user and task) take every addition in the same transaction.
 *
 * - build:   a (zone, month) is computed in full from the raw ledger the first time a report asks for it;
 * - refresh: queued entries are added to their buckets in every tracked zone, and the run buckets that queued run
 *            changes touch are recomputed (the rollupRefresh schedule runs it every minute);
 * - rebuild: recomputes every bucket of a month (or of all months) from the raw ledger, deterministically.
 * A refresh and a rebuild of the same data give identical rows: both aggregate the same ledger rows the same way.
 * The writing is done by SECURITY DEFINER functions (rollups_fold_queues and the rollups_*_month/day ones,
 * migrations/032_roles_by_job.sql): the worker role may not write a rollup row itself. This module takes the lock, the
 * transactions and the batches. Reading them is rollups-read.ts.
 */

export interface RefreshResult {
  /** Queued ledger entries folded in by this refresh (each into every tracked zone). */
  entries: number;
  /** Queued run changes (claims, closes, re-claims) folded in. */
  runChanges: number;
  /** Ledger buckets recomputed, over all zones. */
  buckets: number;
  /** Ledger buckets that existed already and were recomputed because an entry arrived late (or back-dated) into them. */
  reopened: number;
  /** The same two counts per zone. */
  zones: Record<string, { buckets: number; reopened: number }>;
  watermarks: Record<string, Watermark>;
}

export interface RebuildResult {
  zone: string;
  month: Month;
  buckets: number;
  entries: string;
}

export const AGGREGATES = `count(*), sum(l.prompt_tokens)::bigint, sum(l.cached_prompt_tokens)::bigint,
  sum(l.completion_tokens)::bigint, sum(l.reasoning_tokens)::bigint, sum(l.cost_usd), min(l.id), max(l.id)`;
/** The sums of a rollup row, in insert order after its bucket columns. */
export const SUM_COLUMNS = ['entries', 'prompt_tokens', 'cached_prompt_tokens', 'completion_tokens', 'reasoning_tokens', 'cost_usd'];
/** Bucket columns of usage_rollups; task_id, model and kind may be null (compared with `is not distinct from`). */
export const DAY_BUCKET = ['zone', 'day', 'user_id', 'task_id', 'model', 'kind', 'entry_type', 'status'];
/**
 * The rollups coarser than usage_rollups (usage_month_rollups, usage_day_totals, usage_day_users): each bucket, and the SQL that
 * sums rows of usage_rollups (`source`, filtered by `where`) into it, as `rollups verify` recomputes them. What is added
 * to usage_rollups is added to them (rollup_coarser_select in migrations/032_roles_by_job.sql writes them the same way).
 */
export const COARSER_ROLLUPS = [
  { table: 'usage_month_rollups', bucket: ['zone', 'month', 'user_id', 'model', 'kind', 'entry_type', 'status'] },
  { table: 'usage_day_totals', bucket: ['zone', 'day', 'model', 'kind', 'entry_type', 'status'] },
  { table: 'usage_day_users', bucket: ['zone', 'day', 'user_id', 'task_id', 'entry_type'] },
].map(({ table, bucket }) => ({
  table,
  bucket,
  from: (source: string, where: string) =>
    `select ${bucket.map((k) => (k === 'month' ? `to_char(day, 'YYYY-MM') as month` : k)).join(', ')},
            ${SUM_COLUMNS.map((k) => `sum(${k})${k === 'cost_usd' ? '' : '::bigint'} as ${k}`).join(', ')},
            min(first_entry_id) as first_entry_id, max(last_entry_id) as last_entry_id
       from ${source} where ${where} group by ${bucket.map((_, i) => i + 1).join(', ')}`,
}));

/** The local day of a ledger row (or a run's claim) in a zone, given as SQL. */
export const localDay = (zone: string, at = 'l.created_at') => `(${at} at time zone ${zone})::date`;
/**
 * Rows whose local day (of `at` in `zone`) is first..last. The local day decides; the instant range only lets an index
 * on `at` narrow the scan. Its 3-hour margin covers days whose midnight does not exist or repeats (a DST change at
 * midnight moves the instant `day::timestamp at time zone zone` by the size of the change, at most 2 hours).
 */
export const dayRange = (first: string, last: string, zone = '$1', at = 'l.created_at') =>
  `${at} >= ((${first})::timestamp at time zone ${zone}) - interval '3 hours'
   and ${at} < (((${last}) + 1)::timestamp at time zone ${zone}) + interval '3 hours'
   and ${localDay(zone, at)} between (${first}) and (${last})`;
/**
 * One lock for every write to the rollups: refreshes and builds take turns. A build that follows a refresh reads a
 * snapshot holding every entry that refresh consumed from the queue, so a zone registered meanwhile misses nothing.
 * (rebuildMonth takes the same key as a session lock, to take its repeatable-read snapshot after it.)
 */
const lockRollups = (db: pg.PoolClient) => db.query(`select pg_advisory_xact_lock(hashtextextended('cronledger-rollups', 0))`);

/** Fails with a UserError unless PostgreSQL's time zone database knows the zone (Node's may be newer or older). */
export async function assertZoneKnownToDatabase(db: pg.Pool, zone: string): Promise<void> {
  try {
    await db.query('select now() at time zone $1', [zone]);
  } catch (err) {
    if ((err as { code?: string }).code === '22023') {
      throw new UserError(`time zone ${JSON.stringify(zone)} is not known to PostgreSQL; use a name like "UTC" or "Europe/Berlin"`);
    }
    throw err;
  }
}

/** Starts tracking a zone: from now on every refresh folds the queue into it too. */
export async function registerZone(db: pg.Pool, zone: string): Promise<boolean> {
  await assertZoneKnownToDatabase(db, zone);
  const { rows } = await db.query<{ added: boolean }>('select rollups_register_zone($1) as added', [zone]);
  return rows[0].added;
}

/** Makes the month's rollups for a zone complete and current: builds the month once, then folds in the queue. */
export async function ensureMonthRollups(
  db: pg.Pool,
  zone: string,
  month: Month,
  onProgress?: OnProgress,
): Promise<{ built: boolean; refresh: RefreshResult }> {
  await registerZone(db, zone);
  const done = await db.query('select 1 from rollup_months where zone = $1 and month = $2', [zone, month]);
  let built = false;
  if (done.rowCount === 0) {
    await rebuildMonth(db, zone, month, onProgress);
    built = true;
  }
  const refresh = await refreshRollups(db, { onProgress });
  return { built, refresh };
}

type Folded = { entries: number; runChanges: number; perZone: Map<string, { buckets: number; reopened: number }> };

/**
 * Folds queued entries (at most `limit`, or all visible) and run changes into every tracked zone, in the caller's
 * transaction, and deletes their queue rows: exactly once, since the deletion commits with the fold. Entries are
 * added to their buckets as deltas (sums add, the id span widens), so a late entry costs its own row, not a
 * recomputation of its bucket. Runs change status, so their buckets (one user's task on one day) are recomputed.
 * rollups_fold_queues does it.
 */
async function foldQueues(c: pg.PoolClient, limit: number | null): Promise<Folded> {
  const { rows } = await c.query<{
    folded: { entries: number; runChanges: number; zones: { zone: string; buckets: number; reopened: number }[] };
  }>('select rollups_fold_queues($1) as folded', [limit]);
  const { entries, runChanges, zones } = rows[0].folded;
  return { entries, runChanges, perZone: new Map(zones.map((z) => [z.zone, { buckets: z.buckets, reopened: z.reopened }])) };
}

/**
 * Recomputes, in the caller's transaction, the cost_per_run_days rows of the users and tasks the folds since the last
 * recompute touched (cost_per_run_stale, migrations/042_cost_per_run_once_per_refresh.sql), once over their union.
 */
async function recomputeCostPerRun(c: pg.PoolClient): Promise<void> {
  await c.query('select rollups_recompute_cost_per_run()');
}

/**
 * Folds the queued ledger entries and run changes into the rollups of every tracked zone, a batch per transaction,
 * and recomputes cost_per_run_days once, in the last batch's transaction, over what every batch touched (each batch
 * records it in its own transaction, so a refresh interrupted between batches leaves it to the next refresh).
 * Safe to run concurrently (one lock) and to interrupt (a batch commits whole).
 */
export async function refreshRollups(db: pg.Pool, opts: { batchSize?: number; onProgress?: OnProgress } = {}): Promise<RefreshResult> {
  const batchSize = opts.batchSize ?? 5000;
  /** A batch short of both limits emptied the queues (as this refresh sees them). */
  const isLastBatch = (b: Folded) => b.entries < batchSize && b.runChanges < batchSize;
  const queued = await pendingEntries(db);
  const result: Omit<RefreshResult, 'watermarks'> = { entries: 0, runChanges: 0, buckets: 0, reopened: 0, zones: {} };
  for (;;) {
    const batch = await inTransaction(db, async (c) => {
      await lockRollups(c);
      const folded = await foldQueues(c, batchSize);
      if (isLastBatch(folded)) await recomputeCostPerRun(c);
      return folded;
    });
    result.entries += batch.entries;
    result.runChanges += batch.runChanges;
    for (const [zone, z] of batch.perZone) {
      const sum = (result.zones[zone] ??= { buckets: 0, reopened: 0 });
      sum.buckets += z.buckets;
      sum.reopened += z.reopened;
      result.buckets += z.buckets;
      result.reopened += z.reopened;
    }
    if (queued > 0) opts.onProgress?.({ phase: 'refreshing rollups', done: Math.min(result.entries, queued), total: queued });
    if (isLastBatch(batch)) break;
  }
  const watermarks: Record<string, Watermark> = {};
  for (const zone of Object.keys(result.zones)) watermarks[zone] = await readWatermark(db, zone);
  return { ...result, watermarks };
}

/**
 * Builds the month now under way in each tracked zone if it is not built yet: done by the rollupRefresh schedule in
 * the first minute of a month, when the month holds a minute of entries, so no report pays for building a month from
 * the raw ledger. From then on the queue keeps it current. Returns the (zone, month) pairs it built.
 */
export async function buildCurrentMonths(db: pg.Pool, onProgress?: OnProgress): Promise<{ zone: string; month: Month }[]> {
  const { rows } = await db.query<{ zone: string; month: string }>(
    `select z.zone, to_char(now() at time zone z.zone, 'YYYY-MM') as month from rollup_zones z
      where not exists (select 1 from rollup_months m where m.zone = z.zone and m.month = to_char(now() at time zone z.zone, 'YYYY-MM'))
      order by z.zone`,
  );
  for (const r of rows) await rebuildMonth(db, r.zone, r.month, onProgress);
  return rows;
}

/**
 * Recomputes every bucket of one month of one zone from the raw ledger and runs, in one transaction (readers see the
 * old month or the new one, never a mix). Days are inserted one at a time, each through the created_at index, to show
 * progress. Queued entries stay queued: a later refresh recomputes their buckets again, to the same rows.
 */
export async function rebuildMonth(db: pg.Pool, zone: string, month: Month, onProgress?: OnProgress): Promise<RebuildResult> {
  await registerZone(db, zone);
  const days = daysOf(month);
  const phase = `rebuilding rollups ${zone} ${month}`;
  // One snapshot for the whole rebuild (repeatable read), taken after the lock: every queued entry it sees is folded
  // (into every zone) and dequeued first, then the month is recomputed from the same snapshot, so an entry is counted
  // once whether it committed before the snapshot (rebuilt, dequeued) or after (left queued for the next refresh).
  const c = await db.connect();
  try {
    await c.query(`select pg_advisory_lock(hashtextextended('cronledger-rollups', 0))`);
    try {
      await c.query('begin isolation level repeatable read');
      const result = await rebuildInSnapshot(c);
      await c.query('commit');
      return result;
    } catch (err) {
      await c.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      await c.query(`select pg_advisory_unlock(hashtextextended('cronledger-rollups', 0))`).catch(() => undefined);
    }
  } finally {
    c.release();
  }

  async function rebuildInSnapshot(c: pg.PoolClient): Promise<RebuildResult> {
    await foldQueues(c, null);
    await c.query('select rollups_clear_month($1, $2)', [zone, month]);
    let buckets = 0;
    let entries = 0n;
    let lastEntryId = 0n;
    for (const [i, day] of days.entries()) {
      const inserted = await c.query<{ entries: string; last_entry_id: string }>(
        'select entries, last_entry_id from rollups_rebuild_day($1, $2)',
        [zone, day],
      );
      buckets += inserted.rowCount ?? 0;
      for (const r of inserted.rows) {
        entries += BigInt(r.entries);
        if (BigInt(r.last_entry_id) > lastEntryId) lastEntryId = BigInt(r.last_entry_id);
      }
      onProgress?.({ phase, done: i + 1, total: days.length });
    }
    // the coarser rollups, the month's build time and the zone's watermark (forward only: rows rebuilt from the raw
    // ledger are as current as a refresh would make them)
    await c.query('select rollups_finish_month($1, $2, $3)', [zone, month, lastEntryId.toString()]);
    // the cost per run days of what the fold above touched outside the month (and of earlier folds not recomputed)
    await recomputeCostPerRun(c);
    return { zone, month, buckets, entries: entries.toString() };
  }
}

/**
 * Recomputes the queue's summary (rollup_pending, rollup_pending_users) from the queued entries: what `rollups rebuild`
 * does after the months, so a rebuild repairs everything `rollups verify` checks. It waits for open ledger writers
 * (rollups_reset_pending locks the queue), which a month's rebuild does not.
 */
export async function rebuildQueueSummary(db: pg.Pool): Promise<void> {
  await db.query('select rollups_reset_pending()');
}

/**
 * Rebuilds a zone's rollups for every month that has ledger entries or rollups: months between the first and the
 * last entry (found through the created_at index), plus any month rolled up before.
 */
export async function rebuildAll(db: pg.Pool, zone: string, onProgress?: OnProgress): Promise<RebuildResult[]> {
  await registerZone(db, zone);
  const span = await db.query<{ first: string | null; last: string | null }>(
    `select to_char(min(created_at) at time zone $1, 'YYYY-MM') as first, to_char(max(created_at) at time zone $1, 'YYYY-MM') as last
       from usage_ledger`,
    [zone],
  );
  const months = new Set<Month>();
  const { first, last } = span.rows[0];
  if (first && last) for (let m = first; m <= last; m = shiftMonth(m, 1)) months.add(m);
  const known = await db.query<{ month: string }>(
    `select month from rollup_months where zone = $1
     union select distinct to_char(day, 'YYYY-MM') from usage_rollups where zone = $1`,
    [zone],
  );
  for (const r of known.rows) months.add(r.month);
  const ordered = [...months].sort();
  const results: RebuildResult[] = [];
  for (const month of ordered) results.push(await rebuildMonth(db, zone, month, onProgress));
  return results;
}
