import type pg from 'pg';
import { inTransaction } from '../db/pool';
import { toExactString } from '../money';
import type { TokenUsage } from '../models/provider';
import { costOfUsage, type CallKind } from './cost';
import type { LedgerEntry } from './entries';
import { priceInForce } from './prices';
import { validateUsage } from './validate-usage';

export interface UsageBooking {
  /**
   * The execution that made the call: Temporal's run ID, which a slot retry and a reset both change, so each
   * execution's calls get their own rows. Null for system spend that belongs to no run (then give idempotencyKey).
   */
  runId: string | null;
  /** The slot's workflow ID (shared by every execution of the slot); kept in its own column. */
  workflowId?: string | null;
  step: string;
  /** Which call of this step: 1, then 2, 3 ... for each call made again after a billed failure. */
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
  /** The embedding input's token count before it was cut to the model's limit, when it was. */
  inputTruncatedFrom?: number | null;
  /** When the usage happened; defaults to the database's now(). Only imports and late entries set it. */
  occurredAt?: Date;
  /** When the provider's usage came back to the worker (the booking lag runs from here to the commit). */
  usageReceivedAt?: Date | null;
}

export const usageKey = (b: Pick<UsageBooking, 'runId' | 'step' | 'attempt' | 'idempotencyKey'>): string => {
  if (b.idempotencyKey) return b.idempotencyKey;
  if (!b.runId) throw new Error('system spend (no runId) needs an explicit idempotencyKey');
  return `${b.runId}:${b.step}:${b.attempt}`;
};

/**
 * Two different calls claimed one ledger key: a bug (or a reused run ID), never a retry. Booking stops loudly instead
 * of returning the other call's row as if it were this one's.
 */
export class LedgerConflictError extends Error {
  constructor(key: string, differences: string[]) {
    super(`ledger key ${key} is already booked for a different call (${differences.join('; ')}); nothing was booked`);
    this.name = 'LedgerConflictError';
  }
}

/**
 * Books one model call: validates the counts, prices them with the version in force at that moment, and inserts
 * with `on conflict do nothing`, so retrying the booking returns the row already there instead of a second one.
 * A row already there that describes another call (other counts, model, status or request) is a LedgerConflictError.
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
      `insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, provider_model, kind,
                                 status, attempt, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens,
                                 cost_usd, price_version, provider_request_id, worker_id, input_truncated_from, created_at,
                                 usage_received_at)
       values ($1, 'usage', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
       on conflict (idempotency_key) do nothing
       returning *`,
      [
        key,
        booking.userId,
        booking.runId,
        booking.workflowId ?? null,
        booking.taskId,
        booking.model,
        booking.providerModel,
        booking.kind,
        booking.status,
        booking.attempt,
        u.promptTokens,
        u.cachedPromptTokens,
        u.completionTokens,
        u.reasoningTokens,
        toExactString(cost),
        price.version,
        booking.providerRequestId,
        booking.workerId,
        booking.inputTruncatedFrom ?? null,
        at,
        booking.usageReceivedAt ?? null,
      ],
    );
    if (inserted.rows.length === 1) return inserted.rows[0];
    const existing = (await db.query<LedgerEntry>('select * from usage_ledger where idempotency_key = $1', [key])).rows[0];
    const differences = differencesFrom(existing, booking);
    if (differences.length > 0) throw new LedgerConflictError(key, differences);
    return existing;
  });
}

/** What makes a row the same call: who, which execution, which model and kind, the outcome, the counts, the request. */
function differencesFrom(row: LedgerEntry, b: UsageBooking): string[] {
  const expected: [string, unknown, unknown][] = [
    ['entry_type', row.entry_type, 'usage'],
    ['user_id', row.user_id, b.userId],
    ['run_id', row.run_id, b.runId],
    ['model', row.model, b.model],
    ['kind', row.kind, b.kind],
    ['status', row.status, b.status],
    ['attempt', row.attempt, b.attempt],
    ['prompt_tokens', row.prompt_tokens, String(b.usage.promptTokens)],
    ['cached_prompt_tokens', row.cached_prompt_tokens, String(b.usage.cachedPromptTokens)],
    ['completion_tokens', row.completion_tokens, String(b.usage.completionTokens)],
    ['reasoning_tokens', row.reasoning_tokens, String(b.usage.reasoningTokens)],
    ['provider_request_id', row.provider_request_id, b.providerRequestId],
  ];
  return expected.filter(([, had, want]) => had !== want).map(([name, had, want]) => `${name}: booked ${String(had)}, now ${String(want)}`);
}
