-- What /metrics serves, kept as small counter rows in the transaction of what they count, so a scrape reads a few
-- rows per status, bucket, model and user however long the ledger and the runs table grow:
--   metric_ledger_totals   charges (positive entries) and credits (negative entries) per model, kind and user, exact
--   metric_run_counts      runs per status and budget tier, and the duplicates (status 'duplicate')
--   metric_histograms      run durations and ledger booking lags per histogram bucket: observations and milliseconds
-- Triggers on usage_ledger, runs and run_duplicates keep them, whichever function or statement writes those tables. The
-- trigger functions are SECURITY DEFINER (a trigger function cannot be called on its own), so the roles that write
-- runs and the ledger need no write on the counters. Global rows are split into 8 shards by backend, so concurrent
-- claims and completions rarely wait on one row; the readers sum the shards. metric_rebuild() recomputes every counter
-- from the raw rows (this migration, and a bulk load that ran with the triggers off). The read-only role reads the
-- tables through the schema's default privileges.

-- A histogram's bucket upper bounds in milliseconds. Bucket i (from 0) holds the observations above bound i-1 and at
-- most bound i; bucket array_length holds the rest (+Inf). Changing a bound needs metric_rebuild().
create function metric_bounds_ms(p_histogram text) returns bigint[] language sql immutable as $$
  select case p_histogram
    when 'run_duration' then array[100, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000, 1800000]::bigint[]
    when 'booking_lag' then array[10, 50, 100, 500, 1000, 5000, 30000, 300000, 3600000]::bigint[]
  end
$$;

-- Observations are whole milliseconds, so "at most b" is "ms - 1 below b", and width_bucket counts the bounds at or
-- under its first argument.
create function metric_bucket(p_histogram text, p_ms bigint) returns integer language sql immutable as $$
  select width_bucket(p_ms - 1, metric_bounds_ms(p_histogram))
$$;

-- A ledger row's booking lag: from the moment the worker received the usage to booked_at, the clock inside the
-- booking's own transaction; null for corrections (no usage_received_at).
create function metric_booking_lag_ms(p_usage_received_at timestamptz, p_booked_at timestamptz) returns bigint
language sql immutable as $$
  select case when p_usage_received_at is not null and p_booked_at is not null
              then greatest(0, round(extract(epoch from (p_booked_at - p_usage_received_at)) * 1000))::bigint end
$$;

create table metric_ledger_totals (
  model text,
  kind text,
  user_id text not null,
  charges_usd numeric(38, 18) not null default 0 check (charges_usd >= 0),
  credits_usd numeric(38, 18) not null default 0 check (credits_usd >= 0),
  unique nulls not distinct (model, kind, user_id)
);

create table metric_run_counts (
  shard smallint not null,
  status text not null,
  tier text,
  runs bigint not null,
  unique nulls not distinct (shard, status, tier)
);

create table metric_histograms (
  histogram text not null check (histogram in ('run_duration', 'booking_lag')),
  shard smallint not null,
  bucket integer not null,
  observations bigint not null,
  sum_ms bigint not null,
  primary key (histogram, shard, bucket)
);

-- One observation of p_ms milliseconds into a histogram (p_sign -1: taken out again); none when p_ms is null.
create function metric_observe(p_histogram text, p_ms bigint, p_sign integer) returns void language plpgsql as $$
begin
  if p_ms is null then return; end if;
  insert into metric_histograms as h (histogram, shard, bucket, observations, sum_ms)
  values (p_histogram, pg_backend_pid() % 8, metric_bucket(p_histogram, p_ms), p_sign, p_sign * p_ms)
  on conflict (histogram, shard, bucket) do update
    set observations = h.observations + excluded.observations, sum_ms = h.sum_ms + excluded.sum_ms;
end
$$;
revoke execute on function metric_observe(text, bigint, integer) from public;

create function metric_add_run(p_status text, p_tier text, p_duration_ms bigint, p_sign integer) returns void
language plpgsql as $$
begin
  insert into metric_run_counts as c (shard, status, tier, runs) values (pg_backend_pid() % 8, p_status, p_tier, p_sign)
  on conflict (shard, status, tier) do update set runs = c.runs + excluded.runs;
  perform metric_observe('run_duration', p_duration_ms, p_sign);
