import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { UserError } from '../errors';
import { parseUsd, toExactString } from '../money';
import { parseUserId } from './user-id';

/** A usage_ledger row as read from PostgreSQL: counts and money stay exact strings. */
export interface LedgerEntry {
  id: string;
  idempotency_key: string;
  entry_type: 'usage' | 'adjustment' | 'credit' | 'reconciliation';
  original_entry_id: string | null;
  /** A reconciliation entry's import (`cronledger reconcile`, migration 034). */
  reconciliation_import_id: string | null;
  reason: string | null;
  user_id: string;
  /** Temporal's run ID of the execution that made the call. */
  run_id: string | null;
  /** The slot's workflow ID. */
  workflow_id: string | null;
  task_id: string | null;
  model: string | null;
  provider_model: string | null;
  kind: 'chat' | 'embedding' | null;
  status: 'ok' | 'failed';
  attempt: number | null;
  prompt_tokens: string;
  cached_prompt_tokens: string;
  cache_write_5m_tokens: string;
  cache_write_1h_tokens: string;
  completion_tokens: string;
  reasoning_tokens: string;
  /** The tier the provider says served the call; null: standard, or not said. */
  service_tier: string | null;
  cost_usd: string;
  price_version: string | null;
  provider_request_id: string | null;
  worker_id: string | null;
  /** An embedding whose input was cut to the model's limit: the input's token count before. */
  input_truncated_from: string | null;
  /** When the provider's usage came back to the worker; null for corrections. */
  usage_received_at: Date | null;
  created_at: Date;
  /** When the booking's statement formed the row, just before its commit (its column default, so corrections have one too). */
  booked_at: Date | null;
  /** The login role that wrote the row (stamped by the database); null for rows written before it was kept. */
  created_by: string | null;
}

/** Every field as stored: counts and money stay exact decimal strings. */
export function entryJson(e: LedgerEntry) {
  return {
    id: e.id,
    idempotencyKey: e.idempotency_key,
    entryType: e.entry_type,
    originalEntryId: e.original_entry_id,
    reconciliationImportId: e.reconciliation_import_id,
    reason: e.reason,
    userId: e.user_id,
    runId: e.run_id,
    workflowId: e.workflow_id,
    taskId: e.task_id,
    model: e.model,
    providerModel: e.provider_model,
    kind: e.kind,
    status: e.status,
    attempt: e.attempt,
    promptTokens: e.prompt_tokens,
    cachedPromptTokens: e.cached_prompt_tokens,
    cacheWrite5mTokens: e.cache_write_5m_tokens,
    cacheWrite1hTokens: e.cache_write_1h_tokens,
    completionTokens: e.completion_tokens,
    reasoningTokens: e.reasoning_tokens,
    serviceTier: e.service_tier,
    costUsd: e.cost_usd,
    priceVersion: e.price_version,
    providerRequestId: e.provider_request_id,
    workerId: e.worker_id,
    createdAt: e.created_at.toISOString(),
    createdBy: e.created_by,
  };
}

export async function listEntries(
  db: pg.Pool,
  /** runId matches an execution's Temporal run ID or a slot's workflow ID (all its executions). */
  filter: { runId?: string; userId?: string; limit?: number } = {},
): Promise<LedgerEntry[]> {
  const { rows } = await db.query<LedgerEntry>(
    `select * from usage_ledger
      where ($1::text is null or run_id = $1 or workflow_id = $1) and ($2::text is null or user_id = $2)
      order by id desc limit $3`,
    [filter.runId ?? null, filter.userId ?? null, filter.limit ?? 1000],
  );
  return rows.reverse();
}

/**
 * Corrects an entry by appending a signed adjustment that points at it; the original is never touched.
 * The adjustment inherits who, which run and which model, so reports slice it with what it corrects.
 */
export async function adjustEntry(
  db: pg.Pool,
  input: { entryId: string; amount: string; reason: string; idempotencyKey?: string },
): Promise<LedgerEntry> {
  if (!/^\d+$/.test(input.entryId))
    throw new UserError(`--entry ${JSON.stringify(input.entryId)} is not a ledger entry id (a whole number)`);
  const amount = toExactString(parseUsd(input.amount, '--amount'));
  requireReason(input.reason);
  const { rows } = await db.query<LedgerEntry>('select * from adjust_entry($1, $2, $3, $4)', [
    input.idempotencyKey ?? `adjustment:${input.entryId}:${randomUUID()}`,
    input.entryId,
    input.reason,
    amount,
  ]);
  if (rows.length === 1) return rows[0];
  await requireEntry(db, input.entryId);
  return (await db.query<LedgerEntry>('select * from usage_ledger where idempotency_key = $1', [input.idempotencyKey])).rows[0];
}

/** Credits a user: a negative entry with a reason, optionally pointing at the entry it makes good. */
export async function creditUser(
  db: pg.Pool,
  input: { userId: string; amount: string; reason: string; originalEntryId?: string; idempotencyKey?: string },
): Promise<LedgerEntry> {
  if (input.originalEntryId !== undefined) await requireEntry(db, input.originalEntryId);
  const amount = parseUsd(input.amount, '--amount');
  if (toExactString(amount).startsWith('-')) {
    throw new UserError(`--amount ${input.amount} must be positive: a credit of 5.00 lowers what the user owes by $5.00`);
  }
  requireReason(input.reason);
  parseUserId(input.userId, '--user');
  const { rows } = await db.query<LedgerEntry>('select * from credit_user($1, $2, $3, $4, $5)', [
    input.idempotencyKey ?? `credit:${input.userId}:${randomUUID()}`,
    input.originalEntryId ?? null,
    input.reason,
    input.userId,
    `-${toExactString(amount)}`,
  ]);
  return rows[0] ?? (await db.query<LedgerEntry>('select * from usage_ledger where idempotency_key = $1', [input.idempotencyKey])).rows[0];
}

/** Fails with a UserError unless the ledger has an entry with this id. */
async function requireEntry(db: pg.Pool, entryId: string): Promise<void> {
  const exists = await db.query('select 1 from usage_ledger where id = $1', [entryId]);
  if (exists.rowCount === 0) throw new UserError(`ledger entry ${entryId} does not exist; see \`cronledger ledger --json\` for ids`);
}

function requireReason(reason: string): void {
  if (!reason || !reason.trim()) throw new UserError('--reason is required: say why the ledger is being corrected');
}

/**
 * Booking lag per ledger row, as milliseconds with counts: from the moment the worker received the usage to booked_at,
 * the clock inside the booking's own single-statement transaction (created_at is the booking's price instant, which
 * may be earlier). Corrections (no usage_received_at) are left out.
 */
export async function bookingLags(db: pg.Pool): Promise<{ lag_ms: string; entries: string }[]> {
  const { rows } = await db.query<{ lag_ms: string; entries: string }>(
    `select metric_booking_lag_ms(usage_received_at, booked_at)::text as lag_ms, count(*)::text as entries
       from usage_ledger where usage_received_at is not null and booked_at is not null group by 1`,
  );
  return rows;
}
