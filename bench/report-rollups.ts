/**
 * P3, reports at scale: the monthly report and the admin overview from the rollups against the raw scan of the
 * month's ledger, what keeping the rollups current costs, and a month-to-date lookup for one user at 1,000 rows
 * and at the large size. Figures are ratios within one run (the machine is shared and noisy), printed with the
 * command that produced them.
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/report-rollups.ts [--entries 10000000] [--keep]
 *
 * --keep keeps the large database (cronledger_bench_p3_kept_<entries>, one per size) after the run and reuses it on the next run with --keep
 * instead of loading it again (a 10,000,000-entry load takes about 12 minutes): to measure a change on the same data.
 * Each run adds its own 1% late entries to it. Drop it by hand when done (`drop database cronledger_bench_p3_kept_10000000`).
 *
 * It works in databases of its own on the local stack's PostgreSQL (migrated as the owner, used as cronledger_app,
 * the overview read as cronledger_readonly in read-only sessions) and drops them at the end. The month is bulk
 * loaded (bench/lib/synthetic-ledger.ts: triggers off, then the derived tables rebuilt); check free disk first
 * (10,000,000 entries and their 5,000,000 runs take about 5 GB).
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { overview } from '../src/admin/admin-data';
import { budgetStatus, budgetStatusOfAll, monthFigures } from '../src/budgets/budget-status';
import { downgradeSavings } from '../src/budgets/downgrade-savings';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { budgetSection } from '../src/reports/budget-section';
import { buildReport, reportFromSums } from '../src/reports/build-report';
import { readMonthSums } from '../src/reports/rollups-read';
import { rebuildMonth, refreshRollups } from '../src/reports/rollups-write';
import { benchArgs, numberOption } from './lib/args';
import { scratchDatabase, type ScratchDatabase } from './lib/scratch-database';
import { bulkLoadMonth, insertLedgerSql, SYNTHETIC_MONTH as MONTH } from './lib/synthetic-ledger';

const { values } = benchArgs('bench/report-rollups.ts', {
  entries: { type: 'string', default: '1000000' },
  keep: { type: 'boolean', default: false },
});
const entries = numberOption('entries', values.entries);
const { keep } = values;
const SMALL = 1_000;
const command = `node --import tsx bench/report-rollups.ts --entries ${entries}${keep ? ' --keep' : ''}`;

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

async function best(fn: () => Promise<unknown>, times = 3): Promise<number> {
  let min = Infinity;
  for (let i = 0; i < times; i++) min = Math.min(min, await timed(fn));
  return min;
}

async function median(fn: () => Promise<unknown>, times: number): Promise<number> {
  const all: number[] = [];
  for (let i = 0; i < times; i++) all.push(await timed(fn));
  return all.sort((a, b) => a - b)[Math.floor(times / 2)];
}

/** A scratch database holding the month bulk loaded, its rollups rebuilt; returns how long each step took. */
async function loaded(db: ScratchDatabase, n: number): Promise<{ loadMs: number; rebuildMs: number }> {
  const owner = new pg.Client({ connectionString: db.urlAs('owner') });
  await owner.connect();
  try {
    const loadMs = await timed(() =>
      bulkLoadMonth(owner, n, (done) => n >= 1_000_000 && process.stderr.write(`\rloaded ${done} of ${n} entries`)),
    );
    if (n >= 1_000_000) process.stderr.write('\n');
    const rebuildMs = await timed(() => rebuildMonth(db.pool, 'UTC', MONTH));
    return { loadMs, rebuildMs };
  } finally {
    await owner.end();
  }
}

/** The month-to-date lookup of the budget guard (one summary row), median of 200, for the busiest user. */
const lookup = (pool: pg.Pool) => median(() => monthFigures(pool, 'user-1', 'UTC', new Date('2026-06-20T12:00:00Z')), 200);

/**
 * The large database: loaded now, or (--keep) the one a previous run kept, with the late entries it added. A kept
 * database records what it holds in bench_kept, written only once the load and rebuild are done.
 */
