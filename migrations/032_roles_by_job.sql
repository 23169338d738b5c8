-- One role per job. Workers connect as cronledger_worker, which reads and EXECUTEs the functions a run (and the
-- budget sweep, the monthly report and the rollup refresh) needs: each function below that writes is SECURITY DEFINER,
-- owned by the owner, with its search_path fixed, and the worker has no INSERT, UPDATE or DELETE on any table. The
-- operator's CLI connects as cronledger_operator: credits, adjustments, prices, budgets, downgrades, applied task
-- versions and rate limits, each through a function; the created_by triggers (027) stamp session_user, which a SECURITY DEFINER
-- function leaves as the caller's login role. cronledger_app held both jobs and now holds nothing: it stays a role
-- without login only because 001_baseline.sql names it (src/db/roles.ts). Both new roles are created before migrating,
-- by `cronledger dev up`, `cronledger db roles` or a DBA (docs/security.md, "Roles").
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'cronledger_worker')
     or not exists (select 1 from pg_roles where rolname = 'cronledger_operator') then
    raise exception 'roles cronledger_worker and cronledger_operator must exist before migration 032'
      using hint = 'create them first, as a superuser or CREATEROLE user: `cronledger db roles` (see docs/security.md, "Roles")';
  end if;
end
$$;

-- ===================================================================================================================
-- What a run does: the booking path's functions run as their owner from now on
-- ===================================================================================================================

alter function book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint, bigint, bigint,
  text, text, text, bigint, timestamptz, timestamptz) security definer set search_path = pg_catalog, public, pg_temp;
-- The rate limiter's doors (030) were SECURITY DEFINER already; pg_temp last, so no temp table of the caller's comes first.
alter function rate_limit_acquire(text, bigint, bigint) set search_path = pg_catalog, public, pg_temp;
alter function rate_limit_hold(text, bigint, boolean) set search_path = pg_catalog, public, pg_temp;
alter function reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz) security definer set search_path = pg_catalog, public, pg_temp;
alter function claim_run(text, text, text, text, text, timestamptz, text, boolean, text) security definer set search_path = pg_catalog, public, pg_temp;
alter function claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz)
  security definer set search_path = pg_catalog, public, pg_temp;

-- Closes one execution's claim and its attempt row: only a running claim this execution still owns changes, so a
-- retried completion is harmless and a superseded execution never overwrites the new generation's outcome.
create function complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb)
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  update runs set status = p_status, error = p_error, finished_at = now(), tier = coalesce(p_tier, tier),
         budget = coalesce(p_budget, budget), duration_ms = (extract(epoch from (now() - claimed_at)) * 1000)::bigint
   where idempotency_key = p_key and temporal_run_id = p_run_id and status = 'running';
  update run_attempts set status = p_status, error = p_error, finished_at = now() where temporal_run_id = p_run_id and status = 'running';
$$;

-- A completed run's memory (its reply and the embedding given, else the one staged under the call's key; neither is a
-- not-null violation), once per execution, then its completion: one transaction.
create function store_memory_and_complete_run(
  p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb,
  p_workflow_id text, p_memory_run_id text, p_task_id text, p_user_id text, p_content text, p_embedding jsonb,
  p_embedding_key text, p_input_truncated_from bigint
) returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into memories (run_workflow_id, temporal_run_id, task_id, user_id, content, embedding, input_truncated_from)
  values (p_workflow_id, p_memory_run_id, p_task_id, p_user_id, p_content,
          coalesce(p_embedding, (select embedding from call_embeddings where call_key = p_embedding_key)), p_input_truncated_from)
  on conflict do nothing;
  select complete_run(p_key, p_run_id, p_status, p_error, p_tier, p_budget);
$$;

-- A run that named no applied version, under a key of its own (it takes no slot's claim); its user is not believed.
create function record_rejected_run(p_task_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamptz,
  p_worker_id text, p_manual boolean, p_reason text)
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, claimed_by, manual,
                    status, finished_at, error)
  values ('rejected:' || p_run_id, p_task_id, '', p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual,
          'rejected', now(), p_reason)
  on conflict (idempotency_key) do nothing;
$$;

