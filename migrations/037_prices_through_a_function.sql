-- The operator adds price versions through add_price, like its credits, adjustments and budgets, and may no longer
-- INSERT into model_prices or model_price_rates (or draw model_prices' ids) itself. The 027 triggers still stamp
-- created_by with session_user (the operator's login role, inside this SECURITY DEFINER function too) and refuse a
-- version dated before calls of its model already booked; the tables' checks refuse a negative rate.

-- One version of a model's prices, with every (tier, context) it gives: p_rates is a JSON array of rate sets
-- {tier, long, input, cachedInput, cacheWrite5m, cacheWrite1h, output, embeddingInput}, each rate an exact decimal
-- string or null. The standard tier's set below the threshold goes on the version's row, every other set is a row of
-- model_price_rates. Returns the new version's id, or null when the model already has that version or a version
-- starting then (the caller compares them); nothing is written then.
create function add_price(p_model text, p_version text, p_effective_from timestamptz, p_effective_to timestamptz,
  p_long_context_above bigint, p_source text, p_rates jsonb)
returns bigint language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
  v_sets jsonb[] := array(select e from jsonb_array_elements(p_rates) e);
  v_base jsonb;
  v_bad text;
  v_id bigint;
begin
  if cardinality(v_sets) = 0 or exists (select from unnest(v_sets) e where e ->> 'tier' is null or e ->> 'long' is null)
     or (select count(*) from unnest(v_sets) e where e ->> 'tier' = 'standard' and not (e ->> 'long')::boolean) > 1 then
    raise exception 'price version % of % needs its rate sets, each with its tier and context, at most one standard below the threshold',
      p_version, p_model using errcode = 'check_violation';
  end if;
  -- A rate is stored with 12 fractional digits: one with more would be rounded, and the ledger priced at another rate.
  select format('%s %s', e ->> 'tier', c.key) into v_bad
    from unnest(v_sets) e cross join lateral jsonb_each_text(e - 'tier' - 'long') c
   where c.value is not null and c.value::numeric <> round(c.value::numeric, 12)
   limit 1;
  if v_bad is not null then
    raise exception 'price version % of %: the % rate has more than 12 fractional digits', p_version, p_model, v_bad
      using errcode = 'check_violation';
  end if;
  v_base := (select e from unnest(v_sets) e where e ->> 'tier' = 'standard' and not (e ->> 'long')::boolean);
  insert into model_prices (model, version, effective_from, effective_to, long_context_above, input_per_million,
                            cached_input_per_million, cache_write_5m_per_million, cache_write_1h_per_million,
                            output_per_million, embedding_input_per_million, source)
  values (p_model, p_version, p_effective_from, p_effective_to, p_long_context_above, (v_base ->> 'input')::numeric,
          (v_base ->> 'cachedInput')::numeric, (v_base ->> 'cacheWrite5m')::numeric, (v_base ->> 'cacheWrite1h')::numeric,
          (v_base ->> 'output')::numeric, (v_base ->> 'embeddingInput')::numeric, p_source)
  on conflict do nothing
  returning id into v_id;
  if v_id is null then
    return null;
  end if;
  insert into model_price_rates (price_id, service_tier, long_context, input_per_million, cached_input_per_million,
                                 cache_write_5m_per_million, cache_write_1h_per_million, output_per_million,
                                 embedding_input_per_million)
  select v_id, e ->> 'tier', (e ->> 'long')::boolean, (e ->> 'input')::numeric, (e ->> 'cachedInput')::numeric,
         (e ->> 'cacheWrite5m')::numeric, (e ->> 'cacheWrite1h')::numeric, (e ->> 'output')::numeric,
         (e ->> 'embeddingInput')::numeric
    from unnest(v_sets) e
   where not (e ->> 'tier' = 'standard' and not (e ->> 'long')::boolean);
  return v_id;
end
$$;

revoke execute on function add_price(text, text, timestamptz, timestamptz, bigint, text, jsonb) from public;
grant execute on function add_price(text, text, timestamptz, timestamptz, bigint, text, jsonb) to cronledger_operator;
revoke insert on model_prices, model_price_rates from cronledger_operator;
revoke usage on sequence model_prices_id_seq from cronledger_operator;
