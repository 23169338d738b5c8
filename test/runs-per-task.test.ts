import { afterAll, beforeAll, expect, it } from 'vitest';
import { latestRunsWithCostPerTask } from '../src/db/runs';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { createTestContext, type TestContext } from './support/context';
import { fullUsage } from '../src/models/provider';

/** The Tasks page's and `tasks list`'s one query: each task's own newest runs, at most the limit, with their cost. */
let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  // task "many": 7 runs on 7 days; task "few": 2; each run booked one chat call of 1,000 prompt tokens times its day
  for (const [task, days] of [
    ['many', [1, 2, 3, 4, 5, 6, 7]],
    ['few', [3, 9]],
  ] as const) {
    for (const day of days) {
      const at = `2026-11-${String(day).padStart(2, '0')}T09:00:00Z`;
      const workflowId = `cron-${task}-${at}`;
      await ctx.ownerPool.query(
        `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by, claimed_at)
         values ($1, $2, 'u1', $3, $4, $5, 'completed', 'seed', $5)`,
        [`cron:${task}:${at}`, task, workflowId, `${workflowId}-run`, at],
      );
      await recordUsage(ctx.ownerPool, {
        runId: `${workflowId}-run`,
        workflowId,
        step: 'chat',
        attempt: 1,
        userId: 'u1',
        taskId: task,
        model: 'openai/gpt-4o-mini',
        kind: 'chat',
        status: 'ok',
        usage: fullUsage({ promptTokens: 1000 * day, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }),
        providerModel: 'gpt-4o-mini',
        providerRequestId: null,
        workerId: 'seed',
        occurredAt: new Date(at),
      });
    }
  }
});

afterAll(async () => {
  await ctx?.close();
});

/** 1,000 prompt tokens of gpt-4o-mini (0.15 USD per million) per day: 0.00015 USD times the day, as numeric(38, 18) prints it. */
const costOfDay = (day: number) => `0.${(150_000_000_000_000n * BigInt(day)).toString().padStart(18, '0')}`;

it("gives each task its own newest runs up to the limit, newest first, with each run's cost", async () => {
  const byTask = await latestRunsWithCostPerTask(ctx.pool, ['many', 'few', 'none'], 5);
  const view = (task: string) => byTask.get(task)!.map((r) => [r.task_id, r.scheduled_minute.toISOString().slice(0, 10), r.cost_usd]);
  expect([...byTask.keys()]).toEqual(['many', 'few', 'none']);
  expect(view('many')).toEqual([7, 6, 5, 4, 3].map((d) => ['many', `2026-11-0${d}`, costOfDay(d)]));
  expect(view('few')).toEqual([
    ['few', '2026-11-09', costOfDay(9)],
    ['few', '2026-11-03', costOfDay(3)],
  ]);
  expect(view('none')).toEqual([]);
});
