/**
 * P2 (issue 12): the booking path against a raw single-row insert, side by side in one run, at 1 and at 4 clients.
 *
 *   raw              pgbench: one INSERT into raw_ledger, a table of the ledger's shape (its columns, defaults, checks
 *                    and indexes; no triggers), with a constant cost
 *   book_usage       pgbench: the booking statement itself (price lookup, exact cost, idempotent insert, and the
 *                    ledger's triggers: month-to-date summary, reservation settle, rollup queue)
 *   no_bookkeeping   pgbench: the same statement with the ledger's AFTER trigger (book_ledger_entry, every summary
 *                    row a booking writes) disabled on the bench's own database: what the statement costs without them
 *   recordUsage      node: the booking function that returns the whole ledger row (validation, then that statement)
 *   bookCall         node: what the worker's booking step calls: the same statement, reading back only the entry,
 *                    its cost and its price version, the conflict check made in the statement
 *   raw_node         node: raw's insert through bookCall's pool, a named statement: raw with node's client cost
 *                    added as bookCall has it, so bookCall / raw_node compares like with like
 *   bookCall_no_bookkeeping  node: bookCall with the AFTER trigger disabled, as no_bookkeeping: the most bookCall can
 *                    reach against raw with a ledger that writes no summary at all
 *
 * Each client books for its own user (a thousand users booking at 09:00, not one user's hot month row). The phases
 * alternate in the order above for --rounds rounds and the ratios use the sums, so drift on the shared
 * machine hits all of them alike. It runs durable (as the ledger does) and then with synchronous_commit off for its
 * own sessions (the path's own cost without the shared disk's fsync latency). Each phase prints what limited it: CPU seconds of PostgreSQL (every backend of the
 * cluster) and of node per second of wall time, and what the active backends were waiting on (pg_stat_activity
 * sampled every 20 ms; "CPU" = running, not waiting).
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/booking-path.ts [--seconds 10] [--rounds 2]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { dataDir } from '../src/config';
import { createPool } from '../src/db/pool';
import { findPostgresBinDir, postgresPid } from '../src/dev/postgres';
import { bookCall, recordUsage } from '../src/ledger/record-usage';
import { benchArgs, numberOption } from './lib/args';
import { sampleWaits, topWaits } from './lib/postgres-waits';
import { scratchDatabase, type ScratchDatabase } from './lib/scratch-database';
import { fullUsage } from '../src/models/provider';

const { values } = benchArgs('bench/booking-path.ts', {
  seconds: { type: 'string', default: '8' },
  rounds: { type: 'string', default: '2' },
});
const SECONDS = numberOption('seconds', values.seconds);
const ROUNDS = numberOption('rounds', values.rounds);
const CLIENTS = [1, 4];
const command = `node --import tsx bench/booking-path.ts --seconds ${SECONDS} --rounds ${ROUNDS}`;

const COLUMNS = `idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, provider_model, kind, status, attempt,
  prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, price_version, worker_id, usage_received_at`;
const RAW_SCRIPT = `insert into raw_ledger (${COLUMNS})
  values (gen_random_uuid()::text, 'usage', 'user-' || :client_id, gen_random_uuid()::text, 'wf', 'task', 'openai/gpt-4o-mini',
          'gpt-4o-mini', 'chat', 'ok', 1, 1200, 200, 300, 0, 0.000345, 'v1', 'bench', now());\n`;
const BOOK_SCRIPT = `select book_usage(gen_random_uuid()::text, 'user-' || :client_id, gen_random_uuid()::text, 'wf', 'task',
  'openai/gpt-4o-mini', 'gpt-4o-mini', 'chat', 'ok', 1, 1200, 200, 300, 0, 0, 0, null, null, 'bench', null, null, now());\n`;

const PATHS = ['raw', 'book_usage', 'no_bookkeeping', 'recordUsage', 'bookCall', 'raw_node', 'bookCall_no_bookkeeping'] as const;
type Path = (typeof PATHS)[number];
/**
 * Durable: synchronous_commit on, as the ledger runs (a booking is acknowledged once its WAL is on disk). Then the
 * same with synchronous_commit off for the bench's own sessions only, which takes the shared disk's fsync latency out
 * and leaves what the path itself costs (CPU, round trips, locks).
 */
const MODES = [
  { name: 'durable (synchronous_commit on)', options: '' },
  { name: 'path only (synchronous_commit off for these sessions)', options: '-c synchronous_commit=off' },
];
type Mode = (typeof MODES)[number];
interface Phase {
  perSecond: number;
  seconds: number;
  postgresCpu: number;
  nodeCpu: number;
  waits: Map<string, number>;
}

/** CPU seconds of the whole cluster: live backends plus the ones that exited (reaped into the postmaster's cutime). */
function postgresCpuSeconds(postmaster: number): number {
  const ticks = (pid: number | string, fields: number[]): number => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // rest[0] is field 3 (state)
      return fields.reduce((sum, f) => sum + Number(rest[f - 3]), 0);
    } catch {
      return 0;
    }
  };
  let total = ticks(postmaster, [14, 15, 16, 17]);
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster) total += ticks(pid, [14, 15]);
    } catch {
      // gone between the listing and the read
    }
  }
  return total / 100; // USER_HZ
}

