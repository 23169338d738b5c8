/**
 * The admin page's overview against the CLI report on the same ledger: both read the rollups (the overview without
 * refreshing them, as the SELECT-only role, with per-day, per-user and per-task cost and run counts from the rollups
 * too), so the overview should cost no more than the report. Printed as a ratio of times measured in one run (the
 * machine is shared and noisy), with the command that produced it.
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/admin-overview.ts [--entries 1000000]
 * It creates a scratch database, bulk loads a month (bench/lib/synthetic-ledger.ts), writes as cronledger_app and reads
 * the overview as cronledger_readonly in read-only sessions, like the real thing.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { overview } from '../src/admin/admin-data';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { buildReport } from '../src/reports/build-report';
import { rebuildMonth } from '../src/reports/rollups-write';
import { benchArgs, numberOption } from './lib/args';
import { scratchDatabase } from './lib/scratch-database';
import { bulkLoadMonth, SYNTHETIC_MONTH as MONTH } from './lib/synthetic-ledger';

const { values } = benchArgs('bench/admin-overview.ts', { entries: { type: 'string', default: '1000000' } });
const entries = numberOption('entries', values.entries);
const command = `node --import tsx bench/admin-overview.ts --entries ${entries}`;

async function best(fn: () => Promise<unknown>, times = 3): Promise<number> {
  let min = Infinity;
  for (let t = 0; t < times; t++) {
    const start = performance.now();
    await fn();
    min = Math.min(min, performance.now() - start);
  }
  return min;
}

async function main(): Promise<void> {
  const db = await scratchDatabase('cronledger_bench_admin', 4);
  const readonly = createPool(readOnlySessionUrl(db.urlAs('readonly')), 4);
  try {
    const owner = new pg.Client({ connectionString: db.urlAs('owner') });
    await owner.connect();
    await bulkLoadMonth(owner, entries).finally(() => owner.end());
    await rebuildMonth(db.pool, 'UTC', MONTH); // what a bulk load must do; the rollup-refresh schedule keeps it current after

    const report = await best(() => buildReport(db.pool, { month: MONTH, timeZone: 'UTC' }));
    const page = await best(() => overview(readonly, { month: MONTH, zone: 'UTC' }));
    process.stdout.write(`$ ${command}\n${entries} ledger entries and ${Math.floor(entries / 2) + 1} runs in ${MONTH}\n\n`);
    process.stdout.write(`CLI report (buildReport, rollups current, best of 3)   ${report.toFixed(0).padStart(7)} ms\n`);
    process.stdout.write(`admin overview (read-only, best of 3)                 ${page.toFixed(0).padStart(7)} ms\n`);
    process.stdout.write(`overview / report                                     ${(page / report).toFixed(2).padStart(7)}x\n`);
  } finally {
    await readonly.end().catch(() => undefined);
    await db.close();
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
