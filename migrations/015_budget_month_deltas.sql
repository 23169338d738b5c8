-- Bookings no longer take the user's month row. Until here the ledger's row trigger (008) added each entry's cost to
-- budget_months in the booking's transaction, and the budget decision (reserve_budget, 010/014) locked that same row
-- to decide: for one user every booking and every decision queued on one row lock until commit. Now a booking only
-- appends its cost to budget_month_deltas (insert-only, no unique key, so bookings never wait on each other or on a
-- decision) and settles its own reservation row, as before. The decision, under its lock on the month row, folds the
-- month's committed deltas into budget_months.spent_usd. Spent is budget_months.spent_usd plus the deltas not folded
-- yet: every reader goes through the budget_month_spent view, so status, events, reports and the admin page stay exact.

create table budget_month_deltas (
  user_id     text            not null,
  time_zone   text            not null, -- one of budget_zones (no foreign key: its check would lock the zone row per booking)
  month       date            not null, -- the first day of the month, local to time_zone
  amount_usd  numeric(38, 18) not null
);
create index budget_month_deltas_month on budget_month_deltas (user_id, time_zone, month);

-- Spent per (user, zone, month): the folded sum plus the deltas booked since. One statement reads both in one snapshot,
-- and a fold (delete of deltas + update of the row) commits atomically, so a reader sees it wholly or not at all.
create view budget_month_spent as
select user_id, time_zone, month, sum(spent_usd) as spent_usd
  from (select user_id, time_zone, month, spent_usd from budget_months
        union all
        select user_id, time_zone, month, amount_usd from budget_month_deltas) s
 group by user_id, time_zone, month;

-- The ledger's trigger: a delta per tracked zone instead of the upsert of the month row; the settle stays (it updates
-- only that reservation's own row). The shared advisory lock still keeps bookings out while a new zone is seeded:
-- budget_track_zone (008, unchanged) sums the whole ledger into the new zone's months, and a new zone has no deltas,
-- so its seed is exact as it was.
create or replace function budget_book_ledger_entry() returns trigger language plpgsql as $$
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_month_deltas (user_id, time_zone, month, amount_usd)
  select new.user_id, z.time_zone, (date_trunc('month', new.created_at at time zone z.time_zone))::date, new.cost_usd
    from budget_zones z;
  update budget_reservations set status = 'settled', closed_at = now(), settled_entry_id = new.id
   where idempotency_key = new.idempotency_key and status = 'open';
  return null;
end
$$;

-- Spent and reserved without folding (no lock): the decision without a budget, and anyone else who only reads.
create or replace function budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamptz, out spent numeric, out reserved numeric)
language sql stable as $$
  select coalesce((select s.spent_usd from budget_month_spent s where s.user_id = p_user_id and s.time_zone = p_zone and s.month = p_month), 0),
         (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = p_zone and r.month = p_month and r.status = 'open' and r.expires_at > p_at)
$$;

-- The decision's figures, under its lock on the month row: fold the month's deltas into spent_usd and read the open
-- reservations IN ONE STATEMENT. Why one statement (one snapshot) and not two:
--   A booking B commits its delta and the settle of its reservation R atomically, and no longer waits for our lock, so
--   it can commit at any moment of the decision. Every statement of a data-modifying WITH runs on the same snapshot.
--   If B committed before that snapshot, the DELETE takes B's delta (B counts as spent) and R is read as settled (not
--   reserved). If B commits after it, the DELETE does not see B's delta (it stays for the next fold) and R is read as
--   open: B counts as reserved, at its worst case, which is at least its actual cost. Either way exactly once.
--   Split into two statements (fold, then read reservations), each takes its own snapshot: a B committing between them
--   has its delta missed by the fold and its reservation already settled for the read, so it counts as neither and
--   the guard under-counts by B's cost: overspend. (test/budget-deltas.test.ts makes exactly that B commit there.)
--   The DELETE sees exactly its snapshot's deltas: only folders delete deltas, and every folder holds this month's
--   row lock (this one) or skipped the row because someone held it (budget_fold_all_deltas), so none deletes under us.
--   A reservation that expired before its booking committed counts as neither while in flight, as it did before 015:
--   expiry outlasts the call and its booking (src/budgets/reserve.ts expirySeconds).
-- The row is updated only when there is something to fold; otherwise spent_usd is read as it is (we hold its lock, so
-- the snapshot has its latest version).
create function budget_fold_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamptz, out spent numeric, out reserved numeric)
language sql volatile as $$
  with folded as (
    delete from budget_month_deltas d where d.user_id = p_user_id and d.time_zone = p_zone and d.month = p_month
    returning d.amount_usd
  ), summed as (
    update budget_months m set spent_usd = m.spent_usd + (select sum(f.amount_usd) from folded f)
     where m.user_id = p_user_id and m.time_zone = p_zone and m.month = p_month and exists (select from folded)
    returning m.spent_usd
  )
  select coalesce((select s.spent_usd from summed s),
                  (select m.spent_usd from budget_months m where m.user_id = p_user_id and m.time_zone = p_zone and m.month = p_month), 0),
         (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = p_zone and r.month = p_month and r.status = 'open' and r.expires_at > p_at)
