/**
 * What one /metrics scrape costs at 1,000 runs and at 1,000,000: the histograms are counted in PostgreSQL (one grouped
 * query each) and nothing is done per run in JavaScript, so the cost should grow with the database's scan only. Each
 * size gets its own scratch database (bench/lib/synthetic-ledger.ts: two ledger entries per run), read as
 * cronledger_readonly through a real admin server with its cache off, so every scrape computes. Printed as the
 * best of `--times` scrapes per size and their ratio (the machine is shared and noisy), with the command.
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/admin-metrics.ts [--small 1000] [--large 1000000] [--times 5]
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { startAdminServer } from '../src/admin/server';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { benchArgs, numberOption } from './lib/args';
import { scratchDatabase } from './lib/scratch-database';
import { bulkLoadMonth } from './lib/synthetic-ledger';

const { values } = benchArgs('bench/admin-metrics.ts', {
  small: { type: 'string', default: '1000' },
  large: { type: 'string', default: '1000000' },
  times: { type: 'string', default: '5' },
});
const small = numberOption('small', values.small);
const large = numberOption('large', values.large);
const times = numberOption('times', values.times);
const command = `node --import tsx bench/admin-metrics.ts --small ${small} --large ${large} --times ${times}`;

/** The best of `times` computed scrapes of a ledger with `runs` runs, in milliseconds, and the text's size. */
async function scrapeCost(runs: number): Promise<{ ms: number; bytes: number }> {
  const db = await scratchDatabase(`cronledger_bench_metrics_${runs}`, 2);
  const readonly = createPool(readOnlySessionUrl(db.urlAs('readonly')), 4);
  const admin = await startAdminServer({ pool: readonly, namespace: 'default', host: '127.0.0.1', port: 0, metricsCacheMs: 0 });
  try {
    const owner = new pg.Client({ connectionString: db.urlAs('owner') });
    await owner.connect();
    await bulkLoadMonth(owner, runs * 2).finally(() => owner.end());
    let best = Infinity;
    let bytes = 0;
    for (let t = 0; t <= times; t++) {
      const start = performance.now();
      const res = await fetch(`${admin.url}/metrics`);
      const text = await res.text();
      if (res.status !== 200) throw new Error(`/metrics answered ${res.status}: ${text.slice(0, 200)}`);
      if (t > 0) best = Math.min(best, performance.now() - start); // the first scrape warms the caches
      bytes = text.length;
    }
    return { ms: best, bytes };
  } finally {
    await admin.close();
    await readonly.end().catch(() => undefined);
    await db.close();
  }
}

async function main(): Promise<void> {
  const a = await scrapeCost(small);
  const b = await scrapeCost(large);
  const row = (runs: number, r: { ms: number; bytes: number }) =>
    `${String(runs).padStart(9)} runs   ${r.ms.toFixed(1).padStart(8)} ms   ${String(r.bytes).padStart(6)} bytes\n`;
  process.stdout.write(`$ ${command}\none /metrics scrape computed (cache off), best of ${times}\n`);
  process.stdout.write(row(small, a) + row(large, b));
  process.stdout.write(`${large} / ${small} runs: ${(b.ms / a.ms).toFixed(2)}x the time\n`);
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
