import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { budgetChangesOf } from '../../budgets/budget-file';
import { applyBudgets } from '../../budgets/budgets-store';
import { recordAppliedTasks } from '../../db/applied-tasks';
import { applyTasks, omittedTaskSchedules, type Change, type Prune } from '../../schedules/apply-tasks';
import { workflowUrl } from '../../config';
import { listTasks, operateOnTask, triggerManualRun, type TaskOperation } from '../../schedules/manage-task';
import { loadTasksFile, type TasksFile } from '../../tasks/tasks-file';
import { withConnections } from '../connect';
import { printAppliedBudgets, printJson, printTable } from '../output';
import { confirm, onTerminal } from '../prompt';

export function registerTasksCommands(program: Command): void {
  const tasks = program.command('tasks').description('cron tasks as Temporal Schedules');

  tasks
    .command('apply <file>')
    .description('create and update schedules so they match the tasks file (safe to run again); see below for omitted tasks')
    .option('--prune', 'delete the schedules of tasks the file omits, without asking')
    .option('--json', 'print the changes as JSON')
    .addHelpText(
      'after',
      `
A cronledger schedule whose task the file omits is deleted only on purpose:
  on a terminal   tasks apply lists those schedules and asks before deleting them (y/N)
  otherwise       they are left in place and listed ("kept"); exit 0
  --prune         they are deleted without asking, and listed ("deleted")
Schedules cronledger did not create are never touched.`,
    )
    .action(async (file: string, opts: { json?: boolean; prune?: boolean }) => {
      const parsed = loadTasksFile(file); // everything is validated before any schedule changes
      await withConnections({ temporal: true, db: 'operator' }, async ({ client, conn, pool }) => {
        // asked before anything changes, so Ctrl-C at the prompt leaves everything as it was
        const prune: Prune = opts.prune ? 'all' : onTerminal() ? await askToPrune(client, parsed, file) : 'none';
        // budgets and downgrades first, in one transaction: a refusal there leaves every schedule as it was
        const budgets = await applyBudgets(pool, { budgets: budgetChangesOf(parsed.budgets, file), downgrade: parsed.downgrade }, file);
        const changes = await applyTasks(client, parsed, conn.taskQueue, pool, prune);
        // so that `backfill --all` and `tasks list` find these tasks at once (the schedule list lags behind)
        await recordAppliedTasks(
          pool,
          parsed.tasks.map((t) => t.id),
        );
        if (opts.json) return printJson({ changes, budgets });
        for (const c of changes) process.stdout.write(`${c.action.padEnd(9)} ${c.scheduleId}\n`);
        printAppliedBudgets(budgets);
        const count = (action: Change['action']) => changes.filter((c) => c.action === action).length;
        const changed = changes.length - count('unchanged') - count('kept');
        process.stdout.write(`${changed} change${changed === 1 ? '' : 's'}, ${count('unchanged')} unchanged\n`);
        const kept = changes.filter((c) => c.action === 'kept').map((c) => c.scheduleId);
        if (kept.length > 0) {
          process.stdout.write(
            `left ${kept.length} schedule${kept.length === 1 ? '' : 's'} in place whose task is not in ${file}: ${kept.join(', ')}; ` +
              `\`cronledger tasks apply ${file} --prune\` deletes ${kept.length === 1 ? 'it' : 'them'}\n`,
          );
        }
      });
    });

  tasks
    .command('list')
    .description('each task with its next fire times and last runs')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      await withConnections({ temporal: true, db: true }, async ({ client, pool }) => {
        const listing = await listTasks(client, pool);
        if (opts.json) return printJson({ tasks: listing });
        printTable(
          ['TASK', 'CRON', 'ZONE', 'USER', 'STATE', 'NEXT', 'LAST RUNS'],
          listing.map((t) => [
            t.id,
            t.cron,
            t.timezone,
            t.userId,
            t.paused ? 'paused' : 'active',
            t.nextFireTimes.slice(0, 2).join(', ') || '-',
            t.lastRuns.map((r) => `${r.scheduledMinute.slice(0, 16)}Z ${r.status}`).join(', ') || '-',
          ]),
        );
      });
    });

  const operations: [TaskOperation, string][] = [
    ['pause', 'pause a task schedule'],
    ['resume', 'resume a paused task schedule'],
    ['delete', 'delete a task schedule (tasks apply recreates it if the task is still in the file)'],
  ];
  for (const [op, description] of operations) {
    tasks
      .command(`${op} <id>`)
      .description(description)
      .action(async (id: string) => {
        await withConnections({ temporal: true }, async ({ client }) => {
          await operateOnTask(client, id, op);
          process.stdout.write(`${op}${op.endsWith('e') ? 'd' : 'ed'} ${id}\n`);
        });
      });
  }

  tasks
    .command('trigger <id>')
    .description('start a manual run of a task now, outside its schedule (its own claim, never a slot)')
    .option('--json', 'print JSON')
    .action(async (id: string, opts: { json?: boolean }) => {
      await withConnections({ temporal: true }, async ({ client, conn }) => {
        const run = await triggerManualRun(client, id);
        const url = workflowUrl(conn, run.workflowId, run.runId) ?? null;
        if (opts.json) return printJson({ manual: true, taskId: id, ...run, url });
        process.stdout.write(
          `started a manual run of ${id} (not a schedule slot; it claims ${run.idempotencyKey})\n` +
            `workflow ID: ${run.workflowId}\n` +
            (url ? `Web UI: ${url}\n` : ''),
        );
      });
    });
}

/** On a terminal: lists the schedules the file would leave without a task and asks whether to delete them. */
async function askToPrune(client: Client, parsed: TasksFile, file: string): Promise<Prune> {
  const omitted = await omittedTaskSchedules(client, parsed);
  if (omitted.length === 0) return 'none';
  const n = omitted.length;
  process.stderr.write(
    `${file} omits the task${n === 1 ? '' : 's'} of ${n} schedule${n === 1 ? '' : 's'}:\n${omitted.map((id) => `  ${id}\n`).join('')}`,
  );
  return (await confirm(`Delete ${n === 1 ? 'it' : 'them'}? [y/N] `)) ? omitted : 'none';
}
