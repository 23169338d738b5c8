import { WorkflowFailedError } from '@temporalio/client';
import { Option, type Command } from 'commander';
import { workflowUrl } from '../../config';
import { REPORT_SCHEDULE_ID, ROLLUP_SCHEDULE_ID } from '../../constants';
import { UserError } from '../../errors';
import { displayUsd } from '../../money';
import { buildReport } from '../../reports/build-report';
import { monthAt, parseMonth, type Month } from '../../reports/month';
import { loadBudgetsFile } from '../../budgets/budget-file';
import { loadPricesFile } from '../../ledger/prices';
import { repriceMonth } from '../../reports/reprice';
import { REPRICE_FORMATS, renderRepricing, type RepriceFormat } from '../../reports/render-reprice';
import { parseTimeZone } from '../../time-zone';
import { renderHtml } from '../../reports/render-html';
import { renderCsvAll, renderCsvTable, renderJson, renderMarkdown, renderTable, reportForCut } from '../../reports/render';
import { ensureReportSchedule, REPORT_CRON, reportScheduleZone } from '../../schedules/report-schedule';
import { ensureRollupSchedule, ROLLUP_REFRESH_EVERY } from '../../schedules/rollup-schedule';
import { terminalProgress } from '../../reports/terminal-progress';
import { REPORT_FORMATS, type ReportCut, type ReportFormat } from '../../reports/types';
import { monthlyReport, monthlyReportWorkflowId, type MonthlyReportInput, type MonthlyReportResult } from '../../workflows/monthly-report';
import { withConnections } from '../connect';
import { printJson } from '../output';

