/**
 * P1 fan-out: N tasks (1,000) whose Temporal Schedules fire in the same minute, run by 3 worker processes, on a private
 * stack started as `dev up` starts it (its Temporal server flags, its PostgreSQL), in a temp dir. Phases, each on its
 * own task queue and its own N schedules (real schedules firing at a real minute, not a backfill):
 *
 *   bare    the bare workflow (bench/lib/bare-run-workflow.ts): scheduledRun's Temporal steps, activities doing nothing
 *   mock    cronledger's scheduledRun with the offline mock model
 *   openai  scheduledRun through the openai provider against the fake OpenAI server, which takes --call-ms per request
 *   jitter  as mock, with `jitter: 60s` on every task: starts spread over the minute, and nothing runs twice
 *   guarded as mock, for users who each have a monthly budget (1,000,000 USD, never reached): every run's claim
 *           reserves its worst case and each booking settles it (the mock phase's users have no budget, so no guard)
 *   floor   as bare, with each of its three bookkeeping steps writing one row to the stack's PostgreSQL (its own
 *           transaction, through the worker's pool settings): the least a run that claims its slot and books its two
 *           calls in PostgreSQL can do, so floor/bare is the most that mock/bare can reach on this machine and server
 *   bare-journal  as bare, on a second dev server started in this run with the same flags except SQLite's pragmas: its
 *           default rollback journal instead of dev up's journal_mode=wal and synchronous=normal (dev server only)
 *
 * Each phase starts its own workers and warms them with 30 runs of its kind before its schedules are made (warmWorkers).
 * Each prints the time from the slot to the last closed run, runs per second over that time, the peak starts per
 * second, claims and ledger rows (cronledger phases), and the CPU each process group used while the phase drained
 * (share of a core, and per run), so the figure says what limited it, what Temporal did inside a run by its own metrics
 * (persistence requests by operation, tasks matched sync and async; bench/lib/temporal-metrics.ts), and any straggler
 * (bench/lib/p1-pairs.ts). A phase's schedules are deleted once it is measured.
 * mock/bare is the throughput ratio measured in the same run on the same server: the n-th bare phase against the n-th
 * mock, each pair with its CPU a run per process, and the median of the pairs without a straggler; floor/bare likewise.
 *
 *   node --import tsx bench/fan-out.ts [--tasks 1000] [--workers 3] [--only bare,mock,openai,jitter,guarded,floor,bare-journal] [--call-ms 500] [--lead 75]
 *        [--temporal dev|server] [--warm-tasks 30]
 *
 * --temporal: the stack's Temporal, as `dev up --temporal` (dev: the dev server on SQLite; server: the Temporal server's
 * services on the stack's PostgreSQL).
 * --lead: seconds from start of a phase to its slot at least (its N schedules are created in between).
 * --warm-tasks: the bare runs of the unmeasured round a server runs before its first phase (30). After 30, the first
 * measured phase meets a server that has run fewer workflows than every later phase meets, and costs it less (on the
 * Temporal server 39 ms a run against 41 to 44); `--warm-tasks 1000` runs a full-size phase first, so that no pair
 * gains from its position.
 * --profile-workers DIR: each worker process writes CPU profiles (node --cpu-prof, one per thread: the main thread and the
 * workflow thread) to DIR/<phase>/ when it stops; profiling slows the workers, so such a run's figures are not P1's.
 * --dynamic-config KEY=JSON (repeatable, dev server only): added to or replacing `dev up`'s dynamic config
 * (DEV_SERVER_DYNAMIC_CONFIG), to try a setting before it goes there.
 */
import { ScheduleOverlapPolicy, type Client } from '@temporalio/client';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { compileScript } from '../bin/compiled.js';
import { connectClient } from '../src/client';
import { repoRoot, temporalTlsEnv, type TemporalTls } from '../src/config';
import { createPool } from '../src/db/pool';
import { WORKER_ROLE } from '../src/db/roles';
import { freePorts } from '../src/dev/ports';
import { startStack, stopStack } from '../src/dev/stack';
import type { StackFile } from '../src/config';
import { findTemporalCli } from '../src/dev/temporal-cli';
import { DEV_SERVER_DYNAMIC_CONFIG, temporalArgs } from '../src/dev/temporal-server';
import { applyBudgets } from '../src/budgets/budgets-store';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordTaskVersions } from '../src/db/task-versions';
import { scheduleOptionsFor, taskFingerprint } from '../src/schedules/task-schedule';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { startFakeOpenAI, type FakeOpenAI } from '../test/support/fake-openai';
import { startWorkerProcesses, stopWorkerProcesses, writeWorkflowBundle, type WorkerProcess } from '../test/support/worker-processes';
import { benchArgs, numberOption } from './lib/args';
import { prometheusEndpoints, serverCounters } from './lib/temporal-metrics';
import {
  cpuText,
  findStragglers,
  FLOOR_TABLE,
  machineSample,
  pairLines,
  PHASES,
  type MachineSample,
  type Phase,
  type PhaseFigures,
} from './lib/p1-pairs';

