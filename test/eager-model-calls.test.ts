import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freePorts } from '../src/dev/ports';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import type { ScheduledRunResult } from '../src/workflows/scheduled-run';
import { appliedInput, type TestRun } from './support/applied';
import { createTestContext, type TestContext } from './support/context';
import { startWorkerProcesses, stopWorkerProcesses, type WorkerProcess } from './support/worker-processes';
import { workflowBundlePath } from './support/workers';

/**
 * The server hands a run's model calls to the worker whose workflow task scheduled them, in its answer to that
 * task's completion (eager activity dispatch: `system.enableActivityEagerExecution` in dev up's dynamic config and in
 * deploy/temporal/dynamicconfig.yaml), instead of through matching and a poll. The suite's server runs with the same
 * config, in both server modes. The worker's SDK counts every activity task it receives, labelled eager or not.
 */
let ctx: TestContext;
let dir: string;
let workers: WorkerProcess[] = [];
let metricsUrl: string;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  dir = mkdtempSync(join(tmpdir(), 'cronledger-eager-'));
  const [port] = await freePorts(1);
  metricsUrl = `http://127.0.0.1:${port}/metrics`;
  workers = await startWorkerProcesses(1, {
    target: { temporalAddress: ctx.temporalAddress, namespace: ctx.namespace, taskQueue: ctx.taskQueue, databaseUrl: ctx.databaseUrl },
    bundlePath: await workflowBundlePath(dir),
    logDir: join(dir, 'logs'),
    env: () => ({ CRONLEDGER_WORKER_METRICS_ADDRESS: `127.0.0.1:${port}` }),
  });
}, 180_000);

afterAll(async () => {
  await stopWorkerProcesses(workers);
  await ctx?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** activity tasks the worker received, by the SDK's `eager` label */
async function activityTasksReceived(): Promise<Record<string, number>> {
  const text = await (await fetch(metricsUrl)).text();
  const counts: Record<string, number> = { true: 0, false: 0 };
  for (const m of text.matchAll(/^temporal_activity_task_received(?:_total)?\{([^}]*)\} (\d+)$/gm)) {
    const eager = /(?:^|,)eager="(\w+)"/.exec(m[1])?.[1] ?? 'unlabelled';
    counts[eager] = (counts[eager] ?? 0) + Number(m[2]);
  }
  return counts;
}

it("hands each model call to the worker that scheduled it, in the server's answer, not through a poll", async () => {
  const runs = 3;
  for (let i = 1; i <= runs; i++) {
    const input: TestRun = {
      taskId: `eager-${i}`,
      userId: 'eager-user',
      input: 'Summarise the day.',
      model: 'openai/gpt-4o-mini',
      embeddingModel: 'openai/text-embedding-3-small',
      manual: true,
    };
    const result: ScheduledRunResult = await ctx.client.workflow.execute('scheduledRun', {
      taskQueue: ctx.taskQueue,
      workflowId: `eager-run-${i}`,
      args: [await appliedInput(ctx.operatorPool, input)],
    });
    expect(result.status).toBe('completed');
  }
  // two calls per run (chat, embedding), every one received eagerly, none through a poll
  expect(await activityTasksReceived()).toEqual({ true: 2 * runs, false: 0 });
}, 120_000);
