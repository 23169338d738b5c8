import type { Command } from 'commander';
import { backfill, type BackfillSummary, type SlotResult } from '../../schedules/backfill';
import { parseRange } from '../../schedules/slot-range';
import { UserError } from '../../errors';
import { managedTaskIds } from '../../schedules/manage-task';
import { withConnections } from '../connect';
import { printJson } from '../output';
import { createProgress } from '../../progress-bar';
import { backfillBudgetLine } from '../../forecast/backfill-budget';

interface BackfillFlags {
  task?: string;
  all?: boolean;
  from: string;
  to: string;
  retryFailed?: boolean;
  allowOverBudget?: boolean;
  dryRun?: boolean;
  json?: boolean;
}

export function registerBackfillCommand(program: Command): void {
  program
    .command('backfill')
    .description('run the missed slots of a time range, each exactly once (already-run slots are rejected or skipped)')
    .option('--task <id>', 'backfill one task')
    .option('--all', 'backfill every cronledger task')
    .requiredOption('--from <iso>', 'first instant of the range, inclusive, e.g. 2026-11-02T08:58:00Z')
    .requiredOption('--to <iso>', 'last instant of the range, inclusive')
    .option('--retry-failed', 'also run again the slots whose run failed, was cancelled, terminated or timed out')
    .option('--allow-over-budget', "start the slots even when the forecast says they exceed a user's monthly budget")
    .option('--dry-run', 'start nothing: show per user how many slots would run, be downgraded and be blocked')
    .option('--json', 'print results as JSON')
    .action(async (opts: BackfillFlags) => {
      if (Boolean(opts.task) === Boolean(opts.all)) throw new UserError('give exactly one of --task ID or --all');
      const { from, to } = parseRange(opts.from, opts.to);
      await withConnections({ temporal: true, db: true }, async ({ client, pool }) => {
        const taskIds = opts.task ? [opts.task] : await managedTaskIds(client, pool);
        const progress = createProgress('backfill');
        const { results, summary, budget } = await backfill(client, pool, {
          taskIds,
          from,
          to,
          retryFailed: opts.retryFailed === true,
          allowOverBudget: opts.allowOverBudget === true,
          dryRun: opts.dryRun === true,
          onSlotDone: (_r, done, total) => progress.update(done, total),
        });
        progress.finish();
        if (opts.dryRun) {
          if (opts.json) return printJson({ from: from.toISOString(), to: to.toISOString(), dryRun: true, budget });
          for (const b of budget ?? []) process.stdout.write(`${backfillBudgetLine(b)}\n`);
          process.stdout.write('dry run: nothing started\n');
          return;
        }
        if (opts.json) {
          printJson({ from: from.toISOString(), to: to.toISOString(), results, summary, ...(budget ? { budget } : {}) });
        } else {
          for (const r of [...results].sort((a, b) => a.slot.localeCompare(b.slot) || a.taskId.localeCompare(b.taskId))) {
            process.stdout.write(`${r.slot}  ${r.taskId}  ${describe(r)}  ${r.workflowId}\n`);
          }
          process.stdout.write(summaryLine(summary));
        }
        if (summary.failed > 0) {
          process.stderr.write(retryHint(opts, results));
          process.exitCode = 1;
        }
      });
    });
}

function summaryLine(s: BackfillSummary): string {
  return (
    `slots: ${s.slots}, completed: ${s.completed}, retried: ${s.retried}, already ran: ${s.alreadyRan}, ` +
    `running: ${s.running}, failed: ${s.failed}\n`
  );
}

/** How to run the failed slots again, once their cause is fixed. */
function retryHint(opts: { task?: string; from: string; to: string }, results: SlotResult[]): string {
  const failed = results.filter((r) => r.outcome === 'failed');
  const scope = opts.task ? `--task ${opts.task}` : '--all';
  return (
    `${failed.length} slot${failed.length === 1 ? '' : 's'} failed. Fix the cause, then run ${failed.length === 1 ? 'it' : 'them'} again:\n` +
    `  cronledger backfill ${scope} --from ${opts.from} --to ${opts.to} --retry-failed\n` +
    `or one slot: cronledger runs retry --workflow-id ${failed[0].workflowId}\n`
  );
}

function describe(r: SlotResult): string {
  const generation = r.generation && r.generation > 1 ? ` (generation ${r.generation})` : '';
  switch (r.outcome) {
    case 'completed':
      return 'completed';
    case 'retried':
      return `retried, completed${generation}`;
    case 'already-ran':
      return `already ran${generation}`;
    case 'running':
      return `still running${r.detail ? `: ${r.detail}` : ''}`;
    case 'failed':
      return `failed: ${r.detail ?? ''}`;
  }
}
