import { ApplicationFailure, Context } from '@temporalio/activity';
import type pg from 'pg';
import { secretSetting } from '../config';
import { UserError } from '../errors';
import { reportsDir, writeArtifacts } from '../reports/artifacts';
import { buildReport } from '../reports/build-report';
import { buildCurrentMonths, refreshRollups } from '../reports/rollups-write';
import { deliverOnce, readWebhook, WebhookRejectedError } from '../reports/delivery';
import { parseMonth, previousMonthOf } from '../reports/month';
import { parseTimeZone } from '../time-zone';
import type { DeliveryOutcome, GeneratedReport, RollupRefreshResult } from '../reports/types';

/** Optional settings of the report activities; unset ones are read from the worker's environment at call time. */
export interface ReportActivityOptions {
  /** Where artifacts go: default `$CRONLEDGER_REPORTS_DIR`, else `<data folder>/reports`. */
  reportsDir?: string;
  /** Webhook to post the monthly report to: default `$REPORT_WEBHOOK_URL`; an empty string turns delivery off. */
  reportWebhookUrl?: string;
  /** Its signing secret (`whsec_<base64>`): default `$REPORT_WEBHOOK_SECRET`. */
  reportWebhookSecret?: string;
}

export interface ReportActivityDeps extends ReportActivityOptions {
  pool: pg.Pool;
}

/** UserErrors (a bad month or zone) are the caller's to fix: fail the workflow at once instead of retrying. */
async function userErrorsFinal<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof UserError) throw ApplicationFailure.nonRetryable(err.message, 'UserError');
    if (err instanceof WebhookRejectedError) throw ApplicationFailure.nonRetryable(err.message, 'WebhookRejected');
    throw err;
  }
}

export const createReportActivities = (deps: ReportActivityDeps) => ({
  /** The month a scheduled report covers: the one before the nominal time's month, in the schedule's zone. */
  async resolveReportMonth(input: { scheduledAt: string; timezone: string }): Promise<{ month: string }> {
    return userErrorsFinal(async () => ({
      month: previousMonthOf(new Date(input.scheduledAt), parseTimeZone(input.timezone, 'timezone')),
    }));
  },

  /**
   * The rollupRefresh schedule's one step: folds the rollup queues into every tracked zone and builds the month under
   * way where it is not built yet (cheap at its start), heartbeating per batch.
   */
  async foldRollupQueues(): Promise<RollupRefreshResult> {
    const onProgress = (p: unknown) => Context.current().heartbeat(p);
    const folded = await refreshRollups(deps.pool, { onProgress });
    const built = await buildCurrentMonths(deps.pool, onProgress);
    return {
      entries: folded.entries,
      runChanges: folded.runChanges,
      buckets: folded.buckets,
      monthsBuilt: built.map((b) => `${b.zone} ${b.month}`),
    };
  },

  /** Refreshes the rollups, aggregates the month with Dinero and writes usage.{json,csv,md,html}. */
  async generateMonthlyReport(input: { month: string; timezone: string }): Promise<GeneratedReport> {
    return userErrorsFinal(async () => {
      const month = parseMonth(input.month, 'month');
      const timeZone = parseTimeZone(input.timezone, 'timezone');
      const report = await buildReport(deps.pool, {
        month,
        timeZone,
        onProgress: (p) => Context.current().heartbeat(p),
      });
      return writeArtifacts(report, deps.reportsDir ?? reportsDir());
    });
  },

  /** Posts the summary to the webhook unless it is off or this month was delivered already. */
  async deliverMonthlyReport(input: { generated: GeneratedReport }): Promise<DeliveryOutcome> {
    return userErrorsFinal(async () => {
      // A malformed URL or secret fails the workflow at once, without its value.
      const webhook = readWebhook(
        deps.reportWebhookUrl ?? process.env.REPORT_WEBHOOK_URL,
        deps.reportWebhookSecret ?? secretSetting('REPORT_WEBHOOK_SECRET'),
        { url: 'REPORT_WEBHOOK_URL', secret: 'REPORT_WEBHOOK_SECRET' },
      );
      if (!webhook) return { status: 'not-configured' };
      const info = Context.current().info;
      return deliverOnce(deps.pool, {
        webhook,
        generated: input.generated,
        workflowId: info.workflowExecution?.workflowId,
        attempt: info.attempt,
      });
    });
  },
});