-- An embedding call's vector under its call's key, once, until the run's completion copies it into the memory.
create function stage_embedding(p_call_key text, p_embedding jsonb)
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into call_embeddings (call_key, embedding) values (p_call_key, p_embedding) on conflict (call_key) do nothing;
$$;

-- Usage the ledger refused, under the key its entry would have had: the row, new or already there.
create function record_usage_exception(
  p_key text, p_user_id text, p_workflow_id text, p_run_id text, p_task_id text, p_model text, p_provider_model text,
  p_kind text, p_status text, p_attempt integer, p_raw_usage jsonb, p_reason text, p_provider_request_id text, p_worker_id text
) returns setof usage_exceptions language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
  return query
    insert into usage_exceptions (idempotency_key, user_id, workflow_id, run_id, task_id, model, provider_model, kind, status,
                                  attempt, raw_usage, reason, provider_request_id, worker_id)
    values (p_key, p_user_id, p_workflow_id, p_run_id, p_task_id, p_model, p_provider_model, p_kind, p_status, p_attempt,
            p_raw_usage, p_reason, p_provider_request_id, p_worker_id)
    on conflict (idempotency_key) do nothing
    returning *;
  if not found then
    return query select * from usage_exceptions where idempotency_key = p_key;
  end if;
end
$$;

-- A run's open reservations released (its cleanup on failure or cancellation); how many.
create function release_reservations(p_run_id text)
returns integer language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  with closed as (
    update budget_reservations set status = 'released', closed_at = now() where run_id = p_run_id and status = 'open' returning 1
  )
  select count(*)::integer from closed;
$$;

-- The sweeper: reservations whose expiry has passed are closed; how many.
create function expire_reservations()
returns integer language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  with closed as (
    update budget_reservations set status = 'expired', closed_at = now() where status = 'open' and expires_at <= now() returning 1
  )
  select count(*)::integer from closed;
$$;

-- A threshold event's delivery attempt counted; the first success marks it delivered.
create function record_budget_event_delivery(p_event_id text, p_ok boolean, p_error text)
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  update budget_events set attempts = attempts + 1, last_attempt_at = now(),
         delivered_at = case when p_ok then coalesce(delivered_at, now()) else delivered_at end,
         last_error = case when p_ok then last_error else p_error end
   where event_id = p_event_id;
$$;

-- Which monthly report went where.
create function record_report_delivery(p_month text, p_time_zone text, p_complete boolean, p_report_sha256 text, p_target text,
  p_workflow_id text, p_attempt integer, p_response_status integer)
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into report_deliveries (month, time_zone, complete, report_sha256, target, workflow_id, attempt, response_status)
  values (p_month, p_time_zone, p_complete, p_report_sha256, p_target, p_workflow_id, p_attempt, p_response_status);
$$;

-- ===================================================================================================================
-- The rollups' write side (src/reports/rollups-write.ts takes the lock, the transaction and the batches; these do
-- the writing). Temp tables are the function's own, named through pg_temp, and dropped before it returns.
-- ===================================================================================================================

-- `a.k = b.k and ...` over a bucket's columns; task_id, model and kind may be null.
create function rollup_same_bucket(p_bucket text[], a text, b text) returns text language sql immutable
set search_path = pg_catalog, public, pg_temp as $$
  select string_agg(case when k in ('task_id', 'model', 'kind') then format('%s.%I is not distinct from %s.%I', a, k, b, k)
                         else format('%s.%I = %s.%I', a, k, b, k) end, ' and ')
    from unnest(p_bucket) k
$$;

-- The rollups coarser than usage_rollups: their bucket columns.
create function rollup_coarser_bucket(p_table text) returns text[] language sql immutable set search_path = pg_catalog, public, pg_temp as $$
  select case p_table
           when 'usage_month_rollups' then array['zone', 'month', 'user_id', 'model', 'kind', 'entry_type', 'status']
           when 'usage_day_totals' then array['zone', 'day', 'model', 'kind', 'entry_type', 'status']
           when 'usage_day_users' then array['zone', 'day', 'user_id', 'task_id', 'entry_type']
         end
$$;

