-- What each ledger entry adds to the /metrics ledger counters, written once: its charge (a positive cost), its credit
-- (a negative cost, as a positive amount) and its booking lag with the lag histogram's bucket (corrections have none).
-- The fold's trigger, metric_rebuild() and /metrics' read of the entries still queued (src/db/metric-counters.ts) all
-- read it.
create view metric_entry_figures as
select l.id, l.model, l.kind, l.user_id, greatest(l.cost_usd, 0) as charge_usd, greatest(-l.cost_usd, 0) as credit_usd,
       x.lag_ms, metric_bucket('booking_lag', x.lag_ms) as lag_bucket
  from usage_ledger l
 cross join lateral (select metric_booking_lag_ms(l.usage_received_at, l.booked_at) as lag_ms) x;
-- like the counters, read by the admin page's read-only role and the fold's SECURITY DEFINER trigger, not the worker
revoke select on metric_entry_figures from cronledger_worker;

create or replace function metric_ledger_fold() returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
  insert into metric_ledger_totals as t (model, kind, user_id, charges_usd, credits_usd)
  select f.model, f.kind, f.user_id, sum(f.charge_usd), sum(f.credit_usd)
    from changed c join metric_entry_figures f on f.id = c.entry_id
   group by 1, 2, 3
   order by 1, 2, 3
  on conflict (model, kind, user_id) do update
    set charges_usd = t.charges_usd + excluded.charges_usd, credits_usd = t.credits_usd + excluded.credits_usd;
  insert into metric_histograms as h (histogram, shard, bucket, observations, sum_ms)
  select 'booking_lag', pg_backend_pid() % 8, f.lag_bucket, count(*), sum(f.lag_ms)
    from changed c join metric_entry_figures f on f.id = c.entry_id
   where f.lag_ms is not null
   group by 3
   order by 3
  on conflict (histogram, shard, bucket) do update
    set observations = h.observations + excluded.observations, sum_ms = h.sum_ms + excluded.sum_ms;
  return null;
end
$$;

-- Every counter again from the raw rows; the ledger's from the entries no longer queued.
create or replace function metric_rebuild() returns void
language plpgsql as $$
begin
  lock table usage_ledger, runs, run_duplicates, rollup_queue in share mode;
  delete from metric_ledger_totals;
  delete from metric_run_counts;
  delete from metric_histograms;
  insert into metric_ledger_totals (model, kind, user_id, charges_usd, credits_usd)
  select model, kind, user_id, sum(charge_usd), sum(credit_usd)
    from metric_entry_figures f where not exists (select from rollup_queue q where q.entry_id = f.id) group by 1, 2, 3;
  insert into metric_run_counts (shard, status, tier, runs)
  select 0, status, tier, count(*) from runs group by 2, 3
  union all select 0, 'duplicate', null, count(*) from run_duplicates having count(*) > 0;
  insert into metric_histograms (histogram, shard, bucket, observations, sum_ms)
  select 'run_duration', 0, metric_bucket('run_duration', duration_ms) as bucket, count(*), sum(duration_ms)
    from runs where duration_ms is not null group by 3;
  insert into metric_histograms (histogram, shard, bucket, observations, sum_ms)
  select 'booking_lag', 0, lag_bucket, count(*), sum(lag_ms)
    from metric_entry_figures f
   where f.lag_ms is not null and not exists (select from rollup_queue q where q.entry_id = f.id) group by 3;
end
$$;