const { values, command } = benchArgs('bench/fan-out.ts', {
  tasks: { type: 'string', default: '1000' },
  workers: { type: 'string', default: '3' },
  only: { type: 'string', default: 'bare,mock,openai,jitter' },
  'call-ms': { type: 'string', default: '500' },
  lead: { type: 'string', default: '75' },
  'warm-tasks': { type: 'string', default: '30' },
  temporal: { type: 'string', default: 'dev' },
  'profile-workers': { type: 'string', default: '' },
  'dynamic-config': { type: 'string', multiple: true, default: [] },
});
const taskCount = numberOption('tasks', values.tasks);
const workerCount = numberOption('workers', values.workers);
const phases = values.only.split(',').map((p) => {
  if (!(PHASES as readonly string[]).includes(p)) throw new Error(`--only: ${p} is not a phase (${PHASES.join(', ')})`);
  return p as Phase;
});
const callMs = numberOption('call-ms', values['call-ms']);
const leadS = numberOption('lead', values.lead);
if (values.temporal !== 'dev' && values.temporal !== 'server') throw new Error(`--temporal ${values.temporal}: dev or server`);
const temporalMode: 'dev' | 'server' = values.temporal;
const profileDir = values['profile-workers'];
for (const setting of values['dynamic-config']) {
  const [key, ...json] = setting.split('=');
  DEV_SERVER_DYNAMIC_CONFIG[key] = JSON.parse(json.join('='));
}
const DRAIN_TIMEOUT_MS = 15 * 60_000;
const WORKER_WARM_UP_RUNS = 30;
const serverWarmUpTasks = numberOption('warm-tasks', values['warm-tasks']);

/** The phases run by the bare worker (bench/lib/bare-worker.ts) and its workflow. */
const isBare = (phase: Phase): boolean => phase === 'bare' || phase === 'floor' || phase === 'bare-journal';

const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);

interface Stack {
  dir: string;
  client: Client;
  pool: pg.Pool;
  /** The operator role's pool: prices, budgets and the applied task versions. */
  operatorPool: pg.Pool;
  temporalAddress: string;
  /** The stack's client certificate: the Temporal server's frontend requires mutual TLS (`--temporal server`). */
  temporalTls?: TemporalTls;
  namespace: string;
  databaseUrl: string;
  bundlePath: string;
  fake: FakeOpenAI;
  /** The Temporal server's processes (one dev server, or the real server's services) and the postmaster. */
  pids: { temporal: number[]; postgres: number };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-fan-out-'));
  log(`private stack in ${dir}`);
  let stack: Stack | undefined;
  const results: PhaseFigures[] = [];
  try {
    const up = await startStack({ dataDir: dir, workers: 0, admin: false, log, temporal: temporalMode });
    const s = up.stack;
    const pool = createPool(s.postgres.databaseUrl);
    const operatorPool = createPool(s.postgres.operatorDatabaseUrl ?? '', 2);
    await applyPrices(operatorPool, loadPricesFile('prices/standard.json'), 'bench');
    // the guarded phase's users (g1..g100) have a budget; the other phases' (u1..u100) have none
    const monthStart = (await pool.query<{ m: Date }>(`select date_trunc('month', now()) as m`)).rows[0].m;
    const budgets = Array.from({ length: 100 }, (_, i) => ({
      userId: `g${i + 1}`,
      monthlyLimitUsd: '1000000',
      timeZone: 'UTC',
      effectiveFrom: monthStart,
    }));
    await applyBudgets(operatorPool, { budgets }, 'bench');
    if (phases.includes('floor')) await createFloorTable(s.postgres.ownerDatabaseUrl ?? '');
    const fake = await startFakeOpenAI();
    fake.setLatency(callMs);
    stack = {
      dir,
      client: await connectClient({ temporalAddress: s.temporal.address, namespace: s.namespace, temporalTls: s.temporal.tls }),
      temporalTls: s.temporal.tls,
      pool,
      operatorPool,
      temporalAddress: s.temporal.address,
      namespace: s.namespace,
      databaseUrl: s.postgres.databaseUrl,
      bundlePath: await writeWorkflowBundle(dir),
      fake,
      pids: {
        temporal: up.temporal.pids ? Object.values(up.temporal.pids) : [up.temporal.pid],
        postgres: Number(readFileSync(join(s.postgres.clusterDir, 'postmaster.pid'), 'utf8').split('\n')[0]),
      },
    };
    // A freshly started server was slow to fire its first schedules (9 of 60 started 66 s late in a trial run): an
    // unmeasured round first, so that every measured phase meets a warm server (--warm-tasks).
    log(`warm-up: ${serverWarmUpTasks} bare tasks, not measured`);
    await runPhase(stack, 'bare', serverWarmUpTasks, { warmWorkers: false });
    for (const phase of phases) {
      const figures = phase === 'bare-journal' ? await onRollbackJournal(stack, taskCount) : await runPhase(stack, phase, taskCount);
      results.push(figures);
      log(JSON.stringify(figures));
    }
  } finally {
    await stack?.fake.close();
    await stack?.pool.end();
    await stack?.operatorPool.end();
    await stack?.client.connection.close();
    await stopStack(dir);
    rmSync(dir, { recursive: true, force: true });
    rmSync(bareWorkerDir, { recursive: true, force: true });
  }
  process.stdout.write(report(results));
}