-- The SELECT that sums rows of usage_rollups (or a delta shaped like it) into a coarser rollup's buckets.
create function rollup_coarser_select(p_table text, p_source text, p_where text) returns text language sql immutable
set search_path = pg_catalog, public, pg_temp as $$
  select format(
    'select %s, sum(entries)::bigint as entries, sum(prompt_tokens)::bigint as prompt_tokens, '
      'sum(cached_prompt_tokens)::bigint as cached_prompt_tokens, sum(completion_tokens)::bigint as completion_tokens, '
      'sum(reasoning_tokens)::bigint as reasoning_tokens, sum(cost_usd) as cost_usd, '
      'min(first_entry_id) as first_entry_id, max(last_entry_id) as last_entry_id from %s where %s group by %s',
    (select string_agg(case when k = 'month' then 'to_char(day, ''YYYY-MM'') as month' else quote_ident(k) end, ', ' order by n)
       from unnest(rollup_coarser_bucket(p_table)) with ordinality b(k, n)),
    p_source, p_where,
    (select string_agg(n::text, ', ') from generate_series(1, cardinality(rollup_coarser_bucket(p_table))) n))
$$;

-- Adds the rows of the temp table p_delta to their buckets in p_table: a bucket that exists already is deleted and
-- inserted again with the sums added; the buckets it held before stay in the temp table pg_temp.<p_table>_old.
create function rollup_add_to_buckets(p_table text, p_bucket text[], p_delta text) returns void language plpgsql
set search_path = pg_catalog, public, pg_temp as $$
declare
  v_sums text[] := array['entries', 'prompt_tokens', 'cached_prompt_tokens', 'completion_tokens', 'reasoning_tokens', 'cost_usd'];
begin
  execute format('create temp table %I on commit drop as
                    with gone as (delete from public.%I r using pg_temp.%I t where %s returning r.*) select * from gone',
                 p_table || '_old', p_table, p_delta, rollup_same_bucket(p_bucket, 'r', 't'));
  execute format('insert into public.%I (%s, %s, first_entry_id, last_entry_id)
                  select %s, %s, least(t.first_entry_id, o.first_entry_id), greatest(t.last_entry_id, o.last_entry_id)
                    from pg_temp.%I t left join pg_temp.%I o on %s',
                 p_table, array_to_string(p_bucket, ', '), array_to_string(v_sums, ', '),
                 (select string_agg('t.' || quote_ident(k), ', ') from unnest(p_bucket) k),
                 (select string_agg(format('t.%1$I + coalesce(o.%1$I, 0)', k), ', ') from unnest(v_sums) k),
                 p_delta, p_table || '_old', rollup_same_bucket(p_bucket, 'o', 't'));
end
$$;

-- Folds queued entries (at most p_limit, or all when null) and run changes into every tracked zone and deletes their
-- queue rows, in the caller's transaction (src/reports/rollups-write.ts foldQueues says how). Returns
-- {entries, runChanges, zones: [{zone, buckets, reopened}]}, every tracked zone listed.
create function rollups_fold_queues(p_limit integer) returns jsonb language plpgsql security definer
set search_path = pg_catalog, public, pg_temp as $$
declare
  v_entries integer;
  v_run_changes integer;
  v_zones jsonb;
  v_table text;
