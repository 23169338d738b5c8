import type pg from 'pg';

/**
 * A budget event: `threshold`, the user's month reached a band (budget_bands: cheap from 80 %, blocked from 100 %), or
 * `forecast-over-limit`, its month-end forecast at the median cost per run went over the limit (threshold 100).
 */
export interface BudgetEventRow {
  event_id: string;
  kind: 'threshold' | 'forecast-over-limit';
  /** The median forecast of a `forecast-over-limit` event; null for a threshold. */
  forecast_usd: string | null;
  user_id: string;
  time_zone: string;
  month: string;
  /** The band's starting percentage of the limit. */
  threshold: number;
  limit_usd: string;
  spent_usd: string;
  reserved_usd: string;
  created_at: Date;
  delivered_at: Date | null;
  attempts: number;
  last_attempt_at: Date | null;
}

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
  await db.query('select record_budget_event_delivery($1, $2, $3)', [eventId, outcome.ok, outcome.ok ? null : outcome.error]);
}

/**
 * Events recorded and never delivered (a run that died before delivering, a webhook that was down or refused), due for
 * another attempt: the first `retryAfterSeconds` after the event (the run that recorded it delivers it first), then
 * twice as long after each failed attempt, at most an hour apart, so a webhook that stays down is not hammered.
 * Oldest first, at most `limit`: the budget sweeper delivers them under their own event IDs.
 */
export async function undeliveredEvents(db: pg.Pool, opts: { retryAfterSeconds: number; limit: number }): Promise<string[]> {
  const { rows } = await db.query<{ event_id: string }>(
    `select event_id from budget_events
      where delivered_at is null
        and coalesce(last_attempt_at, created_at)
            + least(make_interval(secs => $1::integer * (1 << least(attempts, 12))), interval '1 hour') <= now()
      order by created_at, event_id limit $2`,
    [opts.retryAfterSeconds, opts.limit],
  );
  return rows.map((r) => r.event_id);
}
