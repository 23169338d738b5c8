-- What a task does when money runs short (docs/budgets.md, "Per-task policies"):
-- - maxCostPerRun: a run whose worst case exceeds the task's cap runs on the cheap models if their worst case fits
--   under it, else it is blocked, whatever the monthly budget. reserve_budget decides it, beside the tiers.
-- - the bounded wait: a run that waited its longest for other runs' open reservations decides counting them (p_may_wait
--   false), and says so.
-- - onBudgetExhausted "pause": the schedule pauses and resumes are recorded here, append-only, so the report and the
--   missed-slot check can tell a slot skipped for budget from a missed one.

-- Why a reservation was made on the cheap models when the budget alone would have allowed the default ones.
alter table budget_reservations add column reason text check (reason in ('max-cost-per-run'));

-- The cheap models of a run's calls (each call's own when it has none, or when the run may not downgrade) and their
-- worst cases, in the calls' order, and their sum. A model or a price class without a price in force raises the error
-- that names it (worst_case_cost). Called by reserve_budget only.
create function budget_cheap_worst_cases(
  p_calls jsonb, p_models text[], p_may_downgrade boolean, p_at timestamptz,
  out models text[], out costs numeric[], out downgrades boolean, out worst numeric
) language plpgsql stable as $$
declare
  v_priced boolean;
begin
  select array_agg(w.cheap_model order by w.n), array_agg(w.cheap_cost order by w.n), bool_and(w.cheap_cost is not null),
         bool_or(w.cheap_model <> w.model), sum(w.cheap_cost)
    into models, costs, v_priced, downgrades, worst
    from (select u.n, u.model, d.cheap_model,
                 worst_case_call_cost(j.c ->> 'kind', (j.c ->> 'prompt')::bigint, (j.c ->> 'completion')::bigint, j.c ->> 'tier', q)
                   as cheap_cost
            from unnest(p_models) with ordinality u(model, n)
            join jsonb_array_elements(p_calls) with ordinality j(c, n) using (n)
            cross join lateral (
              select coalesce(case when p_may_downgrade then budget_cheap_model(u.model, p_at) end, u.model) as cheap_model) d
            left join lateral price_version_at(d.cheap_model, p_at) q on true) w;
  if not v_priced then
    perform worst_case_cost(c, m, p_at)
       from jsonb_array_elements(p_calls) with ordinality j(c, n) join unnest(models) with ordinality u(m, n) using (n);
  end if;
end
$$;
revoke execute on function budget_cheap_worst_cases(jsonb, text[], boolean, timestamptz) from public;

drop function claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz);
drop function reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz);

