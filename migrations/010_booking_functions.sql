-- One round trip per booking and per budget decision. Each was a transaction of five to a dozen statements from the
-- worker, and the decision held the user's month row lock across several of those network round trips. Here they are
-- single statements: book_usage (price lookup, exact cost, idempotent insert; its triggers settle and queue as before)
-- and reserve_budget (lookups first, then the month lock only for the sums, the decision and the inserts).
--
-- Errors a user can cause carry their own SQLSTATE so the TypeScript side maps them back to its UserError classes:
--   CL001  no price in force (NoPriceError); DETAIL is JSON {"model", "at", "what"}.

-- When the booking committed, as closely as a row can know it: clock_timestamp() as the row is formed, in the booking's
-- own single-statement transaction (only its after-insert triggers and the commit follow). The admin page's booking-lag
-- histogram runs from usage_received_at to here. Set as a default after the column exists, so rows booked before this
-- migration stay null (a volatile default in ADD COLUMN would stamp them all with the migration's moment).
alter table usage_ledger add column booked_at timestamptz;
alter table usage_ledger alter column booked_at set default clock_timestamp();

-- The newest price version of a model in force at an instant (src/ledger/prices.ts priceInForce does the same).
create function price_in_force(p_model text, p_at timestamptz) returns model_prices language plpgsql stable as $$
declare
  p model_prices;
begin
  select * into p from model_prices where model = p_model and effective_from <= p_at order by effective_from desc limit 1;
  if not found then
    raise exception 'no price in force for model "%" at %', p_model, p_at
      using errcode = 'CL001', detail = json_build_object('model', p_model, 'at', p_at, 'what', 'price')::text;
  end if;
  return p;
end
$$;

-- A price class of a version, or the no-price error naming it (NoPriceError's wording: "input price (version v1)").
create function price_class(p_rate numeric, p model_prices, p_at timestamptz, what text) returns numeric language plpgsql immutable as $$
begin
  if p_rate is null then
    raise exception 'no % price (version %) in force for model "%" at %', what, p.version, p.model, p_at
      using errcode = 'CL001',
            detail = json_build_object('model', p.model, 'at', p_at, 'what', format('%s price (version %s)', what, p.version))::text;
  end if;
  return p_rate;
end
$$;

-- Cost of one call at one price version, with exactly the rules of src/ledger/cost.ts costOfUsage: uncached prompt at
-- input, cached prompt at cached input (input when the version has none), completion at output, an embedding's input
-- at the embedding rate. Exact: prices have 12 fractional digits and 0.000001 adds 6, so every product has 18, the
-- ledger's scale; multiplying (never dividing, which rounds to a chosen scale) keeps numeric exact.
-- test/booking-cost.test.ts checks it equals costOfUsage to the last digit.
create function usage_cost(p_kind text, p_prompt bigint, p_cached bigint, p_completion bigint, p model_prices, p_at timestamptz)
returns numeric language plpgsql stable as $$
declare
  v_input numeric;
  v_cached numeric;
  v_output numeric;
begin
  if p_kind = 'embedding' then
    return price_class(p.embedding_input_per_million, p, p_at, 'embedding input') * p_prompt * 0.000001;
  end if;
  v_input := price_class(p.input_per_million, p, p_at, 'input');
  v_cached := coalesce(p.cached_input_per_million, v_input);
  v_output := price_class(p.output_per_million, p, p_at, 'output');
  return v_input * (p_prompt - p_cached) * 0.000001 + v_cached * p_cached * 0.000001 + v_output * p_completion * 0.000001;
end
$$;

-- One booking, one statement: the price in force at p_occurred_at (else now()), the exact cost, and the insert under
-- the idempotency key. Returns the row, new or already there (a retried booking), so the caller can check that an
-- existing row describes the same call. Validation of the counts stays in TypeScript (validateUsage), before the call.
create function book_usage(
  p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text,
  p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint,
  p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamptz,
  p_usage_received_at timestamptz
) returns usage_ledger language plpgsql as $$
declare
  v_at timestamptz := coalesce(p_occurred_at, now());
  v_price model_prices := price_in_force(p_model, v_at);
  v_row usage_ledger;
begin
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, provider_model, kind,
                            status, attempt, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens,
                            cost_usd, price_version, provider_request_id, worker_id, input_truncated_from, created_at,
                            usage_received_at, booked_at)
  values (p_key, 'usage', p_user_id, p_run_id, p_workflow_id, p_task_id, p_model, p_provider_model, p_kind,
          p_status, p_attempt, p_prompt, p_cached, p_completion, p_reasoning,
          usage_cost(p_kind, p_prompt, p_cached, p_completion, v_price, v_at), v_price.version, p_provider_request_id, p_worker_id,
          p_input_truncated_from, v_at, p_usage_received_at, clock_timestamp())
  on conflict (idempotency_key) do nothing
  returning * into v_row;
  if found then
    return v_row;
  end if;
  -- A statement of its own: it sees the row that a concurrent booking of the same key committed while we waited.
  select * into v_row from usage_ledger where idempotency_key = p_key;
  return v_row;
end
$$;

-- Spent (the month's summary row) and reserved (open, unexpired reservations) for one user's month in one zone.
create function budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamptz, out spent numeric, out reserved numeric)
language sql stable as $$
  select coalesce((select m.spent_usd from budget_months m where m.user_id = p_user_id and m.time_zone = p_zone and m.month = p_month), 0),
         (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = p_zone and r.month = p_month and r.status = 'open' and r.expires_at > p_at)
$$;

-- The worst-case cost of one planned call ({kind, prompt, cached, completion}) on a model, at the price in force.
create function worst_case_cost(p_call jsonb, p_model text, p_at timestamptz) returns numeric language sql stable as $$
  select usage_cost(p_call ->> 'kind', (p_call ->> 'prompt')::bigint, (p_call ->> 'cached')::bigint, (p_call ->> 'completion')::bigint,
                    price_in_force(p_model, p_at), p_at)
$$;

-- The budget guard's decision and reservation (src/budgets/reserve.ts says what it decides and why), one statement.
-- Everything that needs no lock comes first: the budget in force, the cheap models, the prices and the worst cases.
-- Then the user's month row is locked (created empty on the month's first decision) and, while it is held, only: the
-- keys already reserved (a retried request gets them back), the sweep of expired reservations, spent + reserved, the
-- choice, the reservation inserts and the threshold events. No network round trip happens while the lock is held.
-- p_calls: [{step, attempt, kind, model, prompt, cached, completion}] with worst-case counts. Returns JSON, every
-- amount an exact decimal string.
create function reserve_budget(
  p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer,
  p_at timestamptz
) returns jsonb language plpgsql as $$
declare
  v_at timestamptz := coalesce(p_at, now());
  v_budget budgets;
  v_month date;
  v_calls jsonb;      -- p_calls, each with key, cost, cheap_model and cheap_cost
  v_downgrades boolean;
  v_default_worst numeric;
  v_cheap_worst numeric;
  v_figures record;
  v_used numeric;
  v_limit numeric;
  v_band text;
  v_tier text;
  v_worst numeric;
  v_event_ids jsonb;
