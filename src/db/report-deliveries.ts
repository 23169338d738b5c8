import type pg from 'pg';

/** The report_deliveries table: which report went where, so each month (or each report of a month under way) posts once. */

/** Takes the month's delivery lock for this transaction, or returns false at once if another delivery holds it. */
export async function tryLockMonthDelivery(tx: pg.PoolClient, month: string): Promise<boolean> {
  const { rows } = await tx.query<{ ok: boolean }>(
    `select pg_try_advisory_xact_lock(hashtextextended('cronledger-report-delivery:' || $1, 0)) as ok`,
    [month],
  );
  return rows[0].ok;
}

/**
 * When the month was delivered already: as a complete month, or (for a month under way, `complete` false) as this
 * exact report. Undefined when it still has to be posted.
 */
export async function deliveredAt(
  tx: pg.PoolClient,
  report: { month: string; complete: boolean; reportSha256: string },
): Promise<Date | undefined> {
  const { rows } = await tx.query<{ delivered_at: Date }>(
    `select delivered_at from report_deliveries
      where month = $1 and (complete or (not $2::boolean and report_sha256 = $3))
      order by delivered_at limit 1`,
    [report.month, report.complete, report.reportSha256],
  );
  return rows[0]?.delivered_at;
}

export async function recordDelivery(
  tx: pg.PoolClient,
  d: {
    month: string;
    timeZone: string;
    complete: boolean;
    reportSha256: string;
    target: string;
    workflowId: string | null;
    attempt: number | null;
    responseStatus: number;
  },
): Promise<void> {
  await tx.query('select record_report_delivery($1, $2, $3, $4, $5, $6, $7, $8)', [
    d.month,
    d.timeZone,
    d.complete,
    d.reportSha256,
    d.target,
    d.workflowId,
    d.attempt,
    d.responseStatus,
  ]);
}
