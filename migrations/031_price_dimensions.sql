-- Prices with every dimension providers charge (docs/ledger.md, "Price dimensions"):
-- - token classes: input, cache read, cache write (5 minutes, 1 hour), output, embedding input;
-- - service tiers: a version may give rates per tier (standard, batch, flex, priority), and a call is priced at the
--   tier the provider says served it (usage_ledger.service_tier; null is standard);
-- - long context: above a version's threshold of prompt tokens, the whole request is priced at its long-context rates;
-- - an end: a version may stop at effective_to (a promotional price), and the newest version still in force applies.
-- The standard tier's rates below the threshold stay on model_prices itself; every other (tier, context) of a version
-- is a row of model_price_rates. A (tier, context) without rates is no price, like a model without a version.
alter table model_prices add column effective_to timestamptz;
alter table model_prices add column cache_write_5m_per_million numeric(30, 12);
alter table model_prices add column cache_write_1h_per_million numeric(30, 12);
alter table model_prices add column long_context_above bigint;
alter table model_prices add constraint model_prices_ends_after_it_starts check (effective_to > effective_from);
alter table model_prices add constraint model_prices_long_context_above_positive check (long_context_above > 0);
alter table model_prices add constraint model_prices_cache_writes_not_negative
  check (cache_write_5m_per_million >= 0 and cache_write_1h_per_million >= 0);

create table model_price_rates (
  price_id                    bigint         not null references model_prices (id),
  service_tier                text           not null check (service_tier in ('standard', 'batch', 'flex', 'priority')),
  long_context                boolean        not null,
  input_per_million           numeric(30, 12) check (input_per_million >= 0),
  cached_input_per_million    numeric(30, 12) check (cached_input_per_million >= 0),
  cache_write_5m_per_million  numeric(30, 12) check (cache_write_5m_per_million >= 0),
  cache_write_1h_per_million  numeric(30, 12) check (cache_write_1h_per_million >= 0),
  output_per_million          numeric(30, 12) check (output_per_million >= 0),
  embedding_input_per_million numeric(30, 12) check (embedding_input_per_million >= 0),
  primary key (price_id, service_tier, long_context),
  -- the standard tier's rates below the threshold are the version's own columns
  check (service_tier <> 'standard' or long_context)
);
create trigger model_price_rates_append_only before update or delete on model_price_rates
  for each row execute function forbid_append_only_change();
create trigger model_price_rates_no_truncate before truncate on model_price_rates
  for each statement execute function forbid_append_only_change();
grant select, insert on model_price_rates to cronledger_app;

-- The version of a model in force at an instant: the newest that has started and not ended (src/ledger/prices.ts
-- priceInForce reads through it too). A version that ended gives way to the newest older one still in force.
create function price_version_at(p_model text, p_at timestamptz) returns setof model_prices language sql stable as $$
  select * from model_prices
   where model = p_model and effective_from <= p_at and (effective_to is null or effective_to > p_at)
   order by effective_from desc limit 1
$$;

create or replace function price_in_force(p_model text, p_at timestamptz) returns model_prices language plpgsql stable as $$
declare
  p model_prices;
begin
  select * into p from price_version_at(p_model, p_at);
  if not found then
    raise exception 'no price in force for model "%" at %', p_model, p_at
      using errcode = 'CL001', detail = json_build_object('model', p_model, 'at', p_at, 'what', 'price')::text;
  end if;
  return p;
end
$$;

-- The tier a call is priced at, by the provider's name for it: standard for none, and for OpenAI's 'default' (its name
-- for the standard tier).
create function price_tier(p_tier text) returns text language sql immutable as $$
  select case when p_tier is null or p_tier = 'default' then 'standard' else p_tier end
$$;

-- Whether a request of p_prompt prompt tokens is priced at the version's long-context rates.
create function is_long_context(p model_prices, p_prompt bigint) returns boolean language sql immutable as $$
  select coalesce(p_prompt > p.long_context_above, false)