begin
  drop table if exists pg_temp.picked, pg_temp.picked_runs, pg_temp.delta, pg_temp.touched_runs, pg_temp.usage_rollups_old,
    pg_temp.usage_month_rollups_delta, pg_temp.usage_month_rollups_old, pg_temp.usage_day_totals_delta, pg_temp.usage_day_totals_old,
    pg_temp.usage_day_users_delta, pg_temp.usage_day_users_old;
  create temp table picked on commit drop as
    with taken as (
      delete from rollup_queue where entry_id in (select q.entry_id from rollup_queue q order by q.entry_id limit p_limit) returning entry_id)
    select entry_id from taken;
  get diagnostics v_entries = row_count;
  create temp table picked_runs on commit drop as
    with taken as (
      delete from run_rollup_queue where id in (select q.id from run_rollup_queue q order by q.id limit p_limit) returning claimed_at, user_id, task_id)
    select distinct claimed_at, user_id, task_id from taken;
  get diagnostics v_run_changes = row_count;
  v_zones := (select coalesce(jsonb_agg(jsonb_build_object('zone', z.zone, 'buckets', 0, 'reopened', 0) order by z.zone), '[]')
                from rollup_zones z);
  if v_entries > 0 then
    create temp table delta on commit drop as
      select z.zone, (l.created_at at time zone z.zone)::date as day, l.user_id, l.task_id, l.model, l.kind, l.entry_type, l.status,
             count(*) as entries, sum(l.prompt_tokens)::bigint as prompt_tokens, sum(l.cached_prompt_tokens)::bigint as cached_prompt_tokens,
             sum(l.completion_tokens)::bigint as completion_tokens, sum(l.reasoning_tokens)::bigint as reasoning_tokens,
             sum(l.cost_usd) as cost_usd, min(l.id) as first_entry_id, max(l.id) as last_entry_id
        from pg_temp.picked p join usage_ledger l on l.id = p.entry_id cross join rollup_zones z
       group by 1, 2, 3, 4, 5, 6, 7, 8;
    perform rollup_add_to_buckets('usage_rollups', array['zone', 'day', 'user_id', 'task_id', 'model', 'kind', 'entry_type', 'status'], 'delta');
    -- The coarser rollups take the same additions, summed once more, in the same transaction: never apart.
    foreach v_table in array array['usage_month_rollups', 'usage_day_totals', 'usage_day_users'] loop
      execute format('create temp table %I on commit drop as %s', v_table || '_delta', rollup_coarser_select(v_table, 'pg_temp.delta', 'true'));
      perform rollup_add_to_buckets(v_table, rollup_coarser_bucket(v_table), v_table || '_delta');
    end loop;
    v_zones := (select coalesce(jsonb_agg(jsonb_build_object('zone', z.zone, 'buckets', coalesce(d.buckets, 0), 'reopened', coalesce(d.reopened, 0))
                                          order by z.zone), '[]')
                  from rollup_zones z
                  left join (select t.zone, count(*) as buckets, (select count(*) from pg_temp.usage_rollups_old o where o.zone = t.zone) as reopened
                               from pg_temp.delta t group by t.zone) d on d.zone = z.zone);
  end if;
  if v_run_changes > 0 then
    create temp table touched_runs on commit drop as
      select distinct z.zone, (p.claimed_at at time zone z.zone)::date as day, p.user_id, p.task_id
        from pg_temp.picked_runs p cross join rollup_zones z;
    delete from run_rollups r using pg_temp.touched_runs t
     where r.zone = t.zone and r.day = t.day and r.user_id = t.user_id and r.task_id = t.task_id;
    -- the claimed runs of each touched bucket, found through the runs_user_task_claimed index (src/reports/rollups-write.ts dayRange)
    insert into run_rollups (zone, day, user_id, task_id, status, tier, runs)
    select t.zone, t.day, t.user_id, t.task_id, r.status, r.tier, count(*)
      from pg_temp.touched_runs t join runs r
        on r.user_id = t.user_id and r.task_id = t.task_id
       and r.claimed_at >= ((t.day)::timestamp at time zone t.zone) - interval '3 hours'
       and r.claimed_at < (((t.day) + 1)::timestamp at time zone t.zone) + interval '3 hours'
       and (r.claimed_at at time zone t.zone)::date between (t.day) and (t.day)
     group by t.zone, t.day, t.user_id, t.task_id, r.status, r.tier;
  end if;
  update rollup_zones
     set refreshed_at = now(),
         last_entry_id = greatest(last_entry_id, coalesce((select max(entry_id) from pg_temp.picked), 0)),
         entries_folded = entries_folded + v_entries;
  return jsonb_build_object('entries', v_entries, 'runChanges', v_run_changes, 'zones', v_zones);
end
$$;

-- Starts tracking a zone: from now on every refresh folds the queue into it too. True when it was new.
create function rollups_register_zone(p_zone text) returns boolean language plpgsql security definer
set search_path = pg_catalog, public, pg_temp as $$
begin
  insert into rollup_zones (zone) values (p_zone) on conflict do nothing;
  return found;
end
$$;

