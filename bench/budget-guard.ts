/**
 * The budget guard's cost: the decision with its reservation (reserveBudget) for one user with 1,000 and with
 * 10,000,000 ledger rows of their own this month (the summary row makes it a lookup, not a scan), and the booking
 * rate with the guard on (reserve, then book, which settles) against the guard off (book only, user without a budget).
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/budget-guard.ts [--rows 10000000] [--decisions 300] [--bookings 2000]
 *
 * It works in a database of its own on the local stack's PostgreSQL and drops it at the end. The big ledger is made
 * by the owner in one INSERT ... SELECT generate_series with the summary trigger off, then the user's summary is
 * rebuilt by one group-by (what a bulk load must do); check free disk first (10,000,000 rows take about 4 GB).
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { applyBudgets } from '../src/budgets/budgets-store';
import { releaseReservations, reserveBudget, type PlannedCall } from '../src/budgets/reserve';
import { worstCaseOf } from '../src/budgets/worst-case';
import { readStackFile } from '../src/config';
import { migrateDatabase } from '../src/db/migrate';
import { createPool } from '../src/db/pool';
import { OWNER_ROLE } from '../src/db/roles';
import { databaseUrlFor } from '../src/dev/postgres';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const BIG = arg('rows', 10_000_000);
const SMALL = 1_000;
const DECISIONS = arg('decisions', 300);
const BOOKINGS = arg('bookings', 2_000);
const CONCURRENCY = 8;
const USER = 'bench-user';
const command = `node --import tsx bench/budget-guard.ts --rows ${BIG} --decisions ${DECISIONS} --bookings ${BOOKINGS}`;

const worst = worstCaseOf({ prompt: 'Summarise the day for the team.', maxOutputTokens: 1024 });
const calls: PlannedCall[] = [
  { step: 'chat', attempt: 1, kind: 'chat', model: 'openai/gpt-4o-mini', worstCase: worst.chat },
  { step: 'embed', attempt: 1, kind: 'embedding', model: 'openai/text-embedding-3-small', worstCase: worst.embedding },
];

/** `count` usage rows for the user this month, ids from `from`, costs exact numerics computed by PostgreSQL. */
const ledgerRows = (from: number, count: number) => `
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, model, kind, status, attempt,
                            prompt_tokens, completion_tokens, cost_usd, price_version, created_at)
  select 'bench:' || g, 'usage', '${USER}', 'bench-run-' || g, 'openai/gpt-4o-mini', 'chat', 'ok', 1, 100, 20,
         0.000027, 'v1', date_trunc('month', now()) + (g % 86400) * interval '1 second'
    from generate_series(${from}, ${from + count - 1}) g`;

/** Mean milliseconds of one decision with its reservation (released after each, so reserved stays flat). */
async function decisionCost(pool: pg.Pool, label: string): Promise<number> {
  for (let i = 0; i < 20; i++) await decide(pool, `warm-${label}-${i}`);
  const start = performance.now();
  for (let i = 0; i < DECISIONS; i++) await decide(pool, `${label}-${i}`);
  return (performance.now() - start) / DECISIONS;
}

async function decide(pool: pg.Pool, runId: string): Promise<void> {
  const d = await reserveBudget(pool, { userId: USER, runId, workflowId: runId, calls, mayDowngrade: true, expirySeconds: 3600 });
  if (d.tier === 'blocked') throw new Error('the bench user was blocked: raise its limit');
  await releaseReservations(pool, runId);
}

/** Bookings per second, CONCURRENCY at a time: with the guard, each run reserves first and its booking settles. */
async function bookingRate(pool: pg.Pool, userId: string, guard: boolean): Promise<number> {
  let next = 0;
  const one = async (i: number) => {
    const runId = `rate-${userId}-${i}`;
    if (guard)
      await reserveBudget(pool, { userId, runId, workflowId: runId, calls: calls.slice(0, 1), mayDowngrade: true, expirySeconds: 3600 });
    await recordUsage(pool, {
      runId,
      step: 'chat',
      attempt: 1,
      userId,
      taskId: null,
      model: 'openai/gpt-4o-mini',
      kind: 'chat',
      status: 'ok',
      usage: { promptTokens: 100, cachedPromptTokens: 0, completionTokens: 20, reasoningTokens: 0 },
      providerModel: null,
      providerRequestId: null,
      workerId: 'bench',
    });
  };
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < BOOKINGS; i = next++) await one(i);
    }),
  );
  return BOOKINGS / ((performance.now() - start) / 1000);
}