/**
 * The bare worker, compiled once per run as bin/worker.js is compiled, so that both kinds of phase run their workers
 * alike. Inside the checkout, where its packages resolve from node_modules; removed when the run ends.
 */
const bareWorkerDir = join(repoRoot(), '.cache', 'bench', `bare-worker-${process.pid}`);
let bareWorker: Promise<string> | undefined;
const bareWorkerScript = () => (bareWorker ??= compileScript('bench/lib/bare-worker.ts', bareWorkerDir));

async function runPhase(stack: Stack, phase: Phase, taskCount: number, opts = { warmWorkers: true }): Promise<PhaseFigures> {
  const id = `${phase}-${randomUUID().slice(0, 4)}`;
  const taskQueue = `fan-${id}`;
  log(`${phase}: starting ${workerCount} workers on ${taskQueue}`);
  const metricsPorts = await freePorts(workerCount);
  let started = 0;
  const workers = await startWorkerProcesses(workerCount, {
    target: { temporalAddress: stack.temporalAddress, namespace: stack.namespace, taskQueue, databaseUrl: stack.databaseUrl },
    bundlePath: stack.bundlePath,
    logDir: join(stack.dir, 'logs'),
    ...(isBare(phase) ? { script: await bareWorkerScript() } : {}),
    ...(profileDir ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${join(profileDir, phase)}`] } : {}),
    env: () => ({
      // each worker's SDK metrics, scraped while the phase drains: did any kind of task slot run out?
      CRONLEDGER_WORKER_METRICS_ADDRESS: `127.0.0.1:${metricsPorts[started++ % workerCount]}`,
      ...temporalTlsEnv(stack.temporalTls),
      ...(phase === 'floor' ? { BARE_FLOOR: '1' } : {}),
      ...(phase === 'openai' ? { MODEL_PROVIDER: 'openai', OPENAI_API_KEY: 'sk-fake-bench', OPENAI_BASE_URL: stack.fake.baseURL } : {}),
    }),
  });
  let scheduleIds: string[] = [];
  try {
    if (opts.warmWorkers) await warmWorkers(stack, phase, id, taskQueue);
    // only what starts from here is measured (the warm-up's runs share the task queue)
    const measuredFrom = new Date();
    const slot = new Date(Math.ceil((Date.now() + leadS * 1000) / 60_000) * 60_000);
    scheduleIds = await createSchedules(stack, phase, id, taskQueue, slot, taskCount);
    if (Date.now() > slot.getTime() - 2_000) throw new Error(`${phase}: the schedules took past the slot; run with a longer --lead`);
    log(`${phase}: ${taskCount} schedules fire at ${slot.toISOString()}`);
    await sleepUntil(slot.getTime());
    const cpuBefore = sampleCpu(stack, workers);
    const closed = `TaskQueue = '${taskQueue}' AND ExecutionStatus != 'Running' AND StartTime >= '${measuredFrom.toISOString()}'`;
    const deadline = Date.now() + DRAIN_TIMEOUT_MS;
    const slots = new SlotWatch(metricsPorts);
    const requestsBefore = await slots.requests();
    const serverMetrics = await prometheusEndpoints(stack.pids.temporal);
    const serverBefore = await serverCounters(serverMetrics);
    const machine: MachineSample[] = [machineSample()];
    // A loaded dev server now and then answers a visibility query with NamespaceNotFound (its namespace cache being
    // refreshed): such an answer is asked again at the next turn, within the drain's deadline.
    const countClosed = (n: number): Promise<number> =>
      stack.client.workflow.count(closed).then(
        (r) => r.count,
        (err: unknown) => (log(`${phase}: counting closed runs failed, asking again: ${(err as Error).message}`), n),
      );
    for (let n = 0; n < taskCount; n = await countClosed(n)) {
      if (Date.now() > deadline)
        throw new Error(`${phase}: only ${n} of ${taskCount} runs closed within ${DRAIN_TIMEOUT_MS / 60_000} minutes`);
      await slots.scrape();
      await sleep(500);
      machine.push(machineSample());
    }
    const cpuAfter = sampleCpu(stack, workers);
    const requestsAfter = await slots.requests();
    const serverAfter = await serverCounters(serverMetrics);
    const runs = await retried(() => executions(stack.client, taskQueue, measuredFrom));
    const failed = runs.filter((r) => r.status !== 'COMPLETED');
    if (failed.length > 0)
      throw new Error(`${phase}: ${failed.length} runs did not complete (${failed[0].workflowId}: ${failed[0].status})`);
    const drainMs = Math.max(...runs.map((r) => r.closeTime)) - slot.getTime();
    const perSecond = new Map<number, number>();
    for (const r of runs) perSecond.set(Math.floor(r.startTime / 1000), (perSecond.get(Math.floor(r.startTime / 1000)) ?? 0) + 1);
    const sinceSlot = runs.map((r) => r.closeTime - slot.getTime()).sort((a, b) => a - b);
    const startsSinceSlot = runs.map((r) => r.startTime - slot.getTime()).sort((a, b) => a - b);
    const { p99StartMs, stragglers } = findStragglers(runs, slot.getTime(), machine);
    return {
      phase,
      runs: runs.length,
      drainMs,
      medianMs: sinceSlot[Math.floor(sinceSlot.length / 2)],
      firstStartMs: startsSinceSlot[0],
      medianStartMs: startsSinceSlot[Math.floor(startsSinceSlot.length / 2)],
      lastStartMs: startsSinceSlot[startsSinceSlot.length - 1],
      peakStartsPerSecond: Math.max(...perSecond.values()),
      ...(isBare(phase) ? {} : { claims: await claimCounts(stack.pool, id) }),
      ...(phase === 'floor' ? { floorRows: await floorRows(stack.pool, runs) } : {}),
      cpu: cpuShares(cpuBefore, cpuAfter),
      cpuMsPerRun: cpuMsPerRun(cpuBefore, cpuAfter, runs.length),
      workerThreadMsPerRun: workerThreadMsPerRun(cpuBefore, cpuAfter, runs.length),
      fewestFreeSlots: slots.fewest,
      requestsPerRun: countsPerRun(requestsBefore, requestsAfter, runs.length),
      serverPerRun: countsPerRun(serverBefore, serverAfter, runs.length),
      p99StartMs,
      stragglers,
    };
  } finally {
    await stopWorkerProcesses(workers);
    await deleteSchedules(stack, scheduleIds);
  }
}

/** The floor phase's table, made by the owner as migrations are, written by the worker role as the ledger is. */
async function createFloorTable(ownerUrl: string): Promise<void> {
  const owner = new pg.Client({ connectionString: ownerUrl });
  await owner.connect();
  try {
    await owner.query(
      `create table ${FLOOR_TABLE} (workflow_id text, step text, at timestamptz not null default now(), primary key (workflow_id, step))`,
    );
    await owner.query(`grant select, insert on ${FLOOR_TABLE} to ${WORKER_ROLE}`);
  } finally {
    await owner.end();
  }
}

/** The floor phase's rows written by these runs (3 a run: one per bookkeeping step). */
async function floorRows(pool: pg.Pool, runs: Execution[]): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`select count(*)::text as n from ${FLOOR_TABLE} where workflow_id = any($1::text[])`, [
    runs.map((r) => r.workflowId),
  ]);
  return Number(rows[0].n);
}

/** A phase's schedules, deleted once it is measured: no phase meets the 1,000 schedules of each phase before it. */
async function deleteSchedules(stack: Stack, scheduleIds: string[]): Promise<void> {
  await inLanes(scheduleIds, (id) => retried(() => stack.client.schedule.getHandle(id).delete()));
}

/** fn on each item, 16 at a time (a thousand schedule calls at once would queue at the frontend). */
async function inLanes<T>(items: readonly T[], fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    for (let i = next++; i < items.length; i = next++) await fn(items[i]);
  };
  await Promise.all(Array.from({ length: 16 }, lane));
}

/**
 * The bare phase on a second dev server, started here as the stack's is (temporalArgs) but without SQLite's pragmas, so
 * on its default rollback journal: WAL against the rollback journal side by side in one run. Its own warm-up first.
 */
async function onRollbackJournal(stack: Stack, taskCount: number): Promise<PhaseFigures> {
  if (temporalMode !== 'dev') throw new Error('bare-journal compares SQLite journals: dev server only (--temporal dev)');
  const [port, uiPort] = await freePorts(2);
  const args = temporalArgs({ dbFile: join(stack.dir, 'journal.db'), port, uiPort } as StackFile['temporal'], [stack.namespace]);
  const withoutPragmas = args.filter((a, i) => a !== '--sqlite-pragma' && args[i - 1] !== '--sqlite-pragma');
  log(`bare-journal: temporal ${withoutPragmas.join(' ')}`);
  const server = spawn(findTemporalCli()!.path, withoutPragmas, { stdio: 'ignore' });
  try {
    const address = `127.0.0.1:${port}`;
    let client: Client | undefined;
    for (let tries = 0; !client; tries++) {
      client = await connectClient({ temporalAddress: address, namespace: stack.namespace })
        .then(async (c) => (await c.workflow.count(), c))
        .catch(async (e: unknown) => {
          if (tries > 60 || server.exitCode !== null) throw e;
          return sleep(500).then(() => undefined);
        });
    }
    const journal: Stack = { ...stack, client, temporalAddress: address, pids: { ...stack.pids, temporal: [server.pid!] } };
    await runPhase(journal, 'bare-journal', serverWarmUpTasks, { warmWorkers: false });
    const figures = await runPhase(journal, 'bare-journal', taskCount);
    await client.connection.close();
    return figures;
  } finally {
    server.kill('SIGTERM');
    await new Promise((r) => (server.exitCode !== null ? r(null) : server.once('exit', r)));
  }
}

/**
 * N tasks at one daily minute, the slot, created through the same schedule options as `tasks apply`; the bare phase
 * swaps the action's workflow for the bare one. Returns their schedule IDs (runPhase deletes them once measured).
 */
async function createSchedules(
  stack: Stack,
  phase: Phase,
  id: string,
  taskQueue: string,
  slot: Date,
  taskCount: number,
): Promise<string[]> {
  const { client } = stack;
  const { tasks } = parseTasksFile({
    tasks: Array.from({ length: taskCount }, (_, i) => ({
      id: `fan-${id}-${i + 1}`,
      cron: `${slot.getUTCMinutes()} ${slot.getUTCHours()} * * *`,
      userId: `${phase === 'guarded' ? 'g' : 'u'}${(i % 100) + 1}`,
      input: 'Summarise my inbox.',
      ...(phase === 'jitter' ? { jitter: '60s' } : {}),
    })),
    monthlyReport: false,
  });
  // the versions the schedules name, recorded first as `tasks apply` does
  const versions = tasks.map((task) => ({ taskId: task.id, fingerprint: taskFingerprint(task, taskQueue), definition: task }));
  await recordTaskVersions(stack.operatorPool, versions);
  const started = Date.now();
  await inLanes(tasks, async (task) => {
    const options = scheduleOptionsFor(task, taskQueue);
    await client.schedule.create(
      isBare(phase) ? { ...options, action: { ...options.action, workflowType: 'bareRun', args: [] } } : options,
    );
  });
  log(`${phase}: created ${tasks.length} schedules in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return tasks.map((task) => scheduleOptionsFor(task, taskQueue).scheduleId);
}

/**
 * Each phase's workers first run WORKER_WARM_UP_RUNS of their own kind, unmeasured, so that the measured burst meets
 * them as a deployment's workers are at a slot: their code compiled by V8, cronledger's database sessions open and
 * their plans made (the worker keeps an idle connection 5 minutes, longer than the phase's lead). Schedules of their
 * own (a daily minute 12 hours away), triggered now, and deleted once their runs closed.
 */
async function warmWorkers(stack: Stack, phase: Phase, id: string, taskQueue: string): Promise<void> {
  // `${id}w`: outside the measured tasks' prefix fan-<id>- (claimCounts)
  const scheduleIds = await createSchedules(stack, phase, `${id}w`, taskQueue, new Date(Date.now() + 12 * 3_600_000), WORKER_WARM_UP_RUNS);
  await Promise.all(scheduleIds.map((scheduleId) => stack.client.schedule.getHandle(scheduleId).trigger(ScheduleOverlapPolicy.ALLOW_ALL)));
  const closed = `TaskQueue = '${taskQueue}' AND ExecutionStatus != 'Running'`;
  const deadline = Date.now() + 5 * 60_000;
  while ((await retried(() => stack.client.workflow.count(closed))).count < WORKER_WARM_UP_RUNS) {
    if (Date.now() > deadline) throw new Error(`${phase}: the ${WORKER_WARM_UP_RUNS} warm-up runs did not close within 5 minutes`);
    await sleep(500);
  }
  await deleteSchedules(stack, scheduleIds);
  log(`${phase}: workers warmed by ${WORKER_WARM_UP_RUNS} runs`);
}

interface Execution {
  workflowId: string;
  status: string;
  startTime: number;
  closeTime: number;
}

/** fn, asked again up to 5 times 2 s apart when it fails (the visibility queries above, on a loaded server). */
async function retried<T>(fn: () => Promise<T>, tries = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      if (i >= tries) throw err;
      log(`asking again after: ${(err as Error).message}`);
      await sleep(2_000);
    }
  }
}

async function executions(client: Client, taskQueue: string, startedFrom: Date): Promise<Execution[]> {
  const out: Execution[] = [];
  for await (const w of client.workflow.list({ query: `TaskQueue = '${taskQueue}' AND StartTime >= '${startedFrom.toISOString()}'` })) {
    out.push({
      workflowId: w.workflowId,
      status: w.status.name,
      startTime: w.startTime.getTime(),
      closeTime: w.closeTime?.getTime() ?? NaN,
    });
  }
  return out;
}

/** Nothing ran twice: one claim per slot, each completed, no duplicate recorded, two ledger rows (chat, embedding) per run. */
async function claimCounts(pool: pg.Pool, id: string): Promise<NonNullable<PhaseFigures['claims']>> {
  const prefix = `fan-${id}-%`;
  const runs = await pool.query<{ rows: string; completed: string }>(
    `select count(*) as rows, count(*) filter (where status = 'completed') as completed from runs where task_id like $1`,
    [prefix],
  );
  const duplicates = await pool.query<{ n: string }>('select count(*) as n from run_duplicates where task_id like $1', [prefix]);
  const ledger = await pool.query<{ n: string }>('select count(*) as n from usage_ledger where task_id like $1', [prefix]);
  const reservations = await pool.query<{ n: string; open: string }>(
    `select count(*) as n, count(*) filter (where status = 'open') as open from budget_reservations where workflow_id like $1`,
    [`cron-${prefix}`],
  );
  return {
    rows: Number(runs.rows[0].rows),
    completed: Number(runs.rows[0].completed),
    duplicates: Number(duplicates.rows[0].n),
    ledgerRows: Number(ledger.rows[0].n),
    reservations: Number(reservations.rows[0].n),
    openReservations: Number(reservations.rows[0].open),
  };
}

// --- task slots, from each worker's SDK metrics (temporal_worker_task_slots_available by worker_type) ----------

class SlotWatch {
  readonly fewest: Record<string, number> = {};
  constructor(private readonly ports: number[]) {}

  async scrape(): Promise<void> {
    await Promise.all(
      this.ports.map(async (port) => {
        const text = await metricsOf(port, 2_000).catch(() => ''); // a scrape that fails under load is skipped
        for (const m of text.matchAll(/^temporal_worker_task_slots_available\{[^}]*worker_type="(\w+)"[^}]*\} (\d+)/gm)) {
          this.fewest[m[1]] = Math.min(this.fewest[m[1]] ?? Infinity, Number(m[2]));
        }
      }),
    );
  }

  /**
   * The requests the workers have sent to Temporal so far, by operation (the SDK's temporal_request and
   * temporal_long_request counters, summed over the workers): what a run asks of the server, beside its CPU there.
   */
  async requests(): Promise<Record<string, number>> {
    const counts: Record<string, number> = {};
    for (const port of this.ports) {
      const text = await metricsOf(port, 5_000);
      for (const m of text.matchAll(/^temporal_(?:long_)?request(?:_total)?\{[^}]*operation="(\w+)"[^}]*\} (\d+)/gm)) {
        counts[m[1]] = (counts[m[1]] ?? 0) + Number(m[2]);
      }
    }
    return counts;
  }
}

