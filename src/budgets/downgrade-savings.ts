import { subtract } from 'dinero.js/bigint';
import type pg from 'pg';
import { fromDatabaseError } from '../ledger/prices';
import { parseUsd, toExactString } from '../money';

/**
 * What downgrades saved in [from, to): for every usage row of a run that ran at the `cheap` tier under a cheap model,
 * the default model's price for the same tokens (in force at the row's moment) minus what was paid. Exact decimal
 * strings. Rows whose default model has no price (for the row's tier and context) are counted apart, not guessed. The
 * default model's cost is the booking's own (price_call, what usage_cost books), so what a downgrade saved and what a booking costs can never follow two rules.
 *
 * One statement, and no join of the month's ledger to its runs: only the rows under a model that is some downgrade's
 * cheap model are read (usage_ledger_model_created), and only those are checked against the runs that ran cheap; a
 * row under any other model has no default model to compare with, so it never counted. The default model's price in
 * force at each row, its cost and the sums come in the same statement: one row back, not one per ledger row.
 */
export async function downgradeSavings(
  db: pg.Pool,
  from: string,
  to: string,
): Promise<{ savedUsd: string; paidUsd: string; atDefaultPriceUsd: string; entries: number; unpriced: number }> {
  const { rows } = await db
    .query<{ paid: string; at_default: string; entries: number; unpriced: number }>(
      `select coalesce(sum(c.paid) filter (where c.at_default is not null), 0)::text as paid,
              coalesce(sum(c.at_default), 0)::text as at_default,
              count(c.at_default)::int as entries, count(*) filter (where c.at_default is null)::int as unpriced
         from (select l.cost_usd as paid,
                      price_call(l.kind, l.prompt_tokens, l.cached_prompt_tokens, l.cache_write_5m_tokens, l.cache_write_1h_tokens,
                                 l.completion_tokens, l.service_tier, p) as at_default
                 from usage_ledger l
                 cross join lateral (select d.model as default_model from model_downgrades d
                                      where d.cheap_model = l.model and d.effective_from <= l.created_at
                                      order by d.effective_from desc limit 1) dm
                 left join lateral price_version_at(dm.default_model, l.created_at) p on true
                where l.model in (select d.cheap_model from model_downgrades d where d.effective_from < $2)
                  and l.entry_type = 'usage' and l.created_at >= $1 and l.created_at < $2
                  and exists (select from runs r where r.workflow_id = l.workflow_id and r.tier = 'cheap')) c`,
      [from, to],
    )
    .catch((err: unknown) => {
      throw fromDatabaseError(err);
    });
  const paid = parseUsd(rows[0].paid);
  const atDefault = parseUsd(rows[0].at_default);
  return {
    savedUsd: toExactString(subtract(atDefault, paid)),
    paidUsd: toExactString(paid),
    atDefaultPriceUsd: toExactString(atDefault),
    entries: rows[0].entries,
    unpriced: rows[0].unpriced,
  };
}
