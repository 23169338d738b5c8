-- budget_month_figures is a SQL function returning its one row as a table, which PostgreSQL inlines where it is called
-- in FROM: the all-users budget status reads spent and reserved by joining instead of calling a function per user (the
-- report's budget section at 10,000,000 ledger rows and 500 users, BENCHMARKS.md P3), and reserve_budget reads them
-- with `select ... into`, planned once per session. The rule (the month row's spent, the open unexpired reservations)
-- is the same. reserve_budget is restated whole, as `create or replace` must; only its three reads of the figures change.
drop function budget_month_figures(text, text, date, timestamptz);
create function budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamptz)
returns table (spent numeric, reserved numeric)
language sql stable as $$
  select coalesce(m.spent_usd, 0), coalesce(r.reserved, 0)
    from (select) one
    left join budget_months m on m.user_id = p_user_id and m.time_zone = p_zone and m.month = p_month
    left join lateral (select sum(o.amount_usd) as reserved from budget_reservations o
                        where o.user_id = p_user_id and o.time_zone = p_zone and o.month = p_month and o.status = 'open'
                          and o.expires_at > p_at) r on true
$$;
revoke all on function budget_month_figures(text, text, date, timestamptz) from public;
grant execute on function budget_month_figures(text, text, date, timestamptz) to cronledger_worker, cronledger_readonly;

create or replace function reserve_budget(p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric, p_may_wait boolean) returns jsonb
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
  v_at timestamptz := coalesce(p_at, now());
  v_cap numeric := case when p_may_downgrade then p_max_cost_per_run end;
  v_budget budgets;
  v_has_budget boolean;
  v_zone text;
  v_month date;
  v_keys text[];
  v_steps text[];
  v_models text[];
  v_costs numeric[];
  v_cheap record;     -- budget_cap_choice or budget_cheap_worst_cases: models, costs, downgrades, worst
  v_priced boolean;
  v_default_worst numeric;
  v_over_cap boolean;
  v_default_allowed numeric; -- the default models' worst case, or null when the cap rules them out
  v_spent numeric;
  v_reserved numeric;
  v_retried boolean;
  v_used numeric;
  v_limit numeric;
  v_tier text;
  v_worst numeric;
  v_reason text;
  v_event_ids jsonb := '[]'::jsonb;
  v_figures record;   -- spent and reserved outside the lock: a user without a budget, a run over its cap
begin
  select * into v_budget from budget_in_force(p_user_id, v_at);
  v_has_budget := found;
  v_zone := case when v_has_budget then v_budget.time_zone else 'UTC' end;
  v_month := budget_month_of(v_at, v_zone);
  if not v_has_budget and v_cap is null then
    select * into v_figures from budget_month_figures(p_user_id, 'UTC', v_month, v_at);
    return jsonb_build_object('tier', 'default', 'models', (select jsonb_object_agg(c ->> 'step', c ->> 'model') from jsonb_array_elements(p_calls) c),
      'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', null, 'spentUsd', v_figures.spent::text,
      'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'));
  end if;
  v_limit := v_budget.monthly_limit_usd;

  -- Lock-free: each call's key (the ledger key of the booking that settles it, as the worker makes it: usageKey in
  -- src/ledger/record-usage.ts) and its worst case at its own model, and their sum, as arrays in the calls' order.
  select array_agg(w.key order by w.n), array_agg(w.step order by w.n),
         array_agg(w.model order by w.n), array_agg(w.cost order by w.n), bool_and(w.cost is not null), sum(w.cost)
    into v_keys, v_steps, v_models, v_costs, v_priced, v_default_worst
    from (select e.n, e.key, e.step, e.model,
                 worst_case_call_cost(e.kind, e.prompt, e.completion, e.tier, p) as cost
            from (select j.n, j.c ->> 'key' as key, j.c ->> 'step' as step, j.c ->> 'model' as model, j.c ->> 'kind' as kind,
                         (j.c ->> 'prompt')::bigint as prompt, (j.c ->> 'completion')::bigint as completion, j.c ->> 'tier' as tier
                    from jsonb_array_elements(p_calls) with ordinality j(c, n) offset 0) e -- OFFSET 0: each field read once
            left join lateral price_version_at(e.model, v_at) p on true) w;
  if not v_priced then
    -- a model or a price class without a price in force: worst_case_cost raises the error that names it
    perform worst_case_cost(c, c ->> 'model', v_at) from jsonb_array_elements(p_calls) c;
  end if;

  -- The task's cap, lock-free and whatever the budget (budget_cap_choice, the forecast's rule too).
  select * into v_cheap from budget_cap_choice(p_calls, v_models, v_default_worst, v_cap, p_may_downgrade, v_at);
  v_over_cap := v_cheap.choice <> 'default';
  v_default_allowed := case when v_over_cap then null else v_default_worst end;
  if v_over_cap then
    if v_cheap.choice = 'blocked' then
      select * into v_figures from budget_month_figures(p_user_id, v_zone, v_month, v_at);
      return jsonb_build_object('tier', 'blocked', 'reason', 'max-cost-per-run', 'maxCostPerRunUsd', v_cap::text,
               'worstCaseUsd', least(v_default_worst, v_cheap.worst)::text, 'eventIds', '[]'::jsonb, 'limitUsd', v_limit::text,
               'spentUsd', v_figures.spent::text, 'reservedUsd', v_figures.reserved::text, 'timeZone', v_zone,
               'month', to_char(v_month, 'YYYY-MM'));
    end if;
  end if;
  if not v_has_budget then
    -- no budget, so nothing to reserve: the cap alone chose the models
    select * into v_figures from budget_month_figures(p_user_id, 'UTC', v_month, v_at);
    return jsonb_build_object('tier', case when v_over_cap then 'cheap' else 'default' end,
             'models', jsonb_object(v_steps, case when v_over_cap then v_cheap.models else v_models end),
             'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', null, 'spentUsd', v_figures.spent::text,
             'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'))
           || case when v_over_cap then jsonb_build_object('reason', 'max-cost-per-run', 'maxCostPerRunUsd', v_cap::text) else '{}'::jsonb end;
  end if;

  -- The lock, held to the commit: no other decision and no booking of this month gets past it meanwhile.
  select m.spent_usd into v_spent from budget_months m
   where m.user_id = p_user_id and m.time_zone = v_zone and m.month = v_month for update;
  if not found then
    insert into budget_months (user_id, time_zone, month) values (p_user_id, v_zone, v_month) on conflict do nothing;
    select m.spent_usd into v_spent from budget_months m
     where m.user_id = p_user_id and m.time_zone = v_zone and m.month = v_month for update;
  end if;

  -- Reserved (open and not expired), and whether these keys were reserved already (a retried request). The keys are
  -- probed one by one through the primary key (LATERAL ... LIMIT 1), never planned as a scan.
  select (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = v_zone and r.month = v_month and r.status = 'open' and r.expires_at > v_at),
         exists (select from unnest(v_keys) k(key) cross join lateral (select from budget_reservations r where r.idempotency_key = k.key limit 1) r)
    into v_reserved, v_retried;

  if v_retried then
    -- the reservation already made for these keys, as it was made
    return (
      select jsonb_build_object('tier', min(r.tier), 'models', jsonb_object_agg(k.step, coalesce(r.model, k.model)),
               'worstCaseUsd', coalesce(sum(r.amount_usd), 0)::text)
             || case when min(r.reason) is null then '{}'::jsonb
                     else jsonb_build_object('reason', min(r.reason), 'maxCostPerRunUsd', v_cap::text) end
        from unnest(v_keys, v_steps, v_models) k(key, step, model) left join budget_reservations r on r.idempotency_key = k.key
    ) || jsonb_build_object('eventIds', '[]'::jsonb, 'limitUsd', v_limit::text, 'spentUsd', v_spent::text,
           'reservedUsd', v_reserved::text, 'timeZone', v_zone, 'month', to_char(v_month, 'YYYY-MM'));
  end if;

  v_used := v_spent + v_reserved;
  v_tier := budget_choice(v_used, v_limit, v_default_allowed, null, false); -- 'default', or not without the cheap prices
  if v_tier = 'default' then
    v_worst := v_default_worst;
  else
    -- the cheap models and their worst cases, priced only now that the choice needs them (or already, for the cap)
    if not v_over_cap then
      select * into v_cheap from budget_cheap_worst_cases(p_calls, v_models, p_may_downgrade, v_at);
    end if;
    v_tier := budget_choice(v_used, v_limit, v_default_allowed, v_cheap.worst, v_cheap.downgrades);
    if p_may_downgrade and v_reserved > 0
       and budget_choice(v_spent, v_limit, v_default_allowed, v_cheap.worst, v_cheap.downgrades) <> v_tier then
      if p_may_wait then
        return jsonb_build_object('tier', 'wait', 'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', v_limit::text,
                 'spentUsd', v_spent::text, 'reservedUsd', v_reserved::text, 'timeZone', v_zone,
                 'month', to_char(v_month, 'YYYY-MM'));
      end if;
      v_reason := 'waited-for-reservations';
    end if;
    if v_tier = 'cheap' then
      v_worst := v_cheap.worst;
      v_models := v_cheap.models;
      v_costs := v_cheap.costs;
      if v_over_cap then v_reason := 'max-cost-per-run'; end if;
    else
      v_worst := v_cheap.worst; -- blocked: the last tier tried (the default one, without downgrades, costs the same)
      v_reason := coalesce(v_reason, 'monthly-limit');
    end if;
  end if;

  if v_tier <> 'blocked' then
    insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, workflow_id, run_id,
                                     expires_at, reason)
    select k.key, p_user_id, v_zone, v_month, k.cost, k.model, v_tier, p_workflow_id, p_run_id,
           v_at + make_interval(secs => p_expiry_seconds), case when v_reason = 'max-cost-per-run' then v_reason end
      from unnest(v_keys, v_models, v_costs) k(key, model, cost);
  end if;

  -- Threshold events: each band reached with this decision's reservation (a blocked run reaches them all), once per
  -- user and month. The band's starting percentage names the event.
  if v_tier = 'blocked' or budget_tier(v_used + v_worst, v_limit) <> 'default' then
    with inserted as (
      insert into budget_events (event_id, user_id, time_zone, month, threshold, limit_usd, spent_usd, reserved_usd)
      select format('budget:%s:%s:%s:%s', p_user_id, v_zone, to_char(v_month, 'YYYY-MM'), b.from_percent), p_user_id,
             v_zone, v_month, b.from_percent, v_limit, v_spent,
             v_reserved + case when v_tier = 'blocked' then 0 else v_worst end
        from budget_bands() b
       where v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * b.from_percent
      on conflict do nothing
      returning event_id, threshold
    )
    select coalesce(jsonb_agg(to_jsonb(event_id) order by threshold), '[]'::jsonb) into v_event_ids from inserted;
  end if;

  return jsonb_build_object('tier', v_tier, 'worstCaseUsd', v_worst::text, 'eventIds', v_event_ids, 'limitUsd', v_limit::text,
           'spentUsd', v_spent::text, 'reservedUsd', v_reserved::text, 'timeZone', v_zone,
           'month', to_char(v_month, 'YYYY-MM'))
      || case when v_tier = 'blocked' then '{}'::jsonb else jsonb_build_object('models', jsonb_object(v_steps, v_models)) end
      || case when v_reason is null then '{}'::jsonb
              when v_reason = 'max-cost-per-run' then jsonb_build_object('reason', v_reason, 'maxCostPerRunUsd', v_cap::text)
              else jsonb_build_object('reason', v_reason) end;
end
$$;