/** A worker's SDK metrics, as Prometheus scrapes them. */
const metricsOf = (port: number, timeoutMs: number): Promise<string> =>
  fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(timeoutMs) }).then((r) => r.text());

/** Each counter's growth between two samples, a run, for those that grew at least once every 100 runs. */
function countsPerRun(before: Record<string, number>, after: Record<string, number>, runs: number): Record<string, number> {
  const perRun = Object.entries(after).map(([op, n]) => [op, (n - (before[op] ?? 0)) / runs] as const);
  return Object.fromEntries(perRun.filter(([, n]) => n >= 0.01).sort(([a], [b]) => a.localeCompare(b)));
}

// --- CPU, from /proc: which process group was busy while a phase drained --------------------------------------

interface CpuSample {
  at: number;
  /** Clock ticks (1/100 s) per group. */
  ticks: Record<string, number>;
  /** The workers' clock ticks by kind of thread (WORKER_THREADS). */
  workerThreads: Record<string, number>;
  machine: { busy: number; total: number };
}

const TICKS_PER_SECOND = 100;

function sampleCpu(stack: Stack, workers: WorkerProcess[]): CpuSample {
  const parents = parentsOfAll();
  const tree = (root: number): number => treeTicks(root, parents);
  const { busy, total } = machineSample();
  return {
    at: Date.now(),
    ticks: {
      temporal: stack.pids.temporal.reduce((sum, pid) => sum + tree(pid), 0),
      postgres: tree(stack.pids.postgres),
      workers: workers.reduce((sum, w) => sum + (w.pid ? tree(w.pid) : 0), 0),
      'bench (fake OpenAI)': ownTicks(process.pid),
    },
    workerThreads: workerThreadTicks(workers),
    machine: { busy, total },
  };
}

