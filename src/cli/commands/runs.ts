import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { connectClient } from '../../client';
import { resolveConnections, workflowUrl, type Connections } from '../../config';
import { listRuns, type RunRow } from '../../db/runs';
import { UserError } from '../../errors';
import { parseRange } from '../../schedules/slot-range';
import { claimState } from '../../schedules/claim-state';
import { retryRange, retryWorkflowId, type RetryResult } from '../../schedules/retry-slot';
import { withConnections } from '../connect';
import { parseCount } from '../options';
import { printJson, printTable } from '../output';

export function registerRunsCommand(program: Command): void {
  // A group whose default action is the list, so `runs --task X` keeps working next to `runs retry`.
  const runs = program
    .command('runs')
    .description(
      'claimed runs with status, budget tier, scheduled minute, workflow ID and Web UI link; `runs retry` runs a failed slot again',
    )
    .enablePositionalOptions()
    .option('--task <id>', 'only this task')
    .option('--limit <n>', 'how many, newest first', '50')
    .option('--json', 'print JSON')
    .action(async (opts: { task?: string; limit: string; json?: boolean }) => listAction(opts));

  runs
    .command('retry')
    .description('run a failed, cancelled or stale slot again under its own workflow ID (a completed slot is refused)')
    .option('--task <id>', 'retry the failed slots of this task in --from .. --to')
    .option('--from <iso>', 'first instant of the range, inclusive')
    .option('--to <iso>', 'last instant of the range, inclusive')
    .option('--workflow-id <id>', 'retry this one slot, e.g. cron-digest-u1-2026-11-02T09:00:00Z')
    .option('--json', 'print JSON')
    .action(async (opts: { task?: string; from?: string; to?: string; workflowId?: string; json?: boolean }) => retryAction(opts));
}

async function listAction(opts: { task?: string; limit: string; json?: boolean }): Promise<void> {
  const limit = parseCount('--limit', opts.limit);
  await withConnections({ db: true }, async ({ pool, conn }) => {
    const runs = await listRuns(pool, { taskId: opts.task, limit });
    const states = await statesOf(runs);
    const rows = runs.map((r, i) => ({
      taskId: r.task_id,
      scheduledMinute: `${r.scheduled_minute.toISOString().slice(0, 16)}Z`,
      status: states[i],
      // the budget tier the run ran at; null before the budget guard, or a run that stopped before its decision
      tier: r.tier,
      generation: r.generation,
      manual: r.manual,
      workflowId: r.workflow_id,
      runId: r.temporal_run_id,
      workerId: r.claimed_by,
      durationMs: r.duration_ms,
      error: r.error,
      url: workflowUrl(conn, r.workflow_id, r.temporal_run_id) ?? null,
    }));
    if (opts.json) return printJson({ runs: rows });
    printTable(
      ['SCHEDULED', 'TASK', 'STATUS', 'TIER', 'GEN', 'WORKFLOW ID', 'WEB UI'],
      rows.map((r) => [r.scheduledMinute, r.taskId, r.status, r.tier ?? '-', String(r.generation), r.workflowId, r.url ?? '-']),
    );
    if (states.includes('stale')) {
      process.stdout.write(
        'stale: the claim says running, but its execution was terminated or timed out; `cronledger runs retry --workflow-id ID` runs it again\n',
      );
    }
  });
}

/**
 * Each run's status, with `stale` for a running claim whose execution is closed. Only running claims need Temporal,
 * so the list itself works with PostgreSQL alone, and Temporal is reached only when there is one to check.
 */
async function statesOf(runs: RunRow[]): Promise<string[]> {
  if (!runs.some((r) => r.status === 'running')) return runs.map((r) => r.status);
  const conn = resolveConnections(process.env, { temporal: true });
  const client = await connectOrExplain(conn);
  try {
    return await Promise.all(runs.map((r) => (r.status === 'running' ? claimState(client, r) : r.status)));
  } finally {
    await client.connection.close();
  }
}

async function connectOrExplain(conn: Connections): Promise<Client> {
  try {
    return await connectClient(conn);
  } catch (err) {
    throw new UserError(
      `cannot reach Temporal at ${conn.temporalAddress} to check which running claims are stale (${(err as Error).message}); start it with \`npx cronledger dev up\` or fix TEMPORAL_ADDRESS`,
    );
  }
}

async function retryAction(opts: { task?: string; from?: string; to?: string; workflowId?: string; json?: boolean }): Promise<void> {
  const byRange = opts.task !== undefined || opts.from !== undefined || opts.to !== undefined;
  if (byRange === (opts.workflowId !== undefined) || (byRange && !(opts.task && opts.from && opts.to))) {
    throw new UserError('give either --task ID --from ISO --to ISO, or --workflow-id ID');
  }
  await withConnections({ temporal: true, db: true }, async ({ client, pool, conn }) => {
    if (opts.workflowId !== undefined) {
      const r = await retryWorkflowId(client, pool, opts.workflowId);
      if (opts.json) printJson({ retries: [r] });
      else process.stdout.write(`${retryLine(r)}  ${workflowUrl(conn, r.workflowId, r.runId) ?? ''}\n`);
      if (r.outcome !== 'completed') process.exitCode = 1;
      return;
    }
    const { from, to } = parseRange(opts.from as string, opts.to as string);
    const slots = await retryRange(client, pool, opts.task as string, from, to);
    if (opts.json) printJson({ slots });
    else {
      for (const s of slots) {
        const what = s.retry
          ? retryLine(s.retry)
          : s.refused !== undefined
            ? `refused: ${s.refused}`
            : s.state === 'unclaimed'
              ? 'never ran: run it with `cronledger backfill`'
              : `${s.state}: not retried`;
        process.stdout.write(`${s.slot}  ${what}  ${s.workflowId}\n`);
      }
      const retried = slots.filter((s) => s.retry);
      const refused = slots.filter((s) => s.refused !== undefined).length;
      process.stdout.write(
        `slots: ${slots.length}, retried: ${retried.length}, completed: ${retried.filter((s) => s.retry?.outcome === 'completed').length}` +
          `${refused ? `, refused: ${refused}` : ''}\n`,
      );
    }
    if (slots.some((s) => s.refused !== undefined || (s.retry && s.retry.outcome !== 'completed'))) process.exitCode = 1;
  });
}

function retryLine(r: RetryResult): string {
  const gen = r.generation ? ` as generation ${r.generation}` : '';
  switch (r.outcome) {
    case 'completed':
      return `retried (was ${r.was}), completed${gen}: ${r.workflowId} run ${r.runId}`;
    case 'failed':
      return `retried (was ${r.was}), failed again: ${r.detail ?? ''}: ${r.workflowId} run ${r.runId}`;
    case 'duplicate':
      return `not retried: another execution took the slot over first: ${r.workflowId}`;
  }
}
