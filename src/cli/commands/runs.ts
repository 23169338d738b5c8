import type { Command } from 'commander';
import { workflowUrl } from '../../config';
import { listRuns } from '../../db/runs';
import { withConnections } from '../connect';
import { parseCount } from '../options';
import { printJson, printTable } from '../output';

export function registerRunsCommand(program: Command): void {
  program
    .command('runs')
    .description('claimed runs with status, scheduled minute, workflow ID and Web UI link')
    .option('--task <id>', 'only this task')
    .option('--limit <n>', 'how many, newest first', '50')
    .option('--json', 'print JSON')
    .action(async (opts: { task?: string; limit: string; json?: boolean }) => {
      const limit = parseCount('--limit', opts.limit);
      await withConnections({ db: true }, async ({ pool, conn }) => {
        const runs = await listRuns(pool, { taskId: opts.task, limit });
        const rows = runs.map((r) => ({
          taskId: r.task_id,
          scheduledMinute: `${r.scheduled_minute.toISOString().slice(0, 16)}Z`,
          status: r.status,
          workflowId: r.workflow_id,
          runId: r.temporal_run_id,
          workerId: r.claimed_by,
          durationMs: r.duration_ms,
          error: r.error,
          url: workflowUrl(conn, r.workflow_id, r.temporal_run_id) ?? null,
        }));
        if (opts.json) return printJson({ runs: rows });
        printTable(
          ['SCHEDULED', 'TASK', 'STATUS', 'WORKFLOW ID', 'WEB UI'],
          rows.map((r) => [r.scheduledMinute, r.taskId, r.status, r.workflowId, r.url ?? '-']),
        );
      });
    });
}
