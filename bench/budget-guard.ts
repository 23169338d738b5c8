/**
 * The budget guard's cost: the decision with its reservation (reserveBudget, one statement) for one user with 1,000
 * and with 10,000,000 ledger rows of their own this month (the summary row makes it a lookup, not a scan), and the
 * booking rate with the guard on against the guard off, in the shape of a real run: with the guard a run reserves its
 * chat and embedding calls together once, then books the two calls (each booking settles its reservation); without
 * it the run books the two calls only. Both are measured for 8 runs at a time of one user (all on one month row) and
 * of 8 users (one each), alternating off and on for --rounds rounds so drift on the shared machine hits both alike.
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/budget-guard.ts [--rows 10000000] [--decisions 300] [--runs 1000] [--rounds 3]
 *   node --import tsx bench/budget-guard.ts --rate-only [--runs 1000] [--rounds 3]    (the booking rates only)
 *
 * The whole run's database work is measured too: guard off claims, books twice and completes; guard on claims and
 * reserves in one statement (claimAndReserve), books twice and completes; one user and 8 users; and, for reference,
 * guard on with the claim and the reservation as two transactions (before the claim-with-reserve patch).
 *
 * It works in a database of its own on the local stack's PostgreSQL and drops it at the end. The big ledger is bulk
 * loaded by the owner the way a restore would: the ledger's triggers off and its secondary indexes and unique key
 * dropped, rows made by INSERT ... SELECT generate_series in batches of 1,000,000, then the indexes and the key rebuilt,
 * the triggers back on and the user's summary row rebuilt by one group-by. (The rollup queue is not filled for these
 * rows: reports are not measured here.) Check free disk first: 10,000,000 rows take about 4 GB.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { applyBudgets } from '../src/budgets/budgets-store';
import { createPool } from '../src/db/pool';
import { claimAndReserve, releaseReservations, reserveBudget, type PlannedCall } from '../src/budgets/reserve';
import { claimRun, completeRun } from '../src/db/runs';
import { recordUsage } from '../src/ledger/record-usage';
import { benchArgs, numberOption } from './lib/args';
import { GUARDED_RUN_CALLS } from './lib/guarded-run';
import { sampleWaits, topWaits } from './lib/postgres-waits';
import { scratchDatabase } from './lib/scratch-database';
import { fullUsage } from '../src/models/provider';

const { values } = benchArgs('bench/budget-guard.ts', {
  rows: { type: 'string', default: '10000000' },
  decisions: { type: 'string', default: '300' },
  runs: { type: 'string', default: '1000' },
  rounds: { type: 'string', default: '3' },
  'rate-only': { type: 'boolean', default: false },
});
const arg = (name: 'rows' | 'decisions' | 'runs' | 'rounds'): number => numberOption(name, values[name]);
const BIG = arg('rows');
const SMALL = 1_000;
const DECISIONS = arg('decisions');
const RUNS = arg('runs');
const ROUNDS = arg('rounds');
const BATCH = 1_000_000;
const CONCURRENCY = 8;
const USER = 'bench-user';
/** A user with SMALL rows of their own this month, measured side by side with USER once USER has BIG. */
const SMALL_USER = 'bench-user-small';
/** Only the booking rates (guard on against off): no big ledger load, no decision costs. */
const RATE_ONLY = values['rate-only'];
const command = RATE_ONLY
  ? `node --import tsx bench/budget-guard.ts --rate-only --runs ${RUNS} --rounds ${ROUNDS}`
  : `node --import tsx bench/budget-guard.ts --rows ${BIG} --decisions ${DECISIONS} --runs ${RUNS} --rounds ${ROUNDS}`;
const log = (line: string) => process.stderr.write(`${line}\n`);

const calls = GUARDED_RUN_CALLS;

/** `count` usage rows for the user, spread over the month so far, ids from `from`, exact numeric costs. */
const ledgerRows = (from: number, count: number, user = USER) => `
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, provider_model, kind,
                            status, attempt, prompt_tokens, completion_tokens, cost_usd, price_version, created_at)
  select 'bench:' || g, 'usage', '${user}', 'bench-run-' || g, 'cron-bench-' || g, 'bench-task', 'openai/gpt-4o-mini',
         'gpt-4o-mini', 'chat', 'ok', 1, 100 + g % 900, 20 + g % 200, (100 + g % 900) * 0.00000015 + (20 + g % 200) * 0.0000006,
         'v1', date_trunc('month', now()) + (g % greatest(1, extract(epoch from now() - date_trunc('month', now()))::bigint)) * interval '1 second'
    from generate_series(${from}, ${from + count - 1}) g`;

