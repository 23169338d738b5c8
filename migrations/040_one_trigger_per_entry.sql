-- What a ledger entry does in its own transaction, in one trigger call per row: add to its month's spend in every
-- tracked zone and settle its reservation (the budget guard), count it for /metrics, queue it for the rollups and add
-- it to the queue's summary (rollup_pending, rollup_pending_users). A booking inserts one row per statement, so one
-- row trigger with a plain write per table costs the least: no transition tables, no statement trigger that joins the
-- ledger again to find what the statement inserted.
--
-- The tables are written in this order (two bookings of one user take the rows they share in the same order):
-- budget_months, budget_reservations, metric_ledger_totals, metric_histograms, rollup_queue, rollup_pending,
-- rollup_pending_users. A queue row is only added here and only deleted by the fold, whose delete trigger
-- (rollup_pending_change) takes the entry out of the summary again, so the summary holds exactly the queued entries.

drop trigger usage_ledger_budget_months on usage_ledger;
drop trigger usage_ledger_metric_counts on usage_ledger;
drop trigger usage_ledger_queue_rollups on usage_ledger;
drop trigger rollup_queue_pending_in on rollup_queue;
drop function budget_book_ledger_entry();
drop function metric_count_ledger_entry();
drop function queue_entries_for_rollups();

create function book_ledger_entry() returns trigger language plpgsql as $$
declare
  v_shard smallint := (pg_backend_pid() % 8)::smallint;