async function bigDatabase(): Promise<{ big: ScratchDatabase; loadMs: number; rebuildMs: number; lateBefore: number }> {
  const big = await scratchDatabase(keep ? `cronledger_bench_p3_kept_${entries}` : 'cronledger_bench_p3', 4, { kept: keep });
  if (big.existed) {
    const owner = new pg.Client({ connectionString: big.urlAs('owner') });
    await owner.connect();
    try {
      const kept = await owner.query<{ entries: string; late: string }>('select entries, late from bench_kept').catch(() => ({ rows: [] }));
      if (kept.rows[0]?.entries !== String(entries)) {
        throw new Error(
          `${big.name} does not hold a finished load of ${entries} entries: drop it (drop database ${big.name}) or pass its --entries`,
        );
      }
      return { big, loadMs: NaN, rebuildMs: NaN, lateBefore: Number(kept.rows[0].late) };
    } finally {
      await owner.end();
    }
  }
  const { loadMs, rebuildMs } = await loaded(big, entries);
  return { big, loadMs, rebuildMs, lateBefore: 0 };
}

async function markKept(big: ScratchDatabase, late: number): Promise<void> {
  const owner = new pg.Client({ connectionString: big.urlAs('owner') });
  await owner.connect();
  try {
    await owner.query('create table if not exists bench_kept (entries bigint not null, late bigint not null)');
    await owner.query('delete from bench_kept');
    await owner.query('insert into bench_kept values ($1, $2)', [entries, late]);
  } finally {
    await owner.end();
  }
}

const loadAverage = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

