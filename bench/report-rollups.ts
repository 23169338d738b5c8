/**
 * How reading daily rollups compares with scanning the raw ledger for a month's report, and what keeping the
 * rollups current costs. Figures are ratios within one run (the machine is shared and noisy), printed with the
 * command that produced them.
 *
 *   npx cronledger dev up --workers 0      # or set BENCH_ADMIN_DATABASE_URL to a role that may create databases
 *   node --import tsx bench/report-rollups.ts [--entries 200000]
 * It creates a scratch database owned by cronledger_owner, migrates it as the owner and runs as cronledger_app,
 * like the real thing.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { readStackFile } from '../src/config';
import { migrateDatabase } from '../src/db/migrate';
import { createPool } from '../src/db/pool';
import { OWNER_ROLE } from '../src/db/roles';
import { databaseUrlFor } from '../src/dev/postgres';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { buildReport } from '../src/reports/build-report';

const entries = Number(process.argv[process.argv.indexOf('--entries') + 1] ?? 0) || 200_000;
const MONTH = '2026-06';
const command = `node --import tsx bench/report-rollups.ts --entries ${entries}`;

/** Synthetic usage spread over the month: 500 users, two models, exact numeric costs computed by PostgreSQL. */
const insertSql = (from: number, to: number) => `
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, task_id, model, kind, status, attempt,
                            prompt_tokens, completion_tokens, cost_usd, price_version, created_at)
  select 'bench:' || g, 'usage', 'user-' || (g % 500), 'run-' || (g / 2), 'task-' || (g % 50),
         case when g % 2 = 0 then 'openai/gpt-4o-mini' else 'openai/text-embedding-3-small' end,
         case when g % 2 = 0 then 'chat' else 'embedding' end,
         case when g % 97 = 0 then 'failed' else 'ok' end, 1,
         100 + g % 3000, case when g % 2 = 0 then 20 + g % 700 else 0 end,
         case when g % 2 = 0 then (100 + g % 3000) * 0.15 / 1000000 + (20 + g % 700) * 0.60 / 1000000
              else (100 + g % 3000) * 0.02 / 1000000 end,
         'v1', timestamptz '2026-06-01 00:00:00+00' + (g % 2592000) * interval '1 second'
    from generate_series(${from}, ${to}) g`;

async function timed<T>(fn: () => Promise<T>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

async function main(): Promise<void> {
  const stack = readStackFile()?.postgres;
  const passwords = stack?.passwords;
  const adminUrl =
    process.env.BENCH_ADMIN_DATABASE_URL ??
    (stack && passwords ? databaseUrlFor(stack.port, 'superuser', passwords, 'postgres') : undefined);
  if (!adminUrl || !stack || !passwords) throw new Error('no local stack: run `npx cronledger dev up --workers 0` first');
  const name = `cronledger_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name} owner ${OWNER_ROLE}`);
  const url = new URL(databaseUrlFor(stack.port, 'app', passwords, name));
  const pool = createPool(url.toString());
  try {
    await migrateDatabase(databaseUrlFor(stack.port, 'owner', passwords, name));
    await applyPrices(pool, loadPricesFile('prices/standard.json'), 'bench');
    await pool.query(insertSql(1, entries));
    await pool.query('analyze usage_ledger');

    const rawScan = () =>
      pool.query(`select user_id, model, kind, entry_type, status, (created_at at time zone 'UTC')::date as day,
                         count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost_usd)
                    from usage_ledger where created_at >= '2026-06-01Z' and created_at < '2026-07-01Z' group by 1, 2, 3, 4, 5, 6`);
    const report = () => buildReport(pool, { month: MONTH, timeZone: 'UTC' });
    const raw = Math.min(await timed(rawScan), await timed(rawScan), await timed(rawScan));
    const firstBuild = await timed(report);
    const current = Math.min(await timed(report), await timed(report), await timed(report));
    const late = Math.max(1, Math.floor(entries / 100));
    await pool.query(insertSql(entries + 1, entries + late)); // 1% late entries, spread over the whole month
    const incremental = await timed(report);

    const rows: [string, number][] = [
      ['raw ledger group-by for the month (SQL only, best of 3)', raw],
      ['report, first time: builds the month rollups', firstBuild],
      ['report, rollups current (best of 3)', current],
      [`report after ${late} late entries (1%): refresh + read`, incremental],
    ];
    process.stdout.write(`$ ${command}\n${entries} ledger entries in ${MONTH}, PostgreSQL ${url.host}\n\n`);
    for (const [what, ms] of rows) {
      process.stdout.write(`${what.padEnd(58)} ${ms.toFixed(0).padStart(7)} ms  ${(ms / raw).toFixed(2).padStart(6)}x raw scan\n`);
    }
  } finally {
    await pool.end();
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
