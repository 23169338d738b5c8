import type pg from 'pg';
import { claimValues, type ClaimOutcome, type ClaimRequest } from '../db/runs';
import { fromDatabaseError } from '../ledger/prices';
import { usageKey } from '../ledger/record-usage';
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
  /** The task's maxCostPerRun (USD, exact decimal string): the most the run's worst case may be, whatever the budget. */
  maxCostPerRunUsd?: string;
  /**
   * Whether a first decision that other runs' open reservations alone made worse may wait for them (default true);
   * false once the run has waited its longest: it is decided counting them, reason 'waited-for-reservations'.
   */
  mayWait?: boolean;
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

/**
 * Why a run was downgraded or blocked other than by its tier's band alone: the task's cap on one run's worst case, the
 * monthly limit, or the limit counting other runs' open reservations after the run waited its longest for them.
 */
export type DecisionReason = 'max-cost-per-run' | 'monthly-limit' | 'waited-for-reservations';

/** What a downgraded or blocked decision says of why; maxCostPerRunUsd with reason 'max-cost-per-run'. */
export interface DecisionWhy {
  reason?: DecisionReason;
  maxCostPerRunUsd?: string;
}

export type ReserveDecision =
  | (BudgetFigures &
      DecisionWhy & {
        tier: Exclude<Tier, 'blocked'>;
        /** The model each step runs on: the cheap ones for a downgraded run. */
        models: Record<string, string>;
        /** This decision's reservation: the worst case of the calls on those models (0 without a limit). */
        worstCaseUsd: string;
        /** Threshold events recorded and not yet delivered, for the workflow to deliver. */
        eventIds: string[];
      })
  | (BudgetFigures & DecisionWhy & { tier: 'blocked'; worstCaseUsd: string; eventIds: string[] });

/**
 * A run's first decision that other runs' open reservations alone made worse (blocked or downgraded, where spent alone
 * would not be): nothing was reserved, and the run decides again once they have settled (reserve_budget's tier 'wait').
 */
export class AwaitingReservationsError extends Error {
  /** From claimAndReserve: the claim, made and committed with the decision to wait. */
  claim?: ClaimOutcome;
  constructor(readonly figures: BudgetFigures) {
    super(
      `the budget decision waits for other runs' open reservations (${figures.reservedUsd} USD) to settle: spent ${figures.spentUsd} of ${figures.limitUsd} USD`,
    );
    this.name = 'AwaitingReservationsError';
  }
}

/** reserve_budget's JSON: a decision, or 'wait' with the figures it was made on. */
type DecisionRow = ReserveDecision | (BudgetFigures & { tier: 'wait' });

/**
 * The budget guard's decision and reservation, one statement (reserve_budget) under a row lock on the
 * user's month summary row: nothing else can reserve against that month, and no booking of it can commit, until the
 * decision commits (synchronously, so it is durable when this returns). Spent is that row; reserved is the month's open
 * reservations that have not expired (the sweeper closes expired ones); so each call counts once, as spent or as
 * reserved. The budget and the default models' worst cases are looked up before the lock, the cheap models and theirs
 * only when the choice needs them; no network round trip happens while the lock is held. The run gets the default
 * models if spent + reserved is in the default band and their worst case fits the limit, else the cheap models if
 * theirs fits, else it is blocked. "Fits" is spent + reserved + worst case <= limit, exactly. The bands and the
 * threshold events (one per band reached, once per user and month) are SQL's (budget_bands). Repeating a request (a
 * retried activity) returns the reservation already made for those keys. A run's first decision
 * (mayDowngrade) that others' open reservations alone made worse throws AwaitingReservationsError instead, unless
 * mayWait is false (the run waited its longest): then it is decided counting them, reason 'waited-for-reservations'.
 * The task's maxCostPerRunUsd counts on the first decision, whatever the budget: over it, the run gets the cheap models
 * only if their worst case is within it (reason 'max-cost-per-run'), else it is blocked, reserving nothing.
 */
