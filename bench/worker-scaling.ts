/**
 * How N worker replicas share a backfill: the same number of slots run with 1 worker, then 3, then 1 again (the repeat
 * shows the noise), and the ratio of throughputs is printed with the command. Workers here are in-process, each with its own connection, like
 * replicas; the model is the offline mock, so this measures Temporal + PostgreSQL overhead per run.
 *
 *   npx cronledger dev up --workers 0
 *   node --import tsx bench/worker-scaling.ts [--slots 40]
 */
import { NativeConnection, Runtime, DefaultLogger, type Worker } from '@temporalio/worker';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { backfill } from '../src/schedules/backfill';
import { connectClient } from '../src/client';
import { resolveConnections, resolveOperatorDatabaseUrl } from '../src/config';
import { createPool, createWorkerPool } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { MockProvider } from '../src/models/mock-provider';
import { applyTasks } from '../src/schedules/apply-tasks';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { createCronledgerWorker } from '../src/worker-setup';
import { benchArgs, numberOption } from './lib/args';

const { values } = benchArgs('bench/worker-scaling.ts', { slots: { type: 'string', default: '40' } });
const slots = numberOption('slots', values.slots);
const command = `node --import tsx bench/worker-scaling.ts --slots ${slots}`;
Runtime.install({ logger: new DefaultLogger('WARN') });

async function main(): Promise<void> {
  const conn = resolveConnections();
  const client = await connectClient(conn);
  const pool = createWorkerPool(conn.databaseUrl); // the workers' pool, as src/worker.ts makes it
  const operatorPool = createPool(resolveOperatorDatabaseUrl(), 2);
  await applyPrices(operatorPool, loadPricesFile('prices/standard.json'), 'bench');
  const results: { workers: number; ms: number }[] = [];
  try {
    for (const [round, workers] of [1, 3, 1].entries()) {
      const suffix = randomUUID().slice(0, 6);
      const taskId = `bench-scaling-${suffix}`;
      const taskQueue = `bench-${suffix}`;
      // A paused every-minute task in its own task queue; the bench backfills it, so no real slot interferes.
      await applyTasks(
        client,
        parseTasksFile({
          tasks: [{ id: taskId, cron: '* * * * *', userId: 'bench', input: 'tick', paused: true }],
          monthlyReport: false,
          budgetSweep: false,
        }),
        taskQueue,
        operatorPool,
      );
      const from = new Date(Date.UTC(2026, 0, 1 + round, 0, 0));
      const to = new Date(from.getTime() + (slots - 1) * 60_000);
      const fleet: Worker[] = [];
      const connections = await Promise.all(
        Array.from({ length: workers }, () => NativeConnection.connect({ address: conn.temporalAddress })),
      );
      for (const [i, connection] of connections.entries()) {
        fleet.push(
          await createCronledgerWorker({
            connection,
            namespace: conn.namespace,
            taskQueue,
            deps: { pool, provider: new MockProvider(), workerId: `bench-${i + 1}` },
          }),
        );
      }
      const running = fleet.map((w) => w.run());
      const start = performance.now();
      const { summary } = await backfill(client, pool, { taskIds: [taskId], from, to });
      const ms = performance.now() - start;
      fleet.forEach((w) => w.shutdown());
      await Promise.all(running);
      await Promise.all(connections.map((c) => c.close()));
      await client.schedule.getHandle(`cron-${taskId}`).delete();
      if (summary.completed !== slots) throw new Error(`expected ${slots} completed slots, got ${JSON.stringify(summary)}`);
      results.push({ workers, ms });
    }
  } finally {
    await pool.end();
    await operatorPool.end();
    await client.connection.close();
  }
  process.stdout.write(`$ ${command}\n${slots} slots backfilled, each a full scheduledRun (claim, chat, embed, complete)\n\n`);
  const base = results[0];
  for (const r of results) {
    const perSecond = (slots / r.ms) * 1000;
    process.stdout.write(
      `${String(r.workers).padStart(2)} worker(s)  ${r.ms.toFixed(0).padStart(7)} ms  ${perSecond.toFixed(2).padStart(6)} runs/s  ${(base.ms / r.ms).toFixed(2)}x the 1-worker throughput\n`,
    );
  }
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
