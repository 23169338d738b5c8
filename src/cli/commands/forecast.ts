import type { Command } from 'commander';
import { UserError } from '../../errors';
import { taskForecastTable, userForecastTable } from '../../forecast/forecast-table';
import { forecastAccuracy, type ForecastAccuracy } from '../../forecast/forecast-records';
import { monthForecast } from '../../forecast/month-forecast';
import { displayUsd } from '../../money';
import { monthAt, parseMonth } from '../../reports/month';
import { DEFAULT_COST_SAMPLE, MIN_RUNS_FOR_COST } from '../../forecast/projection';
import { parseUserId } from '../../ledger/user-id';
import { taskSchedules } from '../../schedules/scheduled-tasks';
import { withConnections } from '../connect';
import { printJson, printTable } from '../output';

/** `cronledger forecast`: this month's spend to come, counted from the schedules' own slots. */
export function registerForecastCommand(program: Command): void {
  program
    .command('forecast')
    .description(
      "this month's forecast: per task the slots left × the cost of one run, per user the total and the day it crosses 80 % and 100 %",
    )
    .option('--user <id>', 'one user (all their tasks)')
    .option('--task <id>', "one task (its user's totals count all their tasks)")
    .option('--runs <n>', "how many of each task's last completed runs give its cost per run", String(DEFAULT_COST_SAMPLE))
    .option('--month <YYYY-MM>', 'a past month: the forecast recorded on its first day against what it spent')
    .option('--json', 'print JSON (money as exact decimal strings)')
    .action(async (opts: { user?: string; task?: string; runs: string; month?: string; json?: boolean }) => {
      const userId = opts.user === undefined ? undefined : parseUserId(opts.user, '--user');
      const sample = parseSample(opts.runs);
      const month = opts.month === undefined ? undefined : parseMonth(opts.month);
      const thisMonth = monthAt(new Date(), 'UTC');
      if (month !== undefined && month > thisMonth) {
        throw new UserError(
          `--month ${month} has not begun; a forecast is of this month (${thisMonth}, run without --month) or a past one`,
        );
      }
      if (month !== undefined && month < thisMonth) {
        if (opts.task !== undefined)
          throw new UserError('--task does not go with a past --month: its forecast is recorded per user; use --user');
        return withConnections({ db: true }, async ({ pool }) =>
          printAccuracy(await forecastAccuracy(pool, month, userId), month, opts.json),
        );
      }
      await withConnections({ temporal: true, db: true }, async ({ client, pool }) => {
        const schedules = await taskSchedules(client, pool);
        if (opts.task !== undefined && !schedules.tasks.some((t) => t.taskId === opts.task)) {
          throw new UserError(
            `task ${JSON.stringify(opts.task)} has no cronledger schedule; list the tasks with \`cronledger tasks list\``,
          );
        }
        const forecast = await monthForecast(pool, schedules, { userId, taskId: opts.task, sample });
        if (opts.json) return printJson({ currency: 'USD', sampleRuns: sample, minRunsForCost: MIN_RUNS_FOR_COST, ...forecast });
        if (forecast.tasks.length > 0) {
          const t = taskForecastTable(forecast.tasks);
          printTable(
            t.headers.map((h) => h.toUpperCase()),
            t.rows,
            t.right,
          );
          process.stdout.write('\n');
        }
        if (forecast.users.length === 0) {
          process.stdout.write(userId ? `no tasks, budget or spend for user ${userId}\n` : 'no tasks, budgets or spend yet\n');
          return;
        }
        const u = userForecastTable(forecast.users);
        printTable(
          u.headers.map((h) => h.toUpperCase()),
          u.rows,
          u.right,
        );
        if (forecast.tasks.some((t) => t.cost.basis === 'worst-case')) {
          process.stdout.write(
            `worst case: a task with fewer than ${MIN_RUNS_FOR_COST} completed runs is forecast at the budget guard's worst case per run\n`,
          );
        }
        if (forecast.tasks.some((t) => t.cost.capped)) {
          process.stdout.write(
            "capped: a task's maxCostPerRun rules out its default models, so a run costs at most the cheap models' worst case, or is blocked (the guard's rule)\n",
          );
        }
        for (const u of forecast.users.filter((x) => x.highOverLimit)) {
          process.stdout.write(
            `${u.userId}: past the limit slots spend nothing (a "block" task's runs end blocked, a "pause" task is paused until the month turns over); ` +
              `every slot would bring the month to ${displayUsd(u.allSlotsMedianUsd)} (high ${displayUsd(u.allSlotsHighUsd)})\n`,
          );
        }
      });
    });
}

function printAccuracy(rows: ForecastAccuracy[], month: string, json: boolean | undefined): void {
  if (json) return printJson({ currency: 'USD', month, users: rows });
  if (rows.length === 0) {
    process.stdout.write(`no forecast was recorded for ${month} (the budget sweep records one a day)\n`);
    return;
  }
  printTable(
    ['USER', 'ZONE', 'FORECAST OF', 'LIMIT', 'FORECAST MEDIAN', 'FORECAST HIGH', 'SPENT', 'MEDIAN ERROR', 'WITHIN HIGH'],
    rows.map((r) => [
      r.userId,
      r.timeZone,
      r.forecastDay,
      r.limitUsd === null ? 'no limit' : displayUsd(r.limitUsd),
      displayUsd(r.medianUsd),
      displayUsd(r.highUsd),
      displayUsd(r.spentUsd),
      r.medianErrorPercent === null ? '-' : `${r.medianErrorPercent} %`,
      r.withinHigh ? 'yes' : 'no',
    ]),
    [3, 4, 5, 6, 7],
  );
}

function parseSample(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < 1 || n > 10_000) {
    throw new UserError(`--runs ${JSON.stringify(text)} is not a whole number from 1 to 10000; e.g. --runs 30`);
  }
  return n;
}
