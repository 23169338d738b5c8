import { applyPrices, type PricesFile } from '../../src/ledger/prices';
import { nominalId } from '../../src/schedules/start-run';
import { reconcile, type ChaosFigures } from '../support/chaos-figures';
import { runCli, type CliResult } from '../support/cli';
import { createTaskSchedule, scenarioId, startOpenAIWorkers, type ChaosEnv } from './chaos-env';

/**
 * A slot that failed, run again with `cronledger backfill --retry-failed`. The first execution fails after its chat
 * call was billed: its embedding model has no price yet, so the embedding is refused before any spend. Once the price
 * is published, the retry runs the slot under the same workflow ID. Both executions' billed calls must be in the ledger
 * (the retry's chat call must not be swallowed by the first execution's ledger key).
 */
export interface RetryFailedResult {
  figures: ChaosFigures;
  first: CliResult;
  retry: CliResult;
  /** Executions of the slot's workflow ID, oldest first. */
  executions: string[];
  /** Distinct executions (run_id) with ledger rows. */
  ledgerExecutions: number;
}

const UNPRICED_EMBEDDING = 'openai/text-embedding-3-large';

export async function runRetryFailed(env: ChaosEnv, cliEnv: NodeJS.ProcessEnv): Promise<RetryFailedResult> {
  const taskId = scenarioId('retry');
  const taskQueue = `${taskId}-q`;
  await createTaskSchedule(env, { id: taskId, cron: '* * * * *', paused: true, embeddingModel: UNPRICED_EMBEDDING }, taskQueue);
  const workers = await startOpenAIWorkers(env, 1, taskQueue);
  const billedBefore = env.fake.billed.length;
  const startedAt = Date.now();
  const slot = nominalId(new Date(Date.UTC(2026, 3, 1, 0, 0)));
  const range = ['--task', taskId, '--from', slot, '--to', slot];
  try {
    const first = await runCli(['backfill', ...range], cliEnv);
    // Publish the missing price (a new version; published versions never change), then retry the failed slot.
    const price: PricesFile = {
      currency: 'USD',
      unit: 'per_million_tokens',
      versions: [
        {
          version: `${taskId}-large`,
          effectiveFrom: '2024-07-18T00:00:00Z',
          source: 'chaos test',
          models: { [UNPRICED_EMBEDDING]: { embeddingInput: '0.13' } },
        },
      ],
    };
    await applyPrices(env.operatorPool, price, 'test');
    const retry = await runCli(['backfill', ...range, '--retry-failed'], cliEnv);

    const executions: string[] = [];
    for await (const w of env.client.workflow.list({ query: `WorkflowId = 'cron-${taskId}-${slot}'` })) executions.push(w.status.name);
    executions.reverse(); // visibility lists the newest first
    const ledger = await env.pool.query<{ n: string }>('select count(distinct run_id) as n from usage_ledger where task_id = $1', [taskId]);
    const { figures } = await reconcile(env.pool, {
      scenario: 'retry a failed slot: the first execution fails after a billed chat call, `backfill --retry-failed` runs it again',
      taskIds: [taskId],
      slots: 1,
      billed: env.fake.billed.slice(billedBefore),
      startedAt,
      extra: { 'first backfill exit': String(first.code), 'retry exit': String(retry.code), executions: executions.join(', ') },
    });
    return { figures, first, retry, executions, ledgerExecutions: Number(ledger.rows[0].n) };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
}