-- A month's rebuild, step by step in the caller's (repeatable read) transaction: its daily ledger and run rollups
-- cleared, then each day recomputed from the raw ledger (one row per bucket: its entries and last id), then the coarser
-- rollups, the month's build time and the zone's watermark (forward only).
create function rollups_clear_month(p_zone text, p_month text) returns void language sql security definer
set search_path = pg_catalog, public, pg_temp as $$
  delete from usage_rollups
   where zone = p_zone and day between to_date(p_month || '-01', 'YYYY-MM-DD') and ((to_date(p_month || '-01', 'YYYY-MM-DD') + interval '1 month')::date - 1);
  delete from run_rollups
   where zone = p_zone and day between to_date(p_month || '-01', 'YYYY-MM-DD') and ((to_date(p_month || '-01', 'YYYY-MM-DD') + interval '1 month')::date - 1);
$$;

create function rollups_rebuild_day(p_zone text, p_day date) returns table (entries bigint, last_entry_id bigint) language plpgsql
security definer set search_path = pg_catalog, public, pg_temp as $$
begin
  return query
    with inserted as (
      insert into usage_rollups (zone, day, user_id, task_id, model, kind, entry_type, status, entries, prompt_tokens,
                                 cached_prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id)
      select p_zone, (l.created_at at time zone p_zone)::date, l.user_id, l.task_id, l.model, l.kind, l.entry_type, l.status,
             count(*), sum(l.prompt_tokens)::bigint, sum(l.cached_prompt_tokens)::bigint, sum(l.completion_tokens)::bigint,
             sum(l.reasoning_tokens)::bigint, sum(l.cost_usd), min(l.id), max(l.id)
        from usage_ledger l
       where l.created_at >= (p_day::timestamp at time zone p_zone) - interval '3 hours'
         and l.created_at < ((p_day + 1)::timestamp at time zone p_zone) + interval '3 hours'
         and (l.created_at at time zone p_zone)::date between p_day and p_day
       group by 2, 3, 4, 5, 6, 7, 8
      returning usage_rollups.entries, usage_rollups.last_entry_id
    )
    select i.entries, i.last_entry_id from inserted i;
  insert into run_rollups (zone, day, user_id, task_id, status, tier, runs)
  select p_zone, (r.claimed_at at time zone p_zone)::date, r.user_id, r.task_id, r.status, r.tier, count(*)
    from runs r
   where r.claimed_at >= (p_day::timestamp at time zone p_zone) - interval '3 hours'
     and r.claimed_at < ((p_day + 1)::timestamp at time zone p_zone) + interval '3 hours'
     and (r.claimed_at at time zone p_zone)::date between p_day and p_day
   group by 2, 3, 4, 5, 6;
end
$$;

create function rollups_finish_month(p_zone text, p_month text, p_last_entry_id bigint) returns void language plpgsql security definer
set search_path = pg_catalog, public, pg_temp as $$
declare
  v_month_days text := format('zone = %L and day between to_date(%L, ''YYYY-MM-DD'') and ((to_date(%L, ''YYYY-MM-DD'') + interval ''1 month'')::date - 1)',
                              p_zone, p_month || '-01', p_month || '-01');
  v_table text;
begin
  foreach v_table in array array['usage_month_rollups', 'usage_day_totals', 'usage_day_users'] loop
    execute format('delete from public.%I where %s', v_table,
                   case when v_table = 'usage_month_rollups' then format('zone = %L and month = %L', p_zone, p_month) else v_month_days end);
    execute format('insert into public.%I (%s, entries, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id) %s',
                   v_table, array_to_string(rollup_coarser_bucket(v_table), ', '), rollup_coarser_select(v_table, 'public.usage_rollups', v_month_days));
  end loop;
  insert into rollup_months (zone, month) values (p_zone, p_month) on conflict (zone, month) do update set built_at = now();
  -- rows rebuilt from the raw ledger are as current as a refresh would make them
  update rollup_zones set refreshed_at = now(), last_entry_id = greatest(last_entry_id, p_last_entry_id) where zone = p_zone;
end
$$;

-- ===================================================================================================================
-- What the operator does: each write through a function; created_by is stamped by the 027 triggers (session_user)
-- ===================================================================================================================

