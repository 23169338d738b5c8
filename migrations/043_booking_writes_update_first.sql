-- A booking's summary rows almost always exist already (its user's month, its model's totals, its lag bucket, its
-- rollup slot and its user's day), so the ledger's AFTER trigger updates them in place and inserts (with the upsert, which
-- a concurrent first insert can still race) only when the update found no row. An upsert that conflicts probes the
-- index, locks the row (a WAL record of its own) and then updates it: five lock records fewer per booking. The update
-- reads the row as the statement's snapshot sees it and re-checks the newest version, so a concurrent booking's
-- addition is never lost; a row deleted meanwhile (a fold emptying a rollup_pending row, metric_rebuild) makes the
-- update find nothing, and the insert adds it again.
--
-- The booking lag goes straight into its histogram row (metric_observe stays for the first booking of a bucket and for
-- runs). Month rows are written zone by zone in the zones' order, as before, so two bookings of one user take them in
-- the same order.
--
-- The hot summary tables keep their rows on pages with room to spare (fillfactor 10): an updated row's old versions
-- stay on its page until the page is pruned, and a page is pruned when its free space falls below what its fillfactor
-- reserves, so lookups walk a short chain of versions instead of up to a page of them, and concurrent bookings of
-- different users less often share a page.
--
-- The counters' checks become domains: a table's check constraints are read from the catalog and planned again in
-- every statement that writes the table, a domain's once per session.

alter table budget_months set (fillfactor = 10);
alter table metric_ledger_totals set (fillfactor = 10);
alter table metric_histograms set (fillfactor = 10);
alter table rollup_pending set (fillfactor = 10);
alter table rollup_pending_users set (fillfactor = 10);

create domain usd_not_negative as numeric(38, 18) check (value >= 0);
create domain metric_histogram_name as text check (value in ('run_duration', 'booking_lag'));
alter table metric_ledger_totals
  drop constraint metric_ledger_totals_charges_usd_check, drop constraint metric_ledger_totals_credits_usd_check,
  alter column charges_usd type usd_not_negative, alter column credits_usd type usd_not_negative;
alter table metric_histograms
  drop constraint metric_histograms_histogram_check, alter column histogram type metric_histogram_name;

-- The tables are written in this order (two bookings of one user take the rows they share in the same order):
-- budget_months, budget_reservations, metric_ledger_totals, metric_histograms, rollup_queue, rollup_pending,
-- rollup_pending_users. The queue row comes before its summary: rollups_reset_pending's share lock on the queue then
-- waits for this transaction.
create or replace function book_ledger_entry() returns trigger language plpgsql as $$
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
  -- /metrics: the cost into its model, kind and user's charges or credits (an entry without a model or kind always
  -- takes the insert: the update's equality never matches a null), the booking lag into its histogram
  update metric_ledger_totals t
     set charges_usd = t.charges_usd + greatest(new.cost_usd, 0), credits_usd = t.credits_usd + greatest(-new.cost_usd, 0)
   where t.model = new.model and t.kind = new.kind and t.user_id = new.user_id;
  if not found then
    insert into metric_ledger_totals as t (model, kind, user_id, charges_usd, credits_usd)
    values (new.model, new.kind, new.user_id, greatest(new.cost_usd, 0), greatest(-new.cost_usd, 0))
    on conflict (model, kind, user_id) do update
      set charges_usd = t.charges_usd + excluded.charges_usd, credits_usd = t.credits_usd + excluded.credits_usd;
  end if;
  update metric_histograms h
     set observations = h.observations + 1, sum_ms = h.sum_ms + metric_booking_lag_ms(new.usage_received_at, new.booked_at)
   where h.histogram = 'booking_lag' and h.shard = v_shard
     and h.bucket = metric_bucket('booking_lag', metric_booking_lag_ms(new.usage_received_at, new.booked_at));
  if not found then
    -- the bucket's first observation in this shard, or no lag to observe (metric_observe skips a null)
    perform metric_observe('booking_lag', metric_booking_lag_ms(new.usage_received_at, new.booked_at), 1);
  end if;
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
