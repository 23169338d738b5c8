import type pg from 'pg';
import { costOfUsage, type CallKind } from './cost';
import { priceInForce, type PriceRow } from './prices';

const NO_TOKENS = { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 };

/**
 * No call without a price: refuses (NoPriceError) before any spend. The moment is the database's clock, the same clock
 * the booking prices with, so a worker whose clock runs ahead can't pass a check the booking then fails. Pricing zero
 * tokens also refuses a model whose version lacks the rates this kind of call needs (an embedding-only model used for chat).
 */
export async function refuseUnpricedCall(db: pg.Pool, model: string, kind: CallKind): Promise<PriceRow> {
  const now = (await db.query<{ now: Date }>('select now() as now')).rows[0].now;
  const price = await priceInForce(db, model, now);
  costOfUsage(kind, NO_TOKENS, price, now);
  return price;
}
