import { recordUsage } from '../../src/ledger/record-usage';
import { fullUsage } from '../../src/models/provider';
import type { TestContext } from './context';

/** A finished run of `taskId` at `minute` whose one ledger row costs `completionTokens` gpt-4o-mini tokens, booked now. */
export async function finishedRun(
  ctx: TestContext,
  run: { taskId: string; userId: string; minute: Date; completionTokens: number; status?: string },
): Promise<void> {
  const { taskId, userId, minute, completionTokens, status = 'completed' } = run;
  const workflowId = `cron-${taskId}-${minute.toISOString()}`;
  const runId = `run-${taskId}-${minute.getTime()}`;
  await ctx.ownerPool.query(
    `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by, finished_at)
     values ($1, $2, $3, $4, $5, $6, $7, 'test', now())`,
    [`cron:${taskId}:${minute.toISOString()}`, taskId, userId, workflowId, runId, minute, status],
  );
  await recordUsage(ctx.pool, {
    runId,
    workflowId,
    step: 'chat',
    attempt: 1,
    userId,
    taskId,
    model: 'openai/gpt-4o-mini',
    kind: 'chat',
    status: 'ok',
    usage: fullUsage({ promptTokens: 0, cachedPromptTokens: 0, completionTokens, reasoningTokens: 0 }),
    providerModel: null,
    providerRequestId: null,
    workerId: 'test',
  });
}
