-- The admin overview's anomaly series, kept where the rollups are written: per zone, local day and user or task with
-- runs that ran (completed or failed), its spend (every entry but credits) in atto-USD (10^-18 USD, an integer) and
-- those runs, and the trailing median of its cost per run over the 7 days before (null with fewer than 3 of them
-- having runs): what src/admin/anomalies.ts findAnomalies computes for each day. The overview then reads only the days
-- over its factor (cost_atto / runs > factor x median_num / median_den, compared cross-multiplied in SQL, exact),
-- a few hundred rows at most, where a month of series is about 15,000 rows at 500 users.
-- A day with no run has no cost per run and no row: it neither flags nor breaks a streak.
--
-- The rows are the rollups' (usage_day_users and run_rollups) as the last refresh left them: every fold recomputes, in its transaction, the rows of the users and tasks whose buckets it touched
-- from the first touched day to 7 days after the last (their medians look back 7 days), and every month's build or
-- rebuild recomputes the month and the 7 days after it, for every user and task. Written only by those SECURITY
-- DEFINER functions; read by the admin page (cronledger_readonly) and the worker, by the schema's default privileges.
create table cost_per_run_days (
  zone       text    not null references rollup_zones (zone) on delete cascade,
  day        date    not null,
  kind       text    not null check (kind in ('user', 'task')),
  key        text    not null,
  cost_atto  numeric not null check (cost_atto = trunc(cost_atto)),
  runs       bigint  not null check (runs > 0),
  -- the trailing median as a ratio of integers (an even count averages the middle two exactly), both or neither
  median_num numeric,
  median_den numeric check (median_den > 0),
  check ((median_num is null) = (median_den is null)),
  -- (cost_atto / runs) / median in millionths, truncated (capped at bigint's largest), where the median is above zero:
  -- a day whose figure is below floor(factor x 10^6) is under the factor, so a read compares exactly only the others
  over_median_micro bigint check ((over_median_micro is null) = (median_num is null or median_num <= 0)),
  primary key (zone, day, kind, key)
);
-- A flagged day's previous day with runs (whether a streak goes on) is found per key.
create index cost_per_run_days_key on cost_per_run_days (zone, kind, key, day);

-- Recomputes the rows of each (zone, kind, key) of pg_temp.cost_per_run_touched (zone, kind, key, first_day,
-- last_day) for days first_day .. last_day + 7 from the rollups. The days are ranked by cost per run exactly: a
-- quotient truncated at 30 decimals orders two ratios of integers whose denominators (runs of one day) are below 10^15
-- as the ratios do, and ratios that tie at it are equal (then ordered by their terms, so a median is always written
-- the same way).
create function rollup_cost_per_run_recompute() returns void language plpgsql
set search_path = pg_catalog, public, pg_temp set work_mem = '64MB' as $$
begin
  analyze pg_temp.cost_per_run_touched;
  delete from cost_per_run_days c using pg_temp.cost_per_run_touched t
   where c.zone = t.zone and c.kind = t.kind and c.key = t.key and c.day between t.first_day and t.last_day + 7;
  insert into cost_per_run_days (zone, day, kind, key, cost_atto, runs, median_num, median_den, over_median_micro)
  with bounds as (
    select zone, min(first_day) - 7 as first_day, max(last_day) + 7 as last_day from pg_temp.cost_per_run_touched group by zone
  ),
  buckets as (
    select u.zone, u.day, u.user_id, u.task_id, u.cost_usd, null::bigint as runs
      from usage_day_users u join bounds b on u.zone = b.zone and u.day between b.first_day and b.last_day
     where u.entry_type <> 'credit'
    union all
    select r.zone, r.day, r.user_id, r.task_id, null, r.runs
      from run_rollups r join bounds b on r.zone = b.zone and r.day between b.first_day and b.last_day
     where r.status in ('completed', 'failed')
  ),
  keyed as (
    select zone, day, 'user' as kind, user_id as key, cost_usd, runs from buckets
    union all
    select zone, day, 'task', task_id, cost_usd, runs from buckets where task_id is not null
  ),
  summed as (
    select zone, day, kind, key, (coalesce(sum(cost_usd), 0) * 1000000000000000000)::numeric(60, 0) as cost_atto,
           sum(runs)::bigint as runs
      from keyed group by 1, 2, 3, 4 having sum(runs) > 0
  ),
  series as (
    select s.*, t.first_day, t.last_day, div(s.cost_atto * 1000000000000000000000000000000, s.runs) as rank_key
      from summed s join pg_temp.cost_per_run_touched t
        on t.zone = s.zone and t.kind = s.kind and t.key = s.key and s.day between t.first_day - 7 and t.last_day + 7
  ),
  windowed as (
    select s.*, array_agg(s.cost_atto) over w as nums, array_agg(s.runs::numeric) over w as dens, array_agg(s.rank_key) over w as ranks
      from series s
    window w as (partition by s.zone collate "C", s.kind collate "C", s.key collate "C" order by s.day
                 range between interval '7 days' preceding and interval '1 day' preceding)
  ),
  medians as (
    select w.zone, w.day, w.kind, w.key, w.cost_atto, w.runs,
           case when m.n >= 3 then case when m.n % 2 = 1 then w.nums[m.o[m.n / 2 + 1]]
                                        else w.nums[m.o[m.n / 2]] * w.dens[m.o[m.n / 2 + 1]] + w.nums[m.o[m.n / 2 + 1]] * w.dens[m.o[m.n / 2]] end
           end as median_num,
           case when m.n >= 3 then case when m.n % 2 = 1 then w.dens[m.o[m.n / 2 + 1]] else 2 * w.dens[m.o[m.n / 2]] * w.dens[m.o[m.n / 2 + 1]] end
           end as median_den
      from windowed w
      cross join lateral (
        select count(*)::int as n, array_agg(h.i::int order by h.rank_key, h.num, h.den) as o
          from unnest(w.ranks, w.nums, w.dens) with ordinality h(rank_key, num, den, i)
      ) m
     where w.day between w.first_day and w.last_day + 7
  )
  select zone, day, kind, key, cost_atto, runs, median_num, median_den,
         case when median_num > 0
              then least(div(cost_atto * median_den * 1000000, runs * median_num), 9223372036854775807)::bigint end
    from medians;
end
$$;

-- What a fold touched: the users and tasks of the ledger buckets it added to (pg_temp.delta) and of the run buckets it
-- recomputed (pg_temp.touched_runs), each from its first to its last touched day.
create function rollup_cost_per_run_after_fold() returns void language plpgsql
set search_path = pg_catalog, public, pg_temp as $$
begin
  drop table if exists pg_temp.cost_per_run_buckets, pg_temp.cost_per_run_touched;
  create temp table cost_per_run_buckets (zone text, day date, user_id text, task_id text) on commit drop;
  if to_regclass('pg_temp.delta') is not null then
    insert into pg_temp.cost_per_run_buckets select zone, day, user_id, task_id from pg_temp.delta;
  end if;
  if to_regclass('pg_temp.touched_runs') is not null then
    insert into pg_temp.cost_per_run_buckets select zone, day, user_id, task_id from pg_temp.touched_runs;
  end if;
  create temp table cost_per_run_touched on commit drop as
    select b.zone, k.kind, k.key, min(b.day) as first_day, max(b.day) as last_day
      from pg_temp.cost_per_run_buckets b cross join lateral (values ('user', b.user_id), ('task', b.task_id)) k(kind, key)
     where k.key is not null
     group by 1, 2, 3;
  perform rollup_cost_per_run_recompute();
end
$$;

-- A month of a zone just built: every user and task of the zone, over the month's days (and the 7 after).
create function rollup_cost_per_run_month(p_zone text, p_month text) returns void language plpgsql
set search_path = pg_catalog, public, pg_temp as $$
declare
  v_first date := to_date(p_month || '-01', 'YYYY-MM-DD');
  v_last date := (to_date(p_month || '-01', 'YYYY-MM-DD') + interval '1 month')::date - 1;
begin
  drop table if exists pg_temp.cost_per_run_touched;
  create temp table cost_per_run_touched on commit drop as
    select distinct p_zone as zone, k.kind, k.key, v_first as first_day, v_last as last_day
      from (select user_id, task_id from usage_day_users where zone = p_zone and day between v_first - 7 and v_last + 7
            union select user_id, task_id from run_rollups where zone = p_zone and day between v_first - 7 and v_last + 7) b
      cross join lateral (values ('user', b.user_id), ('task', b.task_id)) k(kind, key)
     where k.key is not null;
  -- rows of keys the month's rollups no longer hold go too
  delete from cost_per_run_days where zone = p_zone and day between v_first and v_last + 7;
  perform rollup_cost_per_run_recompute();
end
$$;

-- The fold and the month's finish keep their bodies under helper names; the names the worker calls do the same and
-- then recompute the cost per run days, in the same transaction.
alter function rollups_fold_queues(integer) rename to rollup_fold_queues_into_rollups;
alter function rollups_finish_month(text, text, bigint) rename to rollup_finish_month_rollups;
revoke execute on function rollup_fold_queues_into_rollups(integer), rollup_finish_month_rollups(text, text, bigint) from cronledger_worker;

create function rollups_fold_queues(p_limit integer) returns jsonb language plpgsql security definer
set search_path = pg_catalog, public, pg_temp as $$
declare
  v_folded jsonb := rollup_fold_queues_into_rollups(p_limit);
begin
  perform rollup_cost_per_run_after_fold();
  return v_folded;
end
$$;

create function rollups_finish_month(p_zone text, p_month text, p_last_entry_id bigint) returns void language plpgsql security definer
set search_path = pg_catalog, public, pg_temp as $$
begin
  perform rollup_finish_month_rollups(p_zone, p_month, p_last_entry_id);
  perform rollup_cost_per_run_month(p_zone, p_month);
end
$$;

revoke execute on function rollup_cost_per_run_recompute(), rollup_cost_per_run_after_fold(), rollup_cost_per_run_month(text, text),
  rollups_fold_queues(integer), rollups_finish_month(text, text, bigint) from public;
grant execute on function rollups_fold_queues(integer), rollups_finish_month(text, text, bigint) to cronledger_worker;

-- The months built so far.
do $$
declare
  m record;
begin
  for m in select zone, month from rollup_months order by zone, month loop
    perform rollup_cost_per_run_month(m.zone, m.month);
  end loop;
end
$$;