$$;

-- A version's rates at a tier and context, or null when it gives none (an unknown tier's name included).
create function price_rates(p model_prices, p_tier text, p_long boolean) returns model_price_rates language sql stable as $$
  select case when p_tier = 'standard' and not p_long
              then row(p.id, 'standard', false, p.input_per_million, p.cached_input_per_million, p.cache_write_5m_per_million,
                       p.cache_write_1h_per_million, p.output_per_million, p.embedding_input_per_million)::model_price_rates
              else (select r from model_price_rates r where r.price_id = p.id and r.service_tier = p_tier and r.long_context = p_long)
         end
$$;

-- THE cost of one call at one set of rates: the only place cronledger computes it (the booking, the price check and
-- downgrade savings reach it through usage_cost and price_call; test/support/cost-oracle.ts recomputes it
-- independently for the tests). promptTokens holds cache reads and writes: what is neither is billed at input, cache
-- reads at cached input, each cache write at its own rate (each at input when the rates have none: OpenAI bills its
-- cache writes as input), completion (reasoning included)
-- at output, an embedding's input at the embedding rate. Exact: rates have 12 fractional digits and 0.000001 adds 6,
-- so every product has 18, the ledger's scale; multiplying (never dividing) keeps numeric exact. Null when a rate the
-- call needs is null; callers raise the error.
create function call_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint,
                          r model_price_rates)
returns numeric language sql immutable as $$
  select case when p_kind = 'embedding' then r.embedding_input_per_million * p_prompt * 0.000001
              else r.input_per_million * (p_prompt - p_cached - p_write_5m - p_write_1h) * 0.000001
                   + coalesce(r.cached_input_per_million, r.input_per_million) * p_cached * 0.000001
                   + coalesce(r.cache_write_5m_per_million, r.input_per_million) * p_write_5m * 0.000001
                   + coalesce(r.cache_write_1h_per_million, r.input_per_million) * p_write_1h * 0.000001
                   + r.output_per_million * p_completion * 0.000001 end
$$;

-- call_cost at a version, for the tier that served the call (null: standard) and the context its prompt falls in; null
-- when a rate it needs is missing.
create function price_call(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint,
                           p_tier text, p model_prices)
returns numeric language sql stable as $$
  select call_cost(p_kind, p_prompt, p_cached, p_write_5m, p_write_1h, p_completion,
                   price_rates(p, price_tier(p_tier), is_long_context(p, p_prompt)))
$$;

-- price_call, after checking that every rate the call needs is there: price_class raises CL001 naming the one that is
-- missing, with its tier and context ("no batch tier long-context input price (version v3)").
drop function usage_cost(text, bigint, bigint, bigint, model_prices, timestamptz);
create function usage_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint,
                           p_tier text, p model_prices, p_at timestamptz)
returns numeric language plpgsql stable as $$
declare
  v_tier text := price_tier(p_tier);
  v_long boolean := is_long_context(p, p_prompt);
  r model_price_rates := price_rates(p, v_tier, v_long);
  -- what the rates are of, when not the standard ones ("batch tier long-context"); null for the standard ones
  v_of text := nullif(concat_ws(' ', case when v_tier <> 'standard' then v_tier || ' tier' end, case when v_long then 'long-context' end), '');
begin
  if p_kind = 'embedding' then
    perform price_class(r.embedding_input_per_million, p, p_at, concat_ws(' ', v_of, 'embedding input'));
  else
    perform price_class(r.input_per_million, p, p_at, concat_ws(' ', v_of, 'input'));
    perform price_class(r.output_per_million, p, p_at, concat_ws(' ', v_of, 'output'));
  end if;
  return call_cost(p_kind, p_prompt, p_cached, p_write_5m, p_write_1h, p_completion, r);
end
$$;
drop function call_cost(text, bigint, bigint, bigint, numeric, numeric, numeric, numeric);