begin
  select b.* into v_budget from (
    (select * from budgets where user_id = p_user_id and effective_from <= v_at order by effective_from desc limit 1)
    union all
    (select * from budgets where user_id is null and effective_from <= v_at order by effective_from desc limit 1)
  ) b order by b.user_id is null limit 1;
  if not found then
    v_month := (date_trunc('month', v_at at time zone 'UTC'))::date;
    v_figures := budget_month_figures(p_user_id, 'UTC', v_month, v_at);
    return jsonb_build_object('tier', 'default', 'models', (select jsonb_object_agg(c ->> 'step', c ->> 'model') from jsonb_array_elements(p_calls) c),
      'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', null, 'spentUsd', v_figures.spent::text,
      'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'));
  end if;
  v_month := (date_trunc('month', v_at at time zone v_budget.time_zone))::date;
  v_limit := v_budget.monthly_limit_usd;

  -- Lock-free: each call's cheap model (itself without one, or when the run may not downgrade) and both worst cases.
  select jsonb_agg(e.c || jsonb_build_object('key', p_run_id || ':' || (e.c ->> 'step') || ':' || (e.c ->> 'attempt'),
                                             'cost', worst_case_cost(e.c, e.c ->> 'model', v_at)::text,
                                             'cheap_model', d.cheap_model,
                                             'cheap_cost', worst_case_cost(e.c, d.cheap_model, v_at)::text) order by e.n)
    into v_calls
    from jsonb_array_elements(p_calls) with ordinality e(c, n)
    cross join lateral (
      select coalesce(case when p_may_downgrade then
               (select g.cheap_model from model_downgrades g where g.model = e.c ->> 'model' and g.effective_from <= v_at
                 order by g.effective_from desc limit 1) end, e.c ->> 'model') as cheap_model) d;
  select bool_or(c ->> 'cheap_model' <> c ->> 'model'), sum((c ->> 'cost')::numeric), sum((c ->> 'cheap_cost')::numeric)
    into v_downgrades, v_default_worst, v_cheap_worst
    from jsonb_array_elements(v_calls) c;

  -- The lock: from here to the commit nothing else can book or reserve against this month.
  insert into budget_months (user_id, time_zone, month) values (p_user_id, v_budget.time_zone, v_month) on conflict do nothing;
  perform from budget_months m where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month for update;

  if exists (select from budget_reservations r where r.idempotency_key in (select c ->> 'key' from jsonb_array_elements(v_calls) c)) then
    -- a retried request: the reservation already made for these keys, as it was made
    v_figures := budget_month_figures(p_user_id, v_budget.time_zone, v_month, v_at);
    return (
      select jsonb_build_object('tier', min(r.tier),
               'models', jsonb_object_agg(c ->> 'step', coalesce(r.model, c ->> 'model')),
               'worstCaseUsd', coalesce(sum(r.amount_usd), 0)::text)
        from jsonb_array_elements(v_calls) c left join budget_reservations r on r.idempotency_key = c ->> 'key'
    ) || jsonb_build_object('eventIds', '[]'::jsonb, 'limitUsd', v_limit::text, 'spentUsd', v_figures.spent::text,
           'reservedUsd', v_figures.reserved::text, 'timeZone', v_budget.time_zone, 'month', to_char(v_month, 'YYYY-MM'));
  end if;

  update budget_reservations r set status = 'expired', closed_at = now()
   where r.user_id = p_user_id and r.time_zone = v_budget.time_zone and r.month = v_month and r.status = 'open' and r.expires_at <= v_at;
  v_figures := budget_month_figures(p_user_id, v_budget.time_zone, v_month, v_at);
  v_used := v_figures.spent + v_figures.reserved;
  -- the bands of src/budgets/tier.ts tierFor: blocked from 100 %, cheap from 80 % (exactly 80 % is cheap)
  v_band := case when v_used * 100 >= v_limit * 100 then 'blocked' when v_used * 100 >= v_limit * 80 then 'cheap' else 'default' end;

  -- The default models in the default band if their worst case fits, else the cheap ones if theirs fits, else blocked.
  -- Without a cheap model the cheap tier runs the same calls (cheap_cost = cost), so it is tried only in the cheap band.
  if v_band = 'default' and v_used + v_default_worst <= v_limit then
    v_tier := 'default';
    v_worst := v_default_worst;
  elsif (v_band = 'cheap' or (v_band = 'default' and v_downgrades)) and v_used + v_cheap_worst <= v_limit then
    v_tier := 'cheap';
    v_worst := v_cheap_worst;
  else
    v_tier := 'blocked';
    v_worst := v_cheap_worst; -- the last tier tried (the default one, without downgrades, costs the same)
  end if;

  if v_tier <> 'blocked' then
    insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, workflow_id, run_id, expires_at)
    select c ->> 'key', p_user_id, v_budget.time_zone, v_month,
           (c ->> (case v_tier when 'cheap' then 'cheap_cost' else 'cost' end))::numeric,
           c ->> (case v_tier when 'cheap' then 'cheap_model' else 'model' end), v_tier, p_workflow_id, p_run_id,
           v_at + make_interval(secs => p_expiry_seconds)
      from jsonb_array_elements(v_calls) c;
  end if;

  -- Threshold events reached with this decision's reservation (a blocked run counts as 100 %), once per user and month.
  with inserted as (
    insert into budget_events (event_id, user_id, time_zone, month, threshold, limit_usd, spent_usd, reserved_usd)
    select format('budget:%s:%s:%s:%s', p_user_id, v_budget.time_zone, to_char(v_month, 'YYYY-MM'), t), p_user_id,
           v_budget.time_zone, v_month, t, v_limit, v_figures.spent,
           v_figures.reserved + case when v_tier = 'blocked' then 0 else v_worst end
      from unnest(array[80, 100]) t
     where v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * t
    on conflict do nothing
    returning event_id, threshold
  )
  select coalesce(jsonb_agg(to_jsonb(event_id) order by threshold), '[]'::jsonb) into v_event_ids from inserted;

  return jsonb_build_object('tier', v_tier, 'worstCaseUsd', v_worst::text, 'eventIds', v_event_ids, 'limitUsd', v_limit::text,
           'spentUsd', v_figures.spent::text, 'reservedUsd', v_figures.reserved::text, 'timeZone', v_budget.time_zone,
           'month', to_char(v_month, 'YYYY-MM'))
      || case when v_tier = 'blocked' then '{}'::jsonb else jsonb_build_object('models',
           (select jsonb_object_agg(c ->> 'step', c ->> (case v_tier when 'cheap' then 'cheap_model' else 'model' end))
              from jsonb_array_elements(v_calls) c)) end;
end
$$;

-- Only the application role runs them (SECURITY INVOKER: they run with its own privileges, which already allow
-- exactly these reads and inserts). Functions are executable by PUBLIC unless revoked.
revoke execute on function price_in_force(text, timestamptz), price_class(numeric, model_prices, timestamptz, text),
  usage_cost(text, bigint, bigint, bigint, model_prices, timestamptz),
  book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint, text, text, bigint, timestamptz, timestamptz),
  budget_month_figures(text, text, date, timestamptz), worst_case_cost(jsonb, text, timestamptz),
  reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz) from public;
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    grant execute on function price_in_force(text, timestamptz), price_class(numeric, model_prices, timestamptz, text),
      usage_cost(text, bigint, bigint, bigint, model_prices, timestamptz),
      book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint, text, text, bigint, timestamptz, timestamptz),
      budget_month_figures(text, text, date, timestamptz), worst_case_cost(jsonb, text, timestamptz),
      reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz) to cronledger_app;
  end if;
end
$$;
