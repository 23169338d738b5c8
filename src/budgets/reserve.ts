import type pg from 'pg';
import { claimValues, type ClaimOutcome, type ClaimRequest } from '../db/runs';
import { fromDatabaseError } from '../ledger/prices';
import type { CallKind, TokenUsage } from '../models/provider';
import { atto, usdOf, type Tier } from './tier';

/** One call the run is about to make, with its worst-case usage. Its key is the ledger key that will settle it. */
export interface PlannedCall {
  step: 'chat' | 'embed';
  attempt: number;
  kind: CallKind;
  model: string;
  worstCase: TokenUsage;
}

export interface ReserveRequest {
  userId: string;
  /** Temporal's run ID: reservations are keyed `<runId>:<step>:<attempt>`, like the ledger entries that settle them. */
  runId: string;
  workflowId: string;
  calls: PlannedCall[];
  /** Whether the cheap models may stand in (the run's first decision); a later attempt keeps the run's models. */
  mayDowngrade: boolean;
  /** How long an unsettled reservation counts before the sweeper releases it. */
  expirySeconds: number;
  /** Decide as of this instant instead of the database's now (tests and benchmarks). */
  at?: Date;
}

/** What was used when the decision was made, exact decimal strings; the reason a blocked run records. */
export interface BudgetFigures {
  limitUsd: string | null;
  spentUsd: string;
  /** Open reservations of other calls, before this decision. */
  reservedUsd: string;
  timeZone: string;
  month: string;
}

export type ReserveDecision =
  | (BudgetFigures & {
      tier: Exclude<Tier, 'blocked'>;
      /** The model each step runs on: the cheap ones for a downgraded run. */
      models: Record<string, string>;
      /** This decision's reservation: the worst case of the calls on those models (0 without a limit). */
      worstCaseUsd: string;
      /** Threshold events recorded and not yet delivered, for the workflow to deliver. */
      eventIds: string[];
    })
  | (BudgetFigures & { tier: 'blocked'; worstCaseUsd: string; eventIds: string[] });

/**
 * The budget guard's decision and reservation, one statement (reserve_budget, migrations 010, 019, 020 and 021) under a row lock on
 * the user's month: nothing else can reserve against that month in between. Bookings go on (each adds its cost to its own
 * session's month shard, migration 019); the decision reads spent (the month row, its shards and deltas) in the
 * statement that reads the reservations, so each call counts once, as spent or as reserved. The budget, the prices and
 * the default models' worst cases are looked up before the lock, the cheap models and theirs only when the choice needs
 * them (past 80 %, or no room for the default models); the lock is held only inside the statement, for the sums, the
 * choice and the inserts, with no network round trip while it is held. Expired reservations do not count (the
 * sweeper closes them). The run gets the default models if spent + reserved is under 80 % and their worst case fits the limit,
 * else the cheap models if theirs fits, else it is blocked. "Fits" is spent + reserved + worst case <= limit, exactly.
 * Threshold events (80 %, 100 %) are recorded in the same statement, once per user and month. Repeating a request (a
 * retried activity) returns the reservation already made for those keys.
 */
export async function reserveBudget(pool: pg.Pool, req: ReserveRequest): Promise<ReserveDecision> {
  const { rows } = await decideThenAwaitDurability(
    pool,
    () =>
      pool.query<{ decision: DecisionRow }>({
        name: 'reserve-budget',
        text: 'select reserve_budget($1, $2, $3, $4, $5, $6, $7) as decision',
        values: [req.userId, req.runId, req.workflowId, callsJson(req.calls), req.mayDowngrade, req.expirySeconds, req.at ?? null],
      }),
    (result) => result.rows[0].decision.awaitDurability,
  );
  return exactDecision(rows[0].decision);
}

/** A run's first decision, made with its claim: the run's own calls, and the cheap models may stand in. */
export type ClaimReservation = Omit<ReserveRequest, 'userId' | 'runId' | 'workflowId' | 'mayDowngrade'>;

/**
 * The claim and the run's first budget decision in one statement, so one transaction and one commit (migration 014's
 * claim_and_reserve): the claim as claimRun makes it, then, only if this execution won (or already owns) the claim,
 * reserveBudget's decision on the calls, which may downgrade. A claim lost to another execution reserves nothing
 * (decision null). Repeating it (a re-run local activity) returns the same claim and the same reservation.
 */
export async function claimAndReserve(
  pool: pg.Pool,
  claim: ClaimRequest,
  req: ClaimReservation,
): Promise<{ claim: ClaimOutcome; decision: ReserveDecision | null }> {
  const { rows } = await decideThenAwaitDurability(
    pool,
    () =>
      pool.query<{ result: { claim: ClaimOutcome; decision: DecisionRow | null } }>({
        name: 'claim-and-reserve',
        text: 'select claim_and_reserve($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) as result',
        values: [...claimValues(claim), callsJson(req.calls), req.expirySeconds, req.at ?? null],
      }),
    // the claim and the decision are one transaction: it committed as the decision says
    (result) => result.rows[0].result.decision?.awaitDurability ?? false,
  );
  const { claim: outcome, decision } = rows[0].result;
  return { claim: outcome, decision: decision && exactDecision(decision) };
}

