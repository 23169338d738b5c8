import type { Command } from 'commander';
import { backfill, parseRange, type SlotResult } from '../../schedules/backfill';
import { UserError } from '../../errors';
import { managedTaskIds } from '../../schedules/manage-task';
import { withConnections } from '../connect';
import { printJson } from '../output';
import { createProgress } from '../../progress-bar';

export function registerBackfillCommand(program: Command): void {
  program
    .command('backfill')
    .description('run the missed slots of a time range, each exactly once (already-run slots are rejected or skipped)')
    .option('--task <id>', 'backfill one task')
    .option('--all', 'backfill every cronledger task')
    .requiredOption('--from <iso>', 'first instant of the range, inclusive, e.g. 2026-11-02T08:58:00Z')
    .requiredOption('--to <iso>', 'last instant of the range, inclusive')
    .option('--json', 'print results as JSON')
    .action(async (opts: { task?: string; all?: boolean; from: string; to: string; json?: boolean }) => {
      if (Boolean(opts.task) === Boolean(opts.all)) throw new UserError('give exactly one of --task ID or --all');
      const { from, to } = parseRange(opts.from, opts.to);
      await withConnections({ temporal: true, db: true }, async ({ client, pool }) => {
        const taskIds = opts.task ? [opts.task] : await managedTaskIds(client, pool);
        const progress = createProgress('backfill');
        const { results, summary } = await backfill(client, {
          taskIds,
          from,
          to,
          onSlotDone: (_r, done, total) => progress.update(done, total),
        });
        progress.finish();
        if (opts.json) {
          printJson({ from: from.toISOString(), to: to.toISOString(), results, summary });
        } else {
          for (const r of [...results].sort((a, b) => a.slot.localeCompare(b.slot) || a.taskId.localeCompare(b.taskId))) {
            process.stdout.write(`${r.slot}  ${r.taskId}  ${describe(r)}  ${r.workflowId}\n`);
          }
          process.stdout.write(
            `slots: ${summary.slots}, executed: ${summary.executed}, already ran: ${summary.alreadyRan} ` +
              `(rejected: ${summary.rejected}, claimed: ${summary.claimed}), failed: ${summary.failed}\n`,
          );
        }
        if (summary.failed > 0) process.exitCode = 1;
      });
    });
}

function describe(r: SlotResult): string {
  switch (r.outcome) {
    case 'executed':
      return 'executed';
    case 'rejected':
      return 'already ran (workflow ID exists, rejected by Temporal)';
    case 'claimed':
      return 'already ran (slot claimed in PostgreSQL)';
    case 'failed':
      return `failed: ${r.detail ?? ''}`;
  }
}
