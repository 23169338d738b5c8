import type pg from 'pg';
import { atto, BLOCKED_FROM_PERCENT, CHEAP_FROM_PERCENT, usdOf } from './tier';

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

/** Stable per user, zone, month and threshold: a receiver drops repeats by it. */
export const budgetEventId = (userId: string, timeZone: string, month: string, threshold: number): string =>
  `budget:${userId}:${timeZone}:${month}:${threshold}`;

/**
 * Records the thresholds this decision reached (spent + reserved, with the decision's own reservation; a blocked run
 * counts as 100 %), once per user and month: a unique key, so racing decisions record one row. Returns the IDs this
 * call recorded, for the run that recorded them to deliver.
 */
export async function recordThresholdEvents(
  db: pg.PoolClient,
  e: {
    userId: string;
    timeZone: string;
    month: string;
    limitUsd: string;
    spentUsd: string;
    reservedUsd: string;
    usedAfter: bigint;
    blocked: boolean;
  },
): Promise<string[]> {
  const limit = atto(e.limitUsd);
  const reached = [
    ...(e.usedAfter * 100n >= limit * CHEAP_FROM_PERCENT || e.blocked ? [80] : []),
    ...(e.usedAfter * 100n >= limit * BLOCKED_FROM_PERCENT || e.blocked ? [100] : []),
  ];
  const ids: string[] = [];
  for (const threshold of reached) {
    const id = budgetEventId(e.userId, e.timeZone, e.month, threshold);
    const { rowCount } = await db.query(
      `insert into budget_events (event_id, user_id, time_zone, month, threshold, limit_usd, spent_usd, reserved_usd)
       values ($1, $2, $3, to_date($4, 'YYYY-MM'), $5, $6, $7, $8) on conflict do nothing`,
      [id, e.userId, e.timeZone, e.month, threshold, e.limitUsd, e.spentUsd, usdOf(e.usedAfter - atto(e.spentUsd))],
    );
    if (rowCount === 1) ids.push(id);
  }
  return ids;
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
