-- A decision no longer deletes anything. Since 015 each booking appended a delta row and each decision, under its lock
-- on the user's month row, deleted the month's deltas and added them to spent_usd. The deleted rows stay in the
-- deltas' index until VACUUM, all under the same key (user, zone, month), so every decision walked the dead entries of
-- every decision before it since the last vacuum: on a stack that had booked 45,000 calls, 75 buffers and 2.2 ms to
-- fold 2 rows, plus 1.4 ms to plan the fold again (a LANGUAGE sql function is planned on every call), against 0.5 ms
-- for the whole claim. Decisions for one user wait for each other on that row, so a guarded user's runs went at the
-- fold's pace.
--
-- Now a booking adds its cost to a row of its own session: budget_month_shards, one row per (user, zone, month,
-- backend). `shard` is pg_backend_pid(): two transactions in progress never share a backend, so two bookings never
-- wait for each other's row, however many run for one user, and no lock order between them can deadlock. The update
-- touches no indexed column, so it is a HOT update: the row's index entry stays, and the dead versions are pruned from
-- the page, so a month's rows stay one live version each and reading them does not grow with the bookings.
-- Spent for a month is budget_months.spent_usd + its shards + its deltas (from bookings made before this migration,
-- and from any that were in flight while it ran; nothing appends deltas any more). The budget_month_spent view, which
-- every reader goes through, reads all three; the sweeper folds shards and deltas into budget_months.
--
-- Why the decision stays exact without its fold: it reads spent (the three sources) and the open reservations in ONE
-- statement, so one snapshot. A booking B adds to its shard and settles its reservation R in one transaction. If B
-- committed before the snapshot, B is in its shard (spent) and R is settled (not reserved); if after, B is not in the
-- shard and R is open (reserved at its worst case, at least B's cost). Either way once, as 015's fold did. The sweeper's
-- fold (moving shards and deltas into budget_months) commits atomically, and skips a month whose row a decision holds.

create table budget_month_shards (
  user_id    text            not null,
  time_zone  text            not null, -- one of budget_zones (no foreign key: its check would lock the zone row per booking)
  month      date            not null, -- the first day of the month, local to time_zone
  shard      integer         not null, -- the booking's backend (pg_backend_pid())
  spent_usd  numeric(38, 18) not null,
  primary key (user_id, time_zone, month, shard)
) with (fillfactor = 50); -- room on each page for the HOT updates

create or replace view budget_month_spent as
select user_id, time_zone, month, sum(spent_usd) as spent_usd
  from (select user_id, time_zone, month, spent_usd from budget_months
        union all
        select user_id, time_zone, month, amount_usd from budget_month_deltas
        union all
        select user_id, time_zone, month, spent_usd from budget_month_shards) s
 group by user_id, time_zone, month;

-- The ledger's trigger: the entry's cost added to this session's shard of the user's month in every tracked zone
-- (zones in order: one statement's rows are locked in one order); the settle and the advisory lock as in 015.
create or replace function budget_book_ledger_entry() returns trigger language plpgsql as $$
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_month_shards as s (user_id, time_zone, month, shard, spent_usd)
  select new.user_id, z.time_zone, (date_trunc('month', new.created_at at time zone z.time_zone))::date, pg_backend_pid(), new.cost_usd
    from budget_zones z order by z.time_zone
  on conflict (user_id, time_zone, month, shard) do update set spent_usd = s.spent_usd + excluded.spent_usd;
  update budget_reservations set status = 'settled', closed_at = now(), settled_entry_id = new.id
   where idempotency_key = new.idempotency_key and status = 'open';
  return null;
end
$$;

-- Spent (all three sources, through the view) and reserved (open, unexpired reservations) of one user's month, in one
-- statement. The decision calls it under its lock on the month row; everyone else without a lock. plpgsql, so the
-- statement's plan is kept for the session (015's LANGUAGE sql version was planned on every call).
create or replace function budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamptz, out spent numeric, out reserved numeric)
language plpgsql stable as $$
begin
  select coalesce((select s.spent_usd from budget_month_spent s where s.user_id = p_user_id and s.time_zone = p_zone and s.month = p_month), 0),
         (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = p_zone and r.month = p_month and r.status = 'open' and r.expires_at > p_at)
    into spent, reserved;
