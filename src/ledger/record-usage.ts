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
  return book<LedgerEntry>(pool, booking, 'book-usage', 'b.*');
}

/** What the worker's booking step needs of the row: the entry, its cost (exact decimal string) and its price version. */
export type BookedCall = Pick<LedgerEntry, 'id' | 'cost_usd' | 'price_version'>;

/**
 * recordUsage, reading back only the entry, its cost and its price version. The same statement, the same guarantees.
 * node's CPU per booking grows with the columns it reads back (each query's row description and parsers), on the
 * path every billed call takes.
 */
export async function bookCall(pool: pg.Pool | pg.PoolClient, booking: UsageBooking): Promise<BookedCall> {
  return book<BookedCall>(pool, booking, 'book-call', BOOKED_CALL_COLUMNS);
}

/**
 * bookCall, and in the same statement and transaction, once the row booked (or found) is this call's, what closes a
 * completed run: its memory stored and its claim closed (store_memory_and_complete_run). One round trip for a run's
 * last booking. The row is this call's by the same comparison every booking makes (SAME_CALL), so a
 * LedgerConflictError still leaves the run open. Every error is bookCall's: a refused price or a database failure
 * rolls back the completion with the booking.
 */
export async function bookCallAndCompleteRun(
  pool: pg.Pool | pg.PoolClient,
  booking: UsageBooking,
  completion: RunCompletion,
  memory: MemoryInput,
): Promise<BookedCall> {
  const completing = [...completionParams(completion), ...memoryParams(memory)];
  const row = await book<BookedCall>(pool, booking, 'book-call-and-complete-run', BOOKED_CALL_COLUMNS, (first) => ({
    join: `left join lateral (select store_memory_and_complete_run(${completing.map((_, i) => `$${first + i}`).join(', ')}) where s.same) completed on true`,
    values: completing,
  }));
  return { id: row.id, cost_usd: row.cost_usd, price_version: row.price_version };
}

/**
 * book_usage's parameters in order ($1 to $22), each with what a booking passes. Those that name a column are what
 * makes a row already under the key the same call: who, which execution, which model and kind, the outcome, the
 * counts, the request.
 */
const BOOK_USAGE_PARAMS: { of: (b: UsageBooking) => unknown; column?: keyof LedgerEntry }[] = [
  { of: usageKey },
  { of: (b) => b.userId, column: 'user_id' },
  { of: (b) => b.runId, column: 'run_id' },
  { of: (b) => b.workflowId ?? null },
  { of: (b) => b.taskId },
  { of: (b) => b.model, column: 'model' },
  { of: (b) => b.providerModel },
  { of: (b) => b.kind, column: 'kind' },
  { of: (b) => b.status, column: 'status' },
  { of: (b) => b.attempt, column: 'attempt' },
  { of: (b) => b.usage.promptTokens, column: 'prompt_tokens' },
  { of: (b) => b.usage.cachedPromptTokens, column: 'cached_prompt_tokens' },
  { of: (b) => b.usage.completionTokens, column: 'completion_tokens' },
  { of: (b) => b.usage.reasoningTokens, column: 'reasoning_tokens' },
  { of: (b) => b.usage.cacheWrite5mTokens, column: 'cache_write_5m_tokens' },
  { of: (b) => b.usage.cacheWrite1hTokens, column: 'cache_write_1h_tokens' },
  { of: (b) => b.usage.serviceTier, column: 'service_tier' },
  { of: (b) => b.providerRequestId, column: 'provider_request_id' },
  { of: (b) => b.workerId },
  { of: (b) => b.inputTruncatedFrom ?? null },
  { of: (b) => b.occurredAt ?? null },
  { of: (b) => b.usageReceivedAt ?? null },
];

/** Each compared column of the row `b`, with what this booking expects in it: in SQL, and as node sees it. */
const COMPARED = [
  { column: 'entry_type', sql: `'usage'`, of: (): unknown => 'usage' },
  ...BOOK_USAGE_PARAMS.flatMap(({ of, column }, i) => (column ? [{ column, sql: `$${i + 1}`, of }] : [])),
];

/**
 * The booking, and whether the row under the key is this booking's call (`s.same`). Compared in the statement, so a
 * booking reads back no more than it needs; only a conflict reads the compared columns (as text, `booked`) to say
 * what differs.
 */
const SAME_CALL = COMPARED.map(({ column, sql }) => `b.${column} is not distinct from ${sql}`).join(' and ');
const BOOKED_WHEN_NOT_SAME = `case when s.same then null else array[${COMPARED.map(({ column }) => `b.${column}::text`).join(', ')}] end`;
const BOOKING = `book_usage(${BOOK_USAGE_PARAMS.map((_, i) => `$${i + 1}`).join(', ')}) b cross join lateral (select ${SAME_CALL} as same) s`;
const BOOKED_CALL_COLUMNS = 'b.id, b.cost_usd, b.price_version';

interface Compared {
  same: boolean;
  booked: (string | null)[] | null;
}

/**
 * The booking statement, named (parsed and planned once per connection), reading back `columns` of the row `b` and
 * whether it is this call's (`s.same`); `then` joins a step to it, given the number of its first parameter (they
 * follow book_usage's).
 */
async function book<Row>(
  pool: pg.Pool | pg.PoolClient,
  booking: UsageBooking,
  name: string,
  columns: string,
  then?: (first: number) => { join: string; values: unknown[] },
): Promise<Row> {
  const key = usageKey(booking);
  validateUsage(booking.usage, `usage for ${key}`);
  const joined = then?.(BOOK_USAGE_PARAMS.length + 1);
  const { rows } = await pool
    .query<Row & Compared>({
      name,
      text: `select ${columns}, s.same, ${BOOKED_WHEN_NOT_SAME} as booked from ${BOOKING} ${joined?.join ?? ''}`,
      values: [...BOOK_USAGE_PARAMS.map(({ of }) => of(booking)), ...(joined?.values ?? [])],
    })
    .catch((err: unknown) => {
      throw fromDatabaseError(err);
    });
  const { same, booked: had, ...row } = rows[0];
  if (!same) throw new LedgerConflictError(key, differences(had ?? [], booking));
  return row as Row;
}

function differences(booked: (string | null)[], b: UsageBooking): string[] {
  const text = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
  return COMPARED.flatMap(({ column, of }, i) => {
    const [had, want] = [booked[i], text(of(b))];
    return had === want ? [] : [`${column}: booked ${String(had)}, now ${String(want)}`];
  });
}