/** reserve_budget's JSON: the decision, and whether its transaction committed asynchronously (migration 019). */
type DecisionRow = ReserveDecision & { awaitDurability: boolean };

/**
 * Runs a decision statement, then, if reserve_budget says it committed asynchronously (awaitDurability: it had queued
 * for the user's month row, and let go of the row before its fsync so that the decisions queued behind it need not
 * wait for that flush too; migration 019), waits outside any lock until its commit is durable, before the caller may
 * act on it. A decision that took the row at once committed synchronously and is durable already: no second round
 * trip. Why the wait keeps the guarantee (nothing is spent on a decision, or a claim, that a crash could undo):
 * - The query resolves after the server's ReadyForQuery, so the decision's commit record is already in the WAL.
 * - The barrier is a transaction of its own, in autocommit, with the server's synchronous commit. It writes one
 *   tiny WAL record (a transactional logical message, no table touched, no lock taken), so its commit is flushed: the
 *   WAL up to its commit record, which comes after the decision's, reaches disk. Concurrent barriers share one fsync
 *   (group commit). A transaction that only takes a transaction ID (`select pg_current_xact_id()`) is NOT enough:
 *   PostgreSQL commits one that wrote no WAL of its own without a flush (test/decision-durability.test.ts saw the
 *   decision lost that way).
 * - Nothing acts on the decision until the barrier returned: the activity returns to the workflow (and so a model
 *   call starts) only then. A crash before that loses the decision and the claim together, and the retried activity
 *   decides again.
 * - Any other transaction that saw the decision or the claim (a decision counting this reservation, a booking that
 *   settles it, another execution that found the slot claimed and recorded itself as a duplicate) commits later in
 *   the WAL; if that one is durable, so is everything before it. So no durable state ever depends on a lost decision.
 * A decision that failed (an error) committed nothing: no barrier is needed, and the error is passed on.
 */
async function decideThenAwaitDurability<R extends pg.QueryResultRow>(
  pool: pg.Pool,
  decide: () => Promise<pg.QueryResult<R>>,
  committedAsynchronously: (result: pg.QueryResult<R>) => boolean,
): Promise<pg.QueryResult<R>> {
  const result = await decide().catch((err: unknown) => {
    throw fromDatabaseError(err);
  });
  if (committedAsynchronously(result)) {
    await pool.query({
      name: 'decision-durability-barrier',
      text: `select pg_logical_emit_message(true, 'cronledger-decision-durable', '')`,
    });
  }
  return result;
}

/** The planned calls as reserve_budget reads them, with their worst-case counts. */
export const callsJson = (calls: PlannedCall[]): string =>
  JSON.stringify(
    calls.map((c) => ({
      step: c.step,
      attempt: c.attempt,
      kind: c.kind,
      model: c.model,
      prompt: c.worstCase.promptTokens,
      cached: c.worstCase.cachedPromptTokens,
      completion: c.worstCase.completionTokens,
    })),
  );

/** The same exact text for every amount whatever scale PostgreSQL gave it (18 fractional digits). */
function exactDecision({ awaitDurability: _committed, ...d }: DecisionRow): ReserveDecision {
  const exact = (usd: string): string => usdOf(atto(usd));
  return {
    ...d,
    worstCaseUsd: exact(d.worstCaseUsd),
    spentUsd: exact(d.spentUsd),
    reservedUsd: exact(d.reservedUsd),
    limitUsd: d.limitUsd === null ? null : exact(d.limitUsd),
  };
}

/** Releases a run's open reservations (its cleanup on failure or cancellation); returns how many. */
export async function releaseReservations(pool: pg.Pool, runId: string): Promise<number> {
  const { rowCount } = await pool.query(
    `update budget_reservations set status = 'released', closed_at = now() where run_id = $1 and status = 'open'`,
    [runId],
  );
  return rowCount ?? 0;
}

/**
 * The sweeper: closes reservations whose expiry has passed, for every month (the budget-sweep schedule, and tests).
 * They stopped counting at their expiry already: every sum of reservations (the decision's, budgets status, the admin
 * page) counts open ones that have not expired, so a dead worker's reservation never blocks the next decision. Since
 * migration 020 the decision no longer closes them itself.
 */
export async function sweepAllExpired(pool: pg.Pool): Promise<number> {
  const { rowCount } = await pool.query(
    `update budget_reservations set status = 'expired', closed_at = now() where status = 'open' and expires_at <= now()`,
  );
  return rowCount ?? 0;
}

/**
 * The sweeper's fold: every month's shards (and deltas from before migration 019) into its summary row
 * (budget_fold_all_deltas, migrations 015 and 019), so a month keeps a few rows. Months a decision holds, and shards a
 * booking in flight holds, are skipped until the next pass: it never waits. Returns how many rows were folded.
 */
export async function foldAllDeltas(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ folded: number }>('select budget_fold_all_deltas() as folded');
  return rows[0].folded;
}
