import { execFileSync } from 'node:child_process';
import { Worker } from '@temporalio/worker';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { createTestContext, type TestContext } from './support/context';
import { startWorkers, workflowBundle } from './support/workers';

/**
 * Determinism: the workflow code must make the same decisions when it replays a history. Histories recorded now
 * (completed, duplicate and failed runs) replay against today's code, and so do the histories committed under
 * test/fixtures/histories, recorded by earlier versions: a change that breaks running workflows fails here.
 */
const FIXTURES = join(import.meta.dirname, 'fixtures', 'histories');
let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.pool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => ctx?.close());

const task = (model = 'openai/gpt-4o-mini') => ({
  taskId: 'replayed',
  userId: 'u1',
  input: 'Summarise the day.',
  model,
  embeddingModel: 'openai/text-embedding-3-small',
});

it('replays freshly recorded histories of completed, duplicate and failed runs without nondeterminism', async () => {
  const ids = ['cron-replayed-2026-11-02T09:00:00Z', 'cron-replayed-2026-11-02T09:00:00Z', 'cron-replayed-2026-11-02T09:05:00Z'];
  const fleet = await startWorkers(ctx, 1);
  const runIds = await fleet.runWhile(async () => {
    const completed = await ctx.client.workflow.start(scheduledRun, { workflowId: ids[0], taskQueue: ctx.taskQueue, args: [task()] });
    await completed.result();
    // same slot again (a native backfill would do this): ends as duplicate
    const duplicate = await ctx.client.workflow.start(scheduledRun, {
      workflowId: ids[1],
      taskQueue: ctx.taskQueue,
      args: [task()],
      workflowIdReusePolicy: 'ALLOW_DUPLICATE',
    });
    expect(await duplicate.result()).toMatchObject({ status: 'duplicate' });
    // a model with no price fails before any call
    const failed = await ctx.client.workflow.start(scheduledRun, { workflowId: ids[2], taskQueue: ctx.taskQueue, args: [task('acme/unpriced')] });
    await expect(failed.result()).rejects.toThrow();
    return [completed.firstExecutionRunId, duplicate.firstExecutionRunId, failed.firstExecutionRunId];
  });

  const histories = await Promise.all(ids.map((id, i) => ctx.client.workflow.getHandle(id, runIds[i]).fetchHistory()));
  for (const [i, history] of histories.entries()) {
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, `${ids[i]}-${i}`);
  }
  if (process.env.RECORD_HISTORIES === '1') {
    // Recorded with the temporal CLI, whose JSON is the format Worker.runReplayHistory reads back.
    ['completed', 'duplicate', 'failed'].forEach((name, i) => {
      const json = execFileSync(inject('stack').temporalCli, [
        'workflow', 'show', '--workflow-id', ids[i], '--run-id', runIds[i], '--output', 'json',
        '--address', ctx.temporalAddress, '--namespace', ctx.namespace,
      ]);
      writeFileSync(join(FIXTURES, `scheduled-run-${name}.json`), json);
    });
  }
});

it('replays the committed histories recorded by earlier versions', async () => {
  const files = readdirSync(FIXTURES).filter((f) => f.endsWith('.json'));
  expect(files.length).toBeGreaterThanOrEqual(3);
  for (const file of files) {
    const history = JSON.parse(readFileSync(join(FIXTURES, file), 'utf8'));
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, file);
  }
});
