/**
 * What the summaries a run writes as it goes cost PostgreSQL: one mock run's database statements, exactly as the
 * worker sends them (the applied version, the claim with its reservation, the chat's booking, the embedding's staging,
 * the last booking with the run's completion), for --runs runs in 8 lanes, on a database as migrated and on databases
 * with one group of the run path's summary triggers disabled:
 *
 *   no-run-metrics     the runs' /metrics counters and run-duration histogram (runs_metric_counts, _update)
 *   no-run-queue       the runs' rollup queue (runs_queue_rollups_insert, _update)
 *   no-ledger-summary  the ledger's AFTER trigger (book_ledger_entry: month-to-date, reservation settle, rollup queue
 *                      and its two pending summaries)
 *
 * Rounds alternate over the databases, so drift on the shared machine hits all alike; medians of --rounds rounds.
 * CPU a run: PostgreSQL's (every backend of the cluster, /proc) and this process's (the worker's client side).
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/run-path-summaries.ts [--runs 2000] [--rounds 3]
 */
import { readFileSync, readdirSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { claimAndReserve, type PlannedCall } from '../src/budgets/reserve';
import { worstCaseOf } from '../src/budgets/worst-case';
import { readStackFile } from '../src/config';
import { stageEmbedding } from '../src/db/memories';
import { createPool } from '../src/db/pool';
import { appliedVersion, recordTaskVersions } from '../src/db/task-versions';
import { bookCall, bookCallAndCompleteRun } from '../src/ledger/record-usage';
import { fullUsage } from '../src/models/provider';
import { benchArgs, numberOption } from './lib/args';
import { scratchDatabase, type ScratchDatabase } from './lib/scratch-database';

const { values, command } = benchArgs('bench/run-path-summaries.ts', {
  runs: { type: 'string', default: '2000' },
  rounds: { type: 'string', default: '3' },
});
const RUNS = numberOption('runs', values.runs);
const ROUNDS = numberOption('rounds', values.rounds);
const LANES = 8;

const VARIANTS: Record<string, string> = {
  'as migrated': '',
  'no-run-metrics': 'alter table runs disable trigger runs_metric_counts; alter table runs disable trigger runs_metric_counts_update;',
  'no-run-queue': 'alter table runs disable trigger runs_queue_rollups_insert; alter table runs disable trigger runs_queue_rollups_update;',
  'no-ledger-summary': 'alter table usage_ledger disable trigger usage_ledger_booked;',
};

const PROMPT = 'Summarise the day for the team.';
const worst = worstCaseOf({ prompt: PROMPT, maxOutputTokens: 1024 });
const CALLS: PlannedCall[] = [
  { step: 'chat', attempt: 1, kind: 'chat', model: 'openai/gpt-4o-mini', worstCase: worst.chat },
  { step: 'embed', attempt: 1, kind: 'embedding', model: 'openai/text-embedding-3-small', worstCase: worst.embedding },
];
const VECTOR = Array.from({ length: 16 }, (_, i) => i / 16);

/** CPU milliseconds of the whole cluster: live backends plus those that exited (the postmaster's cutime). */
function postgresCpuMs(postmaster: number): number {
  const ticks = (pid: number | string, fields: number[]): number => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
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
  return total * 10; // USER_HZ 100
}

/** One mock run's statements, in the worker's order. */
async function oneRun(pool: pg.Pool, round: number, i: number): Promise<void> {
  const runId = `run-${round}-${i}`;
  const workflowId = `cron-task-1-${round}-${i}`;
  const userId = `user-${i % 100}`;
  const key = `task-1:${round}:${i}`;
  await appliedVersion(pool, 'task-1', 'fingerprint');
  await claimAndReserve(
    pool,
    {
      idempotencyKey: key,
      taskId: 'task-1',
      userId,
      workflowId,
      temporalRunId: runId,
      scheduledMinute: '2026-12-04T10:00Z',
      workerId: 'bench',
    },
    { calls: CALLS, expirySeconds: 600 },
  );
  const call = {
    runId,
    workflowId,
    attempt: 1,
    userId,
    taskId: 'task-1',
    status: 'ok' as const,
    providerRequestId: 'req',
    workerId: 'bench',
  };
  const usage = (prompt: number, completion: number) =>
    fullUsage({ promptTokens: prompt, cachedPromptTokens: 0, completionTokens: completion, reasoningTokens: 0 });
  await bookCall(pool, {
    ...call,
    step: 'chat',
    model: CALLS[0].model,
    kind: 'chat',
    providerModel: 'gpt-4o-mini',
    usage: usage(12, 40),
    usageReceivedAt: new Date(),
  });
  await stageEmbedding(pool, `${runId}:embed:1`, VECTOR);
  await bookCallAndCompleteRun(
    pool,
    {
      ...call,
      step: 'embed',
      model: CALLS[1].model,
      kind: 'embedding',
      providerModel: 'text-embedding-3-small',
      usage: usage(40, 0),
      usageReceivedAt: new Date(),
    },
    { idempotencyKey: key, temporalRunId: runId, status: 'completed', tier: 'default' },
    { workflowId, temporalRunId: runId, taskId: 'task-1', userId, content: 'the reply', embeddingKey: `${runId}:embed:1` },
  );
}

async function main(): Promise<void> {
  const stack = readStackFile()?.postgres;
  if (!stack) throw new Error('no local stack: run `npx cronledger dev up --workers 0` first');
  const postmaster = Number(readFileSync(`${stack.clusterDir}/postmaster.pid`, 'utf8').split('\n')[0]);
  const dbs = new Map<string, ScratchDatabase>();
  try {
    for (const [name, sql] of Object.entries(VARIANTS)) {
      const db = await scratchDatabase(`run_path_${dbs.size}`, 10);
      dbs.set(name, db);
      const owner = new pg.Client({ connectionString: db.urlAs('owner') });
      await owner.connect();
      await owner.query(sql).finally(() => owner.end());
      const operator = createPool(db.urlAs('operator'), 1);
      const definition = { userId: 'u', input: PROMPT, model: CALLS[0].model, embeddingModel: CALLS[1].model, maxOutputTokens: 1024 };
      await recordTaskVersions(operator, [{ taskId: 'task-1', fingerprint: 'fingerprint', definition }]).finally(() => operator.end());
      await oneRun(db.pool, -1, 0); // each connection's named statements prepared before the first measured round
    }
    const figures = new Map<string, { pg: number; node: number; perSecond: number }[]>([...dbs.keys()].map((k) => [k, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, db] of dbs) {
        let next = 0;
        const pg0 = postgresCpuMs(postmaster);
        const node0 = process.cpuUsage();
        const t0 = performance.now();
        await Promise.all(
          Array.from({ length: LANES }, async () => {
            for (let i = next++; i < RUNS; i = next++) await oneRun(db.pool, round, i);
          }),
        );
        const seconds = (performance.now() - t0) / 1000;
        const node = process.cpuUsage(node0);
        figures
          .get(name)!
          .push({ pg: (postgresCpuMs(postmaster) - pg0) / RUNS, node: (node.user + node.system) / 1000 / RUNS, perSecond: RUNS / seconds });
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const base = median(figures.get('as migrated')!.map((f) => f.pg));
    console.log(`$ ${command}`);
    console.log(`${RUNS} runs a round in ${LANES} lanes, ${ROUNDS} rounds, medians; CPU a run`);
    for (const [name, fs] of figures) {
      const pgMs = median(fs.map((f) => f.pg));
      const delta = name === 'as migrated' ? '' : `  (${(pgMs - base).toFixed(3)} ms against as migrated)`;
      console.log(
        `${name.padEnd(18)} PostgreSQL ${pgMs.toFixed(3)} ms  node ${median(fs.map((f) => f.node)).toFixed(3)} ms  ${median(fs.map((f) => f.perSecond)).toFixed(0)} runs/s${delta}`,
      );
    }
  } finally {
    for (const db of dbs.values()) await db.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
