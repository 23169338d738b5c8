import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
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
 * Reading them is rollups-read.ts.
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

/** Columns of usage_rollups in insert order, and the aggregate of the ledger rows `l` that fills them. */
const ROLLUP_COLUMNS = `zone, day, user_id, task_id, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
  completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id`;
export const AGGREGATES = `count(*), sum(l.prompt_tokens)::bigint, sum(l.cached_prompt_tokens)::bigint,
  sum(l.completion_tokens)::bigint, sum(l.reasoning_tokens)::bigint, sum(l.cost_usd), min(l.id), max(l.id)`;
/** The sums of a rollup row, in insert order after its bucket columns. */
export const SUM_COLUMNS = ['entries', 'prompt_tokens', 'cached_prompt_tokens', 'completion_tokens', 'reasoning_tokens', 'cost_usd'];
/** Bucket columns of usage_rollups; task_id, model and kind may be null (compared with `is not distinct from`). */
export const DAY_BUCKET = ['zone', 'day', 'user_id', 'task_id', 'model', 'kind', 'entry_type', 'status'];
const NULLABLE = new Set(['task_id', 'model', 'kind']);
const columnsOf = (bucket: string[]) => [...bucket, ...SUM_COLUMNS, 'first_entry_id', 'last_entry_id'].join(', ');
const sameBucket = (bucket: string[], a: string, b: string) =>
  bucket.map((k) => (NULLABLE.has(k) ? `${a}.${k} is not distinct from ${b}.${k}` : `${a}.${k} = ${b}.${k}`)).join(' and ');

/**
 * The rollups coarser than usage_rollups (usage_month_rollups, usage_day_totals, usage_day_users): each bucket, and the SQL that
 * sums rows of usage_rollups (`source`, filtered by `where`) into it. What is added to usage_rollups is added to them.
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

/**
 * Adds the rows of the temp table `delta` (bucket columns, sums, id span) to their buckets in `table`. The application
 * role may insert and delete rollup rows, not update them: a bucket that exists already is deleted and inserted again
 * with the sums added. The buckets it held before stay readable in the temp table `<table>_old` until commit.
 */
async function addToBuckets(c: pg.PoolClient, table: string, bucket: string[], delta: string): Promise<void> {
  await c.query(
    `create temp table ${table}_old on commit drop as
       with gone as (delete from ${table} r using ${delta} t where ${sameBucket(bucket, 'r', 't')} returning r.*)
       select * from gone`,
  );
  await c.query(
    `insert into ${table} (${columnsOf(bucket)})
     select ${bucket.map((k) => `t.${k}`).join(', ')}, ${SUM_COLUMNS.map((k) => `t.${k} + coalesce(o.${k}, 0)`).join(', ')},
            least(t.first_entry_id, o.first_entry_id), greatest(t.last_entry_id, o.last_entry_id)
       from ${delta} t left join ${table}_old o on ${sameBucket(bucket, 'o', 't')}`,
  );
}

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
/** A claimed run `r` in the run bucket `t` (zone t.zone): the runs_user_task_claimed index finds them. */
const inRunBucket = `r.user_id = t.user_id and r.task_id = t.task_id and ${dayRange('t.day', 't.day', 't.zone', 'r.claimed_at')}`;

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
  const r = await db.query('insert into rollup_zones (zone) values ($1) on conflict do nothing', [zone]);
  return r.rowCount === 1;
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
 */
async function foldQueues(c: pg.PoolClient, limit: number | null): Promise<Folded> {
  const zones = (await c.query<{ zone: string }>('select zone from rollup_zones order by zone')).rows.map((r) => r.zone);
  const take = (table: string, key: string) => (limit === null ? table : `(select * from ${table} order by ${key} limit ${limit})`);
  const picked = await c.query(
    `create temp table picked on commit drop as
       with taken as (
         delete from rollup_queue where entry_id in (select entry_id from ${take('rollup_queue', 'entry_id')} q) returning entry_id)
       select entry_id from taken`,
  );
  const pickedRuns = await c.query(
    `create temp table picked_runs on commit drop as
       with taken as (
         delete from run_rollup_queue where id in (select id from ${take('run_rollup_queue', 'id')} q) returning claimed_at, user_id, task_id)
       select distinct claimed_at, user_id, task_id from taken`,
  );
  const entries = picked.rowCount ?? 0;
  const runChanges = pickedRuns.rowCount ?? 0;
  const perZone = new Map<string, { buckets: number; reopened: number }>(zones.map((z) => [z, { buckets: 0, reopened: 0 }]));
  if (entries > 0) {
    await c.query(
      `create temp table delta on commit drop as
         select z.zone, ${localDay('z.zone')} as day, l.user_id, l.task_id, l.model, l.kind, l.entry_type, l.status,
                count(*) as entries, sum(l.prompt_tokens)::bigint as prompt_tokens, sum(l.cached_prompt_tokens)::bigint as cached_prompt_tokens,
                sum(l.completion_tokens)::bigint as completion_tokens, sum(l.reasoning_tokens)::bigint as reasoning_tokens,
                sum(l.cost_usd) as cost_usd, min(l.id) as first_entry_id, max(l.id) as last_entry_id
           from picked p join usage_ledger l on l.id = p.entry_id cross join rollup_zones z
          group by 1, 2, 3, 4, 5, 6, 7, 8`,
    );
    await addToBuckets(c, 'usage_rollups', DAY_BUCKET, 'delta');
    // The coarser rollups take the same additions, summed once more, in the same transaction: never apart.
    for (const coarser of COARSER_ROLLUPS) {
      await c.query(`create temp table ${coarser.table}_delta on commit drop as ${coarser.from('delta', 'true')}`);
      await addToBuckets(c, coarser.table, coarser.bucket, `${coarser.table}_delta`);
    }
    const { rows } = await c.query<{ zone: string; buckets: string; reopened: string }>(
      `select t.zone, count(*) as buckets, (select count(*) from usage_rollups_old o where o.zone = t.zone) as reopened from delta t group by t.zone`,
    );
    for (const r of rows) perZone.set(r.zone, { buckets: Number(r.buckets), reopened: Number(r.reopened) });
  }
  if (runChanges > 0) {
    await c.query(
      `create temp table touched_runs on commit drop as
         select distinct z.zone, ${localDay('z.zone', 'p.claimed_at')} as day, p.user_id, p.task_id
           from picked_runs p cross join rollup_zones z`,
    );
    await c.query(
      `delete from run_rollups r using touched_runs t
        where r.zone = t.zone and r.day = t.day and r.user_id = t.user_id and r.task_id = t.task_id`,
    );
    await c.query(
      `insert into run_rollups (zone, day, user_id, task_id, status, tier, runs)
       select t.zone, t.day, t.user_id, t.task_id, r.status, r.tier, count(*)
         from touched_runs t join runs r on ${inRunBucket}
        group by t.zone, t.day, t.user_id, t.task_id, r.status, r.tier`,
    );
  }
  await c.query(
    `update rollup_zones
        set refreshed_at = now(),
            last_entry_id = greatest(last_entry_id, coalesce((select max(entry_id) from picked), 0)),
            entries_folded = entries_folded + $1`,
    [entries],
  );
  return { entries, runChanges, perZone };
}

