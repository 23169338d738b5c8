import type { Command } from 'commander';
import { budgetChangesOf } from '../../budgets/budget-file';
import { applyBudgets } from '../../budgets/budgets-store';
import { recordAppliedTasks } from '../../db/applied-tasks';
import { applyTasks } from '../../schedules/apply-tasks';
import { workflowUrl } from '../../config';
import { listTasks, operateOnTask, triggerManualRun, type TaskOperation } from '../../schedules/manage-task';
import { loadTasksFile } from '../../tasks/tasks-file';
import { withConnections } from '../connect';
import { printJson, printTable } from '../output';
import { printAppliedBudgets } from './budgets';

export function registerTasksCommands(program: Command): void {
  const tasks = program.command('tasks').description('cron tasks as Temporal Schedules');

  tasks
    .command('apply <file>')
    .description('create, update and delete schedules so they match the tasks file (safe to run again)')
    .option('--json', 'print the changes as JSON')
    .action(async (file: string, opts: { json?: boolean }) => {
      const parsed = loadTasksFile(file); // everything is validated before any schedule changes
      await withConnections({ temporal: true, db: true }, async ({ client, conn, pool }) => {
        // budgets and downgrades first, in one transaction: a refusal there leaves every schedule as it was
        const budgets = await applyBudgets(pool, { budgets: budgetChangesOf(parsed.budgets, file), downgrade: parsed.downgrade }, file);
        const changes = await applyTasks(client, parsed, conn.taskQueue, pool);
        // so that `backfill --all` and `tasks list` find these tasks at once (the schedule list lags behind)
        await recordAppliedTasks(
          pool,
          parsed.tasks.map((t) => t.id),
        );
        if (opts.json) return printJson({ changes, budgets });
        for (const c of changes) process.stdout.write(`${c.action.padEnd(9)} ${c.scheduleId}\n`);
        printAppliedBudgets(budgets);
        const changed = changes.filter((c) => c.action !== 'unchanged').length;
        process.stdout.write(`${changed} change${changed === 1 ? '' : 's'}, ${changes.length - changed} unchanged\n`);
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