-- The most a planned call can be billed at one set of rates: every prompt token at the dearest prompt class there is
-- (a cache write is dearer than plain input, a cache read cheaper), every completion token at output. Null when input
-- or output (or an embedding's rate) is missing.
create function worst_case_at_rates(p_kind text, p_prompt bigint, p_completion bigint, r model_price_rates)
returns numeric language sql immutable as $$
  select case when p_kind = 'embedding' then r.embedding_input_per_million * p_prompt * 0.000001
              when r.input_per_million is null or r.output_per_million is null then null
              else greatest(r.input_per_million, r.cached_input_per_million, r.cache_write_5m_per_million, r.cache_write_1h_per_million)
                     * p_prompt * 0.000001
                   + r.output_per_million * p_completion * 0.000001 end
$$;

-- THE worst case of a planned call (the budget guard reserves it; no booking of that call can cost more): at the tier
-- asked for (null: standard). Its prompt count is an upper bound, so a prompt counted above the long-context threshold
-- may be billed in either context: the dearer of the threshold's worth at the base rates and the whole at the
-- long-context rates. Null when a rate either needs is missing.
create function worst_case_call_cost(p_kind text, p_prompt bigint, p_completion bigint, p_tier text, p model_prices)
returns numeric language sql stable as $$
  select case when is_long_context(p, p_prompt)
              then (select case when b is null or l is null then null else greatest(b, l) end
                      from worst_case_at_rates(p_kind, p.long_context_above, p_completion, price_rates(p, price_tier(p_tier), false)) b,
                           worst_case_at_rates(p_kind, p_prompt, p_completion, price_rates(p, price_tier(p_tier), true)) l)
              else worst_case_at_rates(p_kind, p_prompt, p_completion, price_rates(p, price_tier(p_tier), false)) end
$$;

-- The worst case of one planned call ({kind, prompt, completion, tier}) on a model at the price in force; raises CL001
-- naming what has no price (the error a booking in either context would raise).
create or replace function worst_case_cost(p_call jsonb, p_model text, p_at timestamptz) returns numeric language plpgsql stable as $$
declare
  p model_prices := price_in_force(p_model, p_at);
  v_kind text := p_call ->> 'kind';
  v_prompt bigint := (p_call ->> 'prompt')::bigint;
  v_completion bigint := (p_call ->> 'completion')::bigint;
  v_cost numeric := worst_case_call_cost(v_kind, v_prompt, v_completion, p_call ->> 'tier', p);
begin
  if v_cost is null then
    perform usage_cost(v_kind, least(v_prompt, coalesce(p.long_context_above, v_prompt)), 0, 0, 0, v_completion, p_call ->> 'tier', p, p_at);
    perform usage_cost(v_kind, v_prompt, 0, 0, 0, v_completion, p_call ->> 'tier', p, p_at);
  end if;
  return v_cost;
end
$$;

-- One booking, one statement, priced with every dimension of the call (migration 029 has the rest of its story).
create or replace function book_usage(
  p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text,
  p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint,
  p_cache_write_5m bigint, p_cache_write_1h bigint, p_service_tier text,
  p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamptz,
  p_usage_received_at timestamptz
) returns usage_ledger language plpgsql as $$
declare
  v_at timestamptz := coalesce(p_occurred_at, now());
  v_price model_prices := price_in_force(p_model, v_at);
  v_row usage_ledger;
begin
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, provider_model, kind,
                            status, attempt, prompt_tokens, cached_prompt_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
                            completion_tokens, reasoning_tokens, service_tier, cost_usd, price_version, provider_request_id,
                            worker_id, input_truncated_from, created_at, usage_received_at, booked_at)
  values (p_key, 'usage', p_user_id, p_run_id, p_workflow_id, p_task_id, p_model, p_provider_model, p_kind,
          p_status, p_attempt, p_prompt, p_cached, p_cache_write_5m, p_cache_write_1h, p_completion, p_reasoning, p_service_tier,
          usage_cost(p_kind, p_prompt, p_cached, p_cache_write_5m, p_cache_write_1h, p_completion, p_service_tier, v_price, v_at),
          v_price.version, p_provider_request_id, p_worker_id, p_input_truncated_from, v_at, p_usage_received_at, clock_timestamp())
  on conflict (idempotency_key) do nothing
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select * into v_row from usage_ledger where idempotency_key = p_key;
  return v_row;
