import type pg from 'pg';
import { inTransaction } from '../db/pool';
import { toExactString } from '../money';
import type { TokenUsage } from '../models/provider';
import { costOfUsage, type CallKind } from './cost';
import type { LedgerEntry } from './entries';
import { priceInForce } from './prices';
import { validateUsage } from './validate-usage';

export interface UsageBooking {
  /** The run's workflow ID; null for system spend that belongs to no run (then give idempotencyKey). */
  runId: string | null;
  step: string;
  /** The activity attempt that made the call: a retried call the provider billed again gets its own row. */
  attempt: number;
  /** Defaults to `<runId>:<step>:<attempt>`. */
  idempotencyKey?: string;
  userId: string;
  taskId: string | null;
  model: string;
  kind: CallKind;
  status: 'ok' | 'failed';
  usage: TokenUsage;
  providerModel: string | null;
  providerRequestId: string | null;
  workerId: string | null;
  /** When the usage happened; defaults to the database's now(). Only imports and late entries set it. */
  occurredAt?: Date;
}

export const usageKey = (b: Pick<UsageBooking, 'runId' | 'step' | 'attempt' | 'idempotencyKey'>): string => {
  if (b.idempotencyKey) return b.idempotencyKey;
  if (!b.runId) throw new Error('system spend (no runId) needs an explicit idempotencyKey');
  return `${b.runId}:${b.step}:${b.attempt}`;
};

/**
 * Books one model call: validates the counts, prices them with the version in force at that moment, and inserts
 * with `on conflict do nothing`, so retrying the booking returns the row already there instead of a second one.
 * The cost is frozen on the row together with its price version; a later price change never touches it.
 */
export async function recordUsage(pool: pg.Pool, booking: UsageBooking): Promise<LedgerEntry> {
  const key = usageKey(booking);
  validateUsage(booking.usage, `usage for ${key}`);
  return inTransaction(pool, async (db) => {
    const at: Date = booking.occurredAt ?? (await db.query<{ now: Date }>('select now() as now')).rows[0].now;
    const price = await priceInForce(db, booking.model, at);
    const cost = costOfUsage(booking.kind, booking.usage, price, at);
    const u = booking.usage;
    const inserted = await db.query<LedgerEntry>(
      `insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, task_id, model, provider_model, kind, status,
                                 attempt, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens,
                                 cost_usd, price_version, provider_request_id, worker_id, created_at)
       values ($1, 'usage', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
       on conflict (idempotency_key) do nothing
       returning *`,
      [key, booking.userId, booking.runId, booking.taskId, booking.model, booking.providerModel, booking.kind, booking.status,
        booking.attempt, u.promptTokens, u.cachedPromptTokens, u.completionTokens, u.reasoningTokens, toExactString(cost),
        price.version, booking.providerRequestId, booking.workerId, at],
    );
    if (inserted.rows.length === 1) return inserted.rows[0];
    return (await db.query<LedgerEntry>('select * from usage_ledger where idempotency_key = $1', [key])).rows[0];
  });
}
