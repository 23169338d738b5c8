import type pg from 'pg';
import { monthBoundsSql } from '../db/month-bounds';
import { inTransaction } from '../db/pool';
import { UserError } from '../errors';
import type { OnProgress } from '../progress-bar';
import { daysOf, shiftMonth, type Month } from './month';
import { pendingEntries, readWatermark, type Watermark } from './rollups-read';

/**
 * The write side of the daily rollups of the ledger per (zone, local day, user, model, kind, entry_type, status); see
 * migrations/003_rollups.sql for why a queue filled by a trigger, not the id sequence, decides what a refresh must recompute.
 *
 * - build:   a (zone, month) is computed in full from the raw ledger the first time a report asks for it;
 * - refresh: queued entries name the buckets they touch, and only those buckets are recomputed from the raw ledger;
 * - rebuild: recomputes every bucket of a month (or of all months) from the raw ledger, deterministically.
 * A refresh and a rebuild of the same data give identical rows: both aggregate the same ledger rows the same way.
 * Reading them is rollups-read.ts.
 */

export interface RefreshResult {
  /** Queued ledger entries folded in by this refresh. */
  entries: number;
  /** Buckets recomputed. */
  buckets: number;
  /** Buckets that existed already and were recomputed because an entry arrived late (or back-dated) into them. */
  reopened: number;
  watermark: Watermark;
}

export interface RebuildResult {
  zone: string;
  month: Month;
  buckets: number;
  entries: string;
}

/** Columns of usage_rollups in insert order, and the aggregate of the ledger rows `l` that fills them. */
const ROLLUP_COLUMNS = `zone, day, user_id, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
  completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id`;
const AGGREGATES = `count(*), sum(l.prompt_tokens)::bigint, sum(l.cached_prompt_tokens)::bigint,
  sum(l.completion_tokens)::bigint, sum(l.reasoning_tokens)::bigint, sum(l.cost_usd), min(l.id), max(l.id)`;
/** The local day of a ledger row in the zone bound to $1. */
const LOCAL_DAY = `(l.created_at at time zone $1)::date`;
/**
 * Ledger rows of local days first..last in the zone bound to $1. LOCAL_DAY decides; the instant range only lets the
 * created_at index narrow the scan. Its 3-hour margin covers days whose midnight does not exist or repeats (a DST
 * change at midnight moves the instant `day::timestamp at time zone zone` by the size of the change, at most 2 hours).
 */
const dayRange = (first: string, last: string) =>
  `l.created_at >= ((${first})::timestamp at time zone $1) - interval '3 hours'
   and l.created_at < (((${last}) + 1)::timestamp at time zone $1) + interval '3 hours'
   and ${LOCAL_DAY} between (${first}) and (${last})`;

/** One lock per zone: refreshes and rebuilds of a zone take turns; different zones proceed in parallel. */
const lockZone = (db: pg.PoolClient, zone: string) =>
  db.query(`select pg_advisory_xact_lock(hashtextextended('cronledger-rollups:' || $1, 0))`, [zone]);

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

/** Starts tracking a zone: from now on every new ledger entry is queued for it too. */
export async function registerZone(db: pg.Pool, zone: string): Promise<boolean> {
  await assertZoneKnownToDatabase(db, zone);
  const r = await db.query('insert into rollup_zones (zone) values ($1) on conflict do nothing', [zone]);
  return r.rowCount === 1;
}

/**
 * Waits until every transaction that was inserting into the ledger has ended. A writer whose trigger ran before a zone
 * was registered did not queue its entries for that zone, so a month is built only after such writers committed
 * (their rows are then in the build's snapshot). Without any table lock (the application role may not take one):
 * a writer holds ROW EXCLUSIVE on the ledger from before its statement's snapshot until it ends, so the writers that
 * might have missed the zone are among those holding it now; wait for each of their transactions (by virtual
 * transaction id, as CREATE INDEX CONCURRENTLY does) to end. Writers that start later see the zone.
 */
async function waitForLedgerWriters(db: pg.Pool, onProgress?: OnProgress): Promise<void> {
  const { rows } = await db.query<{ vxid: string }>(
    `select distinct virtualtransaction as vxid from pg_locks
      where locktype = 'relation' and database = (select oid from pg_database where datname = current_database())
        and relation = 'usage_ledger'::regclass and mode = 'RowExclusiveLock' and granted and pid <> pg_backend_pid()`,
  );
  const writers = rows.map((r) => r.vxid);
  for (let waited = 0; ; waited++) {
    const open = await db.query<{ n: string }>(
      `select count(*) as n from pg_locks where locktype = 'virtualxid' and mode = 'ExclusiveLock' and granted and virtualxid = any($1::text[])`,
      [writers],
    );
    const left = Number(open.rows[0].n);
    if (left === 0) return;
    onProgress?.({ phase: 'waiting for ledger writers to commit', done: writers.length - left, total: writers.length });
    await new Promise((r) => setTimeout(r, Math.min(20 * 2 ** waited, 200)));
  }
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
  const refresh = await refreshRollups(db, zone, { onProgress });
  return { built, refresh };
}