end
$$;

-- The sweeper's fold (src/workflows/budget-sweep.ts, every minute): shards and deltas into budget_months, so each
-- month keeps a few rows. It never waits: month rows a decision holds are skipped (015), and so are shard rows a
-- booking in flight holds (SKIP LOCKED), so it can't deadlock with a booking that adds to several shards. A month's
-- row and what is folded into it change in one transaction, so every reader sees the fold wholly or not at all.
-- Returns how many rows were folded.
create or replace function budget_fold_all_deltas() returns integer language plpgsql as $$
declare
  v_folded integer;
begin
  insert into budget_months (user_id, time_zone, month)
  select user_id, time_zone, month from budget_month_deltas
  union
  select user_id, time_zone, month from budget_month_shards
  order by 1, 2, 3
  on conflict do nothing;
  with locked as materialized (
    select m.user_id, m.time_zone, m.month from budget_months m
     where (m.user_id, m.time_zone, m.month) in (select d.user_id, d.time_zone, d.month from budget_month_deltas d
                                                 union all
                                                 select s.user_id, s.time_zone, s.month from budget_month_shards s)
     order by 1, 2, 3
       for update of m skip locked
  ), shards as materialized (
    select s.user_id, s.time_zone, s.month, s.shard from budget_month_shards s join locked l using (user_id, time_zone, month)
     order by 1, 2, 3, 4
       for update of s skip locked
  ), folded as (
    delete from budget_month_deltas d using locked l
     where d.user_id = l.user_id and d.time_zone = l.time_zone and d.month = l.month
    returning d.user_id, d.time_zone, d.month, d.amount_usd
  ), folded_shards as (
    delete from budget_month_shards s using shards h
     where s.user_id = h.user_id and s.time_zone = h.time_zone and s.month = h.month and s.shard = h.shard
    returning s.user_id, s.time_zone, s.month, s.spent_usd
  ), sums as (
    select f.user_id, f.time_zone, f.month, sum(f.amount) as amount, count(*) as n
      from (select user_id, time_zone, month, amount_usd as amount from folded
            union all
            select user_id, time_zone, month, spent_usd from folded_shards) f
     group by 1, 2, 3
  ), updated as (
    update budget_months m set spent_usd = m.spent_usd + s.amount from sums s
     where m.user_id = s.user_id and m.time_zone = s.time_zone and m.month = s.month
    returning s.n
  )
  select coalesce(sum(u.n), 0) into v_folded from updated u;
  return v_folded;
end
$$;