export function registerReportCommands(program: Command): void {
  const report = program
    .command('report')
    .description('usage by user, day or model for a month, with unit economics; and the monthly report');

  // The default subcommand, so `report --month ...` works while `report deliver --month ...` keeps its own --month.
  report
    .command('show', { isDefault: true })
    .description('usage for a month by user (default), by day and kind, or by model and kind, with unit economics')
    .option('--month <YYYY-MM>', 'the month to report')
    .addOption(
      new Option('--by <cut>', 'one line per user, per day and kind, or per model and kind')
        .choices(['user', 'day', 'model'])
        .default('user'),
    )
    .addOption(
      new Option('--format <format>', 'output format; csv is the cut as one table (a row per user, day or model), csv-all every section')
        .choices(REPORT_FORMATS)
        .default('table'),
    )
    .option('--tz <zone>', 'IANA time zone whose month and day boundaries apply', 'UTC')
    .option(
      '--reprice <file>',
      'what if: the month per user, task and model under the prices FILE (the format of `prices apply`): ledger, repriced, difference; writes nothing',
    )
    .option('--downgrade <file>', 'with --reprice: price each model as the one this map names (a budgets file\'s "downgrade" section)')
    .action(async (opts: { month?: string; by: ReportCut; format: ReportFormat; tz: string; reprice?: string; downgrade?: string }) => {
      const month = parseMonth(opts.month);
      const timeZone = parseTimeZone(opts.tz);
      if (opts.reprice !== undefined || opts.downgrade !== undefined) return whatIfReport({ ...opts, month, timeZone });
      await withConnections({ db: true }, async ({ pool }) => {
        const progress = terminalProgress();
        const built = await buildReport(pool, { month, timeZone, onProgress: progress.update }).finally(progress.finish);
        const render: Record<ReportFormat, () => string> = {
          table: () => renderTable(built, opts.by),
          json: () => renderJson(reportForCut(built, opts.by)),
          csv: () => renderCsvTable(built, opts.by),
          'csv-all': () => renderCsvAll(built),
          md: () => renderMarkdown(built),
          html: () => renderHtml(built),
        };
        const out = render[opts.format]();
        process.stdout.write(out);
      });
    });

  report
    .command('schedule')
    .description(
      `create or update the ${REPORT_SCHEDULE_ID} schedule (cron "${REPORT_CRON}" in the zone) that runs monthlyReport, and ${ROLLUP_SCHEDULE_ID} (rollupRefresh every minute)`,
    )
    .option('--tz <zone>', 'IANA time zone of the schedule and of the report months', 'UTC')
    .option('--json', 'print JSON')
    .action(async (opts: { tz: string; json?: boolean }) => {
      const timezone = parseTimeZone(opts.tz);
      await withConnections({ temporal: true }, async ({ client, conn }) => {
        const outcome = await ensureReportSchedule(client, { timezone, taskQueue: conn.taskQueue });
        const rollupRefresh = await ensureRollupSchedule(client, { taskQueue: conn.taskQueue });
        const next = (await client.schedule.getHandle(REPORT_SCHEDULE_ID).describe()).info.nextActionTimes.map((d) => d.toISOString());
        if (opts.json) return printJson({ scheduleId: REPORT_SCHEDULE_ID, outcome, timezone, nextActionTimes: next, rollupRefresh });
        process.stdout.write(`${outcome.padEnd(9)} ${REPORT_SCHEDULE_ID} (${REPORT_CRON} in ${timezone})\n`);
        process.stdout.write(`${rollupRefresh.padEnd(9)} ${ROLLUP_SCHEDULE_ID} (every ${ROLLUP_REFRESH_EVERY})\n`);
        if (next.length) process.stdout.write(`next: ${next.slice(0, 2).join(', ')}\n`);
      });
    });

  report
    .command('deliver')
    .description('run the monthlyReport workflow for a month through Temporal, wait, and print where the artifacts are')
    .option('--month <YYYY-MM>', 'a past month, or the current one so far')
    .option('--tz <zone>', "IANA time zone of the month (default: the report schedule's zone, else UTC)")
    .option('--json', 'print the workflow result as JSON')
    .action(async (opts: { month?: string; tz?: string; json?: boolean }) => {
      const month = parseMonth(opts.month);
      const givenZone = opts.tz === undefined ? undefined : parseTimeZone(opts.tz);
      await withConnections({ temporal: true }, async ({ client, conn }) => {
        const timezone = givenZone ?? (await reportScheduleZone(client)) ?? 'UTC';
        const current = monthAt(new Date(), timezone);
        if (month > current) {
          throw new UserError(
            `--month ${month} has not started yet in ${timezone} (it is ${current} there); deliver a past month or the current one`,
          );
        }
        const workflowId = monthlyReportWorkflowId(month);
        const input: MonthlyReportInput = { month, timezone };
        const handle = await client.workflow.start(monthlyReport, {
          workflowId,
          taskQueue: conn.taskQueue,
          args: [input],
          workflowIdReusePolicy: 'ALLOW_DUPLICATE', // running it again regenerates (byte-identical unless the ledger changed)
          workflowIdConflictPolicy: 'USE_EXISTING', // one already running for this month: wait for that one
        });
        const link = workflowUrl(conn, workflowId, handle.firstExecutionRunId);
        process.stderr.write(`started ${workflowId} on task queue ${conn.taskQueue}${link ? ` (${link})` : ''}\n`);
        const hint = setTimeout(
          () =>
            process.stderr.write(
              `still waiting for ${workflowId}: is a worker polling task queue ${conn.taskQueue}? (\`cronledger dev up\` starts workers)\n`,
            ),
          15_000,
        );
        let result: MonthlyReportResult;
        try {
          result = await handle.result();
        } catch (err) {
          if (err instanceof WorkflowFailedError) {
            const inner = err.cause?.cause instanceof Error ? err.cause.cause : err.cause;
            const cause = inner?.message ?? err.message;
            throw new UserError(`monthly report ${workflowId} failed: ${cause}`, 1);
          }
          throw err;
        } finally {
          clearTimeout(hint);
        }
        if (opts.json) return printJson({ workflowId, ...result });
        const s = result.summary;
        process.stdout.write(
          `report ${result.month} (${result.timeZone})${s.complete ? '' : ', month so far'}: total ${displayUsd(s.totalUsd)}, ` +
            `${s.calls} calls, ${s.completedRuns} completed runs\n`,
        );
        process.stdout.write(`artifacts in ${result.dir}\n`);
        for (const f of result.files) process.stdout.write(`  ${f.path}\n`);
        const d = result.delivery;
        process.stdout.write(
          d.status === 'posted'
            ? `delivered to ${d.target}\n`
            : d.status === 'already-delivered'
              ? `already delivered at ${d.deliveredAt}; not posted again\n`
              : 'not delivered: REPORT_WEBHOOK_URL is not set on the workers\n',
        );
      });
    });
}

/** `report --reprice FILE [--downgrade FILE]`: every input checked before the database is asked anything. */
async function whatIfReport(opts: { month: Month; timeZone: string; format: ReportFormat; reprice?: string; downgrade?: string }) {
  const pricesPath = opts.reprice;
  if (pricesPath === undefined) throw new UserError('--downgrade needs --reprice FILE: the prices to reprice the month under');
  if (!(REPRICE_FORMATS as readonly string[]).includes(opts.format)) {
    throw new UserError(`--format ${opts.format} is not available with --reprice: use ${REPRICE_FORMATS.join(', ')}`);
  }
  const prices = loadPricesFile(pricesPath);
  let downgrade: { map: Record<string, string>; path: string } | undefined;
  if (opts.downgrade !== undefined) {
    const map = loadBudgetsFile(opts.downgrade).downgrade;
    if (!map || Object.keys(map).length === 0) {
      throw new UserError(
        `${opts.downgrade} has no "downgrade" section: give a map of models, e.g. {"downgrade": {"openai/gpt-4o-mini": "openai/gpt-4.1-nano"}}`,
      );
    }
    downgrade = { map, path: opts.downgrade };
  }
  await withConnections({ db: true }, async ({ pool }) => {
    const repriced = await repriceMonth(pool, { month: opts.month, timeZone: opts.timeZone, prices, pricesPath, downgrade });
    process.stdout.write(renderRepricing(repriced, opts.format as RepriceFormat));
  });
}
