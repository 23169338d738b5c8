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

/** A worker polling the task queue with every cronledger workflow and activity. N of them share the work. */
export async function createCronledgerWorker(opts: CronledgerWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    identity: opts.deps.workerId,
    activities: createActivities(opts.deps),
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath }),
  });
}