/**
 * Folds the queued ledger entries and run changes into the rollups of every tracked zone, a batch per transaction.
 * Safe to run concurrently (one lock) and to interrupt (a batch commits whole).
 */
export async function refreshRollups(db: pg.Pool, opts: { batchSize?: number; onProgress?: OnProgress } = {}): Promise<RefreshResult> {
  const batchSize = opts.batchSize ?? 5000;
  const queued = await pendingEntries(db);
  const result: Omit<RefreshResult, 'watermarks'> = { entries: 0, runChanges: 0, buckets: 0, reopened: 0, zones: {} };
  for (;;) {
    const batch = await inTransaction(db, async (c) => {
      await lockRollups(c);
      return foldQueues(c, batchSize);
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
    if (batch.entries < batchSize && batch.runChanges < batchSize) break;
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
  const { firstDay: first, lastDay: last } = monthBoundsSql('$2', '$1');
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
    await c.query(`delete from usage_rollups where zone = $1 and day between ${first} and ${last}`, [zone, month]);
    await c.query(`delete from run_rollups where zone = $1 and day between ${first} and ${last}`, [zone, month]);
    let buckets = 0;
    let entries = 0n;
    let lastEntryId = 0n;
    for (const [i, day] of days.entries()) {
      const inserted = await c.query<{ entries: string; last_entry_id: string }>(
        `insert into usage_rollups (${ROLLUP_COLUMNS})
         select $1, ${localDay('$1')}, l.user_id, l.task_id, l.model, l.kind, l.entry_type, l.status, ${AGGREGATES}
           from usage_ledger l
          where ${dayRange('$2::date', '$2::date')}
          group by 2, 3, 4, 5, 6, 7, 8
         returning entries, last_entry_id`,
        [zone, day],
      );
      await c.query(
        `insert into run_rollups (zone, day, user_id, task_id, status, tier, runs)
         select $1, ${localDay('$1', 'r.claimed_at')}, r.user_id, r.task_id, r.status, r.tier, count(*)
           from runs r
          where ${dayRange('$2::date', '$2::date', '$1', 'r.claimed_at')}
          group by 2, 3, 4, 5, 6`,
        [zone, day],
      );
      buckets += inserted.rowCount ?? 0;
      for (const r of inserted.rows) {
        entries += BigInt(r.entries);
        if (BigInt(r.last_entry_id) > lastEntryId) lastEntryId = BigInt(r.last_entry_id);
      }
      onProgress?.({ phase, done: i + 1, total: days.length });
    }
    const monthDays = `zone = $1 and day between ${first} and ${last}`;
    for (const coarser of COARSER_ROLLUPS) {
      const rows = coarser.table === 'usage_month_rollups' ? 'zone = $1 and month = $2' : monthDays;
      await c.query(`delete from ${coarser.table} where ${rows}`, [zone, month]);
      await c.query(`insert into ${coarser.table} (${columnsOf(coarser.bucket)}) ${coarser.from('usage_rollups', monthDays)}`, [
        zone,
        month,
      ]);
    }
    await c.query(`insert into rollup_months (zone, month) values ($1, $2) on conflict (zone, month) do update set built_at = now()`, [
      zone,
      month,
    ]);
    // The watermark moves forward only: rows rebuilt from the raw ledger are as current as a refresh would make them.
    await c.query('update rollup_zones set refreshed_at = now(), last_entry_id = greatest(last_entry_id, $2) where zone = $1', [
      zone,
      lastEntryId.toString(),
    ]);
    return { zone, month, buckets, entries: entries.toString() };
  }
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
