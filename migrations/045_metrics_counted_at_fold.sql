-- The /metrics ledger counters (charges and credits per model, kind and user; the booking-lag histogram) count an
-- entry when the rollup refresh folds it out of rollup_queue, one statement per fold, instead of in the booking's own
-- transaction: a booking writes five summary rows, not seven. /metrics reads the counters plus the entries still
-- queued (src/db/metric-counters.ts), in one statement, so it still serves every booked entry, exactly, at the moment
-- of the scrape. An entry is in exactly one of the two: the fold's delete from the queue and its counting commit together.

create or replace function book_ledger_entry() returns trigger
language plpgsql as $$
declare
  v_shard smallint := (pg_backend_pid() % 8)::smallint;
  v_zone text;
begin
  -- the month-to-date summary, in every zone a budget uses (budget_track_zone adds a zone under the exclusive lock)
  perform pg_advisory_xact_lock_shared(hashtextextended('cronledger-budget-zones', 0));
  for v_zone in select z.time_zone from budget_zones z order by z.time_zone loop
    update budget_months m set spent_usd = m.spent_usd + new.cost_usd
     where m.user_id = new.user_id and m.time_zone = v_zone and m.month = budget_month_of(new.created_at, v_zone);
    if not found then
      insert into budget_months as m (user_id, time_zone, month, spent_usd)
      values (new.user_id, v_zone, budget_month_of(new.created_at, v_zone), new.cost_usd)
      on conflict (user_id, time_zone, month) do update set spent_usd = m.spent_usd + excluded.spent_usd;
    end if;
  end loop;
  update budget_reservations set status = 'settled', closed_at = now(), settled_entry_id = new.id
   where idempotency_key = new.idempotency_key and status = 'open';
  -- the rollup queue, then its summary in the shard the queue row records (the fold takes it out of the same row)
  insert into rollup_queue (entry_id, shard) values (new.id, v_shard);
  update rollup_pending p
     set entries = p.entries + 1, prompt_tokens = p.prompt_tokens + new.prompt_tokens,
         cached_prompt_tokens = p.cached_prompt_tokens + new.cached_prompt_tokens,
         completion_tokens = p.completion_tokens + new.completion_tokens,
         reasoning_tokens = p.reasoning_tokens + new.reasoning_tokens, cost_usd = p.cost_usd + new.cost_usd
   where p.slot = rollup_pending_slot(new.created_at) and p.shard = v_shard and p.model = new.model and p.kind = new.kind
     and p.entry_type = new.entry_type and p.status = new.status;
  if not found then
    insert into rollup_pending as p (slot, shard, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
                                     completion_tokens, reasoning_tokens, cost_usd)
    values (rollup_pending_slot(new.created_at), v_shard, new.model, new.kind, new.entry_type, new.status, 1, new.prompt_tokens,
            new.cached_prompt_tokens, new.completion_tokens, new.reasoning_tokens, new.cost_usd)
    on conflict on constraint rollup_pending_bucket do update
      set entries = p.entries + 1, prompt_tokens = p.prompt_tokens + excluded.prompt_tokens,
          cached_prompt_tokens = p.cached_prompt_tokens + excluded.cached_prompt_tokens,
          completion_tokens = p.completion_tokens + excluded.completion_tokens,
          reasoning_tokens = p.reasoning_tokens + excluded.reasoning_tokens, cost_usd = p.cost_usd + excluded.cost_usd;
  end if;
  if new.entry_type = 'usage' then
    update rollup_pending_users u set usage_entries = u.usage_entries + 1
     where u.user_id = new.user_id and u.at = rollup_pending_user_at(new.created_at);
    if not found then
      insert into rollup_pending_users as u (user_id, at, usage_entries)
      values (new.user_id, rollup_pending_user_at(new.created_at), 1)
      on conflict (user_id, at) do update set usage_entries = u.usage_entries + 1;
    end if;
  end if;
  return null;
end
$$;

-- The entries a fold takes out of the queue (the transition table `changed`), into the /metrics ledger counters.
create function metric_ledger_fold() returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
  insert into metric_ledger_totals as t (model, kind, user_id, charges_usd, credits_usd)
  select l.model, l.kind, l.user_id, coalesce(sum(l.cost_usd) filter (where l.cost_usd > 0), 0),
         coalesce(-sum(l.cost_usd) filter (where l.cost_usd < 0), 0)
    from changed c join usage_ledger l on l.id = c.entry_id
   group by 1, 2, 3
   order by 1, 2, 3
  on conflict (model, kind, user_id) do update
    set charges_usd = t.charges_usd + excluded.charges_usd, credits_usd = t.credits_usd + excluded.credits_usd;
  insert into metric_histograms as h (histogram, shard, bucket, observations, sum_ms)
  select 'booking_lag', pg_backend_pid() % 8, metric_bucket('booking_lag', x.lag_ms), count(*), sum(x.lag_ms)
    from (select metric_booking_lag_ms(l.usage_received_at, l.booked_at) as lag_ms
            from changed c join usage_ledger l on l.id = c.entry_id) x
   where x.lag_ms is not null
   group by 3
   order by 3
  on conflict (histogram, shard, bucket) do update
    set observations = h.observations + excluded.observations, sum_ms = h.sum_ms + excluded.sum_ms;
  return null;
end
$$;

create trigger rollup_queue_metrics_out after delete on rollup_queue referencing old table as changed
  for each statement execute function metric_ledger_fold();

-- Every counter again from the raw rows; the ledger's from the entries no longer queued.
create or replace function metric_rebuild() returns void
language plpgsql as $$
begin
  lock table usage_ledger, runs, run_duplicates, rollup_queue in share mode;
  delete from metric_ledger_totals;
  delete from metric_run_counts;
  delete from metric_histograms;
  insert into metric_ledger_totals (model, kind, user_id, charges_usd, credits_usd)
  select model, kind, user_id, coalesce(sum(cost_usd) filter (where cost_usd > 0), 0), coalesce(-sum(cost_usd) filter (where cost_usd < 0), 0)
    from usage_ledger l where not exists (select from rollup_queue q where q.entry_id = l.id) group by 1, 2, 3;
  insert into metric_run_counts (shard, status, tier, runs)
  select 0, status, tier, count(*) from runs group by 2, 3
  union all select 0, 'duplicate', null, count(*) from run_duplicates having count(*) > 0;
  insert into metric_histograms (histogram, shard, bucket, observations, sum_ms)
  select 'run_duration', 0, metric_bucket('run_duration', duration_ms) as bucket, count(*), sum(duration_ms)
    from runs where duration_ms is not null group by 3;
  insert into metric_histograms (histogram, shard, bucket, observations, sum_ms)
  select 'booking_lag', 0, metric_bucket('booking_lag', lag_ms) as bucket, count(*), sum(lag_ms)
    from (select metric_booking_lag_ms(usage_received_at, booked_at) as lag_ms from usage_ledger l
           where not exists (select from rollup_queue q where q.entry_id = l.id)) l
   where lag_ms is not null group by 3;
end
$$;

-- The entries queued now were counted by their bookings: count them again from the raw rows, without those.
select metric_rebuild();
