import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { onePerPool } from '../db/pool';
import type { CallKind, ServiceTier } from '../models/provider';
import { fromDatabaseError, NoPriceError } from './prices';

/** What a price check found: the version in force by the database's clock, and until when that answer holds. */
export interface PriceCheck {
  version: string;
  /** The database's clock when it checked. */
  checkedAt: Date;
  /**
   * How long after checkedAt the prices applied now keep this answer, in whole milliseconds rounded down: until the
   * version's effective_to or the next version's start, whichever comes first; null when neither exists.
   */
  holdsForMs: number | null;
}

/**
 * No call without a price: refuses (NoPriceError) before any spend. The moment is the database's clock, the same clock
 * the booking prices with, so a worker whose clock runs ahead can't pass a check the booking then fails. Pricing zero
 * tokens with the booking's own usage_cost also refuses a model whose version lacks the rates this kind of call needs
 * (an embedding-only model used for chat, or a service tier the version gives no rates for), with the same error the
 * booking would raise.
 *
 * One statement reads the clock, the price in force by it (price_version_at, priceInForce's rule too), prices it, and
 * finds when the versions applied now stop saying so.
 */
export async function refuseUnpricedCall(
  db: pg.Pool,
  model: string,
  kind: CallKind,
  serviceTier: ServiceTier | null = null,
): Promise<PriceCheck> {
  // Named, so each connection parses and plans it once.
  const { rows } = await db
    .query<{ checked_at: Date; version: string | null; holds_for_ms: number | null; zero_cost: string | null }>({
      name: 'refuse-unpriced-call',
      text: `select n.checked_at, p.version,
                    floor(extract(epoch from least(p.effective_to, (select min(l.effective_from) from model_prices l
                                                                     where l.model = $1 and l.effective_from > n.checked_at))
                                             - n.checked_at) * 1000)::float8 as holds_for_ms,
                    case when p.id is not null then usage_cost($2, 0, 0, 0, 0, 0, $3, p, n.checked_at) end as zero_cost
               from (select now() as checked_at) n
               left join lateral price_version_at($1, n.checked_at) p on true`,
      values: [model, kind, serviceTier],
    })
    .catch((err: unknown) => {
      throw fromDatabaseError(err);
    });
  const { checked_at: checkedAt, version, holds_for_ms: holdsForMs } = rows[0];
  if (version === null) throw new NoPriceError(model, checkedAt);
  return { version, checkedAt, holdsForMs };
}

/** How long a worker trusts that a price is in force for a kind of call, at most. */
export const PRICE_IN_FORCE_TTL_MS = 10_000;

/**
 * refuseUnpricedCall, remembered per worker: an answer "a price is in force for (model, kind, service tier)" is
 * trusted for PRICE_IN_FORCE_TTL_MS at most, and never past its holdsForMs (the version's effective_to, or the next
 * version's start, as applied when it checked). Both limits are on the database's clock: the time it left at the check
 * runs down on this process's monotonic clock from the moment the check was sent, before the database read its clock,
 * so the trust ends a little early, never late, whatever the worker's wall clock says. A refusal is never remembered: a
 * price applied reaches the next call.
 *
 * What this allows: a version applied after a check, in force at once, that refuses a call (it has no rates for a
 * tier or a kind of call; versions never change and a price ends only by its effective_to, so this is the one way a
 * price goes) reaches each worker's checks within 10 s instead of at the next call. That is safe: the check only
 * keeps a call from starting when no price would book it, and a call let through in that window is still booked by
 * the booking's own pricing (book_usage, by the database's clock when the usage came back) or, when that refuses it,
 * kept in usage_exceptions under its key: never lost, never booked at a price not in force. The budget guard prices
 * each run's worst case itself, by the database's clock, not with this.
 */
export function createPriceChecks(db: pg.Pool, monotonicNow: () => number = () => performance.now()) {
  /** Per call kind, the moment on monotonicNow until which its price is trusted. */
  const trustedUntil = new Map<string, number>();
  return {
    async refuseUnpricedCall(model: string, kind: CallKind, serviceTier: ServiceTier | null = null): Promise<void> {
      const key = `${model}\u0000${kind}\u0000${serviceTier ?? ''}`;
      const until = trustedUntil.get(key);
      if (until !== undefined && monotonicNow() < until) return;
      trustedUntil.delete(key);
      const sentAt = monotonicNow();
      const { holdsForMs } = await refuseUnpricedCall(db, model, kind, serviceTier);
      trustedUntil.set(key, sentAt + Math.min(PRICE_IN_FORCE_TTL_MS, holdsForMs ?? Infinity));
    },
  };
}

/** One remembered price check per pool (so per worker process). */
export const priceChecksOf = onePerPool((pool) => createPriceChecks(pool));
