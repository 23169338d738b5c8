import type pg from 'pg';

/** A threshold event: the user's month reached 80 % (cheap from now on) or 100 % (blocked). */
export interface BudgetEventRow {
  event_id: string;
  user_id: string;
  time_zone: string;
  month: string;
  threshold: 80 | 100;
  limit_usd: string;
  spent_usd: string;
  reserved_usd: string;
  created_at: Date;
  delivered_at: Date | null;
  attempts: number;
}

/**
 * Stable per user, zone, month and threshold: a receiver drops repeats by it. reserve_budget (migration 010) records
 * the events under this same ID, in the decision's statement, once per user and month.
 */
export const budgetEventId = (userId: string, timeZone: string, month: string, threshold: number): string =>
  `budget:${userId}:${timeZone}:${month}:${threshold}`;

export async function budgetEvent(db: pg.Pool, eventId: string): Promise<BudgetEventRow | null> {
  const { rows } = await db.query<BudgetEventRow>(`select *, to_char(month, 'YYYY-MM') as month from budget_events where event_id = $1`, [
    eventId,
  ]);
  return rows[0] ?? null;
}

/** Counts a delivery attempt; on success marks the event delivered (the first success wins, later ones change nothing). */
export async function recordEventDelivery(
  db: pg.Pool,
  eventId: string,
  outcome: { ok: true } | { ok: false; error: string },
): Promise<void> {
  await db.query(
    `update budget_events set attempts = attempts + 1,
            delivered_at = case when $2 then coalesce(delivered_at, now()) else delivered_at end,
            last_error = case when $2 then last_error else $3 end
      where event_id = $1`,
    [eventId, outcome.ok, outcome.ok ? null : outcome.error],
  );
}

/** Events recorded and never delivered (a run that died before delivering): for a sweeper to deliver. */
export async function undeliveredEvents(db: pg.Pool): Promise<string[]> {
  return (
    await db.query<{ event_id: string }>('select event_id from budget_events where delivered_at is null order by created_at')
  ).rows.map((r) => r.event_id);
}