end
$$;

-- The budget guard's decision and reservation, one statement (src/budgets/reserve.ts says what it decides and why).
-- Before the lock: the budget in force and the default models' worst cases. Then the user's month row is locked (created
-- on the month's first decision) and, while it is held: spent, reserved, the keys already reserved (a retried request
-- gets them back), the choice (the cheap models priced only when it needs them), the reservation rows and the
-- threshold events. The commit is synchronous, so the decision is durable when the statement returns.
-- A run's first decision (p_may_downgrade: the run holds no reservation yet) whose tier is worse only because of other
-- runs' open reservations reserves nothing and returns tier 'wait': the caller decides again once they have settled,
-- so a burst ends as the same runs would one by one. A call made again never waits: its run may hold a reservation
-- that the runs it would wait for are waiting for.
-- p_calls: [{step, attempt, kind, model, prompt, completion, tier}] with worst-case counts (worst_case_call_cost prices
-- them). Returns JSON, every amount an exact decimal string.
create or replace function reserve_budget(
  p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer,
  p_at timestamptz
) returns jsonb language plpgsql as $$
declare
  v_at timestamptz := coalesce(p_at, now());
  v_budget budgets;
  v_month date;
  v_keys text[];
  v_steps text[];
  v_models text[];
  v_costs numeric[];
  v_cheap_models text[];
  v_cheap_costs numeric[];
  v_priced boolean;
  v_downgrades boolean;
  v_default_worst numeric;
  v_cheap_worst numeric;
  v_spent numeric;
  v_reserved numeric;
  v_retried boolean;
  v_used numeric;
  v_limit numeric;
  v_tier text;
  v_worst numeric;
  v_event_ids jsonb := '[]'::jsonb;
  v_figures record;   -- spent and reserved of a user without a budget
