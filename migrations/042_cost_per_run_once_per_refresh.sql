-- cost_per_run_days is recomputed once per refresh, over what all its fold batches touched: a refresh folds the queue
-- in batches of a few thousand entries, one transaction each, and late entries spread over a month touch most of its
-- users and tasks in every batch.
--
-- Each fold (rollups_fold_queues) records what it touched in cost_per_run_stale: per zone, kind and key, the
-- span from the first to the last touched day, widened to cover what earlier folds recorded. The recompute
-- (rollups_recompute_cost_per_run) runs over that union and empties the table; refreshRollups calls it in the
-- transaction of its last fold, rebuildMonth after the month's build, both under the rollups' lock. A span is
-- recomputed from the rollups as they stand then, so a wider span than the touched days gives the same rows. The
-- table is written in the fold's own transaction, so an interrupted refresh leaves what its committed batches
-- touched for the next refresh to recompute, and nothing is lost. Until then cost_per_run_days is as the last refresh
-- left it, as it is while entries are queued.
create table cost_per_run_stale (
  zone      text not null references rollup_zones (zone) on delete cascade,
  kind      text not null check (kind in ('user', 'task')),
  key       text not null,
  first_day date not null,
  last_day  date not null check (last_day >= first_day),
  primary key (zone, kind, key)
);

-- What a fold touched: the users and tasks of the ledger buckets it added to (pg_temp.delta) and of the run buckets it
-- recomputed (pg_temp.touched_runs), each from its first to its last touched day, added to cost_per_run_stale (one
-- statement per source: each names a key once, as on conflict requires).
create or replace function rollup_cost_per_run_after_fold() returns void language plpgsql
set search_path = pg_catalog, public, pg_temp as $$
declare
  v_source text;
begin
  foreach v_source in array array['delta', 'touched_runs'] loop
    continue when to_regclass('pg_temp.' || v_source) is null;
    execute format(
      $q$insert into cost_per_run_stale (zone, kind, key, first_day, last_day)
           select b.zone, k.kind, k.key, min(b.day), max(b.day)
             from pg_temp.%I b cross join lateral (values ('user', b.user_id), ('task', b.task_id)) k(kind, key)
            where k.key is not null
            group by 1, 2, 3
         on conflict (zone, kind, key) do update
           set first_day = least(cost_per_run_stale.first_day, excluded.first_day),
               last_day = greatest(cost_per_run_stale.last_day, excluded.last_day)$q$, v_source);
  end loop;
end
$$;

-- Recomputes the cost_per_run_days rows of every span in cost_per_run_stale (days first_day .. last_day + 7) and
-- empties it, in the caller's transaction. Returns how many (zone, kind, key) it recomputed; none costs one probe.
create function rollups_recompute_cost_per_run() returns integer language plpgsql security definer
set search_path = pg_catalog, public, pg_temp as $$
declare
  v_keys integer;
begin
  if not exists (select 1 from cost_per_run_stale) then
    return 0;
  end if;
  drop table if exists pg_temp.cost_per_run_touched;
  create temp table cost_per_run_touched on commit drop as
    select zone, kind, key, first_day, last_day from cost_per_run_stale;
  get diagnostics v_keys = row_count;
  delete from cost_per_run_stale s using pg_temp.cost_per_run_touched t
   where s.zone = t.zone and s.kind = t.kind and s.key = t.key;
  perform rollup_cost_per_run_recompute();
  return v_keys;
end
$$;

revoke execute on function rollups_recompute_cost_per_run() from public;
grant execute on function rollups_recompute_cost_per_run() to cronledger_worker;