-- reserve_budget as in 015, except:
--   - its figures under the lock come from budget_month_figures (no fold);
--   - it commits synchronously unless it had to queue for the month row (then asynchronously, and its result says
--     awaitDurability: the caller makes it durable before acting on it); until here the caller made every decision
--     commit asynchronously and then waited for a flush of its own, one more round trip for every run;
--   - the month row is locked first and created only when missing (once per user and month), not inserted every time;
--   - the worst cases and their sums are one statement;
--   - the threshold events' insert runs only when the decision reaches 80 % or blocks (below, it inserts nothing).
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
  v_event_ids jsonb := '[]'::jsonb;
  v_contended boolean := false;
  v_created integer;
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

  -- Lock-free: each call's cheap model (itself without one, or when the run may not downgrade), both worst cases (one
  -- when the cheap model is the call's own), and their sums.
  select jsonb_agg(w.c || jsonb_build_object('key', p_run_id || ':' || (w.c ->> 'step') || ':' || (w.c ->> 'attempt'),
                                             'cost', w.cost::text, 'cheap_model', w.cheap_model, 'cheap_cost', w.cheap_cost::text)
                   order by w.n),
         bool_or(w.cheap_model <> w.c ->> 'model'), sum(w.cost), sum(w.cheap_cost)
    into v_calls, v_downgrades, v_default_worst, v_cheap_worst
    from (select e.c, e.n, d.cheap_model, x.cost,
                 case when d.cheap_model = e.c ->> 'model' then x.cost else worst_case_cost(e.c, d.cheap_model, v_at) end as cheap_cost
            from jsonb_array_elements(p_calls) with ordinality e(c, n)
            cross join lateral (select worst_case_cost(e.c, e.c ->> 'model', v_at) as cost offset 0) x
            cross join lateral (
              select coalesce(case when p_may_downgrade then
                       (select g.cheap_model from model_downgrades g where g.model = e.c ->> 'model' and g.effective_from <= v_at
                         order by g.effective_from desc limit 1) end, e.c ->> 'model') as cheap_model) d
          offset 0) w; -- OFFSET 0: not flattened, so each worst case is computed once, not once per use

  -- The lock: from here to the commit nothing else can reserve against this month, and the sweeper does not fold it.
  -- Bookings go on: they add to their own shard and settle their own reservation (the top of this file says why that
  -- stays exact). Decisions that race to create the month's row wait for the insert that wins, then lock that row.
  -- How this transaction commits depends on whether another decision held the row:
  --   - free: taken at once, and the commit is synchronous as usual; the decision is durable when it returns.
  --   - held: we queued. Then the commit is asynchronous (set_config(..., true): this transaction only), so the
  --     decisions queued behind us get the row once our commit record is in the WAL buffers, not after our fsync:
  --     otherwise each decision of a busy user would wait for every earlier one's disk flush in turn. The result says
  --     awaitDurability, and the caller must wait for the WAL to reach disk before it acts on the decision
  --     (src/budgets/reserve.ts decideThenAwaitDurability, test/decision-durability.test.ts).
  perform from budget_months m where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month
     for update skip locked;
  if not found then
    -- Locked by another decision, or not there yet. The insert creates it (the month's first decision, uncontended),
    -- or finds it there (DO NOTHING takes no lock) or being created by a concurrent decision: then we queue.
    insert into budget_months (user_id, time_zone, month) values (p_user_id, v_budget.time_zone, v_month) on conflict do nothing;
    get diagnostics v_created = row_count;
    v_contended := v_created = 0;
    perform from budget_months m where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month for update;
    if v_contended then
      perform set_config('synchronous_commit', 'off', true);
    end if;
  end if;

  if exists (select from budget_reservations r where r.idempotency_key in (select c ->> 'key' from jsonb_array_elements(v_calls) c)) then
    -- a retried request: the reservation already made for these keys, as it was made
    v_figures := budget_month_figures(p_user_id, v_budget.time_zone, v_month, v_at);
    return (
      select jsonb_build_object('tier', min(r.tier),
               'models', jsonb_object_agg(c ->> 'step', coalesce(r.model, c ->> 'model')),
               'worstCaseUsd', coalesce(sum(r.amount_usd), 0)::text)
        from jsonb_array_elements(v_calls) c left join budget_reservations r on r.idempotency_key = c ->> 'key'
    ) || jsonb_build_object('eventIds', '[]'::jsonb, 'limitUsd', v_limit::text, 'spentUsd', v_figures.spent::text,
           'reservedUsd', v_figures.reserved::text, 'timeZone', v_budget.time_zone, 'month', to_char(v_month, 'YYYY-MM'),
           'awaitDurability', v_contended);
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
  if v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * 80 then
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
  end if;

  return jsonb_build_object('tier', v_tier, 'worstCaseUsd', v_worst::text, 'eventIds', v_event_ids, 'limitUsd', v_limit::text,
           'spentUsd', v_figures.spent::text, 'reservedUsd', v_figures.reserved::text, 'timeZone', v_budget.time_zone,
           'month', to_char(v_month, 'YYYY-MM'), 'awaitDurability', v_contended)
      || case when v_tier = 'blocked' then '{}'::jsonb else jsonb_build_object('models',
           (select jsonb_object_agg(c ->> 'step', c ->> (case v_tier when 'cheap' then 'cheap_model' else 'model' end))
              from jsonb_array_elements(v_calls) c)) end;
end
$$;

-- Nothing calls 015's fold any more: a decision reads, and only the sweeper folds.
drop function budget_fold_month_figures(text, text, date, timestamptz);

do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    -- Shards are added to by bookings (insert or update) and taken by the sweeper's fold (delete).
    grant select, insert, update, delete on budget_month_shards to cronledger_app;
  end if;
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    grant select on budget_month_shards to cronledger_readonly;
  end if;
end
$$;