$$;

-- The sweeper's fold (src/workflows/budget-sweep.ts, every minute), so the deltas of users who book without deciding
-- stay few. Months a decision holds right now are skipped (it folds them itself); the rows it locks are locked before
-- their deltas are deleted, in one order, so it never waits on a decision and a decision never waits on it for long.
-- Returns how many deltas were folded.
create function budget_fold_all_deltas() returns integer language plpgsql as $$
declare
  v_folded integer;
begin
  insert into budget_months (user_id, time_zone, month)
  select distinct user_id, time_zone, month from budget_month_deltas order by 1, 2, 3
  on conflict do nothing;
  with locked as materialized (
    select m.user_id, m.time_zone, m.month from budget_months m
     where (m.user_id, m.time_zone, m.month) in (select d.user_id, d.time_zone, d.month from budget_month_deltas d)
     order by 1, 2, 3
       for update of m skip locked
  ), folded as (
    delete from budget_month_deltas d using locked l
     where d.user_id = l.user_id and d.time_zone = l.time_zone and d.month = l.month
    returning d.user_id, d.time_zone, d.month, d.amount_usd
  ), sums as (
    select f.user_id, f.time_zone, f.month, sum(f.amount_usd) as amount, count(*) as n from folded f group by 1, 2, 3
  ), updated as (
    update budget_months m set spent_usd = m.spent_usd + s.amount from sums s
     where m.user_id = s.user_id and m.time_zone = s.time_zone and m.month = s.month
    returning s.n
  )
  select coalesce(sum(u.n), 0) into v_folded from updated u;
  return v_folded;
end
$$;

-- reserve_budget as in 010, except that its two figures under the lock (the retried request's and the decision's) now
-- come from budget_fold_month_figures, and the lock no longer keeps bookings out.
create or replace function reserve_budget(
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

  -- The lock: from here to the commit nothing else can reserve against this month or fold its deltas (bookings go on:
  -- they only append deltas and settle their own reservation; budget_fold_month_figures says why that stays exact).
  insert into budget_months (user_id, time_zone, month) values (p_user_id, v_budget.time_zone, v_month) on conflict do nothing;
  perform from budget_months m where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month for update;

  if exists (select from budget_reservations r where r.idempotency_key in (select c ->> 'key' from jsonb_array_elements(v_calls) c)) then
    -- a retried request: the reservation already made for these keys, as it was made
    v_figures := budget_fold_month_figures(p_user_id, v_budget.time_zone, v_month, v_at);
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
  v_figures := budget_fold_month_figures(p_user_id, v_budget.time_zone, v_month, v_at);
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

revoke execute on function budget_fold_month_figures(text, text, date, timestamptz), budget_fold_all_deltas() from public;
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    -- Deltas are appended by bookings and deleted by the folds; nothing updates them.
    grant select, insert, delete on budget_month_deltas to cronledger_app;
    grant select on budget_month_spent to cronledger_app;
    grant execute on function budget_fold_month_figures(text, text, date, timestamptz), budget_fold_all_deltas() to cronledger_app;
  end if;
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    grant select on budget_month_deltas, budget_month_spent to cronledger_readonly;
  end if;
end
$$;
