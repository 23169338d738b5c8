import { Worker, type NativeConnection, type WorkerOptions } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import { createActivities, type ActivityDeps } from './activities';

export const workflowsPath = fileURLToPath(new URL('./workflows/index.ts', import.meta.url));

export interface CronledgerWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  deps: ActivityDeps;
  /** Pre-bundled workflow code, so tests that start several workers bundle once. */
  workflowBundle?: WorkerOptions['workflowBundle'];
}

/**
 * How much one worker process takes on at once. The SDK's defaults, except where the fan-out benchmark (1,000 runs
 * firing in one minute on 3 workers, bench/fan-out.ts, BENCHMARKS.md) measured a difference; each value says why.
 */
export const WORKER_TUNING = {} satisfies Partial<WorkerOptions>;

/** A worker polling the task queue with every cronledger workflow and activity. N of them share the work. */
export async function createCronledgerWorker(opts: CronledgerWorkerOptions): Promise<Worker> {
  return Worker.create({
    ...WORKER_TUNING,
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    identity: opts.deps.workerId,
    activities: createActivities(opts.deps),
    // Model-call activities heartbeat every 5 s against a 30 s heartbeat timeout. The SDK would otherwise send at most
    // one heartbeat per 0.8 × timeout (24 s), leaving a loaded worker 6 s of slack before Temporal retries a live call.
    maxHeartbeatThrottleInterval: '5 seconds',
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath }),
  });
}
