/**
 * A worker process for bench/bare-run-workflow.ts, started by bench/fan-out.ts like cronledger's own worker
 * (src/worker.ts): same environment variables, same worker tuning, activities that do nothing. BARE_CALL_MS makes
 * the two call activities wait that long, as a model call would. With BARE_FLOOR=1 (fan-out's `floor` phase) the three
 * bookkeeping steps each write one row to the stack's PostgreSQL instead (FLOOR_TABLE, through the worker's own pool
 * settings): the least a run can do that claims its slot and books each of its two calls in PostgreSQL the moment
 * its usage comes back.
 */
import { Context } from '@temporalio/activity';
import { NativeConnection, Runtime, Worker } from '@temporalio/worker';
import type pg from 'pg';
import { fileURLToPath } from 'node:url';
import { temporalConnectionOptions } from '../../src/client';
import { createWorkerPool } from '../../src/db/pool';
import { WORKER_TUNING } from '../../src/worker-setup';
import { FLOOR_TABLE } from './p1-pairs';

export const createBareActivities = (callMs: number, floor?: pg.Pool) => {
  const write = async (): Promise<void> => {
    if (!floor) return;
    const { workflowExecution, activityType, activityId } = Context.current().info;
    await floor.query({
      name: 'floor-row',
      text: `insert into ${FLOOR_TABLE} (workflow_id, step) values ($1, $2)`,
      values: [workflowExecution?.workflowId ?? activityId, activityType],
    });
  };
  return {
    claimAndReserve: write,
    async call(): Promise<void> {
      if (callMs > 0) await new Promise((r) => setTimeout(r, callMs));
    },
    book: write,
    complete: write,
  };
};

async function main(): Promise<void> {
  const metricsAddress = process.env.CRONLEDGER_WORKER_METRICS_ADDRESS;
  if (metricsAddress) Runtime.install({ telemetryOptions: { metrics: { prometheus: { bindAddress: metricsAddress } } } });
  // the address, namespace and TLS (TEMPORAL_TLS_*: the Temporal server's frontend requires mutual TLS) as cronledger's worker reads them
  const connection = await NativeConnection.connect(
    temporalConnectionOptions({
      temporalAddress: process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233',
      namespace: process.env.TEMPORAL_NAMESPACE ?? 'default',
    }),
  );
  const floor = process.env.BARE_FLOOR === '1' ? createWorkerPool(process.env.DATABASE_URL ?? '') : undefined;
  const worker = await Worker.create({
    ...WORKER_TUNING,
    connection,
    namespace: process.env.TEMPORAL_NAMESPACE ?? 'default',
    taskQueue: process.env.CRONLEDGER_TASK_QUEUE ?? 'bare',
    identity: process.env.CRONLEDGER_WORKER_ID ?? `bare-${process.pid}`,
    workflowsPath: fileURLToPath(new URL('./bare-run-workflow.ts', import.meta.url)),
    activities: createBareActivities(Number(process.env.BARE_CALL_MS ?? 0), floor),
  });
  try {
    await worker.run();
  } finally {
    await connection.close();
    await floor?.end();
  }
}

// A process of its own, never imported for its values (the workflow imports its activities' type only): bench/fan-out.ts
// compiles it as bin/worker.js is compiled (compileScript) and starts it.
main().catch((err) => {
  process.stderr.write(`bare worker failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