-- The budget guard's decision and reservation, one statement (src/budgets/reserve.ts says what it decides and why).
-- Before the lock: the budget in force, the default models' worst cases and the task's cap (p_max_cost_per_run, USD,
-- null for none). The cap is the run's: it counts on the run's first decision (p_may_downgrade), whose calls are the
-- run's; a run over it runs on the cheap models if their worst case is within it, else it is blocked with reason
-- 'max-cost-per-run', with or without a budget, before any lock and with nothing reserved. Then the user's month row
-- is locked (created on the month's first decision) and, while it is held: spent, reserved, the keys already reserved
-- (a retried request gets them back), the choice (the cheap models priced only when it needs them), the reservation
-- rows and the threshold events. The commit is synchronous, so the decision is durable when the statement returns.
-- A run's first decision whose tier is worse only because of other runs' open reservations reserves nothing and
-- returns tier 'wait' while p_may_wait: the caller decides again once they have settled, so a burst ends as the same
-- runs would one by one. A run that has waited its longest asks with p_may_wait false and is decided counting them,
-- with reason 'waited-for-reservations'. A call made again never waits: its run may hold a reservation that the runs it
-- would wait for are waiting for. A run blocked by the limit alone has reason 'monthly-limit'.
-- p_calls: [{step, attempt, kind, model, prompt, completion, tier}] with worst-case counts (worst_case_call_cost prices
-- them). Returns JSON, every amount an exact decimal string.
create function reserve_budget(
  p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer,
  p_at timestamptz, p_max_cost_per_run numeric, p_may_wait boolean
) returns jsonb language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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
  v_cheap record;     -- budget_cheap_worst_cases: models, costs, downgrades, worst
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
    v_figures := budget_month_figures(p_user_id, 'UTC', v_month, v_at);
    return jsonb_build_object('tier', 'default', 'models', (select jsonb_object_agg(c ->> 'step', c ->> 'model') from jsonb_array_elements(p_calls) c),
      'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', null, 'spentUsd', v_figures.spent::text,
      'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'));
  end if;
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

  -- The task's cap, lock-free: over it, the cheap models must fit under it, whatever the budget.
  v_over_cap := v_cap is not null and v_default_worst > v_cap;
  v_default_allowed := case when v_over_cap then null else v_default_worst end;
  if v_over_cap then
    select * into v_cheap from budget_cheap_worst_cases(p_calls, v_models, p_may_downgrade, v_at);
    if not (v_cheap.downgrades and v_cheap.worst <= v_cap) then
      v_figures := budget_month_figures(p_user_id, v_zone, v_month, v_at);
      return jsonb_build_object('tier', 'blocked', 'reason', 'max-cost-per-run', 'maxCostPerRunUsd', v_cap::text,
               'worstCaseUsd', least(v_default_worst, v_cheap.worst)::text, 'eventIds', '[]'::jsonb, 'limitUsd', v_limit::text,
               'spentUsd', v_figures.spent::text, 'reservedUsd', v_figures.reserved::text, 'timeZone', v_zone,
               'month', to_char(v_month, 'YYYY-MM'));
    end if;
  end if;
  if not v_has_budget then
    -- no budget, so nothing to reserve: the cap alone chose the models
    v_figures := budget_month_figures(p_user_id, 'UTC', v_month, v_at);
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

-- The claim and the run's first budget decision in one transaction (src/budgets/reserve.ts claimAndReserve).
create function claim_and_reserve(
  p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamptz,
  p_worker_id text, p_manual boolean, p_supersedes_run_id text, p_calls jsonb, p_expiry_seconds integer, p_at timestamptz,
  p_max_cost_per_run numeric
) returns jsonb language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
  v_claim jsonb := claim_run(p_key, p_task_id, p_user_id, p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual,
                             p_supersedes_run_id);
begin
  if not (v_claim ->> 'claimed')::boolean then
    return jsonb_build_object('claim', v_claim, 'decision', null);
  end if;
  return jsonb_build_object('claim', v_claim,
           'decision', reserve_budget(p_user_id, p_run_id, p_workflow_id, p_calls, true, p_expiry_seconds, p_at, p_max_cost_per_run, true));
end
$$;

revoke execute on function reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz, numeric, boolean),
  claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz, numeric) from public;
grant execute on function reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz, numeric, boolean),
  claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz, numeric)
  to cronledger_worker;

-- ===================================================================================================================
-- onBudgetExhausted "pause": when a task's schedule was paused because its user's money ran out, and when it resumed
-- ===================================================================================================================

-- One row per pause: the task, the blocked run that paused it (once: a retried activity adds nothing), the reason the
-- schedule's note gives, and the budget month (its first day, in time_zone) and limit it ran out under.
create table budget_pauses (
  id               bigserial   primary key,
  task_id          text        not null,
  user_id          text        not null,
  reason           text        not null,
  month            date        not null,
  time_zone        text        not null,
  limit_usd        numeric(38,18),
  paused_by_run_id text        not null unique,
  paused_at        timestamptz not null
);
create index budget_pauses_task on budget_pauses (task_id, paused_at);

