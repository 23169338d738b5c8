-- The budget decision prices the cheap models only when it may use them, and builds its result without a subquery.
--
-- 020's decision priced every call at its own model and at its cheap model before taking the lock. Most decisions need
-- only the first: a user under 80 % of the limit with room for the default models' worst case gets the default tier,
-- and the cheap prices are never read. bench/budget-decision-stages.ts (reserve_budget cut short after each stage, all
-- stages in one pgbench run) put the pricing at 0.24 to 0.26 ms of a 0.7 to 0.8 ms decision. With this function it is
-- 0.14 ms, and a decision 0.13 ms less than 020's (0.866 against 0.995 ms a transaction, measured side by side in one
-- run with 020's function as --candidate). The cheap models' lookups (the downgrade in force, its price, both worst
-- cases) now run after the choice's first test, under the lock, and only when that test fails: past 80 %, or without
-- room for the default models. A decision that chooses the default tier no longer fails when a cheap model has no price
-- in force, since it does not use one (`budgets apply` refuses a cheap model without a price anyway); a decision that
-- needs the cheap model still fails with the error that names it (CL001, through worst_case_cost).
--
-- The result's models object is jsonb_object(steps, models): one function call, where 020 ran a subquery over the
-- two arrays.
--
-- Everything else is 020's, and the result is unchanged, key for key.

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
  v_band text;
  v_tier text;
  v_worst numeric;
  v_event_ids jsonb := '[]'::jsonb;
  v_contended boolean := false;
  v_created integer;
  v_figures record;   -- spent and reserved of a user without a budget
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
      'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'),
      'awaitDurability', false);
  end if;
  v_month := (date_trunc('month', v_at at time zone v_budget.time_zone))::date;
  v_limit := v_budget.monthly_limit_usd;

  -- Lock-free: each call's key and its worst case at its own model, and their sum, as arrays in the calls' order. The
  -- cheap models are priced further down, only when the choice needs them.
  select array_agg(p_run_id || ':' || w.step || ':' || w.attempt order by w.n), array_agg(w.step order by w.n),
         array_agg(w.model order by w.n), array_agg(w.cost order by w.n), bool_and(w.cost is not null), sum(w.cost)
    into v_keys, v_steps, v_models, v_costs, v_priced, v_default_worst
    from (select e.n, e.step, e.attempt, e.model,
                 call_cost(e.kind, e.prompt, e.cached, e.completion, p.input_per_million, p.cached_input_per_million,
                           p.output_per_million, p.embedding_input_per_million) as cost
            from (select j.n, j.c ->> 'step' as step, j.c ->> 'attempt' as attempt, j.c ->> 'model' as model, j.c ->> 'kind' as kind,
                         (j.c ->> 'prompt')::bigint as prompt, (j.c ->> 'cached')::bigint as cached, (j.c ->> 'completion')::bigint as completion
                    from jsonb_array_elements(p_calls) with ordinality j(c, n) offset 0) e -- OFFSET 0: each field read once
            left join lateral (select * from model_prices m where m.model = e.model and m.effective_from <= v_at
                                order by m.effective_from desc limit 1) p on true) w;
  if not v_priced then
    -- a model or a price class without a price in force: worst_case_cost raises the error that names it
    perform worst_case_cost(c, c ->> 'model', v_at) from jsonb_array_elements(p_calls) c;
  end if;

  -- The lock on the user's month row, and the commit that depends on whether another decision held it: as in 019.
  perform from budget_months m where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month
     for update skip locked;
  if not found then
    insert into budget_months (user_id, time_zone, month) values (p_user_id, v_budget.time_zone, v_month) on conflict do nothing;
    get diagnostics v_created = row_count;
    v_contended := v_created = 0;
    perform from budget_months m where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month for update;
    if v_contended then
      perform set_config('synchronous_commit', 'off', true);
    end if;
  end if;

  -- Under the lock, one statement and so one snapshot (019 says why that is exact): spent, reserved (open and not
  -- expired), and whether these keys were reserved already (a retried request). The keys are probed one by one through
  -- the primary key (LATERAL ... LIMIT 1): a join on `= any(keys)` was planned as a sequential scan while the table's
  -- statistics were young, 0.25 ms at 1,200 rows.
  select coalesce((select s.spent_usd from budget_month_spent s where s.user_id = p_user_id and s.time_zone = v_budget.time_zone and s.month = v_month), 0),
         (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = v_budget.time_zone and r.month = v_month and r.status = 'open' and r.expires_at > v_at),
         exists (select from unnest(v_keys) k(key) cross join lateral (select from budget_reservations r where r.idempotency_key = k.key limit 1) r)
    into v_spent, v_reserved, v_retried;

  if v_retried then
    -- the reservation already made for these keys, as it was made
    return (
      select jsonb_build_object('tier', min(r.tier), 'models', jsonb_object_agg(k.step, coalesce(r.model, k.model)),
               'worstCaseUsd', coalesce(sum(r.amount_usd), 0)::text)
        from unnest(v_keys, v_steps, v_models) k(key, step, model) left join budget_reservations r on r.idempotency_key = k.key
    ) || jsonb_build_object('eventIds', '[]'::jsonb, 'limitUsd', v_limit::text, 'spentUsd', v_spent::text,
           'reservedUsd', v_reserved::text, 'timeZone', v_budget.time_zone, 'month', to_char(v_month, 'YYYY-MM'),
           'awaitDurability', v_contended);
  end if;

  v_used := v_spent + v_reserved;
  -- the bands of src/budgets/tier.ts tierFor: blocked from 100 %, cheap from 80 % (exactly 80 % is cheap), and the
  -- default models in the default band if their worst case fits, else the cheap ones if theirs fits, else blocked
  v_band := case when v_used * 100 >= v_limit * 100 then 'blocked' when v_used * 100 >= v_limit * 80 then 'cheap' else 'default' end;
  if v_band = 'default' and v_used + v_default_worst <= v_limit then
    v_tier := 'default';
    v_worst := v_default_worst;
  else
    -- The cheap models (each call's own when it has none, or when the run may not downgrade) and their worst cases,
    -- priced as 020 priced them, now that the choice needs them. This is under the lock, but only for decisions
    -- past 80 % or without room for the default models.
    select array_agg(w.cheap_model order by w.n), array_agg(w.cheap_cost order by w.n), bool_and(w.cheap_cost is not null),
           bool_or(w.cheap_model <> w.model), sum(w.cheap_cost)
      into v_cheap_models, v_cheap_costs, v_priced, v_downgrades, v_cheap_worst
      from (select u.n, u.model, d.cheap_model,
                   call_cost(j.c ->> 'kind', (j.c ->> 'prompt')::bigint, (j.c ->> 'cached')::bigint, (j.c ->> 'completion')::bigint,
                             q.input_per_million, q.cached_input_per_million, q.output_per_million, q.embedding_input_per_million) as cheap_cost
              from unnest(v_models) with ordinality u(model, n)
              join jsonb_array_elements(p_calls) with ordinality j(c, n) using (n)
              cross join lateral (
                select coalesce(case when p_may_downgrade then
                         (select g.cheap_model from model_downgrades g where g.model = u.model and g.effective_from <= v_at
                           order by g.effective_from desc limit 1) end, u.model) as cheap_model) d
              left join lateral (select * from model_prices m where m.model = d.cheap_model and m.effective_from <= v_at
                                  order by m.effective_from desc limit 1) q on true) w;
    if not v_priced then
      perform worst_case_cost(c, m, v_at)
         from jsonb_array_elements(p_calls) with ordinality j(c, n) join unnest(v_cheap_models) with ordinality u(m, n) using (n);
    end if;
    if (v_band = 'cheap' or (v_band = 'default' and v_downgrades)) and v_used + v_cheap_worst <= v_limit then
      v_tier := 'cheap';
      v_worst := v_cheap_worst;
      v_models := v_cheap_models;
      v_costs := v_cheap_costs;
    else
      v_tier := 'blocked';
      v_worst := v_cheap_worst; -- the last tier tried (the default one, without downgrades, costs the same)
    end if;
  end if;

  if v_tier <> 'blocked' then
    insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, workflow_id, run_id, expires_at)
    select k.key, p_user_id, v_budget.time_zone, v_month, k.cost, k.model, v_tier, p_workflow_id, p_run_id,
           v_at + make_interval(secs => p_expiry_seconds)
      from unnest(v_keys, v_models, v_costs) k(key, model, cost);
  end if;

  -- threshold events reached with this decision's reservation (a blocked run counts as 100 %), once per user and month
  if v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * 80 then
    with inserted as (
      insert into budget_events (event_id, user_id, time_zone, month, threshold, limit_usd, spent_usd, reserved_usd)
      select format('budget:%s:%s:%s:%s', p_user_id, v_budget.time_zone, to_char(v_month, 'YYYY-MM'), t), p_user_id,
             v_budget.time_zone, v_month, t, v_limit, v_spent,
             v_reserved + case when v_tier = 'blocked' then 0 else v_worst end
        from unnest(array[80, 100]) t
       where v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * t
      on conflict do nothing
      returning event_id, threshold
    )
    select coalesce(jsonb_agg(to_jsonb(event_id) order by threshold), '[]'::jsonb) into v_event_ids from inserted;
  end if;

  return jsonb_build_object('tier', v_tier, 'worstCaseUsd', v_worst::text, 'eventIds', v_event_ids, 'limitUsd', v_limit::text,
           'spentUsd', v_spent::text, 'reservedUsd', v_reserved::text, 'timeZone', v_budget.time_zone,
           'month', to_char(v_month, 'YYYY-MM'), 'awaitDurability', v_contended)
      || case when v_tier = 'blocked' then '{}'::jsonb else jsonb_build_object('models', jsonb_object(v_steps, v_models)) end;
end
$$;
