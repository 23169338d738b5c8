-- What-if repricing (`cronledger report --reprice FILE`, the admin's models page): a month's usage entries priced
-- under price versions given by the caller (a prices file, or a version of the table) instead of the ledger's own,
-- without writing anything. The versions and their rate sets come in as JSON shaped like model_prices and
-- model_price_rates rows, so the cost of each entry is call_cost's, the booking's own rule: the version in force at
-- the entry's moment (price_version_at's rule, over the given versions), the rates of the tier that served it
-- (price_tier) in its context (is_long_context), and call_cost on the entry's tokens. p_rates carries every rate set
-- of each version, the standard tier's below the threshold included (price_rates' rows, whichever table holds them).
-- An entry whose model has no version in force, or whose tier or context has no rates, costs null and counts as
-- unpriced: the caller lists them rather than guess. p_downgrade maps a ledger model to the model it is priced as
-- ({"openai/gpt-4o-mini": "openai/gpt-4.1-nano"}); p_models, when given, keeps only entries priced as one of them.
create function reprice_usage(p_from timestamptz, p_to timestamptz, p_versions jsonb, p_rates jsonb,
                              p_downgrade jsonb default '{}', p_models text[] default null)
  returns table (user_id text, task_id text, model text, priced_as text, entries bigint, ledger_usd numeric(38, 18),
                 repriced_usd numeric(38, 18), unpriced bigint, first_unpriced_at timestamptz)
  language sql stable
as $$
  with given as (
    select array(select v from jsonb_populate_recordset(null::model_prices, p_versions) v) as versions,
           array(select r from jsonb_populate_recordset(null::model_price_rates, p_rates) r) as rates
  ),
  priced as (
    select l.user_id, l.task_id, l.model, m.priced_as, l.cost_usd, l.created_at,
           call_cost(l.kind, l.prompt_tokens, l.cached_prompt_tokens, l.cache_write_5m_tokens, l.cache_write_1h_tokens,
                     l.completion_tokens,
                     (select r from unnest(given.rates) r
                       where r.price_id = (v.p).id and r.service_tier = price_tier(l.service_tier)
                         and r.long_context = is_long_context(v.p, l.prompt_tokens))) as cost
      from usage_ledger l
      cross join given
      cross join lateral (select coalesce(p_downgrade ->> l.model, l.model) as priced_as) m
      left join lateral (select p from unnest(given.versions) p
                          where p.model = m.priced_as and p.effective_from <= l.created_at
                            and (p.effective_to is null or p.effective_to > l.created_at)
                          order by p.effective_from desc limit 1) v on true
     where l.entry_type = 'usage' and l.created_at >= p_from and l.created_at < p_to
       and (p_models is null or m.priced_as = any (p_models))
  )
  select user_id, task_id, model, priced_as, count(*), sum(cost_usd), sum(cost), count(*) filter (where cost is null),
         min(created_at) filter (where cost is null)
    from priced
   group by user_id, task_id, model, priced_as
$$;

-- A read: the CLI's report (the worker's connection) and the admin page (the read-only role) call it.
revoke all on function reprice_usage(timestamptz, timestamptz, jsonb, jsonb, jsonb, text[]) from public;
grant execute on function reprice_usage(timestamptz, timestamptz, jsonb, jsonb, jsonb, text[]) to cronledger_worker,
  cronledger_readonly;