/**
 * Folds queued entries into the zone's rollups, a batch per transaction: the buckets the batch touches are deleted and
 * recomputed from the raw ledger. Safe to run concurrently (per-zone lock) and to interrupt (a batch commits whole).
 */
export async function refreshRollups(
  db: pg.Pool,
  zone: string,
  opts: { batchSize?: number; onProgress?: OnProgress } = {},
): Promise<RefreshResult> {
  const batchSize = opts.batchSize ?? 5000;
  const queued = await pendingEntries(db, zone);
  const result = { entries: 0, buckets: 0, reopened: 0 };
  for (;;) {
    const batch = await inTransaction(db, async (c) => {
      await lockZone(c, zone);
      const picked = await c.query(
        `create temp table picked on commit drop as
           with taken as (
             delete from rollup_pending
              where zone = $1 and entry_id in (select entry_id from rollup_pending where zone = $1 order by entry_id limit $2)
             returning entry_id)
           select entry_id from taken`,
        [zone, batchSize],
      );
      const entries = picked.rowCount ?? 0;
      if (entries === 0) {
        await c.query('update rollup_zones set refreshed_at = now() where zone = $1', [zone]);
        return { entries, buckets: 0, reopened: 0 };
      }
      await c.query(
        `create temp table touched on commit drop as
           select distinct ${LOCAL_DAY} as day, l.user_id, l.model, l.kind, l.entry_type, l.status
             from picked p join usage_ledger l on l.id = p.entry_id`,
        [zone],
      );
      const reopened = await c.query(
        `delete from usage_rollups r using touched t
          where r.zone = $1 and r.day = t.day and r.user_id = t.user_id and r.model is not distinct from t.model
            and r.kind is not distinct from t.kind and r.entry_type = t.entry_type and r.status = t.status`,
        [zone],
      );
      const recomputed = await c.query(
        `insert into usage_rollups (${ROLLUP_COLUMNS})
         select $1, t.day, t.user_id, t.model, t.kind, t.entry_type, t.status, ${AGGREGATES}
           from touched t
           join usage_ledger l
             on l.user_id = t.user_id and ${dayRange('t.day', 't.day')}
            and l.model is not distinct from t.model and l.kind is not distinct from t.kind
            and l.entry_type = t.entry_type and l.status = t.status
          group by t.day, t.user_id, t.model, t.kind, t.entry_type, t.status`,
        [zone],
      );
      await c.query(
        `update rollup_zones
            set refreshed_at = now(),
                last_entry_id = greatest(last_entry_id, (select max(entry_id) from picked)),
                entries_folded = entries_folded + $2
          where zone = $1`,
        [zone, entries],
      );
      return { entries, buckets: recomputed.rowCount ?? 0, reopened: reopened.rowCount ?? 0 };
    });
    result.entries += batch.entries;
    result.buckets += batch.buckets;
    result.reopened += batch.reopened;
    if (queued > 0) opts.onProgress?.({ phase: 'refreshing rollups', done: Math.min(result.entries, queued), total: queued });
    if (batch.entries < batchSize) break;
  }
  return { ...result, watermark: await readWatermark(db, zone) };
}

/**
 * Recomputes every bucket of one month of one zone from the raw ledger, in one transaction (readers see the old month
 * or the new one, never a mix). Days are inserted one at a time, each through the created_at index, to show progress.
 */
export async function rebuildMonth(db: pg.Pool, zone: string, month: Month, onProgress?: OnProgress): Promise<RebuildResult> {
  await registerZone(db, zone);
  await waitForLedgerWriters(db, onProgress);
  const { firstDay: first, lastDay: last } = monthBoundsSql('$2', '$1');
  const days = daysOf(month);
  const phase = `rebuilding rollups ${zone} ${month}`;
  return inTransaction(db, async (c) => {
    await lockZone(c, zone);
    // Queued entries of this month are covered by the recomputation below, which reads later snapshots than this delete.
    await c.query(
      `delete from rollup_pending p using usage_ledger l
        where p.zone = $1 and l.id = p.entry_id and ${dayRange(first, last)}`,
      [zone, month],
    );
    await c.query(`delete from usage_rollups where zone = $1 and day between ${first} and ${last}`, [zone, month]);
    let buckets = 0;
    let entries = 0n;
    let lastEntryId = 0n;
    for (const [i, day] of days.entries()) {
      const inserted = await c.query<{ entries: string; last_entry_id: string }>(
        `insert into usage_rollups (${ROLLUP_COLUMNS})
         select $1, ${LOCAL_DAY}, l.user_id, l.model, l.kind, l.entry_type, l.status, ${AGGREGATES}
           from usage_ledger l
          where ${dayRange('$2::date', '$2::date')}
          group by 2, 3, 4, 5, 6, 7
         returning entries, last_entry_id`,
        [zone, day],
      );
      buckets += inserted.rowCount ?? 0;
      for (const r of inserted.rows) {
        entries += BigInt(r.entries);
        if (BigInt(r.last_entry_id) > lastEntryId) lastEntryId = BigInt(r.last_entry_id);
      }
      onProgress?.({ phase, done: i + 1, total: days.length });
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
  });
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
