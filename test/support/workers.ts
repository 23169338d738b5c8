import { bundleWorkflowCode, NativeConnection, type Worker, type WorkflowBundle } from '@temporalio/worker';
import { readFile } from 'node:fs/promises';
import type pg from 'pg';
import { inject } from 'vitest';
import { temporalConnectionOptions } from '../../src/client';
import type { TemporalTls } from '../../src/config';
import { MockProvider } from '../../src/models/mock-provider';
import type { ActivityDeps } from '../../src/activities';
import { createCronledgerWorker, workflowsPath } from '../../src/worker-setup';
import { writeWorkflowBundle } from './worker-processes';

let bundle: Promise<WorkflowBundle> | undefined;

/**
 * The workflow bundle (webpack is the slow part of starting a worker): the one the global setup built for the whole
 * run, else (the unit tests have no global setup) built once per test file.
 */
export const workflowBundle = (): Promise<WorkflowBundle> => {
  const built = inject('stack')?.workflowBundlePath;
  return (bundle ??= built
    ? readFile(built, 'utf8').then((code) => ({ code }))
    : bundleWorkflowCode({ workflowsPath, logger: quietLogger }));
};

/** The workflow bundle as a file, for worker processes: the run's, else one written to dir. */
export const workflowBundlePath = (dir: string): Promise<string> => {
  const built = inject('stack')?.workflowBundlePath;
  return built ? Promise.resolve(built) : writeWorkflowBundle(dir);
};

const quietLogger = { trace() {}, debug() {}, info() {}, warn() {}, error: (m: string) => process.stderr.write(`${m}\n`) } as never;

export interface WorkerFleet {
  workers: Worker[];
  /** Runs fn while every worker polls, then shuts them all down. */
  runWhile<T>(fn: () => Promise<T>): Promise<T>;
}

/**
 * N real workers on one task queue, each with its own identity (worker-1..N) recorded on claims and ledger rows.
 * `deps` overrides the activities' dependencies (the provider, the reports folder, the webhook); the mock model by default.
 */
export async function startWorkers(
  /** temporalTls: the client certificate a server in server mode requires (a test context's, or a private server's). */
  ctx: { temporalAddress: string; namespace: string; taskQueue: string; pool: pg.Pool; temporalTls?: TemporalTls },
  count = 1,
  deps: Partial<Omit<ActivityDeps, 'pool' | 'workerId'>> = {},
): Promise<WorkerFleet> {
  const workflowBundleCode = await workflowBundle();
  // One connection per worker, like separate replicas: the SDK refuses two workers on one connection and task queue.
  const options = temporalConnectionOptions(ctx);
  const connections = await Promise.all(Array.from({ length: count }, () => NativeConnection.connect(options)));
  const workers = await Promise.all(
    connections.map((connection, i) =>
      createCronledgerWorker({
        connection,
        namespace: ctx.namespace,
        taskQueue: ctx.taskQueue,
        workflowBundle: workflowBundleCode,
        deps: { pool: ctx.pool, provider: new MockProvider(), ...deps, workerId: `worker-${i + 1}` },
      }),
    ),
  );
  return {
    workers,
    async runWhile<T>(fn: () => Promise<T>): Promise<T> {
      let result!: T;
      const runAll = workers.map((w, i) => (i === 0 ? w.runUntil(fn().then((r) => void (result = r))) : w.run()));
      try {
        await runAll[0];
      } finally {
        for (const w of workers.slice(1)) w.shutdown();
        await Promise.allSettled(runAll);
        await Promise.all(connections.map((c) => c.close()));
      }
      return result;
    },
  };
}
