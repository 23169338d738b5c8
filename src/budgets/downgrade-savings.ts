import { add, subtract } from 'dinero.js/bigint';
import type pg from 'pg';
import { costOfUsage, type CallKind } from '../ledger/cost';
import type { PriceRow } from '../ledger/prices';
import { parseUsd, toExactString, zero, type Money } from '../money';

/**
 * What downgrades saved in [from, to): for every usage row of a run that ran at the `cheap` tier under a cheap model,
 * the default model's price for the same tokens (in force at the row's moment) minus what was paid. Exact decimal
 * strings. Rows whose default model has no price any more are counted apart, not guessed.
 *
 * One statement, and no join of the month's ledger to its runs: only the rows under a model that is some downgrade's
 * cheap model are read (usage_ledger_model_created), and only those are checked against the runs that ran cheap; a
 * row under any other model has no default model to compare with, so it never counted. The default model's price in
 * force at each row comes in the same statement, not a round trip per row.
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
    price_id: string | null;
    price_model: string;
    price_version: string;
    price_effective_from: Date;
    input_per_million: string | null;
    cached_input_per_million: string | null;
    output_per_million: string | null;
    embedding_input_per_million: string | null;
    price_source: string;
  }>(
    `select l.kind, l.prompt_tokens, l.cached_prompt_tokens, l.completion_tokens, l.reasoning_tokens, l.cost_usd, l.created_at,
            p.id as price_id, p.model as price_model, p.version as price_version, p.effective_from as price_effective_from,
            p.input_per_million, p.cached_input_per_million, p.output_per_million, p.embedding_input_per_million,
            p.source as price_source
       from usage_ledger l
       cross join lateral (select d.model as default_model from model_downgrades d
                            where d.cheap_model = l.model and d.effective_from <= l.created_at
                            order by d.effective_from desc limit 1) dm
       left join lateral (select * from model_prices p
                           where p.model = dm.default_model and p.effective_from <= l.created_at
                           order by p.effective_from desc limit 1) p on true
      where l.model in (select d.cheap_model from model_downgrades d where d.effective_from < $2)
        and l.entry_type = 'usage' and l.created_at >= $1 and l.created_at < $2
        and exists (select from runs r where r.workflow_id = l.workflow_id and r.tier = 'cheap')
      order by l.id`,
    [from, to],
  );
  let paid: Money = zero();
  let atDefault: Money = zero();
  let entries = 0;
  let unpriced = 0;
  for (const r of rows) {
    if (r.price_id === null) {
      unpriced++;
      continue;
    }
    const price: PriceRow = {
      id: r.price_id,
      model: r.price_model,
      version: r.price_version,
      effective_from: r.price_effective_from,
      input_per_million: r.input_per_million,
      cached_input_per_million: r.cached_input_per_million,
      output_per_million: r.output_per_million,
      embedding_input_per_million: r.embedding_input_per_million,
      source: r.price_source,
    };
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
