import type { Client, ScheduleOptions } from '@temporalio/client';
import { z } from 'zod';
import { MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE, REPORT_SCHEDULE_ID } from '../constants';
import { fingerprintOf } from '../hash';
import { parseTimeZone } from '../time-zone';
import { monthlyReport, type MonthlyReportInput } from '../workflows/monthly-report';
import { describeOrUndefined } from './describe-schedule';
import { reconcileSchedule } from './reconcile-schedule';
import { isManagedReportSchedule } from './schedule-memos';

/** At midnight on the 1st, in the schedule's zone: the previous month has just ended there. */
export const REPORT_CRON = '0 0 1 * *';

/** The action memo: what was applied, since Temporal compiles the cron string into calendars and can't give it back. */
const reportActionMemoSchema = z.object({ fingerprint: z.string(), timezone: z.string() });
type ReportActionMemo = z.infer<typeof reportActionMemoSchema>;

const fingerprint = (timezone: string, taskQueue: string): string =>
  fingerprintOf({ cron: REPORT_CRON, timezone, taskQueue, workflowType: monthlyReport.name, version: 1 });

/**
 * The monthly report schedule. Each start gets the ID `report-monthly-<nominal time>` (deterministic per month) and
 * works out the month it covers from that nominal time in the zone. Missed months (server down on the 1st) are caught up
 * within 60 days, one after another (BUFFER_ALL), each for its own month.
 */
export function reportScheduleOptions(timezone: string, taskQueue: string): ScheduleOptions {
  const input: MonthlyReportInput = { timezone };
  const memo: ReportActionMemo = { fingerprint: fingerprint(timezone, taskQueue), timezone };
  return {
    scheduleId: REPORT_SCHEDULE_ID,
    spec: { cronExpressions: [REPORT_CRON], timezone },
    action: {
      type: 'startWorkflow',
      workflowType: monthlyReport,
      workflowId: REPORT_SCHEDULE_ID,
      taskQueue,
      args: [input],
      memo,
    },
    policies: { overlap: 'BUFFER_ALL', catchupWindow: '60 days' },
    state: { note: 'managed by cronledger (tasks apply / report schedule)' },
    memo: { [MANAGED_BY_MEMO_KEY]: MANAGED_BY_VALUE, kind: 'report' },
  };
}

/**
 * Creates or updates the `report-monthly` schedule so it fires `0 0 1 * *` in `timezone` on `taskQueue`. Running it
 * again with the same settings changes nothing; concurrent callers converge. A schedule with that ID that cronledger
 * did not create is never touched. A paused schedule stays paused.
 */
export async function ensureReportSchedule(
  client: Client,
  opts: { timezone: string; taskQueue: string },
): Promise<'created' | 'updated' | 'unchanged'> {
  const timezone = parseTimeZone(opts.timezone, 'monthlyReport.timezone');
  const reconciled = await reconcileSchedule(client, {
    options: reportScheduleOptions(timezone, opts.taskQueue),
    fingerprint: fingerprint(timezone, opts.taskQueue),
    kind: 'report',
    notOurs: `schedule ${REPORT_SCHEDULE_ID} exists but was not created by cronledger; delete it yourself or set "monthlyReport": false`,
  });
  return reconciled.outcome;
}

/** The zone the monthly report schedule uses, if cronledger created one: `report deliver` defaults to it. */
export async function reportScheduleZone(client: Client): Promise<string | undefined> {
  const current = await describeOrUndefined(client, REPORT_SCHEDULE_ID);
  if (!current || !isManagedReportSchedule(current.memo)) return undefined;
  return reportActionMemoSchema.safeParse(current.action.memo).data?.timezone;
}
