import type { Command } from 'commander';
import { budgetChangesOf, loadBudgetsFile, parseMonthlyLimit } from '../../budgets/budget-file';
import { budgetStatus, budgetStatusOfAll } from '../../budgets/budget-status';
import { budgetStatusTable } from '../../budgets/status-table';
import { applyBudgets, budgetInForce, listBudgets } from '../../budgets/budgets-store';
import { UserError } from '../../errors';
import { userForecastCells, userForecastHeaders, userForecastRight } from '../../forecast/forecast-table';
import { monthForecast } from '../../forecast/month-forecast';
import { taskSchedules } from '../../schedules/scheduled-tasks';
import { parseUserId } from '../../ledger/user-id';
import { displayUsd } from '../../money';
import { parseTimeZone } from '../../time-zone';
import { withConnections } from '../connect';
import { printAppliedBudgets, printJson, printTable } from '../output';

/** `cronledger budgets apply|set|list|status`: monthly USD limits per user, versioned like prices. */
export function registerBudgetsCommands(program: Command): void {
  const budgets = program.command('budgets').description('monthly USD limits per user: downgrade at 80 %, block at 100 %');

  budgets
    .command('apply')
    .description('add the budget versions and downgrades of FILE (a budgets or tasks file) that differ from those in force')
    .argument('<file>', 'JSON file with "budgets" and/or "downgrade" sections')
    .option('--json', 'print JSON')
    .action(async (file: string, opts: { json?: boolean }) => {
      const parsed = loadBudgetsFile(file); // validated before connecting
      const changes = budgetChangesOf(parsed.budgets, file);
      await withConnections({ db: 'operator' }, async ({ pool }) => {
        const result = await applyBudgets(pool, { budgets: changes, downgrade: parsed.downgrade }, file);
        if (opts.json) return printJson(result);
        printAppliedBudgets(result);
      });
    });

  budgets
    .command('set')
    .description('give USER (or, with --default, everyone without a budget) a new monthly limit from now on')
    .argument('[user]', 'user ID')
    .requiredOption('--monthly <usd>', 'monthly limit in USD, e.g. 25.00')
    .option('--tz <zone>', "IANA time zone where the month starts (default: the current budget's zone, else UTC)")
    .option('--default', 'set the default budget for users without their own')
    .option('--json', 'print JSON')
    .action(async (user: string | undefined, opts: { monthly: string; tz?: string; default?: boolean; json?: boolean }) => {
      if (opts.default && user !== undefined) throw new UserError(`give either a user (${JSON.stringify(user)}) or --default, not both`);
      if (!opts.default && user === undefined) throw new UserError('name a user (`budgets set USER --monthly 25.00`) or pass --default');
      const userId = opts.default ? null : parseUserId(user as string, 'user');
      const monthlyLimitUsd = parseMonthlyLimit(opts.monthly);
      const zone = opts.tz === undefined ? undefined : parseTimeZone(opts.tz);
      await withConnections({ db: 'operator' }, async ({ pool }) => {
        const current = userId === null ? null : await budgetInForce(pool, userId, new Date());
        const timeZone = zone ?? (current?.source === 'user' ? current.timeZone : 'UTC');
        const result = await applyBudgets(pool, { budgets: [{ userId, monthlyLimitUsd, timeZone }] }, 'cronledger budgets set');
        if (opts.json) return printJson(result);
        printAppliedBudgets(result);
      });
    });

  budgets
    .command('list')
    .description('every budget version, the default first')
    .option('--json', 'print JSON (limits as exact decimal strings)')
    .action(async (opts: { json?: boolean }) => {
      await withConnections({ db: true }, async ({ pool }) => {
        const rows = (await listBudgets(pool)).map((r) => ({
          user: r.user_id ?? 'default',
          monthlyLimitUsd: r.monthly_limit_usd,
          timeZone: r.time_zone,
          effectiveFrom: r.effective_from.toISOString(),
          source: r.source,
        }));
        if (opts.json) return printJson({ currency: 'USD', budgets: rows, noBudgetMeans: 'no limit' });
        if (rows.length === 0) {
          process.stdout.write('no budget configured: no limit. Add one with `cronledger budgets set USER --monthly 25.00`\n');
          return;
        }
        printTable(
          ['USER', 'MONTHLY LIMIT', 'ZONE', 'EFFECTIVE FROM', 'SOURCE'],
          rows.map((r) => [r.user, displayUsd(r.monthlyLimitUsd), r.timeZone, r.effectiveFrom, r.source]),
          [1],
        );
        if (!rows.some((r) => r.user === 'default'))
          process.stdout.write('users without a budget of their own: no budget configured, no limit\n');
      });
    });

  budgets
    .command('status')
    .description('limit, spent, reserved, remaining and tier for this month, per user, with the month-end forecast (`cronledger forecast`)')
    .option('--user <id>', 'one user')
    .option('--no-forecast', 'leave out the forecast columns (they read the schedules from Temporal)')
    .option('--json', 'print JSON (money as exact decimal strings)')
    .action(async (opts: { user?: string; forecast: boolean; json?: boolean }) => {
      const userId = opts.user === undefined ? undefined : parseUserId(opts.user, '--user');
      await withConnections({ db: true, temporal: opts.forecast }, async ({ client, pool }) => {
        const status = userId === undefined ? await budgetStatusOfAll(pool) : await budgetStatus(pool, { userId });
        const forecast = opts.forecast ? await monthForecast(pool, await taskSchedules(client, pool), { userId }) : undefined;
        if (opts.json) return printJson({ currency: 'USD', users: status, ...(forecast ? { forecast: forecast.users } : {}) });
        if (status.length === 0) {
          process.stdout.write('no budgets and no spend yet\n');
          return;
        }
        const table = budgetStatusTable(status);
        const byUser = new Map(forecast?.users.map((u) => [u.userId, u]));
        printTable(
          [...table.headers, ...(forecast ? userForecastHeaders : [])].map((h) => h.toUpperCase()),
          table.rows.map((row, i) => [...row, ...(forecast ? userForecastCells(byUser.get(status[i].userId)) : [])]),
          [...table.right, ...(forecast ? userForecastRight.map((k) => table.headers.length + k) : [])],
        );
      });
    });
}
