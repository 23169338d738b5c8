import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { applyTasks } from '../src/schedules/apply-tasks';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { appliedInput } from './support/applied';
import { startWorkers } from './support/workers';

/** `runs retry --task`: a refused slot is reported and the range goes on; the exit code says something was refused. */

let ctx: TestContext;
const FROM = '2026-11-02T08:30:00Z';
const TO = '2026-11-02T11:30:00Z'; // the hourly task's slots 09:00, 10:00, 11:00
const UNPRICED = 'openai/text-embedding-3-large';

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => ctx?.close());

describe('runs retry --task', () => {
  it('goes on past a refused slot, retries the others, reports each refusal and exits non-zero', async () => {
    await applyTasks(
      ctx.client,
      parseTasksFile({
        tasks: [{ id: 'hourly', cron: '0 * * * *', userId: 'u-retry', input: 'retry me', embeddingModel: UNPRICED, paused: true }],
        monthlyReport: false,
        budgetSweep: false,
      }),
      ctx.taskQueue,
      ctx.operatorPool,
    );
    const range = ['--task', 'hourly', '--from', FROM, '--to', TO];
    const slotIds = ['09', '10', '11'].map((h) => `cron-hourly-2026-11-02T${h}:00:00Z`);
    // An execution under the first slot's ID on a task queue nobody polls: it stays running, so retrying that slot is refused.
    const blockerQueue = `${ctx.taskQueue}-nobody`;
    const fleet = await startWorkers(ctx, 1);
    await fleet.runWhile(async () => {
      const failed = await runCli(['backfill', ...range, '--json'], ctx.env); // the embedding model has no price: each slot fails
      expect(JSON.parse(failed.stdout).summary).toMatchObject({ slots: 3, failed: 3 });
      await applyPrices(
        ctx.operatorPool,
        {
          currency: 'USD',
          unit: 'per_million_tokens',
          versions: [{ version: 'v1', effectiveFrom: '2024-07-18T00:00:00Z', models: { [UNPRICED]: { embeddingInput: '0.13' } } }],
        },
        'test',
      );
      const blocker = await ctx.client.workflow.start(scheduledRun, {
        workflowId: slotIds[0],
        taskQueue: blockerQueue,
        workflowIdReusePolicy: 'ALLOW_DUPLICATE',
        args: [
          await appliedInput(ctx.operatorPool, {
            taskId: 'hourly',
            userId: 'u-retry',
            input: 'blocker',
            model: 'openai/gpt-4o-mini',
            embeddingModel: UNPRICED,
          }),
        ],
      });
      try {
        const json = await runCli(['runs', 'retry', ...range, '--json'], ctx.env);
        expect(json.code, json.stderr).toBe(1);
        const slots = JSON.parse(json.stdout).slots as { workflowId: string; refused?: string; retry?: { outcome: string } }[];
        expect(slots.map((s) => [s.workflowId, s.refused === undefined ? s.retry?.outcome : 'refused'])).toEqual([
          [slotIds[0], 'refused'],
          [slotIds[1], 'completed'],
          [slotIds[2], 'completed'],
        ]);
        expect(slots[0].refused).toMatch(/has a running execution .*let it finish, then retry/);

        // The text form says the same, slot by slot, then counts the refusal; only the refused slot is left to retry.
        const text = await runCli(['runs', 'retry', ...range], ctx.env);
        expect(text.code).toBe(1);
        expect(text.stdout).toMatch(/2026-11-02T09:00:00Z {2}refused: .*has a running execution/);
        expect(text.stdout).toMatch(/2026-11-02T10:00:00Z {2}completed: not retried/);
        expect(text.stdout).toMatch(/slots: 3, retried: 0, completed: 0, refused: 1/);
        expect(text.stderr).not.toMatch(/\n\s+at /);
      } finally {
        await blocker.terminate('test over');
      }
    });
  });
});
