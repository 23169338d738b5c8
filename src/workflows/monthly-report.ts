import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { DeliveryOutcome, GeneratedReport } from '../reports/types';
import { scheduledTimeOf } from './scheduled-time';

/**
 * The monthly report: aggregate the month (activities, on Dinero bigint), write the four artifacts, deliver once.
 *
 * Deterministic: no Node imports, no clock. A scheduled start carries no month; the month is the one before the
 * schedule's nominal time (TemporalScheduledStartTime, or the ID suffix the schedule appends), and the calendar math in
 * the schedule's zone runs in an activity, whose result is recorded in history.
 */
export interface MonthlyReportInput {
  /** IANA zone whose month boundaries the report follows; the schedule passes its own. Default UTC. */
  timezone?: string;
  /** YYYY-MM. Omitted by the schedule: then the month before the scheduled time, in `timezone`. */
  month?: string;
}

export interface MonthlyReportResult extends Pick<GeneratedReport, 'month' | 'timeZone' | 'dir' | 'files' | 'summary'> {
  delivery: DeliveryOutcome;
}

/** Workflow ID of an on-demand report for a month (`report deliver`); scheduled ones are `report-monthly-<nominal time>`. */
export const monthlyReportWorkflowId = (month: string): string => `report-monthly-${month}`;

const reporting = proxyActivities<Activities>({
  startToCloseTimeout: '30 minutes',
  retry: {
    initialInterval: '2 seconds',
    backoffCoefficient: 2,
    maximumInterval: '1 minute',
    maximumAttempts: 5,
    nonRetryableErrorTypes: ['UserError'],
  },
});

/** Webhook delivery: retried with exponential backoff (1 s, 2 s, 4 s ... up to 5 min) for about an hour. */
const delivering = proxyActivities<Activities>({
  startToCloseTimeout: '1 minute',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '5 minutes',
    maximumAttempts: 16,
    nonRetryableErrorTypes: ['WebhookRejected', 'UserError'],
  },
});

export async function monthlyReport(input: MonthlyReportInput = {}): Promise<MonthlyReportResult> {
  const timezone = input.timezone ?? 'UTC';
  const month =
    input.month ?? (await reporting.resolveReportMonth({ scheduledAt: scheduledTimeOf(workflowInfo()).toISOString(), timezone })).month;
  const generated = await reporting.generateMonthlyReport({ month, timezone });
  const delivery = await delivering.deliverMonthlyReport({ generated });
  return {
    month: generated.month,
    timeZone: generated.timeZone,
    dir: generated.dir,
    files: generated.files,
    summary: generated.summary,
    delivery,
  };
}
