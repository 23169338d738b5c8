import type pg from 'pg';
import type { UsageBooking } from './record-usage';
import { usageKey } from './record-usage';

/** A usage_exceptions row: billed usage that could not become a ledger row, kept with its raw counts and why. */
export interface UsageException {
  id: string;
  idempotency_key: string;
  user_id: string;
  workflow_id: string | null;
  run_id: string | null;
  task_id: string | null;
  model: string;
  provider_model: string | null;
  kind: 'chat' | 'embedding';
  status: 'ok' | 'failed';
  attempt: number;
  raw_usage: Record<string, unknown>;
  reason: string;
  provider_request_id: string | null;
  worker_id: string | null;
  created_at: Date;
}

/**
 * Keeps usage that the ledger refused (invalid counts, or no price in force when it came back) under the same key the
 * ledger row would have had, so it is recorded once however often the booking is retried. Raw counts are stored as
 * JSON exactly as the provider sent them (they may be negative, fractional or absurd: that is why they are here).
 */
export async function recordUsageException(db: pg.Pool, booking: UsageBooking, reason: string): Promise<UsageException> {
  const key = usageKey(booking);
  const { rows } = await db.query<UsageException>(
    'select * from record_usage_exception($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)',
    [
      key,
      booking.userId,
      booking.workflowId ?? null,
      booking.runId,
      booking.taskId,
      booking.model,
      booking.providerModel,
      booking.kind,
      booking.status,
      booking.attempt,
      JSON.stringify(rawUsage(booking.usage)),
      reason,
      booking.providerRequestId,
      booking.workerId,
    ],
  );
  return rows[0];
}

export async function listUsageExceptions(db: pg.Pool, filter: { userId?: string; limit?: number } = {}): Promise<UsageException[]> {
  const { rows } = await db.query<UsageException>(
    `select * from usage_exceptions where ($1::text is null or user_id = $1) order by id limit $2`,
    [filter.userId ?? null, filter.limit ?? 1000],
  );
  return rows;
}

/** JSON has no NaN or Infinity: keep such values as their text, so the row shows what the provider sent. */
const rawUsage = (usage: object): Record<string, unknown> =>
  Object.fromEntries(Object.entries(usage).map(([k, v]) => [k, typeof v === 'number' && !Number.isFinite(v) ? String(v) : v]));
