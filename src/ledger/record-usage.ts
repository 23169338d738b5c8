import type pg from 'pg';
import { memoryParams, type MemoryInput } from '../db/memories';
import { completionParams, type RunCompletion } from '../db/runs';
import type { CallKind, TokenUsage } from '../models/provider';
import type { LedgerEntry } from './entries';
import { fromDatabaseError } from './prices';
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
 * Books one model call: validates the counts, then one statement (book_usage, migrations/001_baseline.sql) prices them
 * with the version in force at that moment, computes the exact cost (call_cost, the one place the cost rule lives) and
 * inserts with `on conflict do nothing`, so retrying the booking returns the row already there instead of a second one. One
 * round trip, its own transaction. A row already there that describes another call (other counts, model, status or
 * request) is a LedgerConflictError. The cost is frozen on the row together with its price version; a later price
 * change never touches it. Prices are not cached here: a new version can take effect at any moment.
 * Returns the whole row; the worker's booking step, which needs only the entry and its cost, calls bookCall.
 */
export async function recordUsage(pool: pg.Pool | pg.PoolClient, booking: UsageBooking): Promise<LedgerEntry> {
  return book<LedgerEntry>(pool, booking, 'book-usage', '*');
}

/** What the worker's booking step needs of the row: the entry, its cost (exact decimal string) and its price version. */
export type BookedCall = Pick<LedgerEntry, 'id' | 'cost_usd' | 'price_version'>;

/**
 * recordUsage, reading back only the entry, its cost and what the conflict check compares. The same statement, the
 * same guarantees. Reading back the whole row (26 columns, three of them timestamps) took a seventh to a fifth of node's
 * CPU per booking (BENCHMARKS.md, booking path), on the path every billed call takes.
 */
export async function bookCall(pool: pg.Pool | pg.PoolClient, booking: UsageBooking): Promise<BookedCall> {
  const row = await book<ComparedColumns & BookedCall>(pool, booking, 'book-call', BOOKED_CALL_COLUMNS);
  return { id: row.id, cost_usd: row.cost_usd, price_version: row.price_version };
}

/**
 * bookCall, and in the same statement and transaction, once the row booked (or found) is this call's, what closes a
 * completed run: its memory stored and its claim closed (store_memory_and_complete_run). One round trip for a run's
 * last booking. The row is this call's when every column bookCall compares holds what this booking expects, the check
 * bookCall makes in node, so a LedgerConflictError still leaves the run open. Every error is bookCall's: a refused
 * price or a database failure rolls back the completion with the booking.
 */
export async function bookCallAndCompleteRun(
  pool: pg.Pool | pg.PoolClient,
  booking: UsageBooking,
  completion: RunCompletion,
  memory: MemoryInput,
): Promise<BookedCall> {
  const completing = [...completionParams(completion), ...memoryParams(memory)];
  const expected = COMPARED_COLUMNS.map((name) => EXPECTED_IN_ROW[name](booking));
  const row = await book<ComparedColumns & BookedCall>(pool, booking, 'book-call-and-complete-run', BOOKED_CALL_COLUMNS, (first) => {
    const args = completing.map((_, i) => `$${first + i}`).join(', ');
    const same = COMPARED_COLUMNS.map((name, i) => `b.${name} is not distinct from $${first + completing.length + i}`);
    return {
      join: `left join lateral (select store_memory_and_complete_run(${args}) where ${same.join(' and ')}) completed on true`,
      values: [...completing, ...expected],
    };
  });
  return { id: row.id, cost_usd: row.cost_usd, price_version: row.price_version };
}

/**
 * What makes a row the same call: who, which execution, which model and kind, the outcome, the counts, the request.
 * Each compared column with the value this booking expects in it; bookCall reads back exactly these columns.
 */
const EXPECTED_IN_ROW = {
  entry_type: () => 'usage',
  user_id: (b: UsageBooking) => b.userId,
  run_id: (b: UsageBooking) => b.runId,
  model: (b: UsageBooking) => b.model,
  kind: (b: UsageBooking) => b.kind,
  status: (b: UsageBooking) => b.status,
  attempt: (b: UsageBooking) => b.attempt,
  prompt_tokens: (b: UsageBooking) => String(b.usage.promptTokens),
  cached_prompt_tokens: (b: UsageBooking) => String(b.usage.cachedPromptTokens),
  cache_write_5m_tokens: (b: UsageBooking) => String(b.usage.cacheWrite5mTokens),
  cache_write_1h_tokens: (b: UsageBooking) => String(b.usage.cacheWrite1hTokens),
  completion_tokens: (b: UsageBooking) => String(b.usage.completionTokens),
  reasoning_tokens: (b: UsageBooking) => String(b.usage.reasoningTokens),
  service_tier: (b: UsageBooking) => b.usage.serviceTier,
  provider_request_id: (b: UsageBooking) => b.providerRequestId,
} satisfies Partial<Record<keyof LedgerEntry, (b: UsageBooking) => unknown>>;
type ComparedColumns = Pick<LedgerEntry, keyof typeof EXPECTED_IN_ROW>;
const COMPARED_COLUMNS = Object.keys(EXPECTED_IN_ROW) as (keyof typeof EXPECTED_IN_ROW)[];
const BOOKED_CALL_COLUMNS = `b.id, b.cost_usd, b.price_version, ${COMPARED_COLUMNS.map((name) => `b.${name}`).join(', ')}`;

/**
 * The booking statement, named (parsed and planned once per connection), reading back `columns` of the row `b`;
 * `then` joins a step to it, given the number of its first parameter (they follow book_usage's).
 */
async function book<Row extends ComparedColumns>(
  pool: pg.Pool | pg.PoolClient,
  booking: UsageBooking,
  name: string,
  columns: string,
  then?: (first: number) => { join: string; values: unknown[] },
): Promise<Row> {
  const key = usageKey(booking);
  validateUsage(booking.usage, `usage for ${key}`);
  const u = booking.usage;
  const joined = then?.(23); // book_usage's parameters are $1 to $22
  const { rows } = await pool
    .query<Row>({
      name,
      text: `select ${columns} from book_usage($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22) b ${joined?.join ?? ''}`,
      values: [
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
        u.cacheWrite5mTokens,
        u.cacheWrite1hTokens,
        u.serviceTier,
        booking.providerRequestId,
        booking.workerId,
        booking.inputTruncatedFrom ?? null,
        booking.occurredAt ?? null,
        booking.usageReceivedAt ?? null,
        ...(joined?.values ?? []),
      ],
    })
    .catch((err: unknown) => {
      throw fromDatabaseError(err);
    });
  const row = rows[0];
  const differences = differencesFrom(row, booking);
  if (differences.length > 0) throw new LedgerConflictError(key, differences);
  return row;
}

function differencesFrom(row: ComparedColumns, b: UsageBooking): string[] {
  return COMPARED_COLUMNS.flatMap((name) => {
    const [had, want] = [row[name], EXPECTED_IN_ROW[name](b)];
    return had === want ? [] : [`${name}: booked ${String(had)}, now ${String(want)}`];
  });
}