begin
  select * into v_budget from budget_in_force(p_user_id, v_at);
  if not found then
    v_month := budget_month_of(v_at, 'UTC');
    v_figures := budget_month_figures(p_user_id, 'UTC', v_month, v_at);
    return jsonb_build_object('tier', 'default', 'models', (select jsonb_object_agg(c ->> 'step', c ->> 'model') from jsonb_array_elements(p_calls) c),
      'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', null, 'spentUsd', v_figures.spent::text,
      'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'));
  end if;
  v_month := budget_month_of(v_at, v_budget.time_zone);
  v_limit := v_budget.monthly_limit_usd;

  -- Lock-free: each call's key and its worst case at its own model, and their sum, as arrays in the calls' order.
  select array_agg(p_run_id || ':' || w.step || ':' || w.attempt order by w.n), array_agg(w.step order by w.n),
         array_agg(w.model order by w.n), array_agg(w.cost order by w.n), bool_and(w.cost is not null), sum(w.cost)
    into v_keys, v_steps, v_models, v_costs, v_priced, v_default_worst
    from (select e.n, e.step, e.attempt, e.model,
                 worst_case_call_cost(e.kind, e.prompt, e.completion, e.tier, p) as cost
            from (select j.n, j.c ->> 'step' as step, j.c ->> 'attempt' as attempt, j.c ->> 'model' as model, j.c ->> 'kind' as kind,
                         (j.c ->> 'prompt')::bigint as prompt, (j.c ->> 'completion')::bigint as completion, j.c ->> 'tier' as tier
                    from jsonb_array_elements(p_calls) with ordinality j(c, n) offset 0) e -- OFFSET 0: each field read once
            left join lateral price_version_at(e.model, v_at) p on true) w;
  if not v_priced then
    -- a model or a price class without a price in force: worst_case_cost raises the error that names it
    perform worst_case_cost(c, c ->> 'model', v_at) from jsonb_array_elements(p_calls) c;
  end if;

  -- The lock, held to the commit: no other decision and no booking of this month gets past it meanwhile.
  select m.spent_usd into v_spent from budget_months m
   where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month for update;
  if not found then
    insert into budget_months (user_id, time_zone, month) values (p_user_id, v_budget.time_zone, v_month) on conflict do nothing;
    select m.spent_usd into v_spent from budget_months m
     where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month for update;
  end if;

  -- Reserved (open and not expired), and whether these keys were reserved already (a retried request). The keys are
  -- probed one by one through the primary key (LATERAL ... LIMIT 1), never planned as a scan.
  select (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = v_budget.time_zone and r.month = v_month and r.status = 'open' and r.expires_at > v_at),
         exists (select from unnest(v_keys) k(key) cross join lateral (select from budget_reservations r where r.idempotency_key = k.key limit 1) r)
    into v_reserved, v_retried;

  if v_retried then
    -- the reservation already made for these keys, as it was made
    return (
      select jsonb_build_object('tier', min(r.tier), 'models', jsonb_object_agg(k.step, coalesce(r.model, k.model)),
               'worstCaseUsd', coalesce(sum(r.amount_usd), 0)::text)
        from unnest(v_keys, v_steps, v_models) k(key, step, model) left join budget_reservations r on r.idempotency_key = k.key
    ) || jsonb_build_object('eventIds', '[]'::jsonb, 'limitUsd', v_limit::text, 'spentUsd', v_spent::text,
           'reservedUsd', v_reserved::text, 'timeZone', v_budget.time_zone, 'month', to_char(v_month, 'YYYY-MM'));
  end if;

  v_used := v_spent + v_reserved;
  v_tier := budget_choice(v_used, v_limit, v_default_worst, null, false); -- 'default', or not without the cheap prices
  if v_tier = 'default' then
    v_worst := v_default_worst;
  else
    -- The cheap models (each call's own when it has none, or when the run may not downgrade) and their worst cases,
    -- priced only now that the choice needs them.
    select array_agg(w.cheap_model order by w.n), array_agg(w.cheap_cost order by w.n), bool_and(w.cheap_cost is not null),
           bool_or(w.cheap_model <> w.model), sum(w.cheap_cost)
      into v_cheap_models, v_cheap_costs, v_priced, v_downgrades, v_cheap_worst
      from (select u.n, u.model, d.cheap_model,
                   worst_case_call_cost(j.c ->> 'kind', (j.c ->> 'prompt')::bigint, (j.c ->> 'completion')::bigint, j.c ->> 'tier', q)
                     as cheap_cost
              from unnest(v_models) with ordinality u(model, n)
              join jsonb_array_elements(p_calls) with ordinality j(c, n) using (n)
              cross join lateral (
                select coalesce(case when p_may_downgrade then budget_cheap_model(u.model, v_at) end, u.model) as cheap_model) d
              left join lateral price_version_at(d.cheap_model, v_at) q on true) w;
    if not v_priced then
      perform worst_case_cost(c, m, v_at)
         from jsonb_array_elements(p_calls) with ordinality j(c, n) join unnest(v_cheap_models) with ordinality u(m, n) using (n);
    end if;
    v_tier := budget_choice(v_used, v_limit, v_default_worst, v_cheap_worst, v_downgrades);
    if p_may_downgrade and v_reserved > 0 and budget_choice(v_spent, v_limit, v_default_worst, v_cheap_worst, v_downgrades) <> v_tier then
      return jsonb_build_object('tier', 'wait', 'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', v_limit::text,
               'spentUsd', v_spent::text, 'reservedUsd', v_reserved::text, 'timeZone', v_budget.time_zone,
               'month', to_char(v_month, 'YYYY-MM'));
    end if;
    if v_tier = 'cheap' then
      v_worst := v_cheap_worst;
      v_models := v_cheap_models;
      v_costs := v_cheap_costs;
    else
      v_worst := v_cheap_worst; -- blocked: the last tier tried (the default one, without downgrades, costs the same)
    end if;
  end if;

  if v_tier <> 'blocked' then
    insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, workflow_id, run_id, expires_at)
    select k.key, p_user_id, v_budget.time_zone, v_month, k.cost, k.model, v_tier, p_workflow_id, p_run_id,
           v_at + make_interval(secs => p_expiry_seconds)
      from unnest(v_keys, v_models, v_costs) k(key, model, cost);
  end if;

  -- Threshold events: each band reached with this decision's reservation (a blocked run reaches them all), once per
  -- user and month. The band's starting percentage names the event.
  if v_tier = 'blocked' or budget_tier(v_used + v_worst, v_limit) <> 'default' then
    with inserted as (
      insert into budget_events (event_id, user_id, time_zone, month, threshold, limit_usd, spent_usd, reserved_usd)
      select format('budget:%s:%s:%s:%s', p_user_id, v_budget.time_zone, to_char(v_month, 'YYYY-MM'), b.from_percent), p_user_id,
             v_budget.time_zone, v_month, b.from_percent, v_limit, v_spent,
             v_reserved + case when v_tier = 'blocked' then 0 else v_worst end
        from budget_bands() b
       where v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * b.from_percent
      on conflict do nothing
      returning event_id, threshold
    )
    select coalesce(jsonb_agg(to_jsonb(event_id) order by threshold), '[]'::jsonb) into v_event_ids from inserted;
  end if;

  return jsonb_build_object('tier', v_tier, 'worstCaseUsd', v_worst::text, 'eventIds', v_event_ids, 'limitUsd', v_limit::text,
           'spentUsd', v_spent::text, 'reservedUsd', v_reserved::text, 'timeZone', v_budget.time_zone,
           'month', to_char(v_month, 'YYYY-MM'))
      || case when v_tier = 'blocked' then '{}'::jsonb else jsonb_build_object('models', jsonb_object(v_steps, v_models)) end;
