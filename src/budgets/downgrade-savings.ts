import { add, subtract } from 'dinero.js/bigint';
import type pg from 'pg';
import { costOfUsage, type CallKind } from '../ledger/cost';
import { priceInForce, type PriceRow } from '../ledger/prices';
import { parseUsd, toExactString, zero, type Money } from '../money';

/**
 * What downgrades saved in [from, to): for every usage row of a run that ran at the `cheap` tier under a cheap model,
 * the default model's price for the same tokens (in force at the row's moment) minus what was paid. Exact decimal
 * strings. Rows whose default model has no price any more are counted apart, not guessed.
 */
export async function downgradeSavings(
  db: pg.Pool,
  from: string,
  to: string,
): Promise<{ savedUsd: string; paidUsd: string; atDefaultPriceUsd: string; entries: number; unpriced: number }> {
  const { rows } = await db.query<{
    kind: CallKind;
    prompt_tokens: string;
    cached_prompt_tokens: string;
    completion_tokens: string;
    reasoning_tokens: string;
    cost_usd: string;
    created_at: Date;
    default_model: string | null;
  }>(
    `select l.kind, l.prompt_tokens, l.cached_prompt_tokens, l.completion_tokens, l.reasoning_tokens, l.cost_usd, l.created_at,
            (select d.model from model_downgrades d
              where d.cheap_model = l.model and d.effective_from <= l.created_at
              order by d.effective_from desc limit 1) as default_model
       from usage_ledger l join runs r on r.workflow_id = l.workflow_id
      where r.tier = 'cheap' and l.entry_type = 'usage' and l.created_at >= $1 and l.created_at < $2
      order by l.id`,
    [from, to],
  );
  let paid: Money = zero();
  let atDefault: Money = zero();
  let entries = 0;
  let unpriced = 0;
  const prices = new Map<string, PriceRow | null>();
  for (const r of rows) {
    if (!r.default_model) continue;
    const key = `${r.default_model}@${r.created_at.toISOString()}`;
    if (!prices.has(key)) prices.set(key, await priceInForce(db, r.default_model, r.created_at).catch(() => null));
    const price = prices.get(key);
    if (!price) {
      unpriced++;
      continue;
    }
    const usage = {
      promptTokens: Number(r.prompt_tokens),
      cachedPromptTokens: Number(r.cached_prompt_tokens),
      completionTokens: Number(r.completion_tokens),
      reasoningTokens: Number(r.reasoning_tokens),
    };
    atDefault = add(atDefault, costOfUsage(r.kind, usage, price, r.created_at));
    paid = add(paid, parseUsd(r.cost_usd));
    entries++;
  }
  return {
    savedUsd: toExactString(subtract(atDefault, paid)),
    paidUsd: toExactString(paid),
    atDefaultPriceUsd: toExactString(atDefault),
    entries,
    unpriced,
  };
}
