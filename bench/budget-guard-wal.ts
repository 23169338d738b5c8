/**
 * What the budget guard writes and costs per run, without the disk: a run's database work (claim, book, book, complete)
 * with the guard off against on (claim_and_reserve, book, book, complete, each booking settling its reservation), one
 * connection, one run after the other, `synchronous_commit = off` so no statement waits for a flush. Prints the WAL
 * bytes per run (pg_current_wal_lsn differences) with the record types that make the difference (pg_walinspect), and
 * the mean server round trip of each statement. It finds where the guard's extra WAL and CPU go, and --sql FILE tries a
 * candidate change (any SQL, run as the owner in the scratch database before measuring) against the code as it is:
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/budget-guard-wal.ts [--runs 2000] [--rounds 3] [--sql candidate.sql]
 *
 * Rates and lock queues are bench/budget-guard.ts's. Works in a scratch database of the local stack, dropped at the end.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { applyBudgets } from '../src/budgets/budgets-store';
import { callsJson } from '../src/budgets/reserve';
import { GUARDED_RUN_CALLS } from './guarded-run';
import { scratchDatabase } from './scratch-database';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const RUNS = Number(arg('runs') ?? 2000);
const ROUNDS = Number(arg('rounds') ?? 3);
const SQL = arg('sql');
/** --functions: also print each SQL function's own time per run (pg_stat_user_functions, track_functions = all). */
const FUNCTIONS = process.argv.includes('--functions');
const command = `node --import tsx bench/budget-guard-wal.ts --runs ${RUNS} --rounds ${ROUNDS}${SQL ? ` --sql ${SQL}` : ''}${FUNCTIONS ? ' --functions' : ''}`;

/** claim_and_reserve's p_calls, as src/budgets/reserve.ts sends them. */
const CALLS = callsJson(GUARDED_RUN_CALLS);
const BOOKINGS = [
  { step: 'chat', kind: 'chat', model: 'openai/gpt-4o-mini', prompt: 120, completion: 300 },
  { step: 'embed', kind: 'embedding', model: 'openai/text-embedding-3-small', prompt: 300, completion: 0 },
] as const;

type Side = 'off' | 'on';
const STATEMENTS = ['claim', 'book', 'complete'] as const;

