-- Month-to-date spend is one summary row per (user, zone, month): budget_months.spent_usd, which the ledger's insert
-- trigger adds each entry's cost to, in the entry's own transaction (synchronous commit, as every transaction here).
-- The budget decision locks that row and reads spent from it; reserved is the sum of the month's open, unexpired
-- reservations, read through their partial index. While the decision holds the row no booking of that month can commit
-- (each booking updates the row), so spent and reserved are read consistently and every call counts once: booked
-- (spent) or not yet (reserved at its worst case). Neither grows with the ledger.
--
-- The rules the budget path applies live here once, and the TypeScript readers call them:
--   budget_bands / budget_tier   the tiers: cheap from 80 % of the limit, blocked from 100 %; the threshold events
--   budget_month_of              the first day of an instant's month in a zone
--   budget_in_force              the budget that governs a user at an instant (their own, else the default)
--   budget_cheap_model           a model's cheap model in force at an instant
--   budget_choice                the tier a run's calls get: the bands, and whether the worst cases fit
--   budget_month_figures         spent and reserved (open, not expired at the instant) of a user's month

-- What bookings added to shards and deltas, into the summary rows; then they go, with the view and the fold.
insert into budget_months as m (user_id, time_zone, month, spent_usd)
select user_id, time_zone, month, sum(amount)
  from (select user_id, time_zone, month, amount_usd as amount from budget_month_deltas
        union all
        select user_id, time_zone, month, spent_usd from budget_month_shards) s
 group by 1, 2, 3
on conflict (user_id, time_zone, month) do update set spent_usd = m.spent_usd + excluded.spent_usd;
drop view budget_month_spent;
drop function budget_fold_all_deltas();
drop table budget_month_deltas, budget_month_shards;

-- The bands, from their lowest percentage of the limit (of spent + reserved). Under the first band: 'default'.
create function budget_bands() returns table (tier text, from_percent integer) language sql immutable as $$
  values ('cheap', 80), ('blocked', 100)
$$;

-- The tier of what is used against a limit, exactly (exactly 80 % is cheap); no limit is always 'default'.
create function budget_tier(p_used numeric, p_limit numeric) returns text language sql immutable as $$
  select coalesce((select b.tier from budget_bands() b where p_used * 100 >= p_limit * b.from_percent
                    order by b.from_percent desc limit 1), 'default')
$$;

-- The tier a run's calls get at `p_used` of the limit: the default models in the default band if their worst case fits,
-- else the cheap ones if theirs fits, else blocked. Without a cheap model (p_downgrades false) the cheap tier runs the
-- same calls, so in the default band it is tried only with one. "Fits" is used + worst case <= limit, exactly.
create function budget_choice(p_used numeric, p_limit numeric, p_default_worst numeric, p_cheap_worst numeric, p_downgrades boolean)
returns text language sql immutable as $$
  select case when b.band = 'default' and p_used + p_default_worst <= p_limit then 'default'
              when (b.band = 'cheap' or (b.band = 'default' and p_downgrades)) and p_used + p_cheap_worst <= p_limit then 'cheap'
              else 'blocked' end
    from (select budget_tier(p_used, p_limit) as band) b
$$;

-- The bands are the thresholds: the events' own list of them goes.
alter table budget_events drop constraint budget_events_threshold_check;

create function budget_month_of(p_at timestamptz, p_zone text) returns date language sql stable as $$
  select (date_trunc('month', p_at at time zone p_zone))::date
$$;

-- The user's own newest version in force at p_at, else the default's; no row: no budget, no limit.
create function budget_in_force(p_user_id text, p_at timestamptz) returns setof budgets language sql stable as $$
  select b.* from (
    (select * from budgets where user_id = p_user_id and effective_from <= p_at order by effective_from desc limit 1)
    union all
    (select * from budgets where user_id is null and effective_from <= p_at order by effective_from desc limit 1)
  ) b order by b.user_id is null limit 1
$$;

-- plpgsql, so its statement's plan is kept for the session.
-- Null when the model has none (never had one, or its newest version in force ends the downgrade).
create function budget_cheap_model(p_model text, p_at timestamptz) returns text language sql stable as $$
  select g.cheap_model from model_downgrades g where g.model = p_model and g.effective_from <= p_at order by g.effective_from desc limit 1
$$;

create or replace function budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamptz, out spent numeric, out reserved numeric)
language plpgsql stable as $$
begin
  select coalesce((select m.spent_usd from budget_months m where m.user_id = p_user_id and m.time_zone = p_zone and m.month = p_month), 0),
         (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = p_zone and r.month = p_month and r.status = 'open' and r.expires_at > p_at)
    into spent, reserved;
end
$$;

-- The ledger's trigger: the entry's cost added to the user's month row in every tracked zone (in zone order, so two
-- bookings never lock them in opposite orders), and the reservation under the entry's key settled. In SQL, so the
-- ledger's TypeScript never imports budgets and no writer of the ledger can forget it. The shared advisory lock keeps
-- bookings out while budget_track_zone seeds a new zone.
create or replace function budget_book_ledger_entry() returns trigger language plpgsql as $$
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_months as m (user_id, time_zone, month, spent_usd)
  select new.user_id, z.time_zone, budget_month_of(new.created_at, z.time_zone), new.cost_usd
    from budget_zones z order by z.time_zone
  on conflict (user_id, time_zone, month) do update set spent_usd = m.spent_usd + excluded.spent_usd;
  update budget_reservations set status = 'settled', closed_at = now(), settled_entry_id = new.id
   where idempotency_key = new.idempotency_key and status = 'open';
  return null;
end
$$;

-- A budget in a zone not tracked yet: the whole ledger summed into that zone's months once, while no booking runs (the
-- exclusive advisory lock waits for bookings in flight, which hold it shared until they commit).
create or replace function budget_track_zone() returns trigger language plpgsql as $$
begin
  if exists (select 1 from budget_zones where time_zone = new.time_zone) then return null; end if;
  perform pg_advisory_xact_lock(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_zones (time_zone) values (new.time_zone) on conflict do nothing;
  if not found then return null; end if;
  insert into budget_months (user_id, time_zone, month, spent_usd)
  select l.user_id, new.time_zone, budget_month_of(l.created_at, new.time_zone), sum(l.cost_usd)
    from usage_ledger l group by 1, 3;
  return null;
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
-- p_calls: [{step, attempt, kind, model, prompt, cached, completion}] with worst-case counts. Returns JSON, every
-- amount an exact decimal string.
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
                   call_cost(j.c ->> 'kind', (j.c ->> 'prompt')::bigint, (j.c ->> 'cached')::bigint, (j.c ->> 'completion')::bigint,
                             q.input_per_million, q.cached_input_per_million, q.output_per_million, q.embedding_input_per_million) as cheap_cost
              from unnest(v_models) with ordinality u(model, n)
              join jsonb_array_elements(p_calls) with ordinality j(c, n) using (n)
              cross join lateral (
                select coalesce(case when p_may_downgrade then budget_cheap_model(u.model, v_at) end, u.model) as cheap_model) d
              left join lateral (select * from model_prices m where m.model = d.cheap_model and m.effective_from <= v_at
                                  order by m.effective_from desc limit 1) q on true) w;
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

-- Status, reports and the admin page read the figures through budget_month_figures too.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    grant execute on function budget_month_figures(text, text, date, timestamptz) to cronledger_readonly;
  end if;
end
$$;