async function main(): Promise<void> {
  const stack = readStackFile()?.postgres;
  const passwords = stack?.passwords;
  if (!stack || !passwords) throw new Error('no local stack: run `npx cronledger dev up --workers 0` first');
  const name = `cronledger_bench_budget_${process.pid}`;
  const admin = new pg.Client({ connectionString: databaseUrlFor(stack.port, 'superuser', passwords, 'postgres') });
  await admin.connect();
  await admin.query(`create database ${name} owner ${OWNER_ROLE}`);
  const ownerUrl = databaseUrlFor(stack.port, 'owner', passwords, name);
  const pool = createPool(databaseUrlFor(stack.port, 'app', passwords, name), CONCURRENCY + 2);
  const owner = new pg.Client({ connectionString: ownerUrl });
  try {
    await migrateDatabase(ownerUrl);
    await owner.connect();
    await applyPrices(pool, loadPricesFile('prices/standard.json'), 'bench');
    const monthStart = (await pool.query<{ m: Date }>(`select date_trunc('month', now()) as m`)).rows[0].m;
    await applyBudgets(
      pool,
      {
        budgets: [
          { userId: USER, monthlyLimitUsd: '1000000', timeZone: 'UTC', effectiveFrom: monthStart },
          { userId: 'rate-guarded', monthlyLimitUsd: '1000000', timeZone: 'UTC', effectiveFrom: monthStart },
        ],
        downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
      },
      'bench',
    );

    await owner.query(ledgerRows(1, SMALL));
    await owner.query('analyze');
    const small = await decisionCost(pool, 'small');

    const t0 = performance.now();
    await owner.query('alter table usage_ledger disable trigger usage_ledger_budget_months');
    await owner.query(ledgerRows(SMALL + 1, BIG - SMALL));
    await owner.query('alter table usage_ledger enable trigger usage_ledger_budget_months');
    await owner.query(`delete from budget_months where user_id = '${USER}'`);
    await owner.query(
      `insert into budget_months (user_id, time_zone, month, spent_usd)
       select user_id, z.time_zone, (date_trunc('month', created_at at time zone z.time_zone))::date, sum(cost_usd)
         from usage_ledger, budget_zones z where user_id = '${USER}' group by 1, 2, 3`,
    );
    await owner.query('analyze');
    const loadSeconds = (performance.now() - t0) / 1000;
    const rows = (await pool.query<{ n: string }>('select count(*) as n from usage_ledger where user_id = $1', [USER])).rows[0].n;
    const big = await decisionCost(pool, 'big');

    const off = await bookingRate(pool, 'rate-unguarded', false);
    const on = await bookingRate(pool, 'rate-guarded', true);

    process.stdout.write(
      `$ ${command}\nPostgreSQL ${new URL(databaseUrlFor(stack.port, 'app', passwords, name)).host}, ${rows} ledger rows for ${USER} (loaded in ${loadSeconds.toFixed(0)} s)\n\n`,
    );
    process.stdout.write(`decision + reservation at ${SMALL} rows        ${small.toFixed(3).padStart(8)} ms  (mean of ${DECISIONS})\n`);
    process.stdout.write(`decision + reservation at ${rows} rows    ${big.toFixed(3).padStart(8)} ms  (mean of ${DECISIONS})\n`);
    process.stdout.write(`ratio                                      ${(big / small).toFixed(2).padStart(8)}    (goal <= 1.5)\n\n`);
    process.stdout.write(
      `bookings/s, guard off (book only)          ${off.toFixed(0).padStart(8)}    (${BOOKINGS}, ${CONCURRENCY} at a time)\n`,
    );
    process.stdout.write(`bookings/s, guard on (reserve, book+settle)${on.toFixed(0).padStart(8)}\n`);
    process.stdout.write(`ratio                                      ${(on / off).toFixed(2).padStart(8)}    (goal >= 0.8)\n`);
  } finally {
    await owner.end().catch(() => undefined);
    await pool.end();
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