/**
 * The workers' ticks by kind of thread: node's main thread (activities, cronledger's PostgreSQL client, payloads
 * to and from the SDK), node's other threads (the workflow thread and V8's helpers: garbage collection, compiling)
 * and the SDK core's Rust threads (gRPC, protobuf). Node 20 gives a worker thread no name of its own, so the workflow
 * thread is not told apart from V8's helpers.
 */
const WORKER_THREADS = ['main thread', 'workflow thread and V8 helpers', 'SDK core'] as const;

function workerThreadTicks(workers: WorkerProcess[]): Record<string, number> {
  const ticks: Record<string, number> = Object.fromEntries(WORKER_THREADS.map((kind) => [kind, 0]));
  for (const { pid } of workers) {
    if (!pid) continue;
    for (const tid of threadsOf(pid)) {
      const stat = statOf(`/proc/${pid}/task/${tid}/stat`);
      if (!stat) continue;
      // the SDK core's threads: tokio-runtime-w, workflow-proces, temporal-real-s
      const kind = Number(tid) === pid ? WORKER_THREADS[0] : stat.name === 'node' ? WORKER_THREADS[1] : WORKER_THREADS[2];
      ticks[kind] += stat.fields[11] + stat.fields[12];
    }
  }
  return ticks;
}

function threadsOf(pid: number): string[] {
  try {
    return readdirSync(`/proc/${pid}/task`);
  } catch {
    return []; // exited
  }
}

