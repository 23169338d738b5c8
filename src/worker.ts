import { NativeConnection } from '@temporalio/worker';
import { loadClientConnectConfig } from '@temporalio/envconfig';
import { hostname } from 'node:os';
import { definedEnv, resolveConnections } from './config';
import { createPool } from './db/pool';
import { selectProvider } from './models/select-provider';
import { createCronledgerWorker } from './worker-setup';

/** The long-running worker process. Run as many replicas as you like: the task queue gives each task to exactly one. */
async function main(): Promise<void> {
  const conn = resolveConnections();
  const workerId = process.env.CRONLEDGER_WORKER_ID ?? `${hostname()}-${process.pid}`;
  const pool = createPool(conn.databaseUrl);
  const config = loadClientConnectConfig({ overrideEnvVars: { ...definedEnv(), TEMPORAL_ADDRESS: conn.temporalAddress } });
  const connection = await NativeConnection.connect(config.connectionOptions);
  const worker = await createCronledgerWorker({
    connection,
    namespace: conn.namespace,
    taskQueue: conn.taskQueue,
    deps: { pool, provider: selectProvider(), workerId },
  });
  try {
    await worker.run(); // returns after SIGINT/SIGTERM, once in-flight tasks are done
  } finally {
    await connection.close();
    await pool.end();
  }
}

main().catch((err) => {
  process.stderr.write(`worker failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
