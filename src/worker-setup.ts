import { Worker, type NativeConnection, type WorkerOptions } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import { createActivities, type ActivityDeps } from './activities';
import { createReconcileActivities, type ReconcileActivityDeps } from './activities/reconcile-activities';
import { payloadDataConverter, payloadKeysFromEnv, type PayloadKeys } from './payload-codec';

export const workflowsPath = fileURLToPath(new URL('./workflows/index.ts', import.meta.url));

export interface CronledgerWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  deps: ActivityDeps;
  /** Pre-bundled workflow code, so tests that start several workers bundle once. */
  workflowBundle?: WorkerOptions['workflowBundle'];
  /** The payload keys; CRONLEDGER_PAYLOAD_KEYS(_FILE) when not given (none: payloads travel unencrypted). */
  payloadKeys?: PayloadKeys;
}

/**
 * How much one worker process takes on at once, from the fan-out benchmark (bench/fan-out.ts, BENCHMARKS.md): 1,000
 * runs firing in one minute on 3 workers, on the dev server and on the Temporal server, each worker's SDK metrics
 * scraped every half second. No kind of slot ran out: the fewest free on any worker were 7 of 40 workflow task slots,
 * 73 of 100 activity slots (500 ms model calls) and 80 of 100 local activity slots, while the Temporal server's CPU
 * set the pace. So these stay at the SDK's defaults, written out so that an SDK upgrade can't change them unseen; raise
 * maxConcurrentActivityTaskExecutions first for slow real models (a call holds its slot for the provider's latency).
 * The sticky cache (maxCachedWorkflows) keeps the SDK's default, sized from the heap (about 2,300 runs with Node's
 * default heap here, far above the ~333 open runs per worker of such a burst); pollers keep theirs too (10 each).
 */
export const WORKER_TUNING = {
  maxConcurrentWorkflowTaskExecutions: 40,
  maxConcurrentActivityTaskExecutions: 100,
  maxConcurrentLocalActivityExecutions: 100,
} satisfies Partial<WorkerOptions>;

/** A worker polling the task queue with every cronledger workflow and activity. N of them share the work. */
export async function createCronledgerWorker(opts: CronledgerWorkerOptions): Promise<Worker> {
  return Worker.create({
    ...WORKER_TUNING,
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    identity: opts.deps.workerId,
    activities: createActivities(opts.deps),
    // Runs outside the workflow sandbox: workflow code sees decrypted values and never a key.
    dataConverter: payloadDataConverter(opts.payloadKeys ?? payloadKeysFromEnv()),
    // Model-call activities heartbeat every 5 s against a 30 s heartbeat timeout. The SDK would otherwise send at most
    // one heartbeat per 0.8 × timeout (24 s), leaving a loaded worker 6 s of slack before Temporal retries a live call.
    maxHeartbeatThrottleInterval: '5 seconds',
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath }),
  });
}

/**
 * The reconcile worker: reconcileDaily's activity alone, on its own task queue, no workflows. It holds the operator
 * pool and the admin keys that no other worker has; the payload codec is the main worker's (same keys, same env).
 */
export async function createReconcileWorker(opts: {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  identity: string;
  deps: ReconcileActivityDeps;
  payloadKeys?: PayloadKeys;
}): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    identity: opts.identity,
    activities: createReconcileActivities(opts.deps),
    dataConverter: payloadDataConverter(opts.payloadKeys ?? payloadKeysFromEnv()),
    // an import books once in one transaction, so a few at a time is plenty
    maxConcurrentActivityTaskExecutions: 2,
  });
}
