/**
 * The admin page's overview against the CLI report on the same ledger: both read the daily rollups (the overview
 * without refreshing them, as the SELECT-only role), so the overview should cost about what the report costs, plus its
 * anomaly series (users from the rollups, tasks from the month's ledger rows) and run counts. Printed as a ratio of
 * times measured in one run (the machine is shared and noisy), with the command that produced it.
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/admin-overview.ts [--entries 1000000]
 * It creates a scratch database owned by cronledger_owner, migrates it as the owner, writes as cronledger_app and
 * reads the overview as cronledger_readonly in read-only sessions, like the real thing.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { overview } from '../src/admin/admin-data';
import { readStackFile } from '../src/config';
import { migrateDatabase } from '../src/db/migrate';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { OWNER_ROLE } from '../src/db/roles';
import { databaseUrlFor } from '../src/dev/postgres';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { buildReport } from '../src/reports/build-report';

const entries = Number(process.argv[process.argv.indexOf('--entries') + 1] ?? 0) || 1_000_000;
const MONTH = '2026-06';
const command = `node --import tsx bench/admin-overview.ts --entries ${entries}`;

/** Synthetic usage over the month (500 users, 50 tasks, two models) and one claimed run per two entries. */
const insertLedger = (from: number, to: number) => `
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, kind, status, attempt,
                            prompt_tokens, completion_tokens, cost_usd, price_version, created_at)
  select 'bench:' || g, 'usage', 'user-' || (g % 500), 'run-' || (g / 2), 'wf-' || (g / 2), 'task-' || ((g / 2) % 50),
         case when g % 2 = 0 then 'openai/gpt-4o-mini' else 'openai/text-embedding-3-small' end,
         case when g % 2 = 0 then 'chat' else 'embedding' end, 'ok', 1,
         100 + g % 3000, case when g % 2 = 0 then 20 + g % 700 else 0 end,
         case when g % 2 = 0 then (100 + g % 3000) * 0.15 / 1000000 + (20 + g % 700) * 0.60 / 1000000
              else (100 + g % 3000) * 0.02 / 1000000 end,
         'v1', timestamptz '2026-06-01 00:00:00+00' + (g % 2592000) * interval '1 second'
    from generate_series(${from}, ${to}) g`;
const insertRuns = (runs: number) => `
  insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by,
                    claimed_at, finished_at, duration_ms)
  select 'bench:' || r, 'task-' || (r % 50), 'user-' || ((r * 2) % 500), 'wf-' || r, 'run-' || r,
         timestamptz '2026-06-01 00:00:00+00' + ((r * 2) % 2592000) * interval '1 second',
         case when r % 50 = 0 then 'failed' else 'completed' end, 'bench',
         timestamptz '2026-06-01 00:00:00+00' + ((r * 2) % 2592000) * interval '1 second',
         timestamptz '2026-06-01 00:00:01+00' + ((r * 2) % 2592000) * interval '1 second', 1000
    from generate_series(0, ${runs}) r`;

async function best<T>(fn: () => Promise<T>, times = 3): Promise<number> {
  let min = Infinity;
  for (let i = 0; i < times; i++) {
    const start = performance.now();
    await fn();
    min = Math.min(min, performance.now() - start);
  }
  return min;
}

async function main(): Promise<void> {
  const stack = readStackFile()?.postgres;
  const passwords = stack?.passwords;
  if (!stack || !passwords?.readonly)
    throw new Error('no local stack with the read-only role: run `npx cronledger dev up --workers 0` first');
  const name = `cronledger_bench_admin_${process.pid}`;
  const admin = new pg.Client({ connectionString: databaseUrlFor(stack.port, 'superuser', passwords, 'postgres') });
  await admin.connect();
  await admin.query(`create database ${name} owner ${OWNER_ROLE}`);
  const pool = createPool(databaseUrlFor(stack.port, 'app', passwords, name));
  const readonly = createPool(readOnlySessionUrl(databaseUrlFor(stack.port, 'readonly', passwords, name)));
  try {
    await migrateDatabase(databaseUrlFor(stack.port, 'owner', passwords, name));
    await applyPrices(pool, loadPricesFile('prices/standard.json'), 'bench');
    for (let from = 1; from <= entries; from += 100_000) await pool.query(insertLedger(from, Math.min(entries, from + 99_999)));
    await pool.query(insertRuns(Math.floor(entries / 2)));
    await pool.query('analyze');
    await buildReport(pool, { month: MONTH, timeZone: 'UTC' }); // builds the month's rollups once, as a first report would

    const report = await best(() => buildReport(pool, { month: MONTH, timeZone: 'UTC' }));
    const page = await best(() => overview(readonly, { month: MONTH, zone: 'UTC' }));
    process.stdout.write(`$ ${command}\n${entries} ledger entries and ${Math.floor(entries / 2) + 1} runs in ${MONTH}\n\n`);
    process.stdout.write(`CLI report (buildReport, rollups current, best of 3)   ${report.toFixed(0).padStart(7)} ms\n`);
    process.stdout.write(`admin overview (read-only, best of 3)                 ${page.toFixed(0).padStart(7)} ms\n`);
    process.stdout.write(`overview / report                                     ${(page / report).toFixed(2).padStart(7)}x\n`);
  } finally {
    await pool.end();
    await readonly.end();
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