/** Bulk load as a restore does it: no triggers, no secondary indexes while the rows go in; rebuilt after. */
async function bulkLoad(owner: pg.Client, from: number, count: number): Promise<void> {
  const { rows: constraints } = await owner.query<{ name: string; def: string }>(
    `select conname as name, pg_get_constraintdef(oid) as def from pg_constraint where conrelid = 'usage_ledger'::regclass and contype = 'u'`,
  );
  const { rows: indexes } = await owner.query<{ name: string; def: string }>(
    `select c.relname as name, pg_get_indexdef(i.indexrelid) as def from pg_index i join pg_class c on c.oid = i.indexrelid
      where i.indrelid = 'usage_ledger'::regclass and not i.indisprimary
        and not exists (select 1 from pg_constraint k where k.conindid = i.indexrelid)`,
  );
  await owner.query('alter table usage_ledger disable trigger user');
  for (const c of constraints) await owner.query(`alter table usage_ledger drop constraint ${c.name}`);
  for (const i of indexes) await owner.query(`drop index ${i.name}`);
  await owner.query('set synchronous_commit = off');
  for (let at = from; at < from + count; at += BATCH) {
    const t = performance.now();
    await owner.query(ledgerRows(at, Math.min(BATCH, from + count - at)));
    log(`  rows ${at + Math.min(BATCH, from + count - at) - 1} of ${from + count - 1} (${((performance.now() - t) / 1000).toFixed(0)} s)`);
  }
  await owner.query(`set maintenance_work_mem = '512MB'`);
  const t = performance.now();
  for (const c of constraints) await owner.query(`alter table usage_ledger add constraint ${c.name} ${c.def}`);
  for (const i of indexes) await owner.query(i.def);
  log(`  indexes rebuilt (${((performance.now() - t) / 1000).toFixed(0)} s)`);
  await owner.query('alter table usage_ledger enable trigger user');
  await owner.query(`delete from budget_months where user_id = '${USER}'`);
  await owner.query(
    `insert into budget_months (user_id, time_zone, month, spent_usd)
     select user_id, z.time_zone, budget_month_of(created_at, z.time_zone), sum(cost_usd)
       from usage_ledger, budget_zones z where user_id = '${USER}' group by 1, 2, 3`,
  );
  await owner.query('vacuum analyze usage_ledger');
}

/**
 * Mean milliseconds of one decision with its reservation for each user, the users taking turns decision by decision
 * so that the shared machine's drift hits them alike. Each reservation is released after (untimed), so reserved stays
 * flat. The first 20 rounds warm up.
 */
async function decisionCosts(pool: pg.Pool, label: string, users: string[]): Promise<number[]> {
  const totals = users.map(() => 0);
  for (let i = -20; i < DECISIONS; i++) {
    for (const [u, userId] of users.entries()) {
      const runId = `${label}-${userId}-${i}`;
      const start = performance.now();
      const d = await reserveBudget(pool, { userId, runId, workflowId: runId, calls, mayDowngrade: true, expirySeconds: 3600 });
      if (i >= 0) totals[u] += performance.now() - start;
      if (d.tier === 'blocked') throw new Error(`${userId} was blocked: raise its limit`);
      await releaseReservations(pool, runId);
    }
  }
  return totals.map((t) => t / DECISIONS);
}

/**
 * Runs `count` runs, CONCURRENCY at a time, each on its lane's user; returns seconds. `whole`: also the run's claim
 * before and its completion after, the rest of a run's database work (the model calls themselves are left out); with
 * the guard on, 'folded' claims and reserves in one statement (claimAndReserve, what a run does since the
 * claim-with-reserve patch), 'split' claims and then reserves (before it).
 */
async function runs(
  pool: pg.Pool,
  label: string,
  count: number,
  userOf: (lane: number) => string,
  guard: boolean,
  whole: false | 'folded' | 'split' = false,
): Promise<number> {
  let next = 0;
  const book = (runId: string, userId: string, c: PlannedCall) =>
    recordUsage(pool, {
      runId,
      workflowId: runId,
      step: c.step,
      attempt: 1,
      userId,
      taskId: 'bench-task',
      model: c.model,
      kind: c.kind,
      status: 'ok',
      usage:
        c.kind === 'chat'
          ? fullUsage({ promptTokens: 120, cachedPromptTokens: 0, completionTokens: 300, reasoningTokens: 0 })
          : fullUsage({ promptTokens: 300, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }),
      providerModel: null,
      providerRequestId: null,
      workerId: 'bench',
      usageReceivedAt: new Date(),
    });
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, lane) => {
      const userId = userOf(lane);
      for (let i = next++; i < count; i = next++) {
        const runId = `${label}-${i}`;
        const claim = { idempotencyKey: `cron:${runId}`, temporalRunId: runId };
        const request = {
          ...claim,
          taskId: 'bench-task',
          userId,
          workflowId: runId,
          scheduledMinute: new Date().toISOString(),
          workerId: 'bench',
        };
        if (whole === 'folded' && guard) {
          const { decision } = await claimAndReserve(pool, request, { calls, expirySeconds: 3600 });
          if (decision?.tier !== 'default' && decision?.tier !== 'cheap') throw new Error(`${userId} was blocked: raise its limit`);
        } else if (whole) {
          await claimRun(pool, request);
        }
        if (guard && whole !== 'folded') {
          const d = await reserveBudget(pool, { userId, runId, workflowId: runId, calls, mayDowngrade: true, expirySeconds: 3600 });
          if (d.tier === 'blocked') throw new Error(`${userId} was blocked: raise its limit`);
        }
        for (const c of calls) await book(runId, userId, c);
        if (whole) await completeRun(pool, { ...claim, status: 'completed', tier: guard ? 'default' : undefined });
      }
    }),
  );
  return (performance.now() - start) / 1000;
}

