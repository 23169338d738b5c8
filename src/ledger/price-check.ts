import type pg from 'pg';
import type { CallKind, ServiceTier } from '../models/provider';
import { fromDatabaseError, NoPriceError, type PriceRow } from './prices';

/**
 * No call without a price: refuses (NoPriceError) before any spend. The moment is the database's clock, the same clock
 * the booking prices with, so a worker whose clock runs ahead can't pass a check the booking then fails. Pricing zero
 * tokens with the booking's own usage_cost also refuses a model whose version lacks the rates this kind of call needs
 * (an embedding-only model used for chat, or a service tier the version gives no rates for), with the same error the
 * booking would raise.
 *
 * One statement reads the clock, the price in force by it (price_version_at, priceInForce's rule too) and prices it: one
 * round trip before every model call, not two.
 */
export async function refuseUnpricedCall(
  db: pg.Pool,
  model: string,
  kind: CallKind,
  serviceTier: ServiceTier | null = null,
): Promise<PriceRow> {
  // A join, not a row value: numeric prices must come back as PostgreSQL prints them (to_jsonb would make them floats).
  // Named, so each connection parses and plans it once; its columns are listed, so a column added to model_prices
  // later can't change the prepared statement's result type under a running worker.
  const { rows } = await db
    .query<PriceRow & { checked_at: Date; zero_cost: string | null }>({
      name: 'refuse-unpriced-call',
      text: `select n.checked_at, p.id, p.model, p.version, p.effective_from, p.input_per_million, p.cached_input_per_million,
                    p.output_per_million, p.embedding_input_per_million, p.source, p.effective_to, p.cache_write_5m_per_million,
                    p.cache_write_1h_per_million, p.long_context_above,
                    case when p.id is not null then usage_cost($2, 0, 0, 0, 0, 0, $3, p, n.checked_at) end as zero_cost
               from (select now() as checked_at) n
               left join lateral price_version_at($1, n.checked_at) p on true`,
      values: [model, kind, serviceTier],
    })
    .catch((err: unknown) => {
      throw fromDatabaseError(err);
    });
  const { checked_at: now, zero_cost: _zero, ...price } = rows[0];
  if (price.id === null) throw new NoPriceError(model, now);
  return price;
}