-- A credit: a negative entry with a reason, optionally pointing at the entry it makes good. Nothing when the key is there.
create function credit_user(p_key text, p_original_entry_id bigint, p_reason text, p_user_id text, p_cost_usd numeric)
returns setof usage_ledger language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, cost_usd)
  values (p_key, 'credit', p_original_entry_id, p_reason, p_user_id, p_cost_usd)
  on conflict (idempotency_key) do nothing
  returning *;
$$;

-- An adjustment of an entry: a signed amount that points at it and inherits who, which run and which model.
create function adjust_entry(p_key text, p_entry_id bigint, p_reason text, p_amount numeric)
returns setof usage_ledger language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, run_id, task_id, model, kind, cost_usd)
  select p_key, 'adjustment', o.id, p_reason, o.user_id, o.run_id, o.task_id, o.model, o.kind, p_amount
    from usage_ledger o where o.id = p_entry_id
  on conflict (idempotency_key) do nothing
  returning *;
$$;

create function add_budget(p_user_id text, p_monthly_limit_usd numeric, p_time_zone text, p_effective_from timestamptz, p_source text)
returns setof budgets language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into budgets (user_id, monthly_limit_usd, time_zone, effective_from, source)
  values (p_user_id, p_monthly_limit_usd, p_time_zone, p_effective_from, p_source)
  returning *;
$$;

create function add_downgrade(p_model text, p_cheap_model text, p_effective_from timestamptz, p_source text)
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into model_downgrades (model, cheap_model, effective_from, source) values (p_model, p_cheap_model, p_effective_from, p_source);
$$;

-- Applied task versions ([{task_id, fingerprint, definition}]); a version applied before is left as it was.
create function record_task_versions(p_versions jsonb)
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  insert into task_versions (task_id, fingerprint, definition)
  select v.task_id, v.fingerprint, v.definition from jsonb_to_recordset(p_versions) as v(task_id text, fingerprint text, definition jsonb)
  on conflict (task_id, fingerprint) do nothing;
$$;

-- The rate limits of the last `limits apply`: exactly these, nothing else; returns the models that had one and have none now.
create function apply_rate_limits(p_models text[], p_requests_per_minute integer[], p_tokens_per_minute bigint[])
returns setof text language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  with removed as (delete from rate_limits where model <> all(p_models) returning model),
  applied as (
    insert into rate_limits (model, requests_per_minute, tokens_per_minute)
    select * from unnest(p_models, p_requests_per_minute, p_tokens_per_minute)
    on conflict (model) do update set requests_per_minute = excluded.requests_per_minute,
      tokens_per_minute = excluded.tokens_per_minute, applied_at = now(), applied_by = session_user
  )
  select model from removed;
$$;

-- The task IDs of the last `tasks apply`: exactly these, nothing else, in one transaction.
create function record_applied_tasks(p_task_ids text[])
returns void language sql security definer set search_path = pg_catalog, public, pg_temp as $$
  delete from applied_tasks where not (task_id = any(p_task_ids));
  insert into applied_tasks (task_id) select unnest(p_task_ids) on conflict (task_id) do update set applied_at = now();
$$;

-- ===================================================================================================================
-- Grants
-- ===================================================================================================================

