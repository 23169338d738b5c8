import type pg from 'pg';
import { inTransaction } from '../db/pool';
import { costOfUsage, type CallKind } from '../ledger/cost';
import { priceInForce } from '../ledger/prices';
import { toAttoUsd } from '../money';
import type { TokenUsage } from '../models/provider';
import { monthFigures } from './budget-status';
import { budgetInForce } from './budgets-store';
import { cheapModelOf } from './downgrades';
import { recordThresholdEvents } from './threshold-events';
import { atto, tierFor, usdOf, type Tier } from './tier';

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

const keyOf = (runId: string, c: Pick<PlannedCall, 'step' | 'attempt'>): string => `${runId}:${c.step}:${c.attempt}`;

/**
 * The budget guard's decision and reservation, in one transaction under a row lock on the user's month: nothing can
 * book or reserve against that month in between. Expired reservations of the month are swept first. Then the run
 * gets the default models if spent + reserved is under 80 % and their worst case fits the limit, else the cheap
 * models if theirs fits, else it is blocked. "Fits" is spent + reserved + worst case <= limit, exactly.
 * Repeating a request (a retried activity) returns the reservation already made for those keys.
 */
export async function reserveBudget(pool: pg.Pool, req: ReserveRequest): Promise<ReserveDecision> {
  return inTransaction(pool, async (db) => {
    const at = req.at ?? (await db.query<{ now: Date }>('select now() as now')).rows[0].now;
    const budget = await budgetInForce(db, req.userId, at);
    const figures = async (lock: boolean) => {
      const f = await monthFigures(db, req.userId, budget.timeZone, at, lock);
      return { limitUsd: budget.limitUsd, spentUsd: f.spentUsd, reservedUsd: f.reservedUsd, timeZone: budget.timeZone, month: f.month };
    };
    const asIs = Object.fromEntries(req.calls.map((c) => [c.step, c.model]));
    if (budget.limitUsd === null) return { tier: 'default', models: asIs, worstCaseUsd: '0', eventIds: [], ...(await figures(false)) };

    // Prices and cheap models are looked up before the lock, so the lock is held only for the sums and the inserts.
    const cheap: PlannedCall[] = [];
    for (const c of req.calls) cheap.push({ ...c, model: (req.mayDowngrade ? await cheapModelOf(db, c.model, at) : null) ?? c.model });
    const downgrades = cheap.some((c, i) => c.model !== req.calls[i].model);
    const cheapCalls = downgrades ? cheap : req.calls; // no cheap model: the cheap tier runs the same calls
    const costs = new Map<PlannedCall, bigint>();
    for (const c of new Set([...req.calls, ...cheapCalls])) costs.set(c, await worstCaseCost(db, [c], at));
    const worstOf = (cs: PlannedCall[]): bigint => cs.reduce((sum, c) => sum + (costs.get(c) ?? 0n), 0n);

    // The lock: the month's summary row, created empty if this is the user's first entry of the month.
    await db.query(
      `insert into budget_months (user_id, time_zone, month) values ($1, $2, (date_trunc('month', $3::timestamptz at time zone $2))::date)
       on conflict do nothing`,
      [req.userId, budget.timeZone, at],
    );
    await monthFigures(db, req.userId, budget.timeZone, at, true);
    const keys = req.calls.map((c) => keyOf(req.runId, c));
    const existing = await db.query<{ idempotency_key: string; model: string; tier: Tier; amount_usd: string }>(
      'select idempotency_key, model, tier, amount_usd from budget_reservations where idempotency_key = any($1)',
      [keys],
    );
    if (existing.rows.length > 0) {
      const models = Object.fromEntries(
        req.calls.map((c) => [c.step, existing.rows.find((r) => r.idempotency_key === keyOf(req.runId, c))?.model ?? c.model]),
      );
      const worst = existing.rows.reduce((sum, r) => sum + atto(r.amount_usd), 0n);
      return {
        tier: existing.rows[0].tier as 'default' | 'cheap',
        models,
        worstCaseUsd: usdOf(worst),
        eventIds: [],
        ...(await figures(false)),
      };
    }
    await sweepExpired(db, req.userId, budget.timeZone, at);
    const before = await figures(false);
    const limit = atto(budget.limitUsd);
    const used = atto(before.spentUsd) + atto(before.reservedUsd);
    const band = tierFor(used, limit);

    const candidates: { tier: Exclude<Tier, 'blocked'>; calls: PlannedCall[] }[] =
      band === 'blocked'
        ? []
        : band === 'default'
          ? [{ tier: 'default', calls: req.calls }, ...(downgrades ? [{ tier: 'cheap' as const, calls: cheapCalls }] : [])]
          : [{ tier: 'cheap', calls: cheapCalls }];

    let lastWorst = 0n;
    for (const candidate of candidates) {
      const worst = worstOf(candidate.calls);
      lastWorst = worst;
      if (used + worst > limit) continue;
      for (const c of candidate.calls) {
        const cost = costs.get(c) ?? 0n;
        await db.query(
          `insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, workflow_id, run_id, expires_at)
           values ($1, $2, $3, (date_trunc('month', $4::timestamptz at time zone $3))::date, $5, $6, $7, $8, $9, $4::timestamptz + make_interval(secs => $10))`,
          [
            keyOf(req.runId, c),
            req.userId,
            budget.timeZone,
            at,
            usdOf(cost),
            c.model,
            candidate.tier,
            req.workflowId,
            req.runId,
            req.expirySeconds,
          ],
        );
      }
      const eventIds = await recordThresholdEvents(db, {
        userId: req.userId,
        ...before,
        limitUsd: budget.limitUsd,
        usedAfter: used + worst,
        blocked: false,
      });
      return {
        tier: candidate.tier,
        models: Object.fromEntries(candidate.calls.map((c) => [c.step, c.model])),
        worstCaseUsd: usdOf(worst),
        eventIds,
        ...before,
      };
    }
    if (candidates.length === 0) lastWorst = worstOf(cheapCalls);
    const eventIds = await recordThresholdEvents(db, {
      userId: req.userId,
      ...before,
      limitUsd: budget.limitUsd,
      usedAfter: used,
      blocked: true,
    });
    return { tier: 'blocked', worstCaseUsd: usdOf(lastWorst), eventIds, ...before };
  });
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
 * The sweeper: reservations whose expiry has passed stop counting. It runs inside every reservation of that user's
 * month (under its lock), so a dead worker's reservation never blocks the next decision; `sweepAllExpired` does the
 * same for every month, for a scheduled clean-up and for tests.
 */
async function sweepExpired(db: pg.PoolClient, userId: string, timeZone: string, at: Date): Promise<void> {
  await db.query(
    `update budget_reservations set status = 'expired', closed_at = now()
      where user_id = $1 and time_zone = $2 and month = (date_trunc('month', $3::timestamptz at time zone $2))::date
        and status = 'open' and expires_at <= $3`,
    [userId, timeZone, at],
  );
}

export async function sweepAllExpired(pool: pg.Pool): Promise<number> {
  const { rowCount } = await pool.query(
    `update budget_reservations set status = 'expired', closed_at = now() where status = 'open' and expires_at <= now()`,
  );
  return rowCount ?? 0;
}

async function worstCaseCost(db: pg.PoolClient, calls: PlannedCall[], at: Date): Promise<bigint> {
  let total = 0n;
  for (const c of calls) total += toAttoUsd(costOfUsage(c.kind, c.worstCase, await priceInForce(db, c.model, at), at));
  return total;
}