/** The decision's cost at SMALL and at BIG rows of the user's own (the big ledger loaded in between): report lines. */
async function decisionLines(pool: pg.Pool, owner: pg.Client): Promise<string[]> {
  const [before] = await decisionCosts(pool, 'before', [USER]);
  log(`loading ${BIG - SMALL} more rows`);
  const t0 = performance.now();
  await bulkLoad(owner, 2 * SMALL + 1, BIG - SMALL);
  const loadSeconds = (performance.now() - t0) / 1000;
  const count = async (userId: string) =>
    (await pool.query<{ n: string }>('select count(*) as n from usage_ledger where user_id = $1', [userId])).rows[0].n;
  const rows = await count(USER);
  const smallRows = await count(SMALL_USER);
  const [big, small] = await decisionCosts(pool, 'after', [USER, SMALL_USER]);
  return [
    `${rows} ledger rows for ${USER} (bulk loaded in ${loadSeconds.toFixed(0)} s)`,
    '',
    `decision + reservation, users taking turns, mean of ${DECISIONS} each:`,
    `  ${SMALL_USER}, ${smallRows} rows of their own          ${small.toFixed(3).padStart(8)} ms`,
    `  ${USER}, ${rows} rows of their own          ${big.toFixed(3).padStart(8)} ms`,
    `  ratio                                            ${(big / small).toFixed(2).padStart(8)}    (goal <= 1.5)`,
    `(before the load, ${USER} at ${SMALL} rows in a ${2 * SMALL}-row ledger: ${before.toFixed(3)} ms, so ${(big / before).toFixed(2)} times that)`,
    '',
  ];
}