begin
  -- the month-to-date summary, in every zone a budget uses (budget_track_zone adds a zone under the exclusive lock)
  perform pg_advisory_xact_lock_shared(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_months as m (user_id, time_zone, month, spent_usd)
  select new.user_id, z.time_zone, budget_month_of(new.created_at, z.time_zone), new.cost_usd
    from budget_zones z order by z.time_zone
  on conflict (user_id, time_zone, month) do update set spent_usd = m.spent_usd + excluded.spent_usd;
  update budget_reservations set status = 'settled', closed_at = now(), settled_entry_id = new.id
   where idempotency_key = new.idempotency_key and status = 'open';
  -- /metrics: the cost into its model, kind and user's charges or credits, the booking lag into its histogram
  insert into metric_ledger_totals as t (model, kind, user_id, charges_usd, credits_usd)
  values (new.model, new.kind, new.user_id, greatest(new.cost_usd, 0), greatest(-new.cost_usd, 0))
  on conflict (model, kind, user_id) do update
    set charges_usd = t.charges_usd + excluded.charges_usd, credits_usd = t.credits_usd + excluded.credits_usd;
  perform metric_observe('booking_lag', metric_booking_lag_ms(new.usage_received_at, new.booked_at), 1);
  -- the rollup queue, then its summary in the shard the queue row records (the fold takes it out of the same row); the
  -- queue row first, so that rollups_reset_pending's share lock on the queue waits for this transaction
  insert into rollup_queue (entry_id, shard) values (new.id, v_shard);
  insert into rollup_pending as p (slot, shard, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
                                   completion_tokens, reasoning_tokens, cost_usd)
  values (rollup_pending_slot(new.created_at), v_shard, new.model, new.kind, new.entry_type, new.status, 1, new.prompt_tokens,
          new.cached_prompt_tokens, new.completion_tokens, new.reasoning_tokens, new.cost_usd)
  on conflict on constraint rollup_pending_bucket do update
    set entries = p.entries + 1, prompt_tokens = p.prompt_tokens + excluded.prompt_tokens,
        cached_prompt_tokens = p.cached_prompt_tokens + excluded.cached_prompt_tokens,
        completion_tokens = p.completion_tokens + excluded.completion_tokens,
        reasoning_tokens = p.reasoning_tokens + excluded.reasoning_tokens, cost_usd = p.cost_usd + excluded.cost_usd;
  if new.entry_type = 'usage' then
    insert into rollup_pending_users as u (user_id, at, usage_entries)
    values (new.user_id, rollup_pending_user_at(new.created_at), 1)
    on conflict (user_id, at) do update set usage_entries = u.usage_entries + 1;
  end if;
  return null;
end
$$;

create trigger usage_ledger_booked after insert on usage_ledger for each row execute function book_ledger_entry();

-- Before the row is written, in one call too: who wrote it (session_user, also inside a SECURITY DEFINER function, so
-- no caller can name someone else) and when (now, within the skew, unless the table's owner writes it).
drop trigger usage_ledger_created_by on usage_ledger;
drop trigger usage_ledger_dated_now on usage_ledger;
drop function refuse_misdated_entry();

create function stamp_ledger_entry() returns trigger language plpgsql as $$
begin
  new.created_by := session_user;
  if new.created_at not between now() - backdating_skew() and now() + backdating_skew() and not written_by_table_owner(tg_relid) then
    raise exception 'a ledger entry dated % is refused: entries are dated now (within %), not by the caller', new.created_at, backdating_skew()
      using errcode = 'check_violation';
  end if;
  return new;
end
$$;

create trigger usage_ledger_stamped before insert on usage_ledger for each row execute function stamp_ledger_entry();

-- The booking prices with the version in force (price_version_at), its rates (price_rates) and call_cost, called
-- directly, not through the plpgsql wrappers that raise the errors (price_in_force, usage_cost and its price_class
-- checks): call_cost gives a cost exactly when the version has every rate the call needs, and when it gives none,
-- usage_cost is asked only to say why (no price in force, or the rate that is missing), as worst_case_cost does.
create or replace function book_usage(
  p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text,
  p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint,
  p_cache_write_5m bigint, p_cache_write_1h bigint, p_service_tier text,
  p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamptz,
  p_usage_received_at timestamptz
) returns usage_ledger language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
  v_at timestamptz := coalesce(p_occurred_at, now());
  v_price model_prices;
  v_rates model_price_rates;
  v_cost numeric;
  v_row usage_ledger;
begin
  select * into v_price from price_version_at(p_model, v_at);
  v_rates := price_rates(v_price, price_tier(p_service_tier), is_long_context(v_price, p_prompt));
  v_cost := call_cost(p_kind, p_prompt, p_cached, p_cache_write_5m, p_cache_write_1h, p_completion, v_rates);
  if v_cost is null then
    perform usage_cost(p_kind, p_prompt, p_cached, p_cache_write_5m, p_cache_write_1h, p_completion, p_service_tier,
                       price_in_force(p_model, v_at), v_at);
  end if;
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, provider_model, kind,
                            status, attempt, prompt_tokens, cached_prompt_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
                            completion_tokens, reasoning_tokens, service_tier, cost_usd, price_version, provider_request_id,
                            worker_id, input_truncated_from, created_at, usage_received_at, booked_at)
  values (p_key, 'usage', p_user_id, p_run_id, p_workflow_id, p_task_id, p_model, p_provider_model, p_kind,
          p_status, p_attempt, p_prompt, p_cached, p_cache_write_5m, p_cache_write_1h, p_completion, p_reasoning, p_service_tier,
          v_cost, v_price.version, p_provider_request_id, p_worker_id, p_input_truncated_from, v_at, p_usage_received_at, clock_timestamp())
  on conflict (idempotency_key) do nothing
  returning * into v_row;
  if found then
    return v_row;
  end if;
  select * into v_row from usage_ledger where idempotency_key = p_key;
  return v_row;
end
$$;

-- A version's rates for a tier and context, in plpgsql: its lookup of the tier's row is a subquery, which keeps an SQL
-- function from being inlined, and an SQL function that is not inlined is planned again in every statement that calls
-- it (every booking). plpgsql plans the lookup once per session; the standard rates below the
-- threshold are the version's own row and need none.
create or replace function price_rates(p model_prices, p_tier text, p_long boolean) returns model_price_rates
language plpgsql stable as $$
begin
  if p_tier = 'standard' and not p_long then
    return row(p.id, 'standard', false, p.input_per_million, p.cached_input_per_million, p.cache_write_5m_per_million,
               p.cache_write_1h_per_million, p.output_per_million, p.embedding_input_per_million)::model_price_rates;
  end if;
  return (select r from model_price_rates r where r.price_id = p.id and r.service_tier = p_tier and r.long_context = p_long);
end
$$;