async function main(): Promise<void> {
  const startLoad = loadAverage();
  const { big, loadMs, rebuildMs, lateBefore } = await bigDatabase();
  const small = await scratchDatabase('cronledger_bench_p3_small', 4);
  const readonly = createPool(readOnlySessionUrl(big.urlAs('readonly')), 4);
  const rawPool = new pg.Pool({ connectionString: big.urlAs('worker'), max: 1 });
  try {
    if (keep) await markKept(big, lateBefore);
    await loaded(small, SMALL);

    // The raw scan on a connection with the server's defaults: createPool turns JIT off for the application's
    // queries (src/db/pool.ts), which would slow a scan of 10,000,000 rows and flatter the ratios.
    const rawScan = () =>
      rawPool.query(`select user_id, model, kind, entry_type, status, (created_at at time zone 'UTC')::date as day,
                             count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost_usd)
                        from usage_ledger where created_at >= '2026-06-01Z' and created_at < '2026-07-01Z' group by 1, 2, 3, 4, 5, 6`);
    const report = () => buildReport(big.pool, { month: MONTH, timeZone: 'UTC' });
    const page = () => overview(readonly, { month: MONTH, zone: 'UTC' });
    const raw = await best(rawScan);
    const current = await best(report);
    // the report's two parts: the usage figures from the rollups, and the budget section (src/reports/budget-section.ts)
    const sums = () =>
      readMonthSums(big.pool, 'UTC', MONTH, 'stored').then((s) => reportFromSums(big.pool, { month: MONTH, timeZone: 'UTC', sums: s }));
    const figures = await best(sums);
    const sample = await buildReport(big.pool, { month: MONTH, timeZone: 'UTC' });
    const sampleAt = new Date(new Date(sample.period.to).getTime() - 1);
    const budget = await best(() =>
      budgetSection(big.pool, { month: MONTH, period: sample.period, runs: { blocked: 0n, downgraded: 0n } }),
    );
    // the budget section's parts: every user's status in one statement against the per-user path it replaced
    // (three round trips a user), and the downgrade savings
    const statusAll = await best(() => budgetStatusOfAll(big.pool, { at: sampleAt, month: MONTH }));
    const statusPerUser = await best(async () => {
      for (const s of await budgetStatusOfAll(big.pool, { at: sampleAt, month: MONTH })) {
        await budgetStatus(big.pool, { userId: s.userId, at: sampleAt, month: MONTH });
      }
    }, 1);
    const savings = await best(() => downgradeSavings(big.pool, sample.period.from, sample.period.to));
    const admin = await best(page);

    const late = Math.max(1, Math.floor(entries / 100));
    const first = entries + lateBefore + 1; // after the late entries of earlier runs on a kept database
    // Through the triggers, as the owner: only the owner may date an entry in the past (migrations/027).
    const lateWriter = new pg.Client({ connectionString: big.urlAs('owner') });
    await lateWriter.connect();
    try {
      for (let from = first; from < first + late; from += 100_000) {
        await lateWriter.query(insertLedgerSql(from, Math.min(first + late - 1, from + 99_999), entries, true));
      }
    } finally {
      await lateWriter.end();
    }
    if (keep) await markKept(big, lateBefore + late);
    // reads the queued buckets current, without writing: its first call (cold: just after the 1% were written) and the best of 3
    const adminQueuedFirst = await timed(page);
    const adminQueued = await best(page);
    // the late entries are in the month rows already (the ledger's trigger): the budget section reads them at once
    const budgetLate = await timed(() =>
      budgetSection(big.pool, { month: MONTH, period: sample.period, runs: { blocked: 0n, downgraded: 0n } }),
    );
    const refresh = await timed(() => refreshRollups(big.pool)); // what the rollup-refresh schedule pays for them
    const afterLate = await best(report);

    const lookupSmall = await lookup(small.pool);
    const lookupBig = await lookup(big.pool);

    const lines: [string, number, string][] = [
      ...(!Number.isNaN(loadMs)
        ? ([
            [`bulk load (triggers off, month summary rebuilt)`, loadMs, ''],
            [`rebuild of the month's rollups after the load`, rebuildMs, ''],
          ] as [string, number, string][])
        : []),
      ['raw ledger group-by for the month (SQL only, best of 3)', raw, '1.00x'],
      ['report from rollups, current (best of 3)', current, `${(raw / current).toFixed(1)}x faster than raw`],
      ['  of which: usage figures from the rollups, summed in SQL (best of 3)', figures, `${(raw / figures).toFixed(1)}x faster than raw`],
      ['  of which: budget section (best of 3)', budget, ''],
      ["    of which: every user's budget status, one statement (best of 3)", statusAll, ''],
      [
        '    the same user by user, budgetStatus per user (the path it replaced)',
        statusPerUser,
        `${(statusPerUser / statusAll).toFixed(1)}x the one statement`,
      ],
      ['    of which: downgrade savings (best of 3; no downgrades in this month)', savings, ''],
      ['admin overview, read-only (best of 3)', admin, `${(raw / admin).toFixed(1)}x faster than raw`],
      [
        `admin overview with ${late} late entries queued (1%), first call`,
        adminQueuedFirst,
        `${(raw / adminQueuedFirst).toFixed(1)}x faster than raw`,
      ],
      [
        `admin overview with ${late} late entries queued (1%, best of 3)`,
        adminQueued,
        `${(raw / adminQueued).toFixed(1)}x faster than raw`,
      ],
      [`budget section with the ${late} late entries just booked`, budgetLate, ''],
      [`refresh folding the ${late} late entries (the schedule's run)`, refresh, ''],
      ['report after that refresh (best of 3)', afterLate, `${(raw / afterLate).toFixed(1)}x faster than raw`],
      [`month-to-date lookup, one user, ${SMALL} rows (median of 200)`, lookupSmall, ''],
      [
        `month-to-date lookup, one user, ${entries} rows (median of 200)`,
        lookupBig,
        `${(lookupBig / lookupSmall).toFixed(2)}x the ${SMALL}-row lookup`,
      ],
    ];
    process.stdout.write(
      `$ ${command}\n${entries} ledger entries and ${Math.floor(entries / 2) + 1} runs in ${MONTH}, spread over the month` +
        (Number.isNaN(loadMs) ? ` (kept database reused, with ${lateBefore} late entries from earlier runs)` : '') +
        '\n\n',
    );
    for (const [what, ms, ratio] of lines) {
      process.stdout.write(`${what.padEnd(72)} ${ms.toFixed(ms < 10 ? 2 : 0).padStart(9)} ms  ${ratio}\n`);
    }
    process.stdout.write(`\noverview / report: ${(admin / current).toFixed(2)}x\n`);
    // P3's goal (issue 12): the report and the overview under 200 ms and at least 50 times faster than the raw scan.
    const goal = (what: string, ms: number) =>
      `${what.padEnd(36)} ${ms.toFixed(0).padStart(6)} ms, ${(raw / ms).toFixed(1).padStart(6)}x the raw scan: ` +
      `${ms < 200 && raw / ms >= 50 ? 'met' : 'missed'}\n`;
    process.stdout.write(
      `\ngoal: under 200 ms and at least 50x faster than the raw scan\n` +
        goal('report from rollups, current', current) +
        goal('report after the refresh', afterLate) +
        goal('admin overview, read-only', admin) +
        goal(`admin overview, ${late} late entries queued`, adminQueued) +
        `load average (1, 5, 15 min) at the start ${startLoad}, at the end ${loadAverage()}\n`,
    );
  } finally {
    await readonly.end().catch(() => undefined);
    await rawPool.end().catch(() => undefined);
    await small.close();
    await big.close();
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