end
$$;
revoke execute on function metric_add_run(text, text, bigint, integer) from public;

-- A run's change: its old status, tier and duration out, the new ones in (old first, so every transaction locks the
-- counter rows of a claim-then-complete in the same order).
create function metric_count_run() returns trigger language plpgsql security definer set search_path = public, pg_temp as $$
begin
  if tg_op in ('UPDATE', 'DELETE') then perform metric_add_run(old.status, old.tier, old.duration_ms, -1); end if;
  if tg_op in ('INSERT', 'UPDATE') then perform metric_add_run(new.status, new.tier, new.duration_ms, 1); end if;
  return null;
end
$$;

create trigger runs_metric_counts after insert or delete on runs for each row execute function metric_count_run();
create trigger runs_metric_counts_update after update of status, tier, duration_ms on runs for each row
  when (old.status is distinct from new.status or old.tier is distinct from new.tier or old.duration_ms is distinct from new.duration_ms)
  execute function metric_count_run();

create function metric_count_duplicate() returns trigger language plpgsql security definer set search_path = public, pg_temp as $$
begin
  perform metric_add_run('duplicate', null, null, case tg_op when 'INSERT' then 1 else -1 end);
  return null;
end
$$;

create trigger run_duplicates_metric_counts after insert or delete on run_duplicates for each row execute function metric_count_duplicate();

-- A ledger entry: its cost into its model, kind and user's charges or credits (a row per user: only the user's own
-- bookings share it), and its booking lag into the lag histogram.
create function metric_count_ledger_entry() returns trigger language plpgsql security definer set search_path = public, pg_temp as $$
begin
  insert into metric_ledger_totals as t (model, kind, user_id, charges_usd, credits_usd)
  values (new.model, new.kind, new.user_id, greatest(new.cost_usd, 0), greatest(-new.cost_usd, 0))
  on conflict (model, kind, user_id) do update
    set charges_usd = t.charges_usd + excluded.charges_usd, credits_usd = t.credits_usd + excluded.credits_usd;
  perform metric_observe('booking_lag', metric_booking_lag_ms(new.usage_received_at, new.booked_at), 1);
  return null;
end
$$;

create trigger usage_ledger_metric_counts after insert on usage_ledger for each row execute function metric_count_ledger_entry();

-- Every counter from the raw rows, in one transaction (the owner's: after a bulk load with the triggers off).
create function metric_rebuild() returns void language plpgsql as $$
begin
  lock table usage_ledger, runs, run_duplicates in share mode;
  delete from metric_ledger_totals;
  delete from metric_run_counts;
  delete from metric_histograms;
  insert into metric_ledger_totals (model, kind, user_id, charges_usd, credits_usd)
  select model, kind, user_id, coalesce(sum(cost_usd) filter (where cost_usd > 0), 0), coalesce(-sum(cost_usd) filter (where cost_usd < 0), 0)
    from usage_ledger group by 1, 2, 3;
  insert into metric_run_counts (shard, status, tier, runs)
  select 0, status, tier, count(*) from runs group by 2, 3
  union all select 0, 'duplicate', null, count(*) from run_duplicates having count(*) > 0;
  insert into metric_histograms (histogram, shard, bucket, observations, sum_ms)
  select 'run_duration', 0, metric_bucket('run_duration', duration_ms) as bucket, count(*), sum(duration_ms)
    from runs where duration_ms is not null group by 3;
  insert into metric_histograms (histogram, shard, bucket, observations, sum_ms)
  select 'booking_lag', 0, metric_bucket('booking_lag', lag_ms) as bucket, count(*), sum(lag_ms)
    from (select metric_booking_lag_ms(usage_received_at, booked_at) as lag_ms from usage_ledger) l
   where lag_ms is not null group by 3;
end
$$;
revoke execute on function metric_rebuild() from public;

select metric_rebuild();