async function main(): Promise<void> {
  const db = await scratchDatabase('cronledger_bench_budget', CONCURRENCY + 2);
  const { pool } = db;
  const owner = new pg.Client({ connectionString: db.urlAs('owner') });
  const superuser = new pg.Client({ connectionString: db.urlAs('superuser', 'postgres') });
  try {
    await owner.connect();
    await superuser.connect();
    const monthStart = (await pool.query<{ m: Date }>(`select date_trunc('month', now()) as m`)).rows[0].m;
    const guarded = [USER, SMALL_USER, 'rate-on', ...Array.from({ length: CONCURRENCY }, (_, i) => `rate-on-${i}`)];
    const operatorPool = createPool(db.urlAs('operator'), 1);
    await applyBudgets(
      operatorPool,
      {
        budgets: guarded.map((userId) => ({ userId, monthlyLimitUsd: '1000000', timeZone: 'UTC', effectiveFrom: monthStart })),
        downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
      },
      'bench',
    ).finally(() => operatorPool.end());

    await owner.query(ledgerRows(1, SMALL));
    await owner.query(ledgerRows(SMALL + 1, SMALL, SMALL_USER));
    await owner.query('analyze');
    const decisions = RATE_ONLY ? [] : await decisionLines(pool, owner);

    const perRound = Math.ceil(RUNS / ROUNDS);
    const seconds = { offOne: 0, onOne: 0, offMany: 0, onMany: 0, offWholeOne: 0, onWholeOne: 0, offWhole: 0, onWhole: 0, splitWhole: 0 };
    const waits = Object.fromEntries(Object.keys(seconds).map((k) => [k, new Map<string, number>()])) as Record<
      keyof typeof seconds,
      Map<string, number>
    >;
    // the claim's and the completion's statements (their COMMIT included) are 'run'
    // claim_and_reserve (the folded step) is 'claim+reserve'
    const statement = (query: string) =>
      query.includes('claim_and_reserve')
        ? 'claim+reserve'
        : query.includes('reserve_budget')
          ? 'reserve'
          : query.includes('book_usage')
            ? 'book'
            : 'run';
    const phase = async (key: keyof typeof seconds, run: () => Promise<number>) => {
      const stop = sampleWaits(superuser, db.name, statement);
      try {
        seconds[key] += await run();
      } finally {
        for (const [w, n] of await stop()) waits[key].set(w, (waits[key].get(w) ?? 0) + n);
      }
    };
    for (let r = 0; r < ROUNDS; r++) {
      await phase('offOne', () => runs(pool, `off-one-${r}`, perRound, () => 'rate-off', false));
      await phase('onOne', () => runs(pool, `on-one-${r}`, perRound, () => 'rate-on', true));
      await phase('offMany', () => runs(pool, `off-many-${r}`, perRound, (lane) => `rate-off-${lane}`, false));
      await phase('onMany', () => runs(pool, `on-many-${r}`, perRound, (lane) => `rate-on-${lane}`, true));
      await phase('offWholeOne', () => runs(pool, `off-whole-one-${r}`, perRound, () => 'rate-off', false, 'folded'));
      await phase('onWholeOne', () => runs(pool, `on-whole-one-${r}`, perRound, () => 'rate-on', true, 'folded'));
      await phase('offWhole', () => runs(pool, `off-whole-${r}`, perRound, (lane) => `rate-off-${lane}`, false, 'folded'));
      await phase('onWhole', () => runs(pool, `on-whole-${r}`, perRound, (lane) => `rate-on-${lane}`, true, 'folded'));
      await phase('splitWhole', () => runs(pool, `split-whole-${r}`, perRound, (lane) => `rate-on-${lane}`, true, 'split'));
    }
    const bookings = perRound * ROUNDS * calls.length;
    const rate = (s: number) => (bookings / s).toFixed(0).padStart(8);

    const out = [
      `$ ${command}`,
      `PostgreSQL 127.0.0.1:${db.port}`,
      ...decisions,
      `runs of a chat and an embedding call, ${CONCURRENCY} at a time, ${perRound * ROUNDS} runs (${bookings} bookings) per line, ${ROUNDS} rounds alternating`,
      `bookings/s, one user,  guard off (book, book)              ${rate(seconds.offOne)}`,
      `bookings/s, one user,  guard on  (reserve both, book, book)${rate(seconds.onOne)}`,
      `ratio                                                      ${(seconds.offOne / seconds.onOne).toFixed(2).padStart(8)}    (goal >= 0.8)`,
      `  waits off: ${topWaits(waits.offOne, 4)}`,
      `  waits on:  ${topWaits(waits.onOne, 5)}`,
      `bookings/s, ${CONCURRENCY} users,  guard off                            ${rate(seconds.offMany)}`,
      `bookings/s, ${CONCURRENCY} users,  guard on                             ${rate(seconds.onMany)}`,
      `ratio                                                      ${(seconds.offMany / seconds.onMany).toFixed(2).padStart(8)}    (goal >= 0.8)`,
      `  waits off: ${topWaits(waits.offMany, 4)}`,
      `  waits on:  ${topWaits(waits.onMany, 5)}`,
      `whole run's database work (off: claim, book, book, complete; on: claim+reserve in one statement, book, book, complete):`,
      `bookings/s, one user,  guard off                           ${rate(seconds.offWholeOne)}`,
      `bookings/s, one user,  guard on                            ${rate(seconds.onWholeOne)}`,
      `ratio                                                      ${(seconds.offWholeOne / seconds.onWholeOne).toFixed(2).padStart(8)}    (goal >= 0.8)`,
      `  waits off: ${topWaits(waits.offWholeOne, 4)}`,
      `  waits on:  ${topWaits(waits.onWholeOne, 5)}`,
      `bookings/s, ${CONCURRENCY} users,  guard off                            ${rate(seconds.offWhole)}`,
      `bookings/s, ${CONCURRENCY} users,  guard on                             ${rate(seconds.onWhole)}`,
      `ratio                                                      ${(seconds.offWhole / seconds.onWhole).toFixed(2).padStart(8)}    (goal >= 0.8)`,
      `  waits off: ${topWaits(waits.offWhole, 4)}`,
      `  waits on:  ${topWaits(waits.onWhole, 5)}`,
      `bookings/s, ${CONCURRENCY} users,  guard on, claim then reserve (before the fold)  ${rate(seconds.splitWhole)}`,
      `ratio to guard off                                         ${(seconds.offWhole / seconds.splitWhole).toFixed(2).padStart(8)}`,
    ];
    process.stdout.write(`${out.join('\n')}\n`);
  } finally {
    await owner.end().catch(() => undefined);
    await superuser.end().catch(() => undefined);
    await db.close();
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