/** A process's or thread's name and the fields of its stat after the name (utime is fields[11], stime fields[12]). */
function statOf(path: string): { name: string; fields: number[] } | undefined {
  try {
    const stat = readFileSync(path, 'utf8');
    const fields = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    return { name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), fields };
  } catch {
    return undefined; // exited meanwhile
  }
}

/** CPU time a run (ms) of the workers, the Temporal server and PostgreSQL between two samples. */
function cpuMsPerRun(a: CpuSample, b: CpuSample, runs: number): Record<string, number> {
  const ms = (group: string) => ((b.ticks[group] - a.ticks[group]) / TICKS_PER_SECOND / runs) * 1000;
  return { workers: ms('workers'), Temporal: ms('temporal'), PostgreSQL: ms('postgres') };
}

/** The workers' CPU time a run (ms) by kind of thread between two samples. */
function workerThreadMsPerRun(a: CpuSample, b: CpuSample, runs: number): Record<string, number> {
  const ms = (kind: string) => ((b.workerThreads[kind] - a.workerThreads[kind]) / TICKS_PER_SECOND / runs) * 1000;
  return Object.fromEntries(WORKER_THREADS.map((kind) => [kind, ms(kind)]));
}

function cpuShares(a: CpuSample, b: CpuSample): Record<string, number> {
  const seconds = (b.at - a.at) / 1000;
  const shares = Object.fromEntries(Object.keys(a.ticks).map((k) => [k, (b.ticks[k] - a.ticks[k]) / TICKS_PER_SECOND / seconds]));
  return { ...shares, 'machine (all cores, every user)': (b.machine.busy - a.machine.busy) / (b.machine.total - a.machine.total) };
}

