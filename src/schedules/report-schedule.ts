import { ScheduleAlreadyRunning, type Client, type ScheduleOptions } from '@temporalio/client';
import { createHash } from 'node:crypto';
import { MANAGED_BY_MEMO_KEY, MANAGED_BY_VALUE, REPORT_SCHEDULE_ID } from '../constants';
import { UserError } from '../errors';
import { describeOrUndefined } from './describe-schedule';
import type { MonthlyReportInput } from '../workflows/monthly-report';
import { parseTimeZone } from '../time-zone';

/** At midnight on the 1st, in the schedule's zone: the previous month has just ended there. */
export const REPORT_CRON = '0 0 1 * *';
export const REPORT_WORKFLOW_TYPE = 'monthlyReport';

/** The action memo: what was applied, since Temporal compiles the cron string into calendars and can't give it back. */
interface ReportActionMemo {
  fingerprint: string;
  timezone: string;
}

const fingerprint = (timezone: string, taskQueue: string): string =>
  createHash('sha256')
    .update(JSON.stringify({ cron: REPORT_CRON, timezone, taskQueue, workflowType: REPORT_WORKFLOW_TYPE, version: 1 }))
    .digest('hex')
    .slice(0, 32);

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
      workflowType: REPORT_WORKFLOW_TYPE,
      workflowId: REPORT_SCHEDULE_ID,
      taskQueue,
      args: [input],
      memo: memo as unknown as Record<string, unknown>,
    },
    policies: { overlap: 'BUFFER_ALL', catchupWindow: '60 days' },
    state: { note: 'managed by cronledger (tasks apply / report schedule)' },
    memo: { [MANAGED_BY_MEMO_KEY]: MANAGED_BY_VALUE, kind: 'report' },
  };
}

export const isManagedReportSchedule = (memo: Record<string, unknown> | undefined): boolean =>
  memo?.[MANAGED_BY_MEMO_KEY] === MANAGED_BY_VALUE && memo?.kind === 'report';

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
  const options = reportScheduleOptions(timezone, opts.taskQueue);
  let current = await describeOrUndefined(client, REPORT_SCHEDULE_ID);
  if (!current) {
    try {
      await client.schedule.create(options);
      return 'created';
    } catch (err) {
      if (!(err instanceof ScheduleAlreadyRunning)) throw err;
      current = await client.schedule.getHandle(REPORT_SCHEDULE_ID).describe();
    }
  }
  if (!isManagedReportSchedule(current.memo)) {
    throw new UserError(`schedule ${REPORT_SCHEDULE_ID} exists but was not created by cronledger; delete it yourself or set "monthlyReport": false`);
  }
  const applied = current.action.memo as unknown as ReportActionMemo | undefined;
  const wanted = options.action.memo as unknown as ReportActionMemo;
  if (applied?.fingerprint === wanted.fingerprint) return 'unchanged';
  await client.schedule
    .getHandle(REPORT_SCHEDULE_ID)
    .update((prev) => ({ ...prev, spec: options.spec, action: options.action, policies: options.policies }));
  return 'updated';
}

/** The zone the monthly report schedule uses, if cronledger created one: `report deliver` defaults to it. */
export async function reportScheduleZone(client: Client): Promise<string | undefined> {
  const current = await describeOrUndefined(client, REPORT_SCHEDULE_ID);
  if (!current || !isManagedReportSchedule(current.memo)) return undefined;
  return (current.action.memo as unknown as ReportActionMemo | undefined)?.timezone;
}