end
$$;

-- Only the application role runs the pricing functions; the read-only role may price with them too (the admin page
-- and reports reach them through usage_cost and price_call).
revoke execute on function price_version_at(text, timestamptz), price_tier(text), is_long_context(model_prices, bigint),
  price_rates(model_prices, text, boolean), call_cost(text, bigint, bigint, bigint, bigint, bigint, model_price_rates),
  price_call(text, bigint, bigint, bigint, bigint, bigint, text, model_prices),
  usage_cost(text, bigint, bigint, bigint, bigint, bigint, text, model_prices, timestamptz),
  worst_case_at_rates(text, bigint, bigint, model_price_rates), worst_case_call_cost(text, bigint, bigint, text, model_prices)
  from public;
grant execute on function price_version_at(text, timestamptz), price_tier(text), is_long_context(model_prices, bigint),
  price_rates(model_prices, text, boolean), call_cost(text, bigint, bigint, bigint, bigint, bigint, model_price_rates),
  price_call(text, bigint, bigint, bigint, bigint, bigint, text, model_prices),
  usage_cost(text, bigint, bigint, bigint, bigint, bigint, text, model_prices, timestamptz),
  worst_case_at_rates(text, bigint, bigint, model_price_rates), worst_case_call_cost(text, bigint, bigint, text, model_prices)
  to cronledger_app;
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    grant execute on function price_version_at(text, timestamptz), price_tier(text), is_long_context(model_prices, bigint),
      price_rates(model_prices, text, boolean), call_cost(text, bigint, bigint, bigint, bigint, bigint, model_price_rates),
      price_call(text, bigint, bigint, bigint, bigint, bigint, text, model_prices),
      usage_cost(text, bigint, bigint, bigint, bigint, bigint, text, model_prices, timestamptz) to cronledger_readonly;
  end if;
end
$$;