/** utime + stime of a process, and of its children it has waited for. */
function ownTicks(pid: number): number {
  const f = statOf(`/proc/${pid}/stat`)?.fields;
  return f ? f[11] + f[12] + f[13] + f[14] : 0; // 0: gone since the scan
}

function parentsOfAll(): Map<number, number> {
  const parents = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    const parent = /^\d+$/.test(name) ? statOf(`/proc/${name}/stat`)?.fields[1] : undefined; // undefined: exited while listing
    if (parent !== undefined) parents.set(Number(name), parent);
  }
  return parents;
}

function treeTicks(root: number, parents: Map<number, number>): number {
  let sum = ownTicks(root);
  for (const [pid, parent] of parents) if (parent === root) sum += treeTicks(pid, parents);
  return sum;
}

// --- output ---------------------------------------------------------------------------------------------------

function report(results: PhaseFigures[]): string {
  const lines = [
    `$ ${command}`,
    `${taskCount} tasks firing in one minute, ${workerCount} worker processes, Temporal ${temporalMode === 'dev' ? 'dev server' : 'server on PostgreSQL'}, calls ${callMs} ms in the openai phase`,
    '',
  ];
  const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
  for (const r of results) {
    lines.push(
      `${r.phase.padEnd(7)} last run closed ${s(r.drainMs).padStart(7)} after the slot (median ${s(r.medianMs)}), starts ${s(r.firstStartMs)} to ${s(r.lastStartMs)} (median ${s(r.medianStartMs)}), ` +
        `${((r.runs / r.drainMs) * 1000).toFixed(1)} runs/s, peak ${r.peakStartsPerSecond} starts/s`,
    );
    if (r.floorRows !== undefined) lines.push(`        rows written ${r.floorRows} (3 per run)`);
    if (r.claims) {
      const c = r.claims;
      lines.push(
        `        claims ${c.rows} (completed ${c.completed}), duplicates ${c.duplicates}, ledger rows ${c.ledgerRows} (2 per run), ` +
          `reservations ${c.reservations} (open ${c.openReservations})`,
      );
    }
    const slotText = Object.entries(r.fewestFreeSlots).map(([k, v]) => `${k} ${v}`);
    lines.push(`        fewest free task slots on a worker: ${slotText.join(', ') || 'not scraped'}`);
    lines.push(
      `        cpu while draining: ${Object.entries(r.cpu)
        .map(([k, v]) => `${k} ${(v * 100).toFixed(0)}%`)
        .join(', ')}`,
    );
    lines.push(`        cpu a run: ${cpuText(r)}`);
    const threadText = Object.entries(r.workerThreadMsPerRun).map(([kind, ms]) => `${kind} ${ms.toFixed(1)}`);
    lines.push(`        the workers' cpu a run by thread: ${threadText.join(', ')} ms`);
    const requestText = Object.entries(r.requestsPerRun).map(([op, n]) => `${op} ${n.toFixed(2)}`);
    lines.push(`        requests to Temporal a run: ${requestText.join(', ')}`);
    const serverText = Object.entries(r.serverPerRun).map(([what, n]) => `${what} ${n.toFixed(2)}`);
    lines.push(`        inside Temporal a run (its metrics): ${serverText.join(', ') || 'not scraped'}`);
    for (const st of r.stragglers)
      lines.push(
        `        STRAGGLER ${st.workflowId} started ${s(st.startMs)} after the slot (99th percentile ${s(r.p99StartMs)}), ` +
          `machine ${(st.machineBusy * 100).toFixed(0)}% busy meanwhile`,
      );
  }
  const find = (p: Phase) => results.find((r) => r.phase === p);
  const bare = find('bare');
  const mock = find('mock');
  lines.push(...pairLines(results), ...pairLines(results, 'floor'));
  if (mock) lines.push(`mock drain: ${s(mock.drainMs)} (goal <= 60 s)`);
  const openai = find('openai');
  if (openai) lines.push(`openai (${callMs} ms calls): slowest run closed ${s(openai.drainMs)} after its slot (goal <= 90 s)`);
  const jitter = find('jitter');
  if (jitter && mock) lines.push(`jitter 60s: peak starts/s ${jitter.peakStartsPerSecond} vs ${mock.peakStartsPerSecond} without`);
  const guarded = find('guarded');
  if (guarded && mock)
    lines.push(`guarded / mock throughput (budget guard on / off, whole runs): ${(mock.drainMs / guarded.drainMs).toFixed(2)}x`);
  const journal = find('bare-journal');
  if (bare && journal) lines.push(`bare, WAL / rollback journal throughput: ${(journal.drainMs / bare.drainMs).toFixed(2)}x`);
  return `${lines.join('\n')}\n`;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const sleepUntil = (t: number): Promise<void> => sleep(Math.max(0, t - Date.now()));

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