-- The functions the application role was granted (pricing, the booking path's helpers) the worker may run too.
do $$
declare
  f regprocedure;
begin
  for f in select p.oid::regprocedure from pg_proc p join pg_namespace n on n.oid = p.pronamespace
            where n.nspname = 'public' and p.prorettype <> 'trigger'::regtype
              and exists (select 1 from aclexplode(p.proacl) a where a.grantee = 'cronledger_app'::regrole and a.privilege_type = 'EXECUTE')
  loop
    execute format('grant execute on function %s to cronledger_worker', f);
  end loop;
end
$$;

-- cronledger_app: nothing.
revoke all on all tables in schema public from cronledger_app;
revoke all on all sequences in schema public from cronledger_app;
revoke all on all functions in schema public from cronledger_app;
revoke all on schema public from cronledger_app;
alter default privileges in schema public revoke all on tables from cronledger_app;
alter default privileges in schema public revoke all on sequences from cronledger_app;

-- Every function this migration adds, and the booking path's, runs only for the roles granted it below. The rollup
-- helpers are called by rollups_fold_queues and rollups_finish_month only.
revoke execute on function complete_run(text, text, text, text, text, jsonb),
  store_memory_and_complete_run(text, text, text, text, text, jsonb, text, text, text, text, text, jsonb, text, bigint),
  record_rejected_run(text, text, text, timestamptz, text, boolean, text), stage_embedding(text, jsonb),
  record_usage_exception(text, text, text, text, text, text, text, text, text, integer, jsonb, text, text, text),
  release_reservations(text), expire_reservations(), record_budget_event_delivery(text, boolean, text),
  record_report_delivery(text, text, boolean, text, text, text, integer, integer),
  rollup_same_bucket(text[], text, text), rollup_coarser_bucket(text), rollup_coarser_select(text, text, text),
  rollup_add_to_buckets(text, text[], text), rollups_fold_queues(integer), rollups_register_zone(text),
  rollups_clear_month(text, text), rollups_rebuild_day(text, date), rollups_finish_month(text, text, bigint),
  credit_user(text, bigint, text, text, numeric),
  adjust_entry(text, bigint, text, numeric), add_budget(text, numeric, text, timestamptz, text),
  add_downgrade(text, text, timestamptz, text), record_task_versions(jsonb), record_applied_tasks(text[]),
  apply_rate_limits(text[], integer[], bigint[]) from public;

-- The worker reads (reports, budgets, the applied task versions a run loads) and writes nothing itself.
grant usage on schema public to cronledger_worker;
grant select on all tables in schema public to cronledger_worker;
alter default privileges in schema public grant select on tables to cronledger_worker;
grant execute on function price_in_force(text, timestamptz), worst_case_cost(jsonb, text, timestamptz),
  budget_month_figures(text, text, date, timestamptz),
  book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint, bigint, bigint, text, text, text,
    bigint, timestamptz, timestamptz),
  rate_limit_acquire(text, bigint, bigint), rate_limit_hold(text, bigint, boolean),
  reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz),
  claim_run(text, text, text, text, text, timestamptz, text, boolean, text),
  claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz),
  complete_run(text, text, text, text, text, jsonb),
  store_memory_and_complete_run(text, text, text, text, text, jsonb, text, text, text, text, text, jsonb, text, bigint),
  record_rejected_run(text, text, text, timestamptz, text, boolean, text), stage_embedding(text, jsonb),
  record_usage_exception(text, text, text, text, text, text, text, text, text, integer, jsonb, text, text, text),
  release_reservations(text), expire_reservations(), record_budget_event_delivery(text, boolean, text),
  record_report_delivery(text, text, boolean, text, text, text, integer, integer),
  rollups_fold_queues(integer), rollups_register_zone(text), rollups_clear_month(text, text), rollups_rebuild_day(text, date),
  rollups_finish_month(text, text, bigint), record_rollup_verification(integer, bigint, bigint, jsonb) to cronledger_worker;

-- The operator reads what its commands compare against (prices, budgets, downgrades, the ledger entry it corrects,
-- applied versions) and writes through its functions.
grant usage on schema public to cronledger_operator;
grant select on usage_ledger, model_prices, model_price_rates, budgets, model_downgrades, task_versions, applied_tasks, rate_limits
  to cronledger_operator;
-- Price versions and their rates are appended directly (src/ledger/prices.ts applyPrices): the created_by trigger stamps
-- the operator, the checks refuse negative and back-dated prices, and the table stays append-only.
grant insert on model_prices, model_price_rates to cronledger_operator;
grant usage on sequence model_prices_id_seq to cronledger_operator;
grant execute on function price_in_force(text, timestamptz), credit_user(text, bigint, text, text, numeric),
  adjust_entry(text, bigint, text, numeric), add_budget(text, numeric, text, timestamptz, text),
  add_downgrade(text, text, timestamptz, text), record_task_versions(jsonb), record_applied_tasks(text[]),
  apply_rate_limits(text[], integer[], bigint[]) to cronledger_operator;