-- One row per resume, written by the budget sweeper after it resumed the schedule: when, why, and how many of the
-- schedule's slots fell in the pause unclaimed (skipped for budget, not missed).
create table budget_pause_ends (
  pause_id      bigint      primary key references budget_pauses (id),
  resumed_at    timestamptz not null,
  cause         text        not null check (cause in ('month-turnover', 'limit-raised')),
  skipped_slots integer     not null check (skipped_slots >= 0)
);

create trigger budget_pauses_append_only before update or delete on budget_pauses
  for each row execute function forbid_append_only_change();
create trigger budget_pauses_no_truncate before truncate on budget_pauses
  for each statement execute function forbid_append_only_change();
create trigger budget_pause_ends_append_only before update or delete on budget_pause_ends
  for each row execute function forbid_append_only_change();
create trigger budget_pause_ends_no_truncate before truncate on budget_pause_ends
  for each statement execute function forbid_append_only_change();

-- Each pause with its end (resumed_at null: still paused), what the report and the missed-slot check read.
create view budget_pause_intervals as
  select p.id, p.task_id, p.user_id, p.paused_at, e.resumed_at, p.reason, p.month, p.time_zone, p.limit_usd, e.cause, e.skipped_slots
    from budget_pauses p left join budget_pause_ends e on e.pause_id = p.id;

-- Records that the blocked run p_run_id pauses its task's schedule, unless the task has a pause still open (another
-- blocked run paused it first): returns the open pause's ID and whether this call recorded it.
create function record_budget_pause(
  p_task_id text, p_user_id text, p_reason text, p_month date, p_time_zone text, p_limit numeric, p_run_id text, p_at timestamptz
) returns jsonb language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
  v_id bigint;
begin
  perform pg_advisory_xact_lock(hashtextextended('cronledger-budget-pause:' || p_task_id, 0));
  select p.id into v_id from budget_pause_intervals p where p.task_id = p_task_id and p.resumed_at is null order by p.id limit 1;
  if found then return jsonb_build_object('pauseId', v_id, 'recorded', false); end if;
  insert into budget_pauses (task_id, user_id, reason, month, time_zone, limit_usd, paused_by_run_id, paused_at)
  values (p_task_id, p_user_id, p_reason, p_month, p_time_zone, p_limit, p_run_id, coalesce(p_at, now()))
  on conflict (paused_by_run_id) do nothing
  returning id into v_id;
  return jsonb_build_object('pauseId', v_id, 'recorded', v_id is not null);
end
$$;

-- The open pauses the sweeper resumes at p_at, with the cause: the budget month turned over in the pause's zone, or the
-- user's limit in force now is higher than the one the task ran out under (or the user has no budget any more).
create function budget_pauses_due(p_at timestamptz)
returns table (pause_id bigint, task_id text, cause text)
language sql stable security definer set search_path = pg_catalog, public, pg_temp as $$
  select p.id, p.task_id,
         case when budget_month_of(p_at, p.time_zone) > p.month then 'month-turnover' else 'limit-raised' end
    from budget_pause_intervals p
    left join lateral budget_in_force(p.user_id, p_at) b on true
   where p.resumed_at is null
     and (budget_month_of(p_at, p.time_zone) > p.month or b.id is null or b.monthly_limit_usd > p.limit_usd)
   order by p.id
$$;

-- The sweeper resumed the pause's schedule at p_at: recorded once.
create function record_budget_resume(p_pause_id bigint, p_at timestamptz, p_cause text, p_skipped_slots integer)
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into budget_pause_ends (pause_id, resumed_at, cause, skipped_slots) values (p_pause_id, p_at, p_cause, p_skipped_slots)
  on conflict do nothing;
$$;

revoke execute on function record_budget_pause(text, text, text, date, text, numeric, text, timestamptz),
  budget_pauses_due(timestamptz), record_budget_resume(bigint, timestamptz, text, integer) from public;
grant execute on function record_budget_pause(text, text, text, date, text, numeric, text, timestamptz),
  budget_pauses_due(timestamptz), record_budget_resume(bigint, timestamptz, text, integer) to cronledger_worker;
