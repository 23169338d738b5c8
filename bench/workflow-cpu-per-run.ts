/**
 * A worker's CPU per run for the workflow side alone: scheduledRun against the bare workflow (bench/bare-run-workflow.ts,
 * the same Temporal steps with activities that do nothing), each replayed from a completed run's history, in rounds
 * that alternate between the two, so drift on the shared machine hits both alike.
 *
 * Replay runs each workflow's code as a worker runs it live (the same bundle, the same SDK, the promise hook that records
 * a stack trace per promise, the same activations) without a server and without activities: what P1's workers spend
 * on the workflow thread and the SDK's plumbing, apart from what the activities do (PostgreSQL, the model client).
 * - scheduledRun: test/fixtures/histories/scheduled-run-unmarked-completed.json, a completed run on the current shape.
 * - bare: bareRun's history, recorded at the start on a private in-memory dev server.
 *
 *   node --import tsx bench/workflow-cpu-per-run.ts [--runs 300] [--rounds 5]
 *
 * CPU is this process's (every thread: the workflow thread, the SDK's core), read with process.cpuUsage() around each
 * round; the first round of each is a warm-up, unmeasured.
 */
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
import { createBareActivities } from './bare-worker';

const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
};
const RUNS = Number(arg('runs', '300'));
const ROUNDS = Number(arg('rounds', '5'));
const command = `node --import tsx bench/workflow-cpu-per-run.ts ${process.argv.slice(2).join(' ')}`.trim();
const log = (line: string): void => void process.stderr.write(`${new Date().toISOString()} ${line}\n`);
const SCHEDULED_RUN_HISTORY = 'test/fixtures/histories/scheduled-run-unmarked-completed.json';
const bareWorkflowsPath = fileURLToPath(new URL('./bare-run-workflow.ts', import.meta.url));
const silent = { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} };
const quiet = { logger: silent };

interface Variant {
  name: string;
  bundle: WorkflowBundle;
  history: unknown;
  cpuMsPerRun: number[];
}

/** bareRun once on a private in-memory dev server, and its history. */
async function recordBareHistory(bundle: WorkflowBundle): Promise<unknown> {
  const cli = findTemporalCli();
  if (!cli) throw new Error('no temporal CLI: run `npx cronledger dev up` once (it builds and caches it), or set CRONLEDGER_TEMPORAL_CLI');
  const [port, uiPort] = await freePorts(2);
  const server = spawn(
    cli.path,
    [
      'server',
      'start-dev',
      '--headless',
      '--ip',
      '127.0.0.1',
      '--port',
      String(port),
      '--ui-port',
      String(uiPort),
      '--search-attribute',
      `${SEARCH_ATTRIBUTES.tier}=Keyword`,
    ],
    {
      stdio: 'ignore',
    },
  );
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
      const worker = await Worker.create({ connection: native, taskQueue, workflowBundle: bundle, activities: createBareActivities(0) });
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
  const histories = Array.from({ length: RUNS }, () => ({ workflowId: `replay-${randomUUID()}`, history: v.history as never }));
  const before = process.cpuUsage();
  for await (const result of Worker.runReplayHistories({ workflowBundle: v.bundle, ...quiet }, histories)) {
    if (result.error) throw new Error(`${v.name}: replay failed: ${result.error.message}`);
  }
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000 / RUNS;
}

async function main(): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  log('bundling scheduledRun and the bare workflow');
  const [scheduled, bare] = await Promise.all([
    bundleWorkflowCode({ workflowsPath, ...quiet }),
    bundleWorkflowCode({ workflowsPath: bareWorkflowsPath, ...quiet }),
  ]);
  log('recording the bare workflow on a private dev server');
  const variants: Variant[] = [
    { name: 'scheduledRun', bundle: scheduled, history: JSON.parse(readFileSync(SCHEDULED_RUN_HISTORY, 'utf8')), cpuMsPerRun: [] },
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
  const [s, b] = variants;
  const lines = [
    `$ ${command}`,
    `${RUNS} replays a round, ${ROUNDS} rounds alternating; this process's CPU (all threads) per replayed run`,
    ...variants.map(
      (v) =>
        `${v.name.padEnd(12)} ${mean(v.cpuMsPerRun).toFixed(2)} ms a run (rounds ${v.cpuMsPerRun.map((x) => x.toFixed(2)).join(', ')})`,
    ),
    `scheduledRun / bareRun: ${(mean(s.cpuMsPerRun) / mean(b.cpuMsPerRun)).toFixed(2)}`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
