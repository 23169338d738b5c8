/**
 * Where the budget decision's time goes, stage by stage: reserve_budget as it is in the database, cut short after each
 * of its stages (a copy of the function that returns there), each followed by its two settles as the bookings make
 * them, all in ONE pgbench run that picks a stage at random for every transaction. So drift on the shared machine
 * hits every stage alike, and the difference between two stages' latencies is what the later stage costs.
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/budget-decision-stages.ts [--seconds 60] [--clients 1] [--sync off|on] [--candidate FILE]
 *
 * Stages, each including the ones before it:
 *   entry     the function called, returning at once: the floor (the statement, the call, the settles finding nothing)
 *   budget    the user's budget in force
 *   pricing   each call's worst case at its own and at its cheap model (prices in force, downgrades)
 *   lock      the row lock on the user's month
 *   figures   spent, reserved and the retried-keys check, in one statement
 *   reserve   the tier, and the reservation rows inserted (now the settles find them: two updates)
 *   whole     the threshold events and the result: reserve_budget as it is
 * --candidate FILE (repeatable): a `create or replace function reserve_budget(...)` to measure as one more line,
 * candidate_1, candidate_2, ..., against `whole` in the same run (each file is read, renamed and created beside it;
 * reserve_budget is not replaced).
 *
 * With --sync off (the default) no commit waits for a flush, so the figures are server time; the booking rate under
 * durable commits is bench/budget-guard.ts's. Works in a scratch database of the local stack, dropped at the end.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { applyBudgets } from '../src/budgets/budgets-store';
import { callsJson } from '../src/budgets/reserve';
import { GUARDED_RUN_CALLS } from './guarded-run';
import { scratchDatabase } from './scratch-database';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const SECONDS = Number(arg('seconds') ?? 60);
const CLIENTS = Number(arg('clients') ?? 1);
const SYNC = arg('sync') ?? 'off';
/** --candidate FILE, repeatable: each one more line, candidate_1, candidate_2, ... */
const CANDIDATES = process.argv.flatMap((a, i) => (a === '--candidate' ? [process.argv[i + 1]] : []));
const command =
  `node --import tsx bench/budget-decision-stages.ts --seconds ${SECONDS} --clients ${CLIENTS} --sync ${SYNC}` +
  CANDIDATES.map((c) => ` --candidate ${c}`).join('');

/** Where each stage ends: the text of reserve_budget (migrations 020 and 021) that the next stage starts with. */
const STAGE_ENDS = [
  ['entry', '  select b.* into v_budget from ('],
  ['budget', "  v_month := (date_trunc('month', v_at at time zone v_budget.time_zone))::date;\n  v_limit"],
  ['pricing', "  -- The lock on the user's month row"],
  ['lock', '  -- Under the lock, one statement'],
  ['figures', '  if v_retried then'],
  ['reserve', '  -- threshold events reached'],
] as const;
const STAGES = [...STAGE_ENDS.map(([s]) => s), 'whole'] as const;

/** claim_and_reserve's p_calls as src/budgets/reserve.ts sends them (the run's chat and embedding call). */
const CALLS = callsJson(GUARDED_RUN_CALLS);