async function measure(db: ScratchDatabase, superuser: pg.Client, postmaster: number, run: () => Promise<number>): Promise<Phase> {
  const stop = sampleWaits(superuser, db.name);
  const pg0 = postgresCpuSeconds(postmaster);
  const node0 = process.cpuUsage();
  const t0 = performance.now();
  // a failed phase stops the sampler before its client is closed, so the phase's own error is the one printed
  const count = await run().catch(async (err: unknown) => {
    await stop();
    throw err;
  });
  const seconds = (performance.now() - t0) / 1000;
  const node = process.cpuUsage(node0);
  // pgbench's backends exit as it ends: wait until they are gone, so their CPU is in the postmaster's cutime
  for (let i = 0; i < 100; i++) {
    const { rows } = await superuser.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where datname = $1 and application_name = 'pgbench'`,
      [db.name],
    );
    if (rows[0].n === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return {
    perSecond: count / seconds,
    seconds,
    postgresCpu: postgresCpuSeconds(postmaster) - pg0,
    nodeCpu: (node.user + node.system) / 1e6,
    waits: await stop(),
  };
}

function pgbench(db: ScratchDatabase, mode: Mode, script: string, clients: number): () => Promise<number> {
  return async () => {
    const bin = join(findPostgresBinDir() ?? '/usr/lib/postgresql/15/bin', 'pgbench');
    const url = new URL(db.urlAs('worker'));
    const dir = mkdtempSync(join(tmpdir(), 'cronledger-pgbench-'));
    try {
      writeFileSync(join(dir, 'script.sql'), script);
      // spawned asynchronously, so the wait sampler keeps running on this event loop meanwhile
      const out = await new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve, reject) => {
        const child = spawn(
          bin,
          [
            '-n',
            '-M',
            'prepared',
            '-c',
            String(clients),
            '-j',
            String(Math.min(clients, 2)),
            '-T',
            String(SECONDS),
            '-f',
            join(dir, 'script.sql'),
          ],
          {
            env: {
              ...process.env,
              PGHOST: url.hostname,
              PGPORT: url.port,
              PGUSER: decodeURIComponent(url.username),
              PGPASSWORD: decodeURIComponent(url.password),
              PGDATABASE: db.name,
              PGOPTIONS: mode.options,
            },
          },
        );
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.on('error', reject);
        child.on('close', (status) => resolve({ status, stdout, stderr }));
      });
      const processed = /number of transactions actually processed: (\d+)/.exec(out.stdout);
      if (out.status !== 0 || !processed) throw new Error(`pgbench failed: ${out.stderr || out.stdout}`);
      return Number(processed[1]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}

/** `clients` loops calling `once` for SECONDS; the number of calls made. */
function viaNode(clients: number, once: (client: number, i: number) => Promise<unknown>): () => Promise<number> {
  return async () => {
    let done = 0;
    const until = performance.now() + SECONDS * 1000;
    await Promise.all(
      Array.from({ length: clients }, async (_, client) => {
        for (let i = 0; performance.now() < until; i++) {
          await once(client, i);
          done++;
        }
      }),
    );
    return done;
  };
}

/** A booking through `bookOnce` (recordUsage or bookCall), its key unique to the phase, the client and the call. */
function bookingsViaNode(pool: pg.Pool, clients: number, round: string, bookOnce: typeof bookCall, label: string): () => Promise<number> {
  return viaNode(clients, (client, i) =>
    bookOnce(pool, {
      runId: `${label}-${round}-${clients}-${client}-${i}`,
      workflowId: 'wf',
      step: 'chat',
      attempt: 1,
      userId: `user-${client + 1}`,
      taskId: 'task',
      model: 'openai/gpt-4o-mini',
      kind: 'chat',
      status: 'ok',
      usage: fullUsage({ promptTokens: 1200, cachedPromptTokens: 200, completionTokens: 300, reasoningTokens: 0 }),
      providerModel: 'gpt-4o-mini',
      providerRequestId: null,
      workerId: 'bench',
      usageReceivedAt: new Date(),
    }),
  );
}

/** RAW_SCRIPT's insert from node, its values as pgbench's (a key and a run of their own, the client's user). */
const rawViaNode = (pool: pg.Pool, clients: number): (() => Promise<number>) =>
  viaNode(clients, (client) =>
    pool.query({
      name: 'raw-insert',
      text: `insert into raw_ledger (${COLUMNS})
        values (gen_random_uuid()::text, 'usage', $1, gen_random_uuid()::text, 'wf', 'task', 'openai/gpt-4o-mini',
                'gpt-4o-mini', 'chat', 'ok', 1, 1200, 200, 300, 0, 0.000345, 'v1', 'bench', now())`,
      values: [`user-${client + 1}`],
    }),
  );

const sum = (phases: Phase[], f: (p: Phase) => number): number => phases.reduce((s, p) => s + f(p), 0);

function describe(phases: Phase[]): string {
  const seconds = sum(phases, (p) => p.seconds);
  const waits = new Map<string, number>();
  for (const p of phases) for (const [w, n] of p.waits) waits.set(w, (waits.get(w) ?? 0) + n);
  const top = topWaits(waits, 3);
  return `${(sum(phases, (p) => p.perSecond * p.seconds) / seconds).toFixed(0).padStart(7)}/s   postgres CPU ${(sum(phases, (p) => p.postgresCpu) / seconds).toFixed(2)}  node CPU ${(sum(phases, (p) => p.nodeCpu) / seconds).toFixed(2)}   waits: ${top}`;
}

async function main(): Promise<void> {
  const db = await scratchDatabase('cronledger_bench_booking', Math.max(...CLIENTS));
  const postmaster = postgresPid(dataDir());
  if (!postmaster) throw new Error('the local stack has no running PostgreSQL: run `npx cronledger dev up --workers 0`');
  const superuser = new pg.Client({ connectionString: db.urlAs('superuser', 'postgres') });
  await superuser.connect();
  const owner = new pg.Client({ connectionString: db.urlAs('owner') });
  await owner.connect();
  try {
    await owner.query('create table raw_ledger (like usage_ledger including all)');
    // raw_ledger draws ids from a sequence of its own: the worker (pgbench's and the pools' role) may not use the ledger's
    await owner.query(`create sequence raw_ledger_id_seq owned by raw_ledger.id;
      alter table raw_ledger alter column id set default nextval('raw_ledger_id_seq');
      grant select, insert on raw_ledger to cronledger_worker; grant usage on sequence raw_ledger_id_seq to cronledger_worker`);
    const lines = [`$ ${command}`, `PostgreSQL 127.0.0.1:${db.port}, ${ROUNDS} rounds of ${SECONDS} s per phase, one user per client`];
    /** fn with the ledger's AFTER trigger (book_ledger_entry: every summary row a booking writes) disabled. */
    const withoutBookkeeping = async <T>(fn: () => Promise<T>): Promise<T> => {
      await owner.query('alter table usage_ledger disable trigger usage_ledger_booked');
      try {
        return await fn();
      } finally {
        await owner.query('alter table usage_ledger enable trigger usage_ledger_booked');
      }
    };
    for (const [m, mode] of MODES.entries()) {
      const pool =
        m === 0 ? db.pool : createPool(`${db.urlAs('worker')}?options=${encodeURIComponent(mode.options)}`, Math.max(...CLIENTS));
      const results = new Map<string, Phase[]>();
      const add = (path: Path, clients: number, phase: Phase) => {
        const key = `${path}@${clients}`;
        results.set(key, [...(results.get(key) ?? []), phase]);
      };
      for (let round = 1; round <= ROUNDS; round++) {
        for (const clients of CLIENTS) {
          add('raw', clients, await measure(db, superuser, postmaster, pgbench(db, mode, RAW_SCRIPT, clients)));
          add('book_usage', clients, await measure(db, superuser, postmaster, pgbench(db, mode, BOOK_SCRIPT, clients)));
          add(
            'no_bookkeeping',
            clients,
            await withoutBookkeeping(() => measure(db, superuser, postmaster, pgbench(db, mode, BOOK_SCRIPT, clients))),
          );
          const booking = (bookOnce: typeof bookCall, label: Path) =>
            measure(db, superuser, postmaster, bookingsViaNode(pool, clients, `${m}-${round}`, bookOnce, label));
          add('recordUsage', clients, await booking(recordUsage, 'recordUsage'));
          add('bookCall', clients, await booking(bookCall, 'bookCall'));
          add('raw_node', clients, await measure(db, superuser, postmaster, rawViaNode(pool, clients)));
          add('bookCall_no_bookkeeping', clients, await withoutBookkeeping(() => booking(bookCall, 'bookCall_no_bookkeeping')));
        }
      }
      if (pool !== db.pool) await pool.end();
      const rate = (key: string): number => {
        const phases = results.get(key) ?? [];
        return sum(phases, (p) => p.perSecond * p.seconds) / sum(phases, (p) => p.seconds);
      };
      lines.push('', `${mode.name}`);
      for (const clients of CLIENTS) {
        lines.push(`  ${clients} client(s)`);
        for (const path of PATHS) {
          lines.push(`    ${path.padEnd(23)} ${describe(results.get(`${path}@${clients}`) ?? [])}`);
        }
        const ratio = (path: Path, of: Path = 'raw'): string => (rate(`${path}@${clients}`) / rate(`${of}@${clients}`)).toFixed(2);
        for (const path of PATHS.slice(1)) {
          const goal = path === 'bookCall' ? "   (goal >= 0.5: the worker's path)" : '';
          lines.push(`    ratio ${`${path} / raw`.padEnd(30)} ${ratio(path)}${goal}`);
        }
        lines.push(`    ratio ${'bookCall / raw_node'.padEnd(30)} ${ratio('bookCall', 'raw_node')}   (both from node)`);
      }
    }
    process.stdout.write(`${lines.join('\n')}\n`);
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