async function main(): Promise<void> {
  const db = await scratchDatabase('cronledger_bench_guard_wal', 1);
  const superuser = new pg.Client({ connectionString: db.urlAs('superuser') });
  const owner = new pg.Client({ connectionString: db.urlAs('owner') });
  const app = new pg.Client({ connectionString: db.urlAs('app') });
  try {
    await superuser.connect();
    // a database setting, so that it is in force in the application role's session (which may not set it itself)
    if (FUNCTIONS) await superuser.query(`alter database ${db.name} set track_functions = 'all'`);
    await Promise.all([owner.connect(), app.connect()]);
    await superuser.query('create extension if not exists pg_walinspect');
    const monthStart = (await app.query<{ m: Date }>(`select date_trunc('month', now()) as m`)).rows[0].m;
    await applyBudgets(
      db.pool,
      {
        budgets: [{ userId: 'guard-on', monthlyLimitUsd: '1000000', timeZone: 'UTC', effectiveFrom: monthStart }],
        downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
      },
      'bench',
    );
    if (SQL) await owner.query(readFileSync(SQL, 'utf8'));
    await app.query('set synchronous_commit = off');

    const ms: Record<Side, Record<string, number>> = { off: {}, on: {} };
    const wal: Record<Side, number> = { off: 0, on: 0 };
    const records: Record<Side, Map<string, number>> = { off: new Map(), on: new Map() };
    const timed = async (side: Side, what: string, q: pg.QueryConfig) => {
      const t = performance.now();
      await app.query(q);
      ms[side][what] = (ms[side][what] ?? 0) + performance.now() - t;
    };
    const lsn = async () => (await superuser.query<{ l: string }>('select pg_current_wal_lsn()::text as l')).rows[0].l;
    for (let round = 0; round < ROUNDS; round++) {
      for (const side of ['off', 'on'] as const) {
        const start = await lsn();
        for (let i = 0; i < RUNS; i++) {
          const run = `${side}-${round}-${i}`;
          const user = `guard-${side}`;
          if (side === 'on') {
            await timed(side, 'claim', {
              name: 'claim-and-reserve',
              text: 'select claim_and_reserve($1, $2, $3, $4, $5, now(), $6, false, null, $7, 3600, null)',
              values: [`cron:${run}`, 'bench-task', user, run, run, 'bench', CALLS],
            });
          } else {
            await timed(side, 'claim', {
              name: 'claim-run',
              text: 'select claim_run($1, $2, $3, $4, $5, now(), $6, false, null)',
              values: [`cron:${run}`, 'bench-task', user, run, run, 'bench'],
            });
          }
          for (const b of BOOKINGS) {
            await timed(side, 'book', {
              name: 'book-usage',
              text: `select book_usage($1, $2, $3, $4, 'bench-task', $5, null, $6, 'ok', 1, $7, 0, $8, 0, null, 'bench', null, null, now())`,
              values: [`${run}:${b.step}:1`, user, run, run, b.model, b.kind, b.prompt, b.completion],
            });
          }
          // completeRun's statement (src/db/runs.ts): a guarded run records its tier
          await timed(side, 'complete', {
            name: 'complete-run',
            text: `update runs set status = 'completed', finished_at = now(), tier = coalesce($2, tier) where idempotency_key = $1`,
            values: [`cron:${run}`, side === 'on' ? 'default' : null],
          });
        }
        const end = await lsn();
        // pg_walinspect reads only flushed WAL: a synchronous commit that writes a record flushes past `end`
        await superuser.query(`select pg_logical_emit_message(true, 'bench', 'flush')`);
        wal[side] += Number((await superuser.query('select pg_wal_lsn_diff($2, $1) as d', [start, end])).rows[0].d);
        const { rows } = await superuser.query<{ t: string; bytes: string }>(
          `select "resource_manager/record_type" as t, record_size + fpi_size as bytes from pg_get_wal_stats($1, $2, true) where count > 0`,
          [start, end],
        );
        for (const r of rows) records[side].set(r.t, (records[side].get(r.t) ?? 0) + Number(r.bytes));
      }
    }
    const n = RUNS * ROUNDS;
    const per = (x: number) => (x / n).toFixed(0).padStart(7);
    const types = [...new Set([...records.off.keys(), ...records.on.keys()])]
      .map((t) => ({ t, off: records.off.get(t) ?? 0, on: records.on.get(t) ?? 0 }))
      .sort((a, b) => Math.abs(b.on - b.off) - Math.abs(a.on - a.off))
      .slice(0, 8);
    const out = [
      `$ ${command}`,
      `PostgreSQL 127.0.0.1:${db.port}, ${n} runs per side, one after the other, ${ROUNDS} rounds alternating, synchronous_commit off`,
      `WAL bytes per run              off     on`,
      `  all                      ${per(wal.off)}${per(wal.on)}    ratio ${(wal.on / wal.off).toFixed(2)}`,
      ...types.map((r) => `  ${r.t.padEnd(23)}${per(r.off)}${per(r.on)}`),
      `server round trip per run, ms  off     on`,
      ...STATEMENTS.map(
        (s) =>
          `  ${(s === 'claim' ? 'claim (on: claim_and_reserve)' : s === 'book' ? 'book, both calls' : s).padEnd(30)}` +
          `${(ms.off[s] / n).toFixed(3).padStart(7)}${(ms.on[s] / n).toFixed(3).padStart(7)}`,
      ),
      `  all                           ${(sum(ms.off) / n).toFixed(3).padStart(6)}${(sum(ms.on) / n).toFixed(3).padStart(7)}    ratio ${(sum(ms.off) / sum(ms.on)).toFixed(2)}`,
    ];
    if (FUNCTIONS) out.push(...(await functionTimes(superuser, app, db.name, n)));
    process.stdout.write(`${out.join('\n')}\n`);
  } finally {
    await Promise.all([superuser.end(), owner.end(), app.end()].map((p) => p.catch(() => undefined)));
    await db.close();
  }
}

/**
 * Each function's own time (self_time: without the functions it calls) per run, both sides together, from the
 * statistics the application session sends when it ends. The per-side split is in the round trips above.
 */
async function functionTimes(superuser: pg.Client, app: pg.Client, database: string, runs: number): Promise<string[]> {
  await app.end();
  for (let waited = 0; waited < 50; waited++) {
    const { rows } = await superuser.query<{ n: string }>(
      `select count(*) as n from pg_stat_activity where datname = $1 and usename = 'cronledger_app'`,
      [database],
    );
    if (rows[0].n === '0') break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await superuser.query('select pg_stat_clear_snapshot()');
  const { rows } = await superuser.query<{ funcname: string; calls: string; self_time: string; total_time: string }>(
    'select funcname, calls, self_time, total_time from pg_stat_user_functions order by self_time desc',
  );
  return [
    `SQL functions, both sides, per run (self ms, total ms, calls)`,
    ...rows.map(
      (r) =>
        `  ${r.funcname.padEnd(28)}${(Number(r.self_time) / runs).toFixed(3).padStart(7)}` +
        `${(Number(r.total_time) / runs).toFixed(3).padStart(7)}${(Number(r.calls) / runs).toFixed(1).padStart(6)}`,
    ),
  ];
}

const sum = (r: Record<string, number>): number => Object.values(r).reduce((a, b) => a + b, 0);

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