/** The function's definition with `name` for its name, returning a fixed result where `end` begins (if given). */
function variant(definition: string, name: string, end?: string): string {
  const head = /create or replace function (public\.)?reserve_budget\(/i;
  if (!head.test(definition)) throw new Error(`no "create or replace function reserve_budget(" in the definition of ${name}`);
  let body = definition.replace(head, `create function ${name}(`);
  if (end !== undefined) {
    const at = body.indexOf(end);
    if (at < 0) throw new Error(`reserve_budget has changed: the stage ending before ${JSON.stringify(end.trim())} is not found`);
    body = `${body.slice(0, at)}  return jsonb_build_object('tier', 'default');\n${body.slice(at)}`;
  }
  return body;
}

async function main(): Promise<void> {
  const db = await scratchDatabase('cronledger_bench_decision_stages', 1);
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-stages-'));
  try {
    const monthStart = (await db.pool.query<{ m: Date }>(`select date_trunc('month', now()) as m`)).rows[0].m;
    await applyBudgets(
      db.pool,
      {
        budgets: [{ userId: 'stages', monthlyLimitUsd: '1000000', timeZone: 'UTC', effectiveFrom: monthStart }],
        downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
      },
      'bench',
    );
    await db.pool.end();
    const owner = new pg.Client({ connectionString: db.urlAs('owner') });
    await owner.connect();
    try {
      const { rows } = await owner.query<{ def: string }>(
        `select pg_get_functiondef('reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz)'::regprocedure) as def`,
      );
      const current = rows[0].def;
      // the pgbench scripts, one per stage and candidate, in the order they are reported
      const scripts: string[] = [...STAGES];
      for (const [stage, end] of STAGE_ENDS) await owner.query(variant(current, `stage_${stage}`, end));
      await owner.query(variant(current, 'stage_whole'));
      for (const [i, file] of CANDIDATES.entries()) {
        await owner.query(variant(readFileSync(file, 'utf8'), `stage_candidate_${i + 1}`));
        scripts.push(`candidate_${i + 1}`);
      }
      await owner.query(`grant execute on all functions in schema public to cronledger_app`);
      const args = ['-n', '-c', String(CLIENTS), '-j', String(CLIENTS), '-T', String(SECONDS), '-M', 'simple'];
      for (const stage of scripts) {
        const file = join(dir, `${stage}.sql`);
        // a run id per transaction (:r), its two reservations settled as the bookings' trigger settles them
        writeFileSync(
          file,
          [
            `\\set r random(1, 1000000000000)`,
            `select stage_${stage}('stages', 'run-' || :r, 'run-' || :r, '${CALLS}'::jsonb, true, 3600, null);`,
            `update budget_reservations set status = 'settled', closed_at = now() where idempotency_key in ('run-' || :r || ':chat:1', 'run-' || :r || ':embed:1') and status = 'open';`,
            '',
          ].join('\n'),
        );
        args.push('-f', `${file}@1`);
      }
      const out = execFileSync('pgbench', [...args, db.urlAs('app')], {
        env: { ...process.env, PGOPTIONS: `-c synchronous_commit=${SYNC}` },
        encoding: 'utf8',
      });
      const latency = new Map<string, { ms: number; n: number }>();
      for (const m of out.matchAll(/SQL script \d+: \S+\/(\w+)\.sql[\s\S]*?- (\d+) transactions[\s\S]*?latency average = ([0-9.]+) ms/g))
        latency.set(m[1], { n: Number(m[2]), ms: Number(m[3]) });
      const get = (stage: string) => {
        const l = latency.get(stage);
        if (!l) throw new Error(`pgbench printed no latency for ${stage}:\n${out}`);
        return l;
      };
      const report = [
        `$ ${command}`,
        `PostgreSQL 127.0.0.1:${db.port}, one pgbench run of ${SECONDS} s, ${CLIENTS} client(s), each transaction a stage picked at random, synchronous_commit ${SYNC}`,
        `stage        transactions   latency ms   this stage adds`,
      ];
      let before: number | undefined;
      for (const stage of scripts) {
        const { n, ms } = get(stage);
        const adds = stage.startsWith('candidate')
          ? `${(ms - get('whole').ms).toFixed(3)} against whole`
          : before === undefined
            ? ''
            : (ms - before).toFixed(3);
        report.push(`  ${stage.padEnd(10)} ${String(n).padStart(12)} ${ms.toFixed(3).padStart(12)}   ${adds}`);
        if (!stage.startsWith('candidate')) before = ms;
      }
      process.stdout.write(`${report.join('\n')}\n`);
    } finally {
      await owner.end();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await db.close();
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
