import { NativeConnection, Runtime } from '@temporalio/worker';
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { connectClient, temporalConnectionOptions } from './client';
import { resolveConnections } from './config';
import { createWorkerPool } from './db/pool';
import { UserError } from './errors';
import { selectProvider } from './models/select-provider';
import { budgetWebhookFromEnv, reportWebhookFromEnv } from './reports/delivery';
import { taskSchedules } from './schedules/scheduled-tasks';
import { createCronledgerWorker } from './worker-setup';

/** The long-running worker process. Run as many replicas as you like: the task queue gives each task to exactly one. */
async function main(): Promise<void> {
  const conn = resolveConnections();
  // A webhook URL without its signing secret, or over plain http, stops the worker here rather than at the first post.
  reportWebhookFromEnv();
  budgetWebhookFromEnv();
  // The SDK's own runtime metrics (task slots, poll latency, schedule-to-start, ...) on a Prometheus endpoint of this
  // replica: CRONLEDGER_WORKER_METRICS_ADDRESS=host:port, scraped at http://host:port/metrics. `dev up` gives each its port.
  const metricsAddress = process.env.CRONLEDGER_WORKER_METRICS_ADDRESS;
  if (metricsAddress) Runtime.install({ telemetryOptions: { metrics: { prometheus: { bindAddress: metricsAddress } } } });
  const workerId = process.env.CRONLEDGER_WORKER_ID ?? `${hostname()}-${process.pid}`;
  const pool = createWorkerPool(conn.databaseUrl);
  const connection = await NativeConnection.connect(temporalConnectionOptions(conn));
  // the budget sweep's forecast reads the task schedules' slot times through a client of its own
  const client = await connectClient(conn);
  const worker = await createCronledgerWorker({
    connection,
    namespace: conn.namespace,
    taskQueue: conn.taskQueue,
    deps: { pool, provider: selectProvider(), workerId, taskSchedules: () => taskSchedules(client, pool) },
    workflowBundle: prebuiltBundle(),
  });
  try {
    await worker.run(); // returns after SIGINT/SIGTERM, once in-flight tasks are done
  } finally {
    await client.connection.close();
    await connection.close();
    await pool.end();
  }
}

/**
 * CRONLEDGER_WORKFLOW_BUNDLE names a file written from bundleWorkflowCode's output: a worker that restarts often (the
 * fault-injection tests kill and restart them every few seconds) then starts in a second instead of running webpack.
 * The file must come from this same checkout, or the worker would run workflow code other than its own.
 */
function prebuiltBundle(): { codePath: string } | undefined {
  const codePath = process.env.CRONLEDGER_WORKFLOW_BUNDLE;
  if (!codePath) return undefined;
  if (!existsSync(codePath)) {
    throw new UserError(`CRONLEDGER_WORKFLOW_BUNDLE=${codePath} does not exist; unset it to bundle the workflow code at start`);
  }
  return { codePath };
}

main().catch((err) => {
  process.stderr.write(`worker failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
