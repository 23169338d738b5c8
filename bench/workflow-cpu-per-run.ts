/**
 * A worker's CPU per run on the workflow side alone: scheduledRun against P1's bare workflow (bench/lib/bare-run-workflow.ts,
 * the same Temporal steps with activities that do nothing), each replayed from a completed run's history, in rounds
 * that alternate between them so that drift on the shared machine hits each alike.
 *
 * Replay runs the workflow code as a worker runs it live (the same bundle, the same SDK, the promise hook that records a
 * stack trace per promise, the same activations), without a server and without activities, on this process's main
 * thread: what P1's workers spend on the workflow and the SDK's plumbing of it, apart from what the activities do.
 * - scheduledRun: test/fixtures/histories/scheduled-run-schedule-started.json (a committed completed run), as a worker
 *   bundles it, and bundled with swc's target raised from the SDK's es2017 to es2022 (object spread left native);
 * - bareRun: its history, recorded at the start on a private in-memory dev server.
 * Both histories are converted from JSON once, before the rounds (a live worker receives them decoded).
 *
 *   node --import tsx bench/workflow-cpu-per-run.ts [--runs 300] [--rounds 4]
 *
 * CPU is this process's (all threads), read with process.cpuUsage() around each round; round 0 is a warm-up.
 */
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Runtime, Worker, type WorkflowBundle } from '@temporalio/worker';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { SEARCH_ATTRIBUTES } from '../src/constants';
import { freePorts } from '../src/dev/ports';
import { findTemporalCli } from '../src/dev/temporal-cli';
import { workflowsPath } from '../src/worker-setup';
import { benchArgs, numberOption } from './lib/args';

const { values, command } = benchArgs('bench/workflow-cpu-per-run.ts', {
  runs: { type: 'string', default: '300' },
  rounds: { type: 'string', default: '4' },
});
const RUNS = numberOption('runs', values.runs);
const ROUNDS = numberOption('rounds', values.rounds);
const SCHEDULED_RUN_HISTORY = 'test/fixtures/histories/scheduled-run-schedule-started.json';
const bareWorkflowsPath = fileURLToPath(new URL('./lib/bare-run-workflow.ts', import.meta.url));
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);
const quiet = { logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} } };
// bench/lib/bare-worker.ts's activities (that file starts a worker process when imported)
const bareActivities = { async claimAndReserve() {}, async call() {}, async book() {}, async complete() {} };

type History = ReturnType<typeof historyFromJSON>;
interface Variant {
  name: string;
  bundle: WorkflowBundle;
  history: History;
  cpuMsPerRun: number[];
}

/** bareRun once on a private in-memory dev server, and its history. */
async function recordBareHistory(bundle: WorkflowBundle): Promise<History> {
  const cli = findTemporalCli();
  if (!cli) throw new Error('no temporal CLI: run `npx cronledger dev up` once (it builds and caches it), or set CRONLEDGER_TEMPORAL_CLI');
  const [port, uiPort] = await freePorts(2);
  const args = ['server', 'start-dev', '--headless', '--ip', '127.0.0.1', '--port', String(port), '--ui-port', String(uiPort)];
  const server = spawn(cli.path, [...args, '--search-attribute', `${SEARCH_ATTRIBUTES.tier}=Keyword`], { stdio: 'ignore' });
  try {
    const address = `127.0.0.1:${port}`;
    let connection: Connection | undefined;
    for (let i = 0; !connection; i++) {
      connection = await Connection.connect({ address, connectTimeout: 1_000 }).catch((err: unknown) => {
        if (i > 60) throw err;
        return new Promise<undefined>((r) => setTimeout(() => r(undefined), 500));
      });
    }
    const client = new Client({ connection });
    const taskQueue = `bare-${randomUUID().slice(0, 8)}`;
    const native = await NativeConnection.connect({ address });
    try {
      const worker = await Worker.create({ connection: native, taskQueue, workflowBundle: bundle, activities: bareActivities });
      const handle = await client.workflow.start('bareRun', { taskQueue, workflowId: `bare-${randomUUID()}` });
      await worker.runUntil(handle.result());
      return await handle.fetchHistory();
    } finally {
      await native.close();
      await connection.close();
    }
  } finally {
    server.kill('SIGTERM');
  }
}

/** Replays the variant's history RUNS times; this process's CPU per replayed run, in ms. */
async function round(v: Variant): Promise<number> {
  const histories = Array.from({ length: RUNS }, () => ({ workflowId: `replay-${randomUUID()}`, history: v.history }));
  const before = process.cpuUsage();
  for await (const result of Worker.runReplayHistories({ workflowBundle: v.bundle, ...quiet }, histories)) {
    if (result.error) throw new Error(`${v.name}: replay failed: ${result.error.message}`);
  }
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000 / RUNS;
}

/** The SDK's webpack configuration with swc's target raised, so that object spread and rest stay native. */
function es2022(config: { module?: { rules?: unknown[] } }): typeof config {
  for (const rule of config.module?.rules ?? []) {
    const jsc = (rule as { use?: { options?: { jsc?: { target?: string } } } }).use?.options?.jsc;
    if (jsc) jsc.target = 'es2022';
  }
  return config;
}

async function main(): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  log('bundling scheduledRun (twice) and the bare workflow');
  const scheduled = await bundleWorkflowCode({ workflowsPath, ...quiet });
  const modern = await bundleWorkflowCode({ workflowsPath, ...quiet, webpackConfigHook: es2022 as never });
  const bare = await bundleWorkflowCode({ workflowsPath: bareWorkflowsPath, ...quiet });
  log('recording the bare workflow on a private dev server');
  const completedRun = historyFromJSON(JSON.parse(readFileSync(SCHEDULED_RUN_HISTORY, 'utf8')));
  const variants: Variant[] = [
    { name: 'scheduledRun', bundle: scheduled, history: completedRun, cpuMsPerRun: [] },
    { name: 'es2022', bundle: modern, history: completedRun, cpuMsPerRun: [] },
    { name: 'bareRun', bundle: bare, history: await recordBareHistory(bare), cpuMsPerRun: [] },
  ];
  for (let r = 0; r <= ROUNDS; r++) {
    for (const v of r % 2 === 0 ? variants : [...variants].reverse()) {
      const ms = await round(v);
      if (r > 0) v.cpuMsPerRun.push(ms);
      log(`round ${r}${r === 0 ? ' (warm-up)' : ''}: ${v.name} ${ms.toFixed(2)} ms a run`);
    }
  }
  const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  const [s, , b] = variants;
  const lines = [
    `$ ${command}`,
    `${RUNS} replays a round, ${ROUNDS} rounds alternating; this process's CPU (all threads) per replayed run`,
    ...variants.map(
      (v) =>
        `${v.name.padEnd(12)} ${mean(v.cpuMsPerRun).toFixed(2)} ms a run (rounds ${v.cpuMsPerRun.map((x) => x.toFixed(2)).join(', ')})`,
    ),
    `scheduledRun - bareRun: ${(mean(s.cpuMsPerRun) - mean(b.cpuMsPerRun)).toFixed(2)} ms a run`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