export async function reserveBudget(pool: pg.Pool, req: ReserveRequest): Promise<ReserveDecision> {
  const { rows } = await pool
    .query<{ decision: DecisionRow }>({
      name: 'reserve-budget',
      text: 'select reserve_budget($1, $2, $3, $4, $5, $6, $7, $8, $9) as decision',
      values: [
        req.userId,
        req.runId,
        req.workflowId,
        callsJson(req.runId, req.calls),
        req.mayDowngrade,
        req.expirySeconds,
        req.at ?? null,
        req.maxCostPerRunUsd ?? null,
        req.mayWait ?? true,
      ],
    })
    .catch(rethrowPriced);
  return decisionOf(rows[0].decision);
}

/** A run's first decision, made with its claim: the run's own calls, and the cheap models may stand in. */
export type ClaimReservation = Omit<ReserveRequest, 'userId' | 'runId' | 'workflowId' | 'mayDowngrade' | 'mayWait'>;

/**
 * The claim and the run's first budget decision in one statement, so one transaction and one commit
 * (claim_and_reserve): the claim as claimRun makes it, then, only if this execution won (or already owns) the claim,
 * reserveBudget's decision on the calls, which may downgrade. A claim lost to another execution reserves nothing
 * (decision null). Repeating it (a re-run local activity) returns the same claim and the same reservation. A decision
 * that must wait throws AwaitingReservationsError, the claim made: asked again, it is the owner's.
 */
export async function claimAndReserve(
  pool: pg.Pool,
  claim: ClaimRequest,
  req: ClaimReservation,
): Promise<{ claim: ClaimOutcome; decision: ReserveDecision | null }> {
  const { rows } = await pool
    .query<{ result: { claim: ClaimOutcome; decision: DecisionRow | null } }>({
      name: 'claim-and-reserve',
      text: 'select claim_and_reserve($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) as result',
      values: [
        ...claimValues(claim),
        callsJson(claim.temporalRunId, req.calls),
        req.expirySeconds,
        req.at ?? null,
        req.maxCostPerRunUsd ?? null,
      ],
    })
    .catch(rethrowPriced);
  const { claim: outcome, decision } = rows[0].result;
  try {
    return { claim: outcome, decision: decision && decisionOf(decision) };
  } catch (err) {
    if (err instanceof AwaitingReservationsError) err.claim = outcome;
    throw err;
  }
}

/** A model or price class without a price in force comes back as NoPriceError; anything else as it is. */
function rethrowPriced(err: unknown): never {
  throw fromDatabaseError(err);
}

/**
 * The planned calls as reserve_budget reads them, with their worst-case counts, each under the ledger key of the
 * booking that will settle it (usageKey: the one place that key is made).
 */
export const callsJson = (runId: string, calls: PlannedCall[]): string =>
  JSON.stringify(
    calls.map((c) => ({
      key: usageKey({ runId, step: c.step, attempt: c.attempt }),
      step: c.step,
      kind: c.kind,
      model: c.model,
      prompt: c.worstCase.promptTokens,
      completion: c.worstCase.completionTokens,
      tier: c.worstCase.serviceTier,
    })),
  );

/**
 * The decision with the same exact text for every amount whatever scale PostgreSQL gave it (18 fractional digits);
 * 'wait' throws AwaitingReservationsError.
 */
function decisionOf(d: DecisionRow): ReserveDecision {
  if (d.tier === 'wait') {
    const { tier: _wait, ...figures } = d;
    throw new AwaitingReservationsError(figures);
  }
  const exact = (usd: string): string => usdOf(atto(usd));
  return {
    ...d,
    worstCaseUsd: exact(d.worstCaseUsd),
    spentUsd: exact(d.spentUsd),
    reservedUsd: exact(d.reservedUsd),
    limitUsd: d.limitUsd === null ? null : exact(d.limitUsd),
    ...(d.maxCostPerRunUsd === undefined ? {} : { maxCostPerRunUsd: exact(d.maxCostPerRunUsd) }),
  };
}

/** Releases a run's open reservations (its cleanup on failure or cancellation); returns how many. */
export async function releaseReservations(pool: pg.Pool, runId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('select release_reservations($1) as n', [runId]);
  return rows[0].n;
}

/**
 * The sweeper: closes reservations whose expiry has passed, for every month (the budget-sweep schedule, and tests).
 * They stopped counting at their expiry already: every sum of reservations (budget_month_figures, the decision's)
 * counts open ones that have not expired, so a dead worker's reservation never blocks the next decision.
 */
export async function sweepAllExpired(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('select expire_reservations() as n');
  return rows[0].n;
}
