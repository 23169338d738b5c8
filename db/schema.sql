-- db/schema.sql: written by `npm run db:schema` from a freshly migrated database; do not edit.
--
-- PostgreSQL database dump
--

--
-- Name: metric_histogram_name; Type: DOMAIN; Schema: public; Owner: -
--

CREATE DOMAIN public.metric_histogram_name AS text
	CONSTRAINT metric_histogram_name_check CHECK ((VALUE = ANY (ARRAY['run_duration'::text, 'booking_lag'::text])));

--
-- Name: usd_not_negative; Type: DOMAIN; Schema: public; Owner: -
--

CREATE DOMAIN public.usd_not_negative AS numeric(38,18)
	CONSTRAINT usd_not_negative_check CHECK ((VALUE >= (0)::numeric));

--
-- Name: budgets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budgets (
    id bigint NOT NULL,
    user_id text,
    monthly_limit_usd numeric(38,18) NOT NULL,
    time_zone text DEFAULT 'UTC'::text NOT NULL,
    effective_from timestamp with time zone DEFAULT now() NOT NULL,
    source text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text,
    CONSTRAINT budgets_monthly_limit_usd_check CHECK ((monthly_limit_usd >= (0)::numeric))
);

--
-- Name: add_budget(text, numeric, text, timestamp with time zone, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.add_budget(p_user_id text, p_monthly_limit_usd numeric, p_time_zone text, p_effective_from timestamp with time zone, p_source text) RETURNS SETOF public.budgets
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  insert into budgets (user_id, monthly_limit_usd, time_zone, effective_from, source)
  values (p_user_id, p_monthly_limit_usd, p_time_zone, p_effective_from, p_source)
  returning *;
$$;

--
-- Name: add_downgrade(text, text, timestamp with time zone, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.add_downgrade(p_model text, p_cheap_model text, p_effective_from timestamp with time zone, p_source text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  insert into model_downgrades (model, cheap_model, effective_from, source) values (p_model, p_cheap_model, p_effective_from, p_source);
$$;

--
-- Name: add_price(text, text, timestamp with time zone, timestamp with time zone, bigint, text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.add_price(p_model text, p_version text, p_effective_from timestamp with time zone, p_effective_to timestamp with time zone, p_long_context_above bigint, p_source text, p_rates jsonb) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_sets jsonb[] := array(select e from jsonb_array_elements(p_rates) e);
  v_base jsonb;
  v_bad text;
  v_id bigint;
begin
  if cardinality(v_sets) = 0 or exists (select from unnest(v_sets) e where e ->> 'tier' is null or e ->> 'long' is null)
     or (select count(*) from unnest(v_sets) e where e ->> 'tier' = 'standard' and not (e ->> 'long')::boolean) > 1 then
    raise exception 'price version % of % needs its rate sets, each with its tier and context, at most one standard below the threshold',
      p_version, p_model using errcode = 'check_violation';
  end if;
  -- A rate is stored with 12 fractional digits: one with more would be rounded, and the ledger priced at another rate.
  select format('%s %s', e ->> 'tier', c.key) into v_bad
    from unnest(v_sets) e cross join lateral jsonb_each_text(e - 'tier' - 'long') c
   where c.value is not null and c.value::numeric <> round(c.value::numeric, 12)
   limit 1;
  if v_bad is not null then
    raise exception 'price version % of %: the % rate has more than 12 fractional digits', p_version, p_model, v_bad
      using errcode = 'check_violation';
  end if;
  v_base := (select e from unnest(v_sets) e where e ->> 'tier' = 'standard' and not (e ->> 'long')::boolean);
  insert into model_prices (model, version, effective_from, effective_to, long_context_above, input_per_million,
                            cached_input_per_million, cache_write_5m_per_million, cache_write_1h_per_million,
                            output_per_million, embedding_input_per_million, source)
  values (p_model, p_version, p_effective_from, p_effective_to, p_long_context_above, (v_base ->> 'input')::numeric,
          (v_base ->> 'cachedInput')::numeric, (v_base ->> 'cacheWrite5m')::numeric, (v_base ->> 'cacheWrite1h')::numeric,
          (v_base ->> 'output')::numeric, (v_base ->> 'embeddingInput')::numeric, p_source)
  on conflict do nothing
  returning id into v_id;
  if v_id is null then
    return null;
  end if;
  insert into model_price_rates (price_id, service_tier, long_context, input_per_million, cached_input_per_million,
                                 cache_write_5m_per_million, cache_write_1h_per_million, output_per_million,
                                 embedding_input_per_million)
  select v_id, e ->> 'tier', (e ->> 'long')::boolean, (e ->> 'input')::numeric, (e ->> 'cachedInput')::numeric,
         (e ->> 'cacheWrite5m')::numeric, (e ->> 'cacheWrite1h')::numeric, (e ->> 'output')::numeric,
         (e ->> 'embeddingInput')::numeric
    from unnest(v_sets) e
   where not (e ->> 'tier' = 'standard' and not (e ->> 'long')::boolean);
  return v_id;
end
$$;

--
-- Name: usage_ledger; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_ledger (
    id bigint NOT NULL,
    idempotency_key text NOT NULL,
    entry_type text NOT NULL,
    original_entry_id bigint,
    reason text,
    user_id text NOT NULL,
    run_id text,
    task_id text,
    model text,
    provider_model text,
    kind text,
    status text DEFAULT 'ok'::text NOT NULL,
    attempt integer,
    prompt_tokens bigint DEFAULT 0 NOT NULL,
    cached_prompt_tokens bigint DEFAULT 0 NOT NULL,
    completion_tokens bigint DEFAULT 0 NOT NULL,
    reasoning_tokens bigint DEFAULT 0 NOT NULL,
    cost_usd numeric(38,18) NOT NULL,
    price_version text,
    provider_request_id text,
    worker_id text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    workflow_id text,
    input_truncated_from bigint,
    usage_received_at timestamp with time zone,
    booked_at timestamp with time zone DEFAULT clock_timestamp(),
    created_by text,
    cache_write_5m_tokens bigint DEFAULT 0 NOT NULL,
    cache_write_1h_tokens bigint DEFAULT 0 NOT NULL,
    service_tier text,
    reconciliation_import_id bigint,
    CONSTRAINT usage_ledger_adjustment_points_at_entry CHECK (((entry_type <> 'adjustment'::text) OR (original_entry_id IS NOT NULL))),
    CONSTRAINT usage_ledger_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT usage_ledger_cache_parts_of_prompt CHECK ((((cached_prompt_tokens + cache_write_5m_tokens) + cache_write_1h_tokens) <= prompt_tokens)),
    CONSTRAINT usage_ledger_cache_write_1h_tokens_check CHECK ((cache_write_1h_tokens >= 0)),
    CONSTRAINT usage_ledger_cache_write_5m_tokens_check CHECK ((cache_write_5m_tokens >= 0)),
    CONSTRAINT usage_ledger_check CHECK (((cached_prompt_tokens >= 0) AND (cached_prompt_tokens <= prompt_tokens))),
    CONSTRAINT usage_ledger_check1 CHECK (((reasoning_tokens >= 0) AND (reasoning_tokens <= completion_tokens))),
    CONSTRAINT usage_ledger_check2 CHECK (((entry_type <> 'usage'::text) OR ((model IS NOT NULL) AND (kind IS NOT NULL) AND (price_version IS NOT NULL) AND (attempt IS NOT NULL)))),
    CONSTRAINT usage_ledger_check3 CHECK (((entry_type = 'usage'::text) OR (reason IS NOT NULL))),
    CONSTRAINT usage_ledger_completion_tokens_check CHECK ((completion_tokens >= 0)),
    CONSTRAINT usage_ledger_entry_type_check CHECK ((entry_type = ANY (ARRAY['usage'::text, 'adjustment'::text, 'credit'::text, 'reconciliation'::text]))),
    CONSTRAINT usage_ledger_input_truncated_from_check CHECK ((input_truncated_from >= 0)),
    CONSTRAINT usage_ledger_kind_check CHECK ((kind = ANY (ARRAY['chat'::text, 'embedding'::text]))),
    CONSTRAINT usage_ledger_prompt_tokens_check CHECK ((prompt_tokens >= 0)),
    CONSTRAINT usage_ledger_reconciliation_points_at_import CHECK (((entry_type <> 'reconciliation'::text) OR (original_entry_id IS NOT NULL) OR (reconciliation_import_id IS NOT NULL))),
    CONSTRAINT usage_ledger_status_check CHECK ((status = ANY (ARRAY['ok'::text, 'failed'::text])))
);

--
-- Name: adjust_entry(text, bigint, text, numeric); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.adjust_entry(p_key text, p_entry_id bigint, p_reason text, p_amount numeric) RETURNS SETOF public.usage_ledger
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, run_id, task_id, model, kind, cost_usd)
  select p_key, 'adjustment', o.id, p_reason, o.user_id, o.run_id, o.task_id, o.model, o.kind, p_amount
    from usage_ledger o where o.id = p_entry_id
  on conflict (idempotency_key) do nothing
  returning *;
$$;

--
-- Name: apply_rate_limits(text[], integer[], bigint[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.apply_rate_limits(p_models text[], p_requests_per_minute integer[], p_tokens_per_minute bigint[]) RETURNS SETOF text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  with removed as (delete from rate_limits where model <> all(p_models) returning model),
  applied as (
    insert into rate_limits (model, requests_per_minute, tokens_per_minute)
    select * from unnest(p_models, p_requests_per_minute, p_tokens_per_minute)
    on conflict (model) do update set requests_per_minute = excluded.requests_per_minute,
      tokens_per_minute = excluded.tokens_per_minute, applied_at = now(), applied_by = session_user
  )
  select model from removed;
$$;

--
-- Name: backdating_skew(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.backdating_skew() RETURNS interval
    LANGUAGE sql IMMUTABLE
    AS $$ select interval '5 minutes' $$;

--
-- Name: book_ledger_entry(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.book_ledger_entry() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint, bigint, bigint, text, text, text, bigint, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.book_usage(p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text, p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint, p_cache_write_5m bigint, p_cache_write_1h bigint, p_service_tier text, p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamp with time zone, p_usage_received_at timestamp with time zone) RETURNS public.usage_ledger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: budget_bands(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_bands() RETURNS TABLE(tier text, from_percent integer)
    LANGUAGE sql IMMUTABLE
    AS $$
  values ('cheap', 80), ('blocked', 100)
$$;

--
-- Name: budget_cap_choice(jsonb, text[], numeric, numeric, boolean, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_cap_choice(p_calls jsonb, p_models text[], p_default_worst numeric, p_cap numeric, p_may_downgrade boolean, p_at timestamp with time zone, OUT choice text, OUT models text[], OUT costs numeric[], OUT downgrades boolean, OUT worst numeric) RETURNS record
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  if p_cap is null or p_default_worst <= p_cap then
    choice := 'default';
    return;
  end if;
  select c.models, c.costs, c.downgrades, c.worst into models, costs, downgrades, worst
    from budget_cheap_worst_cases(p_calls, p_models, p_may_downgrade, p_at) c;
  choice := case when downgrades and worst <= p_cap then 'cheap' else 'blocked' end;
end
$$;

--
-- Name: budget_cheap_model(text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_cheap_model(p_model text, p_at timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE
    AS $$
  select g.cheap_model from model_downgrades g where g.model = p_model and g.effective_from <= p_at order by g.effective_from desc limit 1
$$;

--
-- Name: budget_cheap_worst_cases(jsonb, text[], boolean, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_cheap_worst_cases(p_calls jsonb, p_models text[], p_may_downgrade boolean, p_at timestamp with time zone, OUT models text[], OUT costs numeric[], OUT downgrades boolean, OUT worst numeric) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $$
declare
  v_priced boolean;
begin
  select array_agg(w.cheap_model order by w.n), array_agg(w.cheap_cost order by w.n), bool_and(w.cheap_cost is not null),
         bool_or(w.cheap_model <> w.model), sum(w.cheap_cost)
    into models, costs, v_priced, downgrades, worst
    from (select u.n, u.model, d.cheap_model,
                 worst_case_call_cost(j.c ->> 'kind', (j.c ->> 'prompt')::bigint, (j.c ->> 'completion')::bigint, j.c ->> 'tier', q)
                   as cheap_cost
            from unnest(p_models) with ordinality u(model, n)
            join jsonb_array_elements(p_calls) with ordinality j(c, n) using (n)
            cross join lateral (
              select coalesce(case when p_may_downgrade then budget_cheap_model(u.model, p_at) end, u.model) as cheap_model) d
            left join lateral price_version_at(d.cheap_model, p_at) q on true) w;
  if not v_priced then
    perform worst_case_cost(c, m, p_at)
       from jsonb_array_elements(p_calls) with ordinality j(c, n) join unnest(models) with ordinality u(m, n) using (n);
  end if;
end
$$;

--
-- Name: budget_choice(numeric, numeric, numeric, numeric, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_choice(p_used numeric, p_limit numeric, p_default_worst numeric, p_cheap_worst numeric, p_downgrades boolean) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
  v_band text := budget_tier(p_used, p_limit);
begin
  return case when v_band = 'default' and p_used + p_default_worst <= p_limit then 'default'
              when (v_band = 'cheap' or (v_band = 'default' and p_downgrades)) and p_used + p_cheap_worst <= p_limit then 'cheap'
              else 'blocked' end;
end
$$;

--
-- Name: budget_in_force(text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_in_force(p_user_id text, p_at timestamp with time zone) RETURNS SETOF public.budgets
    LANGUAGE sql STABLE
    AS $$
  select b.* from (
    (select * from budgets where user_id = p_user_id and effective_from <= p_at order by effective_from desc limit 1)
    union all
    (select * from budgets where user_id is null and effective_from <= p_at order by effective_from desc limit 1)
  ) b order by b.user_id is null limit 1
$$;

--
-- Name: budget_month_figures(text, text, date, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamp with time zone) RETURNS TABLE(spent numeric, reserved numeric)
    LANGUAGE sql STABLE
    AS $$
  select coalesce(m.spent_usd, 0), coalesce(r.reserved, 0)
    from (select) one
    left join budget_months m on m.user_id = p_user_id and m.time_zone = p_zone and m.month = p_month
    left join lateral (select sum(o.amount_usd) as reserved from budget_reservations o
                        where o.user_id = p_user_id and o.time_zone = p_zone and o.month = p_month and o.status = 'open'
                          and o.expires_at > p_at) r on true
$$;

--
-- Name: budget_month_of(timestamp with time zone, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_month_of(p_at timestamp with time zone, p_zone text) RETURNS date
    LANGUAGE sql STABLE
    AS $$
  select (date_trunc('month', p_at at time zone p_zone))::date
$$;

--
-- Name: budget_pauses_due(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_pauses_due(p_at timestamp with time zone) RETURNS TABLE(pause_id bigint, task_id text, cause text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  select p.id, p.task_id,
         case when budget_month_of(p_at, p.time_zone) > p.month then 'month-turnover' else 'limit-raised' end
    from budget_pause_intervals p
    left join lateral budget_in_force(p.user_id, p_at) b on true
   where p.resumed_at is null
     and (budget_month_of(p_at, p.time_zone) > p.month or b.id is null or b.monthly_limit_usd > p.limit_usd)
   order by p.id
$$;

--
-- Name: budget_tier(numeric, numeric); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_tier(p_used numeric, p_limit numeric) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
begin
  return coalesce((select b.tier from budget_bands() b where p_used * 100 >= p_limit * b.from_percent
                    order by b.from_percent desc limit 1), 'default');
end
$$;

--
-- Name: budget_track_zone(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.budget_track_zone() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if exists (select 1 from budget_zones where time_zone = new.time_zone) then return null; end if;
  perform pg_advisory_xact_lock(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_zones (time_zone) values (new.time_zone) on conflict do nothing;
  if not found then return null; end if;
  insert into budget_months (user_id, time_zone, month, spent_usd)
  select l.user_id, new.time_zone, budget_month_of(l.created_at, new.time_zone), sum(l.cost_usd)
    from usage_ledger l group by 1, 3;
  return null;
end
$$;

--
-- Name: model_price_rates; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.model_price_rates (
    price_id bigint NOT NULL,
    service_tier text NOT NULL,
    long_context boolean NOT NULL,
    input_per_million numeric(30,12),
    cached_input_per_million numeric(30,12),
    cache_write_5m_per_million numeric(30,12),
    cache_write_1h_per_million numeric(30,12),
    output_per_million numeric(30,12),
    embedding_input_per_million numeric(30,12),
    CONSTRAINT model_price_rates_cache_write_1h_per_million_check CHECK ((cache_write_1h_per_million >= (0)::numeric)),
    CONSTRAINT model_price_rates_cache_write_5m_per_million_check CHECK ((cache_write_5m_per_million >= (0)::numeric)),
    CONSTRAINT model_price_rates_cached_input_per_million_check CHECK ((cached_input_per_million >= (0)::numeric)),
    CONSTRAINT model_price_rates_check CHECK (((service_tier <> 'standard'::text) OR long_context)),
    CONSTRAINT model_price_rates_embedding_input_per_million_check CHECK ((embedding_input_per_million >= (0)::numeric)),
    CONSTRAINT model_price_rates_input_per_million_check CHECK ((input_per_million >= (0)::numeric)),
    CONSTRAINT model_price_rates_output_per_million_check CHECK ((output_per_million >= (0)::numeric)),
    CONSTRAINT model_price_rates_service_tier_check CHECK ((service_tier = ANY (ARRAY['standard'::text, 'batch'::text, 'flex'::text, 'priority'::text])))
);

--
-- Name: call_cost(text, bigint, bigint, bigint, bigint, bigint, public.model_price_rates); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.call_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, r public.model_price_rates) RETURNS numeric
    LANGUAGE sql IMMUTABLE
    AS $$
  select case when p_kind = 'embedding' then r.embedding_input_per_million * p_prompt * 0.000001
              else r.input_per_million * (p_prompt - p_cached - p_write_5m - p_write_1h) * 0.000001
                   + coalesce(r.cached_input_per_million, r.input_per_million) * p_cached * 0.000001
                   + coalesce(r.cache_write_5m_per_million, r.input_per_million) * p_write_5m * 0.000001
                   + coalesce(r.cache_write_1h_per_million, r.input_per_million) * p_write_1h * 0.000001
                   + r.output_per_million * p_completion * 0.000001 end
$$;

--
-- Name: claim_and_reserve(text, text, text, text, text, timestamp with time zone, text, boolean, text, jsonb, integer, timestamp with time zone, numeric); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.claim_and_reserve(p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_supersedes_run_id text, p_calls jsonb, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_claim jsonb := claim_run(p_key, p_task_id, p_user_id, p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual,
                             p_supersedes_run_id);
begin
  if not (v_claim ->> 'claimed')::boolean then
    return jsonb_build_object('claim', v_claim, 'decision', null);
  end if;
  return jsonb_build_object('claim', v_claim,
           'decision', reserve_budget(p_user_id, p_run_id, p_workflow_id, p_calls, true, p_expiry_seconds, p_at, p_max_cost_per_run, true));
end
$$;

--
-- Name: claim_run(text, text, text, text, text, timestamp with time zone, text, boolean, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.claim_run(p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_supersedes_run_id text) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_generation integer;
  v_owner runs;
begin
  insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, claimed_by, manual)
  values (p_key, p_task_id, p_user_id, p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual)
  on conflict (idempotency_key) do nothing
  returning generation into v_generation;
  if not found and p_supersedes_run_id is not null and p_supersedes_run_id <> p_run_id then
    update runs set generation = generation + 1, temporal_run_id = p_run_id, claimed_by = p_worker_id,
                    status = 'running', claimed_at = now(), finished_at = null, duration_ms = null, error = null
     where idempotency_key = p_key and temporal_run_id = p_supersedes_run_id and workflow_id = p_workflow_id
       and status not in ('completed', 'blocked')
     returning generation into v_generation;
    if found then
      update run_attempts set status = 'stale', finished_at = now() where temporal_run_id = p_supersedes_run_id and status = 'running';
    end if;
  end if;
  if v_generation is not null then
    insert into run_attempts (idempotency_key, generation, workflow_id, temporal_run_id, claimed_by)
    values (p_key, v_generation, p_workflow_id, p_run_id, p_worker_id);
    return jsonb_build_object('claimed', true, 'ownerWorkflowRunId', p_run_id, 'generation', v_generation);
  end if;
  -- A statement of its own: it sees the claim that a concurrent insert of the same key committed while we waited.
  select * into v_owner from runs where idempotency_key = p_key;
  if v_owner.temporal_run_id = p_run_id then
    return jsonb_build_object('claimed', true, 'ownerWorkflowRunId', p_run_id, 'generation', v_owner.generation);
  end if;
  insert into run_duplicates (temporal_run_id, workflow_id, idempotency_key, task_id, user_id, detected_by)
  values (p_run_id, p_workflow_id, p_key, p_task_id, p_user_id, p_worker_id) on conflict do nothing;
  return jsonb_build_object('claimed', false, 'ownerWorkflowRunId', v_owner.temporal_run_id, 'generation', v_owner.generation,
                            'ownerStatus', v_owner.status);
end
$$;

--
-- Name: complete_run(text, text, text, text, text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  update runs set status = p_status, error = p_error, finished_at = now(), tier = coalesce(p_tier, tier),
         budget = coalesce(p_budget, budget), duration_ms = (extract(epoch from (now() - claimed_at)) * 1000)::bigint
   where idempotency_key = p_key and temporal_run_id = p_run_id and status = 'running';
  update run_attempts set status = p_status, error = p_error, finished_at = now() where temporal_run_id = p_run_id and status = 'running';
end
$$;

--
-- Name: credit_user(text, bigint, text, text, numeric); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.credit_user(p_key text, p_original_entry_id bigint, p_reason text, p_user_id text, p_cost_usd numeric) RETURNS SETOF public.usage_ledger
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  insert into usage_ledger (idempotency_key, entry_type, original_entry_id, reason, user_id, cost_usd)
  values (p_key, 'credit', p_original_entry_id, p_reason, p_user_id, p_cost_usd)
  on conflict (idempotency_key) do nothing
  returning *;
$$;

--
-- Name: expire_reservations(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.expire_reservations() RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  with closed as (
    update budget_reservations set status = 'expired', closed_at = now() where status = 'open' and expires_at <= now() returning 1
  )
  select count(*)::integer from closed;
$$;

--
-- Name: forbid_append_only_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.forbid_append_only_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  raise exception '% is append-only: % is not allowed', tg_table_name, tg_op
    using errcode = 'restrict_violation',
          hint = 'append a correcting entry (cronledger ledger adjust / ledger credit, or a new prices version) instead';
end
$$;

--
-- Name: model_prices; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.model_prices (
    id bigint NOT NULL,
    model text NOT NULL,
    version text NOT NULL,
    effective_from timestamp with time zone NOT NULL,
    input_per_million numeric(30,12),
    cached_input_per_million numeric(30,12),
    output_per_million numeric(30,12),
    embedding_input_per_million numeric(30,12),
    source text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text,
    effective_to timestamp with time zone,
    cache_write_5m_per_million numeric(30,12),
    cache_write_1h_per_million numeric(30,12),
    long_context_above bigint,
    CONSTRAINT model_prices_cache_writes_not_negative CHECK (((cache_write_5m_per_million >= (0)::numeric) AND (cache_write_1h_per_million >= (0)::numeric))),
    CONSTRAINT model_prices_ends_after_it_starts CHECK ((effective_to > effective_from)),
    CONSTRAINT model_prices_long_context_above_positive CHECK ((long_context_above > 0))
);

--
-- Name: is_long_context(public.model_prices, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.is_long_context(p public.model_prices, p_prompt bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
  select coalesce(p_prompt > p.long_context_above, false)
$$;

--
-- Name: metric_add_run(text, text, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_add_run(p_status text, p_tier text, p_duration_ms bigint, p_sign integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  insert into metric_run_counts as c (shard, status, tier, runs) values (pg_backend_pid() % 64, p_status, p_tier, p_sign)
  on conflict (shard, status, tier) do update set runs = c.runs + excluded.runs;
  perform metric_observe('run_duration', p_duration_ms, p_sign);
end
$$;

--
-- Name: metric_booking_lag_ms(timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_booking_lag_ms(p_usage_received_at timestamp with time zone, p_booked_at timestamp with time zone) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
  select case when p_usage_received_at is not null and p_booked_at is not null
              then greatest(0, round(extract(epoch from (p_booked_at - p_usage_received_at)) * 1000))::bigint end
$$;

--
-- Name: metric_bounds_ms(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_bounds_ms(p_histogram text) RETURNS bigint[]
    LANGUAGE sql IMMUTABLE
    AS $$
  select case p_histogram
    when 'run_duration' then array[100, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000, 1800000]::bigint[]
    when 'booking_lag' then array[10, 50, 100, 500, 1000, 5000, 30000, 300000, 3600000]::bigint[]
  end
$$;

--
-- Name: metric_bucket(text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_bucket(p_histogram text, p_ms bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
  select width_bucket(p_ms - 1, metric_bounds_ms(p_histogram))
$$;

--
-- Name: metric_count_duplicate(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_count_duplicate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
  perform metric_add_run('duplicate', null, null, case tg_op when 'INSERT' then 1 else -1 end);
  return null;
end
$$;

--
-- Name: metric_count_run(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_count_run() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
  if tg_op in ('UPDATE', 'DELETE') then perform metric_add_run(old.status, old.tier, old.duration_ms, -1); end if;
  if tg_op in ('INSERT', 'UPDATE') then perform metric_add_run(new.status, new.tier, new.duration_ms, 1); end if;
  return null;
end
$$;

--
-- Name: metric_ledger_fold(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_ledger_fold() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: metric_observe(text, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_observe(p_histogram text, p_ms bigint, p_sign integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  if p_ms is null then return; end if;
  insert into metric_histograms as h (histogram, shard, bucket, observations, sum_ms)
  values (p_histogram, pg_backend_pid() % 8, metric_bucket(p_histogram, p_ms), p_sign, p_sign * p_ms)
  on conflict (histogram, shard, bucket) do update
    set observations = h.observations + excluded.observations, sum_ms = h.sum_ms + excluded.sum_ms;
end
$$;

--
-- Name: metric_rebuild(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.metric_rebuild() RETURNS void
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: price_call(text, bigint, bigint, bigint, bigint, bigint, text, public.model_prices); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.price_call(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices) RETURNS numeric
    LANGUAGE sql STABLE
    AS $$
  select call_cost(p_kind, p_prompt, p_cached, p_write_5m, p_write_1h, p_completion,
                   price_rates(p, price_tier(p_tier), is_long_context(p, p_prompt)))
$$;

--
-- Name: price_class(numeric, public.model_prices, timestamp with time zone, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.price_class(p_rate numeric, p public.model_prices, p_at timestamp with time zone, what text) RETURNS numeric
    LANGUAGE plpgsql IMMUTABLE
    AS $$
begin
  if p_rate is null then
    raise exception 'no % price (version %) in force for model "%" at %', what, p.version, p.model, p_at
      using errcode = 'CL001',
            detail = json_build_object('model', p.model, 'at', p_at, 'what', format('%s price (version %s)', what, p.version))::text;
  end if;
  return p_rate;
end
$$;

--
-- Name: price_in_force(text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.price_in_force(p_model text, p_at timestamp with time zone) RETURNS public.model_prices
    LANGUAGE plpgsql STABLE
    AS $$
declare
  p model_prices;
begin
  select * into p from price_version_at(p_model, p_at);
  if not found then
    raise exception 'no price in force for model "%" at %', p_model, p_at
      using errcode = 'CL001', detail = json_build_object('model', p_model, 'at', p_at, 'what', 'price')::text;
  end if;
  return p;
end
$$;

--
-- Name: price_rates(public.model_prices, text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.price_rates(p public.model_prices, p_tier text, p_long boolean) RETURNS public.model_price_rates
    LANGUAGE plpgsql STABLE
    AS $$
begin
  if p_tier = 'standard' and not p_long then
    return row(p.id, 'standard', false, p.input_per_million, p.cached_input_per_million, p.cache_write_5m_per_million,
               p.cache_write_1h_per_million, p.output_per_million, p.embedding_input_per_million)::model_price_rates;
  end if;
  return (select r from model_price_rates r where r.price_id = p.id and r.service_tier = p_tier and r.long_context = p_long);
end
$$;

--
-- Name: price_tier(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.price_tier(p_tier text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
  select case when p_tier is null or p_tier = 'default' then 'standard' else p_tier end
$$;

--
-- Name: price_version_at(text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.price_version_at(p_model text, p_at timestamp with time zone) RETURNS SETOF public.model_prices
    LANGUAGE sql STABLE
    AS $$
  select * from model_prices
   where model = p_model and effective_from <= p_at and (effective_to is null or effective_to > p_at)
   order by effective_from desc limit 1
$$;

--
-- Name: queue_runs_for_rollups(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.queue_runs_for_rollups() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if tg_op = 'UPDATE' then
    insert into run_rollup_queue (claimed_at, user_id, task_id)
    select claimed_at, user_id, task_id from old_runs
    union select claimed_at, user_id, task_id from new_runs;
  else
    insert into run_rollup_queue (claimed_at, user_id, task_id) select claimed_at, user_id, task_id from new_runs;
  end if;
  return null;
end
$$;

--
-- Name: rate_limit_acquire(text, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rate_limit_acquire(p_model text, p_tokens bigint, p_waited_us bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_limit rate_limits;
  v_state rate_limit_state;
  v_now bigint;
  v_burst constant bigint := 6000000;
  v_request_cost bigint;
  v_token_cost bigint;
  v_wait bigint;
begin
  select * into v_limit from rate_limits where model = p_model;
  if not found then return 0; end if;
  insert into rate_limit_state (model) values (p_model) on conflict do nothing;
  select * into v_state from rate_limit_state where model = p_model for update;
  -- the clock read under the lock: a call that queued for it is admitted at the time it holds it, never earlier
  v_now := rate_limit_now_us();
  v_wait := greatest(v_state.held_until_us - v_now, 0);
  if v_limit.requests_per_minute is not null then
    v_request_cost := rate_limit_cost_us(1, v_limit.requests_per_minute);
    v_wait := greatest(v_wait, greatest(v_state.requests_tat_us - v_now, 0) + v_request_cost - v_burst);
  end if;
  if v_limit.tokens_per_minute is not null then
    v_token_cost := rate_limit_cost_us(greatest(p_tokens, 0), v_limit.tokens_per_minute);
    -- larger than the burst alone: admitted once nothing is owed
    v_wait := greatest(v_wait, greatest(v_state.tokens_tat_us - v_now, 0) + least(v_token_cost, v_burst) - v_burst);
  end if;
  if v_wait > 0 then return v_wait; end if;
  update rate_limit_state
     set requests_tat_us = case when v_request_cost is null then requests_tat_us else greatest(requests_tat_us, v_now) + v_request_cost end,
         tokens_tat_us = case when v_token_cost is null then tokens_tat_us else greatest(tokens_tat_us, v_now) + v_token_cost end,
         admitted = admitted + 1,
         waited = waited + (p_waited_us > 0)::int,
         waited_us = waited_us + greatest(p_waited_us, 0)
   where model = p_model;
  return 0;
end
$$;

--
-- Name: rate_limit_cost_us(bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rate_limit_cost_us(p_units bigint, p_per_minute bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
  select (p_units * 66000000 + p_per_minute - 1) / p_per_minute
$$;

--
-- Name: rate_limit_count_hour(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rate_limit_count_hour() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  insert into rate_limit_hours as h (model, hour, waited, waited_us, throttled)
  values (new.model, date_trunc('hour', now(), 'UTC'), new.waited - old.waited, new.waited_us - old.waited_us,
          new.throttled - old.throttled)
  on conflict (model, hour) do update
    set waited = h.waited + excluded.waited, waited_us = h.waited_us + excluded.waited_us, throttled = h.throttled + excluded.throttled;
  return null;
end
$$;

--
-- Name: rate_limit_hold(text, bigint, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rate_limit_hold(p_model text, p_after_ms bigint, p_throttled boolean) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  insert into rate_limit_state (model) values (p_model) on conflict do nothing;
  update rate_limit_state
     set held_until_us = greatest(held_until_us, rate_limit_now_us() + greatest(p_after_ms, 0) * 1000),
         throttled = throttled + p_throttled::int
   where model = p_model;
end
$$;

--
-- Name: rate_limit_now_us(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rate_limit_now_us() RETURNS bigint
    LANGUAGE sql
    AS $$
  select (extract(epoch from clock_timestamp()) * 1000000)::bigint
$$;

--
-- Name: reconciliation_keys(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.reconciliation_keys(p_import_id bigint) RETURNS TABLE(day date, model text, token_class text, service_tier text, side text, ledger_model text, provider_tokens bigint, provider_usd numeric, ledger_tokens bigint, ledger_usd numeric, booked_tokens bigint, booked_usd numeric)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  with i as (select * from reconciliation_imports where id = p_import_id),
  p as (
    select r.day, r.model, r.token_class, r.service_tier, sum(r.tokens)::bigint as tokens, sum(r.cost_usd) as usd
      from provider_usage_rows r, i where r.import_id = i.id and r.in_scope and r.day between i.from_day and i.to_day
     group by 1, 2, 3, 4
  ),
  l as (select s.* from i, reconciliation_ledger_side(i.provider, i.from_day, i.to_day) s),
  b as (
    select e.day, e.model, e.token_class, e.service_tier, sum(e.tokens)::bigint as tokens, sum(u.cost_usd) as usd
      from reconciliation_entries e join usage_ledger u on u.id = e.ledger_entry_id, i
     where e.provider = i.provider and e.day between i.from_day and i.to_day and e.import_id < i.id
     group by 1, 2, 3, 4
  )
  select k.day, k.model, k.token_class, k.service_tier,
         case when p.day is null then 'ledger' when l.day is null then 'provider' else 'both' end,
         l.ledger_model, p.tokens, p.usd, coalesce(l.tokens, 0), coalesce(l.cost_usd, 0), coalesce(b.tokens, 0), coalesce(b.usd, 0)
    from (select day, model, token_class, service_tier from p union select day, model, token_class, service_tier from l
          union select day, model, token_class, service_tier from b) k
    left join p using (day, model, token_class, service_tier)
    left join l using (day, model, token_class, service_tier)
    left join b using (day, model, token_class, service_tier)
   order by 1, 2, 3, 4
$$;

--
-- Name: reconciliation_ledger_side(text, date, date); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.reconciliation_ledger_side(p_provider text, p_from date, p_to date) RETURNS TABLE(day date, model text, token_class text, service_tier text, ledger_model text, tokens bigint, cost_usd numeric)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  select (l.created_at at time zone 'UTC')::date, coalesce(l.provider_model, regexp_replace(l.model, '^[^/]*/', '')),
         c.token_class, price_tier(l.service_tier), max(l.model), sum(c.tokens)::bigint,
         sum(call_cost(l.kind, c.prompt, c.cached, c.write_5m, c.write_1h, c.completion,
                       price_rates(p, price_tier(l.service_tier), is_long_context(p, l.prompt_tokens))))
    from usage_ledger l
    join model_prices p on p.model = l.model and p.version = l.price_version
    cross join lateral (values
      ('input', l.prompt_tokens - l.cached_prompt_tokens - l.cache_write_5m_tokens - l.cache_write_1h_tokens,
                l.prompt_tokens - l.cached_prompt_tokens - l.cache_write_5m_tokens - l.cache_write_1h_tokens, 0::bigint, 0::bigint, 0::bigint, 0::bigint),
      ('cached_input', l.cached_prompt_tokens, l.cached_prompt_tokens, l.cached_prompt_tokens, 0, 0, 0),
      ('cache_write_5m', l.cache_write_5m_tokens, l.cache_write_5m_tokens, 0, l.cache_write_5m_tokens, 0, 0),
      ('cache_write_1h', l.cache_write_1h_tokens, l.cache_write_1h_tokens, 0, 0, l.cache_write_1h_tokens, 0),
      ('output', l.completion_tokens, 0, 0, 0, 0, l.completion_tokens)
    ) c(token_class, tokens, prompt, cached, write_5m, write_1h, completion)
   where l.entry_type = 'usage' and l.kind = 'chat' and c.tokens > 0
     and (l.model like 'anthropic/%') = (p_provider = 'anthropic')
     and l.created_at >= p_from::timestamp at time zone 'UTC' and l.created_at < (p_to + 1)::timestamp at time zone 'UTC'
   group by 1, 2, 3, 4
  union all
  select (l.created_at at time zone 'UTC')::date, coalesce(l.provider_model, regexp_replace(l.model, '^[^/]*/', '')),
         'embedding', price_tier(l.service_tier), max(l.model), sum(l.prompt_tokens)::bigint, sum(l.cost_usd)
    from usage_ledger l
   where l.entry_type = 'usage' and l.kind = 'embedding' and l.prompt_tokens > 0
     and (l.model like 'anthropic/%') = (p_provider = 'anthropic')
     and l.created_at >= p_from::timestamp at time zone 'UTC' and l.created_at < (p_to + 1)::timestamp at time zone 'UTC'
   group by 1, 2, 4
$$;

--
-- Name: record_applied_tasks(text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_applied_tasks(p_task_ids text[]) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  delete from applied_tasks where not (task_id = any(p_task_ids));
  insert into applied_tasks (task_id) select unnest(p_task_ids) on conflict (task_id) do update set applied_at = now();
$$;

--
-- Name: record_budget_event_delivery(text, boolean, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_budget_event_delivery(p_event_id text, p_ok boolean, p_error text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  update budget_events set attempts = attempts + 1, last_attempt_at = now(),
         delivered_at = case when p_ok then coalesce(delivered_at, now()) else delivered_at end,
         last_error = case when p_ok then last_error else p_error end
   where event_id = p_event_id;
$$;

--
-- Name: record_budget_pause(text, text, text, date, text, numeric, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_budget_pause(p_task_id text, p_user_id text, p_reason text, p_month date, p_time_zone text, p_limit numeric, p_run_id text, p_at timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_id bigint;
begin
  perform pg_advisory_xact_lock(hashtextextended('cronledger-budget-pause:' || p_task_id, 0));
  select p.id into v_id from budget_pause_intervals p where p.task_id = p_task_id and p.resumed_at is null order by p.id limit 1;
  if found then return jsonb_build_object('pauseId', v_id, 'recorded', false); end if;
  insert into budget_pauses (task_id, user_id, reason, month, time_zone, limit_usd, paused_by_run_id, paused_at)
  values (p_task_id, p_user_id, p_reason, p_month, p_time_zone, p_limit, p_run_id, coalesce(p_at, now()))
  on conflict (paused_by_run_id) do nothing
  returning id into v_id;
  return jsonb_build_object('pauseId', v_id, 'recorded', v_id is not null);
end
$$;

--
-- Name: record_budget_resume(bigint, timestamp with time zone, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_budget_resume(p_pause_id bigint, p_at timestamp with time zone, p_cause text, p_skipped_slots integer) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  insert into budget_pause_ends (pause_id, resumed_at, cause, skipped_slots) values (p_pause_id, p_at, p_cause, p_skipped_slots)
  on conflict do nothing;
$$;

--
-- Name: record_forecast(text, text, date, date, numeric, numeric, numeric, numeric, numeric, numeric, numeric, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_forecast(p_user_id text, p_zone text, p_month date, p_day date, p_median numeric, p_high numeric, p_limit numeric, p_spent numeric, p_reserved numeric, p_all_slots_median numeric DEFAULT NULL::numeric, p_all_slots_high numeric DEFAULT NULL::numeric, p_spend_by_day jsonb DEFAULT NULL::jsonb) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_event_ids jsonb := '[]'::jsonb;
  v_all_median numeric := coalesce(p_all_slots_median, p_median);
begin
  insert into budget_forecasts (user_id, time_zone, month, day, median_usd, high_usd, limit_usd, spent_usd, reserved_usd,
                                all_slots_median_usd, all_slots_high_usd, spend_by_day)
  values (p_user_id, p_zone, p_month, p_day, p_median, p_high, p_limit, p_spent, p_reserved, v_all_median,
          coalesce(p_all_slots_high, p_high), p_spend_by_day)
  on conflict do nothing;
  if p_limit is not null and v_all_median > p_limit then
    with inserted as (
      insert into budget_events (event_id, user_id, time_zone, month, threshold, kind, limit_usd, spent_usd, reserved_usd, forecast_usd)
      values (format('budget-forecast:%s:%s:%s', p_user_id, p_zone, to_char(p_month, 'YYYY-MM')), p_user_id, p_zone, p_month, 100,
              'forecast-over-limit', p_limit, p_spent, p_reserved, v_all_median)
      on conflict do nothing
      returning event_id
    )
    select coalesce(jsonb_agg(to_jsonb(event_id)), '[]'::jsonb) into v_event_ids from inserted;
  end if;
  return v_event_ids;
end
$$;

--
-- Name: record_reconciliation(text, text, date, date, text, jsonb, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_reconciliation(p_provider text, p_source text, p_from date, p_to date, p_pages_sha256 text, p_scope jsonb, p_rows jsonb) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_import reconciliation_imports;
  k record;
  v_tokens bigint;
  v_usd numeric;
  v_entry_id bigint;
  v_model text;
  v_keys jsonb := '[]';
begin
  perform pg_advisory_xact_lock(hashtextextended('cronledger-reconcile-' || p_provider, 0));
  insert into reconciliation_imports (provider, source, from_day, to_day, pages_sha256, scope, created_by)
  values (p_provider, p_source, p_from, p_to, p_pages_sha256, p_scope, session_user)
  returning * into v_import;
  insert into provider_usage_rows (import_id, day, model, token_class, service_tier, project_id, api_key_id, tokens, cost_usd, in_scope)
  select v_import.id, r.day, r.model, r."tokenClass", r."serviceTier", r."projectId", r."apiKeyId", r.tokens::bigint,
         r."costUsd"::numeric(38, 18), r."inScope"
    from jsonb_to_recordset(p_rows) as r(day date, model text, "tokenClass" text, "serviceTier" text, "projectId" text,
                                         "apiKeyId" text, tokens text, "costUsd" text, "inScope" boolean);
  for k in select * from reconciliation_keys(v_import.id) loop
    v_tokens := case when k.provider_tokens is null then 0 else k.provider_tokens - k.ledger_tokens - k.booked_tokens end;
    v_usd := case when k.provider_usd is null then 0 else k.provider_usd - k.ledger_usd - k.booked_usd end;
    v_entry_id := null;
    if k.side <> 'ledger' and (v_tokens <> 0 or v_usd <> 0) then
      v_model := coalesce(k.ledger_model,
                          (select u.model from usage_ledger u where u.provider_model = k.model and u.entry_type = 'usage' limit 1),
                          case when k.token_class = 'line_item' then p_provider || ' line item' else p_provider || '/' || k.model end);
      insert into usage_ledger (idempotency_key, entry_type, reconciliation_import_id, reason, user_id, model, provider_model, kind,
                                service_tier, cost_usd)
      values (format('reconciliation:%s:%s:%s:%s:%s:%s', v_import.id, p_provider, k.day, k.model, k.token_class, k.service_tier),
              'reconciliation', v_import.id,
              format('%s reports %s tokens / %s USD for %s %s %s (%s tier); the ledger holds %s / %s and reconciliation booked %s / %s before import %s',
                     p_provider, coalesce(k.provider_tokens::text, 'no'), coalesce(k.provider_usd::text, 'no'), k.day, k.model,
                     k.token_class, k.service_tier, k.ledger_tokens, k.ledger_usd, k.booked_tokens, k.booked_usd, v_import.id),
              'reconciliation:' || p_provider, v_model, k.model,
              case when k.token_class = 'embedding' then 'embedding' when k.token_class = 'line_item' then null else 'chat' end,
              k.service_tier, v_usd)
      returning id into v_entry_id;
      insert into reconciliation_entries (ledger_entry_id, import_id, provider, day, model, token_class, service_tier, tokens)
      values (v_entry_id, v_import.id, p_provider, k.day, k.model, k.token_class, k.service_tier, v_tokens);
    end if;
    v_keys := v_keys || jsonb_build_object(
      'day', k.day, 'model', k.model, 'tokenClass', k.token_class, 'serviceTier', k.service_tier, 'side', k.side,
      'providerTokens', k.provider_tokens::text, 'providerUsd', k.provider_usd::text,
      'ledgerTokens', k.ledger_tokens::text, 'ledgerUsd', k.ledger_usd::text,
      'bookedBeforeTokens', k.booked_tokens::text, 'bookedBeforeUsd', k.booked_usd::text,
      'entryId', v_entry_id::text,
      'bookedTokens', case when v_entry_id is null then '0' else v_tokens::text end,
      'bookedUsd', case when v_entry_id is null then '0' else v_usd::text end);
  end loop;
  return jsonb_build_object('importId', v_import.id::text, 'importedAt', v_import.imported_at, 'keys', v_keys);
end
$$;

--
-- Name: record_rejected_run(text, text, text, timestamp with time zone, text, boolean, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_rejected_run(p_task_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_reason text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, claimed_by, manual,
                    status, finished_at, error)
  values ('rejected:' || p_run_id, p_task_id, '', p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual,
          'rejected', now(), p_reason)
  on conflict (idempotency_key) do nothing;
$$;

--
-- Name: record_report_delivery(text, text, boolean, text, text, text, integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_report_delivery(p_month text, p_time_zone text, p_complete boolean, p_report_sha256 text, p_target text, p_workflow_id text, p_attempt integer, p_response_status integer) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  insert into report_deliveries (month, time_zone, complete, report_sha256, target, workflow_id, attempt, response_status)
  values (p_month, p_time_zone, p_complete, p_report_sha256, p_target, p_workflow_id, p_attempt, p_response_status);
$$;

--
-- Name: rollup_verifications; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rollup_verifications (
    id bigint NOT NULL,
    verified_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text NOT NULL,
    months integer NOT NULL,
    rows_checked bigint NOT NULL,
    differences bigint NOT NULL,
    sample jsonb DEFAULT '[]'::jsonb NOT NULL,
    CONSTRAINT rollup_verifications_differences_check CHECK ((differences >= 0)),
    CONSTRAINT rollup_verifications_months_check CHECK ((months >= 0)),
    CONSTRAINT rollup_verifications_rows_checked_check CHECK ((rows_checked >= 0))
);

--
-- Name: record_rollup_verification(integer, bigint, bigint, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_rollup_verification(p_months integer, p_rows_checked bigint, p_differences bigint, p_sample jsonb) RETURNS public.rollup_verifications
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
  insert into rollup_verifications (created_by, months, rows_checked, differences, sample)
  values (session_user, p_months, p_rows_checked, p_differences, coalesce(p_sample, '[]'))
  returning *
$$;

--
-- Name: record_task_versions(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_task_versions(p_versions jsonb) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  insert into task_versions (task_id, fingerprint, definition)
  select v.task_id, v.fingerprint, v.definition from jsonb_to_recordset(p_versions) as v(task_id text, fingerprint text, definition jsonb)
  on conflict (task_id, fingerprint) do nothing;
$$;

--
-- Name: usage_exceptions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_exceptions (
    id bigint NOT NULL,
    idempotency_key text NOT NULL,
    user_id text NOT NULL,
    workflow_id text,
    run_id text,
    task_id text,
    model text NOT NULL,
    provider_model text,
    kind text NOT NULL,
    status text NOT NULL,
    attempt integer NOT NULL,
    raw_usage jsonb NOT NULL,
    reason text NOT NULL,
    provider_request_id text,
    worker_id text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT usage_exceptions_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT usage_exceptions_kind_check CHECK ((kind = ANY (ARRAY['chat'::text, 'embedding'::text]))),
    CONSTRAINT usage_exceptions_status_check CHECK ((status = ANY (ARRAY['ok'::text, 'failed'::text])))
);

--
-- Name: record_usage_exception(text, text, text, text, text, text, text, text, text, integer, jsonb, text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.record_usage_exception(p_key text, p_user_id text, p_workflow_id text, p_run_id text, p_task_id text, p_model text, p_provider_model text, p_kind text, p_status text, p_attempt integer, p_raw_usage jsonb, p_reason text, p_provider_request_id text, p_worker_id text) RETURNS SETOF public.usage_exceptions
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: refuse_backdated_price(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_backdated_price() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if new.effective_from < now() - backdating_skew() and not written_by_table_owner(tg_relid)
     and not exists (select 1 from model_prices p where p.model = new.model and p.version = new.version and p.effective_from = new.effective_from)
     and exists (select 1 from usage_ledger l where l.model = new.model and l.created_at >= new.effective_from) then
    raise exception 'price version % of % takes effect at %, before calls already booked: a new price takes effect from now on',
      new.version, new.model, new.effective_from
      using errcode = 'check_violation', hint = 'give the version an effectiveFrom of now or later';
  end if;
  return new;
end
$$;

--
-- Name: release_reservations(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.release_reservations(p_run_id text) RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  with closed as (
    update budget_reservations set status = 'released', closed_at = now() where run_id = p_run_id and status = 'open' returning 1
  )
  select count(*)::integer from closed;
$$;

--
-- Name: reprice_usage(timestamp with time zone, timestamp with time zone, jsonb, jsonb, jsonb, text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.reprice_usage(p_from timestamp with time zone, p_to timestamp with time zone, p_versions jsonb, p_rates jsonb, p_downgrade jsonb DEFAULT '{}'::jsonb, p_models text[] DEFAULT NULL::text[]) RETURNS TABLE(user_id text, task_id text, model text, priced_as text, entries bigint, ledger_usd numeric, repriced_usd numeric, unpriced bigint, first_unpriced_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
  with given as (
    select array(select v from jsonb_populate_recordset(null::model_prices, p_versions) v) as versions,
           array(select r from jsonb_populate_recordset(null::model_price_rates, p_rates) r) as rates
  ),
  priced as (
    select l.user_id, l.task_id, l.model, m.priced_as, l.cost_usd, l.created_at,
           call_cost(l.kind, l.prompt_tokens, l.cached_prompt_tokens, l.cache_write_5m_tokens, l.cache_write_1h_tokens,
                     l.completion_tokens,
                     (select r from unnest(given.rates) r
                       where r.price_id = (v.p).id and r.service_tier = price_tier(l.service_tier)
                         and r.long_context = is_long_context(v.p, l.prompt_tokens))) as cost
      from usage_ledger l
      cross join given
      cross join lateral (select coalesce(p_downgrade ->> l.model, l.model) as priced_as) m
      left join lateral (select p from unnest(given.versions) p
                          where p.model = m.priced_as and p.effective_from <= l.created_at
                            and (p.effective_to is null or p.effective_to > l.created_at)
                          order by p.effective_from desc limit 1) v on true
     where l.entry_type = 'usage' and l.created_at >= p_from and l.created_at < p_to
       and (p_models is null or m.priced_as = any (p_models))
  )
  select user_id, task_id, model, priced_as, count(*), sum(cost_usd), sum(cost), count(*) filter (where cost is null),
         min(created_at) filter (where cost is null)
    from priced
   group by user_id, task_id, model, priced_as
$$;

--
-- Name: reserve_budget(text, text, text, jsonb, boolean, integer, timestamp with time zone, numeric, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.reserve_budget(p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric, p_may_wait boolean) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_at timestamptz := coalesce(p_at, now());
  v_cap numeric := case when p_may_downgrade then p_max_cost_per_run end;
  v_budget budgets;
  v_has_budget boolean;
  v_zone text;
  v_month date;
  v_keys text[];
  v_steps text[];
  v_models text[];
  v_costs numeric[];
  v_cheap record;     -- budget_cap_choice or budget_cheap_worst_cases: models, costs, downgrades, worst
  v_priced boolean;
  v_default_worst numeric;
  v_over_cap boolean;
  v_default_allowed numeric; -- the default models' worst case, or null when the cap rules them out
  v_spent numeric;
  v_reserved numeric;
  v_retried boolean;
  v_used numeric;
  v_limit numeric;
  v_tier text;
  v_worst numeric;
  v_reason text;
  v_event_ids jsonb := '[]'::jsonb;
  v_figures record;   -- spent and reserved outside the lock: a user without a budget, a run over its cap
begin
  select * into v_budget from budget_in_force(p_user_id, v_at);
  v_has_budget := found;
  v_zone := case when v_has_budget then v_budget.time_zone else 'UTC' end;
  v_month := budget_month_of(v_at, v_zone);
  if not v_has_budget and v_cap is null then
    select * into v_figures from budget_month_figures(p_user_id, 'UTC', v_month, v_at);
    return jsonb_build_object('tier', 'default', 'models', (select jsonb_object_agg(c ->> 'step', c ->> 'model') from jsonb_array_elements(p_calls) c),
      'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', null, 'spentUsd', v_figures.spent::text,
      'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'));
  end if;
  v_limit := v_budget.monthly_limit_usd;

  -- Lock-free: each call's key (the ledger key of the booking that settles it, as the worker makes it: usageKey in
  -- src/ledger/record-usage.ts) and its worst case at its own model, and their sum, as arrays in the calls' order.
  select array_agg(w.key order by w.n), array_agg(w.step order by w.n),
         array_agg(w.model order by w.n), array_agg(w.cost order by w.n), bool_and(w.cost is not null), sum(w.cost)
    into v_keys, v_steps, v_models, v_costs, v_priced, v_default_worst
    from (select e.n, e.key, e.step, e.model,
                 worst_case_call_cost(e.kind, e.prompt, e.completion, e.tier, p) as cost
            from (select j.n, j.c ->> 'key' as key, j.c ->> 'step' as step, j.c ->> 'model' as model, j.c ->> 'kind' as kind,
                         (j.c ->> 'prompt')::bigint as prompt, (j.c ->> 'completion')::bigint as completion, j.c ->> 'tier' as tier
                    from jsonb_array_elements(p_calls) with ordinality j(c, n) offset 0) e -- OFFSET 0: each field read once
            left join lateral price_version_at(e.model, v_at) p on true) w;
  if not v_priced then
    -- a model or a price class without a price in force: worst_case_cost raises the error that names it
    perform worst_case_cost(c, c ->> 'model', v_at) from jsonb_array_elements(p_calls) c;
  end if;

  -- The task's cap, lock-free and whatever the budget (budget_cap_choice, the forecast's rule too).
  select * into v_cheap from budget_cap_choice(p_calls, v_models, v_default_worst, v_cap, p_may_downgrade, v_at);
  v_over_cap := v_cheap.choice <> 'default';
  v_default_allowed := case when v_over_cap then null else v_default_worst end;
  if v_over_cap then
    if v_cheap.choice = 'blocked' then
      select * into v_figures from budget_month_figures(p_user_id, v_zone, v_month, v_at);
      return jsonb_build_object('tier', 'blocked', 'reason', 'max-cost-per-run', 'maxCostPerRunUsd', v_cap::text,
               'worstCaseUsd', least(v_default_worst, v_cheap.worst)::text, 'eventIds', '[]'::jsonb, 'limitUsd', v_limit::text,
               'spentUsd', v_figures.spent::text, 'reservedUsd', v_figures.reserved::text, 'timeZone', v_zone,
               'month', to_char(v_month, 'YYYY-MM'));
    end if;
  end if;
  if not v_has_budget then
    -- no budget, so nothing to reserve: the cap alone chose the models
    select * into v_figures from budget_month_figures(p_user_id, 'UTC', v_month, v_at);
    return jsonb_build_object('tier', case when v_over_cap then 'cheap' else 'default' end,
             'models', jsonb_object(v_steps, case when v_over_cap then v_cheap.models else v_models end),
             'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', null, 'spentUsd', v_figures.spent::text,
             'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'))
           || case when v_over_cap then jsonb_build_object('reason', 'max-cost-per-run', 'maxCostPerRunUsd', v_cap::text) else '{}'::jsonb end;
  end if;

  -- The lock, held to the commit: no other decision and no booking of this month gets past it meanwhile.
  select m.spent_usd into v_spent from budget_months m
   where m.user_id = p_user_id and m.time_zone = v_zone and m.month = v_month for update;
  if not found then
    insert into budget_months (user_id, time_zone, month) values (p_user_id, v_zone, v_month) on conflict do nothing;
    select m.spent_usd into v_spent from budget_months m
     where m.user_id = p_user_id and m.time_zone = v_zone and m.month = v_month for update;
  end if;

  -- Reserved (open and not expired), and whether these keys were reserved already (a retried request). The keys are
  -- probed one by one through the primary key (LATERAL ... LIMIT 1), never planned as a scan.
  select (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = v_zone and r.month = v_month and r.status = 'open' and r.expires_at > v_at),
         exists (select from unnest(v_keys) k(key) cross join lateral (select from budget_reservations r where r.idempotency_key = k.key limit 1) r)
    into v_reserved, v_retried;

  if v_retried then
    -- the reservation already made for these keys, as it was made
    return (
      select jsonb_build_object('tier', min(r.tier), 'models', jsonb_object_agg(k.step, coalesce(r.model, k.model)),
               'worstCaseUsd', coalesce(sum(r.amount_usd), 0)::text)
             || case when min(r.reason) is null then '{}'::jsonb
                     else jsonb_build_object('reason', min(r.reason), 'maxCostPerRunUsd', v_cap::text) end
        from unnest(v_keys, v_steps, v_models) k(key, step, model) left join budget_reservations r on r.idempotency_key = k.key
    ) || jsonb_build_object('eventIds', '[]'::jsonb, 'limitUsd', v_limit::text, 'spentUsd', v_spent::text,
           'reservedUsd', v_reserved::text, 'timeZone', v_zone, 'month', to_char(v_month, 'YYYY-MM'));
  end if;

  v_used := v_spent + v_reserved;
  v_tier := budget_choice(v_used, v_limit, v_default_allowed, null, false); -- 'default', or not without the cheap prices
  if v_tier = 'default' then
    v_worst := v_default_worst;
  else
    -- the cheap models and their worst cases, priced only now that the choice needs them (or already, for the cap)
    if not v_over_cap then
      select * into v_cheap from budget_cheap_worst_cases(p_calls, v_models, p_may_downgrade, v_at);
    end if;
    v_tier := budget_choice(v_used, v_limit, v_default_allowed, v_cheap.worst, v_cheap.downgrades);
    if p_may_downgrade and v_reserved > 0
       and budget_choice(v_spent, v_limit, v_default_allowed, v_cheap.worst, v_cheap.downgrades) <> v_tier then
      if p_may_wait then
        return jsonb_build_object('tier', 'wait', 'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', v_limit::text,
                 'spentUsd', v_spent::text, 'reservedUsd', v_reserved::text, 'timeZone', v_zone,
                 'month', to_char(v_month, 'YYYY-MM'));
      end if;
      v_reason := 'waited-for-reservations';
    end if;
    if v_tier = 'cheap' then
      v_worst := v_cheap.worst;
      v_models := v_cheap.models;
      v_costs := v_cheap.costs;
      if v_over_cap then v_reason := 'max-cost-per-run'; end if;
    else
      v_worst := v_cheap.worst; -- blocked: the last tier tried (the default one, without downgrades, costs the same)
      v_reason := coalesce(v_reason, 'monthly-limit');
    end if;
  end if;

  if v_tier <> 'blocked' then
    insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, workflow_id, run_id,
                                     expires_at, reason)
    select k.key, p_user_id, v_zone, v_month, k.cost, k.model, v_tier, p_workflow_id, p_run_id,
           v_at + make_interval(secs => p_expiry_seconds), case when v_reason = 'max-cost-per-run' then v_reason end
      from unnest(v_keys, v_models, v_costs) k(key, model, cost);
  end if;

  -- Threshold events: each band reached with this decision's reservation (a blocked run reaches them all), once per
  -- user and month. The band's starting percentage names the event.
  if v_tier = 'blocked' or budget_tier(v_used + v_worst, v_limit) <> 'default' then
    with inserted as (
      insert into budget_events (event_id, user_id, time_zone, month, threshold, limit_usd, spent_usd, reserved_usd)
      select format('budget:%s:%s:%s:%s', p_user_id, v_zone, to_char(v_month, 'YYYY-MM'), b.from_percent), p_user_id,
             v_zone, v_month, b.from_percent, v_limit, v_spent,
             v_reserved + case when v_tier = 'blocked' then 0 else v_worst end
        from budget_bands() b
       where v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * b.from_percent
      on conflict do nothing
      returning event_id, threshold
    )
    select coalesce(jsonb_agg(to_jsonb(event_id) order by threshold), '[]'::jsonb) into v_event_ids from inserted;
  end if;

  return jsonb_build_object('tier', v_tier, 'worstCaseUsd', v_worst::text, 'eventIds', v_event_ids, 'limitUsd', v_limit::text,
           'spentUsd', v_spent::text, 'reservedUsd', v_reserved::text, 'timeZone', v_zone,
           'month', to_char(v_month, 'YYYY-MM'))
      || case when v_tier = 'blocked' then '{}'::jsonb else jsonb_build_object('models', jsonb_object(v_steps, v_models)) end
      || case when v_reason is null then '{}'::jsonb
              when v_reason = 'max-cost-per-run' then jsonb_build_object('reason', v_reason, 'maxCostPerRunUsd', v_cap::text)
              else jsonb_build_object('reason', v_reason) end;
end
$$;

--
-- Name: rollup_add_to_buckets(text, text[], text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_add_to_buckets(p_table text, p_bucket text[], p_delta text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $_$
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
$_$;

--
-- Name: rollup_coarser_bucket(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_coarser_bucket(p_table text) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  select case p_table
           when 'usage_month_rollups' then array['zone', 'month', 'user_id', 'model', 'kind', 'entry_type', 'status']
           when 'usage_day_totals' then array['zone', 'day', 'model', 'kind', 'entry_type', 'status']
           when 'usage_day_users' then array['zone', 'day', 'user_id', 'task_id', 'entry_type']
         end
$$;

--
-- Name: rollup_coarser_select(text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_coarser_select(p_table text, p_source text, p_where text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: rollup_cost_per_run_after_fold(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_cost_per_run_after_fold() RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $_$
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
$_$;

--
-- Name: rollup_cost_per_run_month(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_cost_per_run_month(p_zone text, p_month text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: rollup_cost_per_run_recompute(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_cost_per_run_recompute() RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET work_mem TO '64MB'
    AS $$
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

--
-- Name: rollup_finish_month_rollups(text, text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_finish_month_rollups(p_zone text, p_month text, p_last_entry_id bigint) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: rollup_fold_queues_into_rollups(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_fold_queues_into_rollups(p_limit integer) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: rollup_pending_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_pending_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_sign integer := case tg_op when 'INSERT' then 1 else -1 end;
begin
  insert into rollup_pending as p (slot, shard, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
                                   completion_tokens, reasoning_tokens, cost_usd)
  select rollup_pending_slot(l.created_at), c.shard, l.model, l.kind, l.entry_type, l.status, v_sign * count(*),
         v_sign * sum(l.prompt_tokens), v_sign * sum(l.cached_prompt_tokens), v_sign * sum(l.completion_tokens),
         v_sign * sum(l.reasoning_tokens), v_sign * sum(l.cost_usd)
    from changed c join usage_ledger l on l.id = c.entry_id
   group by 1, 2, 3, 4, 5, 6
   order by 1, 2, 3, 4, 5, 6
  on conflict on constraint rollup_pending_bucket do update
    set entries = p.entries + excluded.entries, prompt_tokens = p.prompt_tokens + excluded.prompt_tokens,
        cached_prompt_tokens = p.cached_prompt_tokens + excluded.cached_prompt_tokens,
        completion_tokens = p.completion_tokens + excluded.completion_tokens,
        reasoning_tokens = p.reasoning_tokens + excluded.reasoning_tokens, cost_usd = p.cost_usd + excluded.cost_usd;
  insert into rollup_pending_users as u (user_id, at, usage_entries)
  select l.user_id, rollup_pending_user_at(l.created_at), v_sign * count(*)
    from changed c join usage_ledger l on l.id = c.entry_id
   where l.entry_type = 'usage'
   group by 1, 2
   order by 1, 2
  on conflict (user_id, at) do update set usage_entries = u.usage_entries + excluded.usage_entries;
  if v_sign < 0 then
    delete from rollup_pending where entries = 0;
    delete from rollup_pending_users where usage_entries = 0;
  end if;
  return null;
end
$$;

--
-- Name: rollup_pending_slot(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_pending_slot(p_at timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE
    AS $$
  select date_bin('15 minutes', p_at, timestamptz '2000-01-01 00:00:00+00')
$$;

--
-- Name: rollup_pending_user_at(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_pending_user_at(p_at timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE
    AS $$
  select case when extract(day from p_at at time zone 'UTC') = 1 or extract(day from (p_at at time zone 'UTC') + interval '1 day') = 1
              then rollup_pending_slot(p_at)
              else date_trunc('day', p_at at time zone 'UTC') at time zone 'UTC' end
$$;

--
-- Name: rollup_same_bucket(text[], text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollup_same_bucket(p_bucket text[], a text, b text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  select string_agg(case when k in ('task_id', 'model', 'kind') then format('%s.%I is not distinct from %s.%I', a, k, b, k)
                         else format('%s.%I = %s.%I', a, k, b, k) end, ' and ')
    from unnest(p_bucket) k
$$;

--
-- Name: rollups_clear_month(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollups_clear_month(p_zone text, p_month text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
  delete from usage_rollups
   where zone = p_zone and day between to_date(p_month || '-01', 'YYYY-MM-DD') and ((to_date(p_month || '-01', 'YYYY-MM-DD') + interval '1 month')::date - 1);
  delete from run_rollups
   where zone = p_zone and day between to_date(p_month || '-01', 'YYYY-MM-DD') and ((to_date(p_month || '-01', 'YYYY-MM-DD') + interval '1 month')::date - 1);
$$;

--
-- Name: rollups_finish_month(text, text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollups_finish_month(p_zone text, p_month text, p_last_entry_id bigint) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  perform rollup_finish_month_rollups(p_zone, p_month, p_last_entry_id);
  perform rollup_cost_per_run_month(p_zone, p_month);
end
$$;

--
-- Name: rollups_fold_queues(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollups_fold_queues(p_limit integer) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
declare
  v_folded jsonb := rollup_fold_queues_into_rollups(p_limit);
begin
  perform rollup_cost_per_run_after_fold();
  return v_folded;
end
$$;

--
-- Name: rollups_rebuild_day(text, date); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollups_rebuild_day(p_zone text, p_day date) RETURNS TABLE(entries bigint, last_entry_id bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: rollups_recompute_cost_per_run(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollups_recompute_cost_per_run() RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
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

--
-- Name: rollups_register_zone(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollups_register_zone(p_zone text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  insert into rollup_zones (zone) values (p_zone) on conflict do nothing;
  return found;
end
$$;

--
-- Name: rollups_reset_pending(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.rollups_reset_pending() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  lock table rollup_queue in share mode;
  delete from rollup_pending;
  delete from rollup_pending_users;
  insert into rollup_pending (slot, shard, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
                              completion_tokens, reasoning_tokens, cost_usd)
  select rollup_pending_slot(l.created_at), q.shard, l.model, l.kind, l.entry_type, l.status, count(*), sum(l.prompt_tokens),
         sum(l.cached_prompt_tokens), sum(l.completion_tokens), sum(l.reasoning_tokens), sum(l.cost_usd)
    from rollup_queue q join usage_ledger l on l.id = q.entry_id
   group by 1, 2, 3, 4, 5, 6;
  insert into rollup_pending_users (user_id, at, usage_entries)
  select l.user_id, rollup_pending_user_at(l.created_at), count(*)
    from rollup_queue q join usage_ledger l on l.id = q.entry_id
   where l.entry_type = 'usage'
   group by 1, 2;
end
$$;

--
-- Name: stage_embedding(text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.stage_embedding(p_call_key text, p_embedding jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  insert into call_embeddings (call_key, embedding) values (p_call_key, p_embedding) on conflict (call_key) do nothing;
end
$$;

--
-- Name: stamp_created_by(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.stamp_created_by() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  new.created_by := session_user;
  return new;
end
$$;

--
-- Name: stamp_ledger_entry(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.stamp_ledger_entry() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  new.created_by := session_user;
  if new.created_at not between now() - backdating_skew() and now() + backdating_skew() and not written_by_table_owner(tg_relid) then
    raise exception 'a ledger entry dated % is refused: entries are dated now (within %), not by the caller', new.created_at, backdating_skew()
      using errcode = 'check_violation';
  end if;
  return new;
end
$$;

--
-- Name: store_memory_and_complete_run(text, text, text, text, text, jsonb, text, text, text, text, text, jsonb, text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.store_memory_and_complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb, p_workflow_id text, p_memory_run_id text, p_task_id text, p_user_id text, p_content text, p_embedding jsonb, p_embedding_key text, p_input_truncated_from bigint) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
begin
  insert into memories (run_workflow_id, temporal_run_id, task_id, user_id, content, embedding, input_truncated_from)
  values (p_workflow_id, p_memory_run_id, p_task_id, p_user_id, p_content,
          coalesce(p_embedding, (select embedding from call_embeddings where call_key = p_embedding_key)), p_input_truncated_from)
  on conflict do nothing;
  perform complete_run(p_key, p_run_id, p_status, p_error, p_tier, p_budget);
end
$$;

--
-- Name: usage_cost(text, bigint, bigint, bigint, bigint, bigint, text, public.model_prices, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.usage_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices, p_at timestamp with time zone) RETURNS numeric
    LANGUAGE plpgsql STABLE
    AS $$
declare
  v_tier text := price_tier(p_tier);
  v_long boolean := is_long_context(p, p_prompt);
  r model_price_rates := price_rates(p, v_tier, v_long);
  -- what the rates are of, when not the standard ones ("batch tier long-context"); null for the standard ones
  v_of text := nullif(concat_ws(' ', case when v_tier <> 'standard' then v_tier || ' tier' end, case when v_long then 'long-context' end), '');
begin
  if p_kind = 'embedding' then
    perform price_class(r.embedding_input_per_million, p, p_at, concat_ws(' ', v_of, 'embedding input'));
  else
    perform price_class(r.input_per_million, p, p_at, concat_ws(' ', v_of, 'input'));
    perform price_class(r.output_per_million, p, p_at, concat_ws(' ', v_of, 'output'));
  end if;
  return call_cost(p_kind, p_prompt, p_cached, p_write_5m, p_write_1h, p_completion, r);
end
$$;

--
-- Name: worst_case_at_rates(text, bigint, bigint, public.model_price_rates); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.worst_case_at_rates(p_kind text, p_prompt bigint, p_completion bigint, r public.model_price_rates) RETURNS numeric
    LANGUAGE sql IMMUTABLE
    AS $$
  select case when p_kind = 'embedding' then r.embedding_input_per_million * p_prompt * 0.000001
              when r.input_per_million is null or r.output_per_million is null then null
              else greatest(r.input_per_million, r.cached_input_per_million, r.cache_write_5m_per_million, r.cache_write_1h_per_million)
                     * p_prompt * 0.000001
                   + r.output_per_million * p_completion * 0.000001 end
$$;

--
-- Name: worst_case_call_cost(text, bigint, bigint, text, public.model_prices); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.worst_case_call_cost(p_kind text, p_prompt bigint, p_completion bigint, p_tier text, p public.model_prices) RETURNS numeric
    LANGUAGE plpgsql STABLE
    AS $$
declare
  v_tier text := price_tier(p_tier);
  v_base model_price_rates := price_rates(p, v_tier, false);
  v_long model_price_rates;
  v_base_cost numeric;
  v_long_cost numeric;
begin
  if not is_long_context(p, p_prompt) then
    return worst_case_at_rates(p_kind, p_prompt, p_completion, v_base);
  end if;
  v_long := price_rates(p, v_tier, true);
  v_base_cost := worst_case_at_rates(p_kind, p.long_context_above, p_completion, v_base);
  v_long_cost := worst_case_at_rates(p_kind, p_prompt, p_completion, v_long);
  return case when v_base_cost is null or v_long_cost is null then null else greatest(v_base_cost, v_long_cost) end;
end
$$;

--
-- Name: worst_case_cost(jsonb, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.worst_case_cost(p_call jsonb, p_model text, p_at timestamp with time zone) RETURNS numeric
    LANGUAGE plpgsql STABLE
    AS $$
declare
  p model_prices := price_in_force(p_model, p_at);
  v_kind text := p_call ->> 'kind';
  v_prompt bigint := (p_call ->> 'prompt')::bigint;
  v_completion bigint := (p_call ->> 'completion')::bigint;
  v_cost numeric := worst_case_call_cost(v_kind, v_prompt, v_completion, p_call ->> 'tier', p);
begin
  if v_cost is null then
    perform usage_cost(v_kind, least(v_prompt, coalesce(p.long_context_above, v_prompt)), 0, 0, 0, v_completion, p_call ->> 'tier', p, p_at);
    perform usage_cost(v_kind, v_prompt, 0, 0, 0, v_completion, p_call ->> 'tier', p, p_at);
  end if;
  return v_cost;
end
$$;

--
-- Name: written_by_table_owner(regclass); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.written_by_table_owner(p_table regclass) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  select pg_has_role(session_user, c.relowner, 'member') from pg_class c where c.oid = p_table
$$;

--
-- Name: applied_tasks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.applied_tasks (
    task_id text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: budget_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_events (
    event_id text NOT NULL,
    user_id text NOT NULL,
    time_zone text NOT NULL,
    month date NOT NULL,
    threshold integer NOT NULL,
    limit_usd numeric(38,18) NOT NULL,
    spent_usd numeric(38,18) NOT NULL,
    reserved_usd numeric(38,18) NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    delivered_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    last_attempt_at timestamp with time zone,
    kind text DEFAULT 'threshold'::text NOT NULL,
    forecast_usd numeric(38,18),
    CONSTRAINT budget_events_kind_check CHECK ((kind = ANY (ARRAY['threshold'::text, 'forecast-over-limit'::text])))
);

--
-- Name: budget_forecasts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_forecasts (
    user_id text NOT NULL,
    time_zone text NOT NULL,
    month date NOT NULL,
    day date NOT NULL,
    median_usd numeric(38,18) NOT NULL,
    high_usd numeric(38,18) NOT NULL,
    limit_usd numeric(38,18),
    spent_usd numeric(38,18) NOT NULL,
    reserved_usd numeric(38,18) NOT NULL,
    computed_at timestamp with time zone DEFAULT now() NOT NULL,
    all_slots_median_usd numeric(38,18),
    all_slots_high_usd numeric(38,18),
    spend_by_day jsonb
);

--
-- Name: budget_months; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_months (
    user_id text NOT NULL,
    time_zone text NOT NULL,
    month date NOT NULL,
    spent_usd numeric(38,18) DEFAULT 0 NOT NULL
)
WITH (fillfactor='10');

--
-- Name: budget_pause_ends; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_pause_ends (
    pause_id bigint NOT NULL,
    resumed_at timestamp with time zone NOT NULL,
    cause text NOT NULL,
    skipped_slots integer NOT NULL,
    CONSTRAINT budget_pause_ends_cause_check CHECK ((cause = ANY (ARRAY['month-turnover'::text, 'limit-raised'::text]))),
    CONSTRAINT budget_pause_ends_skipped_slots_check CHECK ((skipped_slots >= 0))
);

--
-- Name: budget_pauses; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_pauses (
    id bigint NOT NULL,
    task_id text NOT NULL,
    user_id text NOT NULL,
    reason text NOT NULL,
    month date NOT NULL,
    time_zone text NOT NULL,
    limit_usd numeric(38,18),
    paused_by_run_id text NOT NULL,
    paused_at timestamp with time zone NOT NULL
);

--
-- Name: budget_pause_intervals; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.budget_pause_intervals AS
 SELECT p.id,
    p.task_id,
    p.user_id,
    p.paused_at,
    e.resumed_at,
    p.reason,
    p.month,
    p.time_zone,
    p.limit_usd,
    e.cause,
    e.skipped_slots
   FROM (public.budget_pauses p
     LEFT JOIN public.budget_pause_ends e ON ((e.pause_id = p.id)));

--
-- Name: budget_pauses_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.budget_pauses_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: budget_pauses_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.budget_pauses_id_seq OWNED BY public.budget_pauses.id;

--
-- Name: budget_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_reservations (
    idempotency_key text NOT NULL,
    user_id text NOT NULL,
    time_zone text NOT NULL,
    month date NOT NULL,
    amount_usd numeric(38,18) NOT NULL,
    model text NOT NULL,
    tier text NOT NULL,
    workflow_id text,
    run_id text,
    status text DEFAULT 'open'::text NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    closed_at timestamp with time zone,
    settled_entry_id bigint,
    reason text,
    CONSTRAINT budget_reservations_amount_usd_check CHECK ((amount_usd >= (0)::numeric)),
    CONSTRAINT budget_reservations_reason_check CHECK ((reason = 'max-cost-per-run'::text)),
    CONSTRAINT budget_reservations_status_check CHECK ((status = ANY (ARRAY['open'::text, 'settled'::text, 'released'::text, 'expired'::text]))),
    CONSTRAINT budget_reservations_tier_check CHECK ((tier = ANY (ARRAY['default'::text, 'cheap'::text])))
);

--
-- Name: budget_zones; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_zones (
    time_zone text NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: budgets_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.budgets_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: budgets_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.budgets_id_seq OWNED BY public.budgets.id;

--
-- Name: call_embeddings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.call_embeddings (
    call_key text NOT NULL,
    embedding jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: cost_per_run_days; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.cost_per_run_days (
    zone text NOT NULL,
    day date NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    cost_atto numeric NOT NULL,
    runs bigint NOT NULL,
    median_num numeric,
    median_den numeric,
    over_median_micro bigint,
    CONSTRAINT cost_per_run_days_check CHECK (((median_num IS NULL) = (median_den IS NULL))),
    CONSTRAINT cost_per_run_days_check1 CHECK (((over_median_micro IS NULL) = ((median_num IS NULL) OR (median_num <= (0)::numeric)))),
    CONSTRAINT cost_per_run_days_cost_atto_check CHECK ((cost_atto = trunc(cost_atto))),
    CONSTRAINT cost_per_run_days_kind_check CHECK ((kind = ANY (ARRAY['user'::text, 'task'::text]))),
    CONSTRAINT cost_per_run_days_median_den_check CHECK ((median_den > (0)::numeric)),
    CONSTRAINT cost_per_run_days_runs_check CHECK ((runs > 0))
);

--
-- Name: cost_per_run_stale; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.cost_per_run_stale (
    zone text NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    first_day date NOT NULL,
    last_day date NOT NULL,
    CONSTRAINT cost_per_run_stale_check CHECK ((last_day >= first_day)),
    CONSTRAINT cost_per_run_stale_kind_check CHECK ((kind = ANY (ARRAY['user'::text, 'task'::text])))
);

--
-- Name: memories; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.memories (
    run_workflow_id text NOT NULL,
    task_id text NOT NULL,
    user_id text NOT NULL,
    content text NOT NULL,
    embedding jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    temporal_run_id text,
    input_truncated_from bigint
);

--
-- Name: metric_entry_figures; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.metric_entry_figures AS
 SELECT l.id,
    l.model,
    l.kind,
    l.user_id,
    GREATEST(l.cost_usd, (0)::numeric) AS charge_usd,
    GREATEST((- l.cost_usd), (0)::numeric) AS credit_usd,
    x.lag_ms,
    public.metric_bucket('booking_lag'::text, x.lag_ms) AS lag_bucket
   FROM (public.usage_ledger l
     CROSS JOIN LATERAL ( SELECT public.metric_booking_lag_ms(l.usage_received_at, l.booked_at) AS lag_ms) x);

--
-- Name: metric_histograms; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.metric_histograms (
    histogram public.metric_histogram_name NOT NULL,
    shard smallint NOT NULL,
    bucket integer NOT NULL,
    observations bigint NOT NULL,
    sum_ms bigint NOT NULL
)
WITH (fillfactor='10');

--
-- Name: metric_ledger_totals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.metric_ledger_totals (
    model text,
    kind text,
    user_id text NOT NULL,
    charges_usd public.usd_not_negative DEFAULT 0 NOT NULL,
    credits_usd public.usd_not_negative DEFAULT 0 NOT NULL
)
WITH (fillfactor='10');

--
-- Name: metric_run_counts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.metric_run_counts (
    shard smallint NOT NULL,
    status text NOT NULL,
    tier text,
    runs bigint NOT NULL
);

--
-- Name: model_downgrades; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.model_downgrades (
    id bigint NOT NULL,
    model text NOT NULL,
    cheap_model text,
    effective_from timestamp with time zone DEFAULT now() NOT NULL,
    source text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text
);

--
-- Name: model_downgrades_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.model_downgrades_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: model_downgrades_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.model_downgrades_id_seq OWNED BY public.model_downgrades.id;

--
-- Name: model_prices_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.model_prices_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: model_prices_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.model_prices_id_seq OWNED BY public.model_prices.id;

--
-- Name: provider_usage_rows; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_usage_rows (
    import_id bigint NOT NULL,
    day date NOT NULL,
    model text NOT NULL,
    token_class text NOT NULL,
    service_tier text NOT NULL,
    project_id text,
    api_key_id text,
    tokens bigint,
    cost_usd numeric(38,18),
    in_scope boolean NOT NULL,
    CONSTRAINT provider_usage_rows_check CHECK (((tokens IS NULL) <> (cost_usd IS NULL))),
    CONSTRAINT provider_usage_rows_tokens_check CHECK ((tokens >= 0))
);

--
-- Name: rate_limit_hours; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rate_limit_hours (
    model text NOT NULL,
    hour timestamp with time zone NOT NULL,
    waited bigint DEFAULT 0 NOT NULL,
    waited_us bigint DEFAULT 0 NOT NULL,
    throttled bigint DEFAULT 0 NOT NULL,
    CONSTRAINT rate_limit_hours_throttled_check CHECK ((throttled >= 0)),
    CONSTRAINT rate_limit_hours_waited_check CHECK ((waited >= 0)),
    CONSTRAINT rate_limit_hours_waited_us_check CHECK ((waited_us >= 0))
);

--
-- Name: rate_limit_state; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rate_limit_state (
    model text NOT NULL,
    requests_tat_us bigint DEFAULT 0 NOT NULL,
    tokens_tat_us bigint DEFAULT 0 NOT NULL,
    held_until_us bigint DEFAULT 0 NOT NULL,
    admitted bigint DEFAULT 0 NOT NULL,
    waited bigint DEFAULT 0 NOT NULL,
    waited_us bigint DEFAULT 0 NOT NULL,
    throttled bigint DEFAULT 0 NOT NULL
);

--
-- Name: rate_limits; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rate_limits (
    model text NOT NULL,
    requests_per_minute integer,
    tokens_per_minute bigint,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    applied_by text DEFAULT SESSION_USER NOT NULL,
    CONSTRAINT rate_limits_check CHECK (((requests_per_minute IS NOT NULL) OR (tokens_per_minute IS NOT NULL))),
    CONSTRAINT rate_limits_requests_per_minute_check CHECK (((requests_per_minute >= 1) AND (requests_per_minute <= 1000000000))),
    CONSTRAINT rate_limits_tokens_per_minute_check CHECK (((tokens_per_minute >= 1) AND (tokens_per_minute <= '1000000000000'::bigint)))
);

--
-- Name: reconciliation_entries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reconciliation_entries (
    ledger_entry_id bigint NOT NULL,
    import_id bigint NOT NULL,
    provider text NOT NULL,
    day date NOT NULL,
    model text NOT NULL,
    token_class text NOT NULL,
    service_tier text NOT NULL,
    tokens bigint NOT NULL
);

--
-- Name: reconciliation_imports; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reconciliation_imports (
    id bigint NOT NULL,
    provider text NOT NULL,
    source text NOT NULL,
    from_day date NOT NULL,
    to_day date NOT NULL,
    pages_sha256 text NOT NULL,
    scope jsonb NOT NULL,
    imported_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text NOT NULL,
    CONSTRAINT reconciliation_imports_check CHECK ((to_day >= from_day)),
    CONSTRAINT reconciliation_imports_pages_sha256_check CHECK ((pages_sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT reconciliation_imports_provider_check CHECK ((provider = ANY (ARRAY['openai'::text, 'anthropic'::text]))),
    CONSTRAINT reconciliation_imports_source_check CHECK ((source = ANY (ARRAY['api'::text, 'file'::text])))
);

--
-- Name: reconciliation_imports_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.reconciliation_imports_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: reconciliation_imports_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.reconciliation_imports_id_seq OWNED BY public.reconciliation_imports.id;

--
-- Name: report_deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.report_deliveries (
    id bigint NOT NULL,
    month text NOT NULL,
    time_zone text NOT NULL,
    complete boolean NOT NULL,
    report_sha256 text NOT NULL,
    target text NOT NULL,
    workflow_id text,
    attempt integer,
    response_status integer,
    delivered_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT report_deliveries_month_check CHECK ((month ~ '^\d{4}-(0[1-9]|1[0-2])$'::text))
);

--
-- Name: report_deliveries_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.report_deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: report_deliveries_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.report_deliveries_id_seq OWNED BY public.report_deliveries.id;

--
-- Name: rollup_months; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rollup_months (
    zone text NOT NULL,
    month text NOT NULL,
    built_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT rollup_months_month_check CHECK ((month ~ '^\d{4}-(0[1-9]|1[0-2])$'::text))
);

--
-- Name: rollup_pending; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rollup_pending (
    slot timestamp with time zone NOT NULL,
    shard smallint NOT NULL,
    model text,
    kind text,
    entry_type text NOT NULL,
    status text NOT NULL,
    entries bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    cached_prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    reasoning_tokens bigint NOT NULL,
    cost_usd numeric(38,18) NOT NULL
)
WITH (fillfactor='10');

--
-- Name: rollup_pending_users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rollup_pending_users (
    user_id text NOT NULL,
    at timestamp with time zone NOT NULL,
    usage_entries bigint NOT NULL
)
WITH (fillfactor='10');

--
-- Name: rollup_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rollup_queue (
    entry_id bigint NOT NULL,
    shard smallint DEFAULT ((pg_backend_pid() % 8))::smallint NOT NULL
);

--
-- Name: rollup_verifications_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.rollup_verifications_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: rollup_verifications_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.rollup_verifications_id_seq OWNED BY public.rollup_verifications.id;

--
-- Name: rollup_zones; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.rollup_zones (
    zone text NOT NULL,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    refreshed_at timestamp with time zone,
    last_entry_id bigint DEFAULT 0 NOT NULL,
    entries_folded bigint DEFAULT 0 NOT NULL
);

--
-- Name: run_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_attempts (
    id bigint NOT NULL,
    idempotency_key text NOT NULL,
    generation integer NOT NULL,
    workflow_id text NOT NULL,
    temporal_run_id text NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    claimed_by text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    error text,
    CONSTRAINT run_attempts_generation_check CHECK ((generation >= 1)),
    CONSTRAINT run_attempts_status_check CHECK ((status = ANY (ARRAY['running'::text, 'completed'::text, 'failed'::text, 'cancelled'::text, 'stale'::text, 'blocked'::text])))
);

--
-- Name: run_attempts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.run_attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: run_attempts_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.run_attempts_id_seq OWNED BY public.run_attempts.id;

--
-- Name: run_duplicates; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_duplicates (
    temporal_run_id text NOT NULL,
    workflow_id text NOT NULL,
    idempotency_key text NOT NULL,
    task_id text NOT NULL,
    user_id text NOT NULL,
    detected_by text NOT NULL,
    detected_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: run_rollup_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_rollup_queue (
    id bigint NOT NULL,
    claimed_at timestamp with time zone NOT NULL,
    user_id text NOT NULL,
    task_id text NOT NULL
);

--
-- Name: run_rollup_queue_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.run_rollup_queue_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: run_rollup_queue_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.run_rollup_queue_id_seq OWNED BY public.run_rollup_queue.id;

--
-- Name: run_rollups; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_rollups (
    zone text NOT NULL,
    day date NOT NULL,
    user_id text NOT NULL,
    task_id text NOT NULL,
    status text NOT NULL,
    tier text,
    runs bigint NOT NULL
);

--
-- Name: runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.runs (
    id bigint NOT NULL,
    idempotency_key text NOT NULL,
    task_id text NOT NULL,
    user_id text NOT NULL,
    workflow_id text NOT NULL,
    temporal_run_id text NOT NULL,
    scheduled_minute timestamp with time zone NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    claimed_by text NOT NULL,
    claimed_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    duration_ms bigint,
    error text,
    generation integer DEFAULT 1 NOT NULL,
    manual boolean DEFAULT false NOT NULL,
    tier text,
    budget jsonb,
    CONSTRAINT runs_generation_check CHECK ((generation >= 1)),
    CONSTRAINT runs_status_check CHECK ((status = ANY (ARRAY['running'::text, 'completed'::text, 'failed'::text, 'cancelled'::text, 'blocked'::text, 'rejected'::text]))),
    CONSTRAINT runs_tier_check CHECK ((tier = ANY (ARRAY['default'::text, 'cheap'::text, 'blocked'::text])))
);

--
-- Name: runs_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: runs_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.runs_id_seq OWNED BY public.runs.id;

--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: task_versions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.task_versions (
    task_id text NOT NULL,
    fingerprint text NOT NULL,
    definition jsonb NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    applied_by text DEFAULT SESSION_USER NOT NULL
);

--
-- Name: usage_day_totals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_day_totals (
    zone text NOT NULL,
    day date NOT NULL,
    model text,
    kind text,
    entry_type text NOT NULL,
    status text NOT NULL,
    entries bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    cached_prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    reasoning_tokens bigint NOT NULL,
    cost_usd numeric(38,18) NOT NULL,
    first_entry_id bigint NOT NULL,
    last_entry_id bigint NOT NULL
);

--
-- Name: usage_day_users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_day_users (
    zone text NOT NULL,
    day date NOT NULL,
    user_id text NOT NULL,
    task_id text,
    entry_type text NOT NULL,
    entries bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    cached_prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    reasoning_tokens bigint NOT NULL,
    cost_usd numeric(38,18) NOT NULL,
    first_entry_id bigint NOT NULL,
    last_entry_id bigint NOT NULL
);

--
-- Name: usage_exceptions_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.usage_exceptions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: usage_exceptions_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.usage_exceptions_id_seq OWNED BY public.usage_exceptions.id;

--
-- Name: usage_ledger_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.usage_ledger_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: usage_ledger_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.usage_ledger_id_seq OWNED BY public.usage_ledger.id;

--
-- Name: usage_month_rollups; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_month_rollups (
    zone text NOT NULL,
    month text NOT NULL,
    user_id text NOT NULL,
    model text,
    kind text,
    entry_type text NOT NULL,
    status text NOT NULL,
    entries bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    cached_prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    reasoning_tokens bigint NOT NULL,
    cost_usd numeric(38,18) NOT NULL,
    first_entry_id bigint NOT NULL,
    last_entry_id bigint NOT NULL,
    CONSTRAINT usage_month_rollups_month_check CHECK ((month ~ '^\d{4}-(0[1-9]|1[0-2])$'::text))
);

--
-- Name: usage_rollups; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_rollups (
    zone text NOT NULL,
    day date NOT NULL,
    user_id text NOT NULL,
    model text,
    kind text,
    entry_type text NOT NULL,
    status text NOT NULL,
    entries bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    cached_prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    reasoning_tokens bigint NOT NULL,
    cost_usd numeric(38,18) NOT NULL,
    first_entry_id bigint NOT NULL,
    last_entry_id bigint NOT NULL,
    task_id text
);

--
-- Name: budget_pauses id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_pauses ALTER COLUMN id SET DEFAULT nextval('public.budget_pauses_id_seq'::regclass);

--
-- Name: budgets id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budgets ALTER COLUMN id SET DEFAULT nextval('public.budgets_id_seq'::regclass);

--
-- Name: model_downgrades id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_downgrades ALTER COLUMN id SET DEFAULT nextval('public.model_downgrades_id_seq'::regclass);

--
-- Name: model_prices id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_prices ALTER COLUMN id SET DEFAULT nextval('public.model_prices_id_seq'::regclass);

--
-- Name: reconciliation_imports id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reconciliation_imports ALTER COLUMN id SET DEFAULT nextval('public.reconciliation_imports_id_seq'::regclass);

--
-- Name: report_deliveries id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.report_deliveries ALTER COLUMN id SET DEFAULT nextval('public.report_deliveries_id_seq'::regclass);

--
-- Name: rollup_verifications id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rollup_verifications ALTER COLUMN id SET DEFAULT nextval('public.rollup_verifications_id_seq'::regclass);

--
-- Name: run_attempts id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_attempts ALTER COLUMN id SET DEFAULT nextval('public.run_attempts_id_seq'::regclass);

--
-- Name: run_rollup_queue id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_rollup_queue ALTER COLUMN id SET DEFAULT nextval('public.run_rollup_queue_id_seq'::regclass);

--
-- Name: runs id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs ALTER COLUMN id SET DEFAULT nextval('public.runs_id_seq'::regclass);

--
-- Name: usage_exceptions id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_exceptions ALTER COLUMN id SET DEFAULT nextval('public.usage_exceptions_id_seq'::regclass);

--
-- Name: usage_ledger id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger ALTER COLUMN id SET DEFAULT nextval('public.usage_ledger_id_seq'::regclass);

--
-- Name: applied_tasks applied_tasks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.applied_tasks
    ADD CONSTRAINT applied_tasks_pkey PRIMARY KEY (task_id);

--
-- Name: budget_events budget_events_once; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_events
    ADD CONSTRAINT budget_events_once UNIQUE (user_id, time_zone, month, threshold, kind);

--
-- Name: budget_events budget_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_events
    ADD CONSTRAINT budget_events_pkey PRIMARY KEY (event_id);

--
-- Name: budget_forecasts budget_forecasts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_forecasts
    ADD CONSTRAINT budget_forecasts_pkey PRIMARY KEY (user_id, time_zone, month, day);

--
-- Name: budget_months budget_months_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_months
    ADD CONSTRAINT budget_months_pkey PRIMARY KEY (user_id, time_zone, month);

--
-- Name: budget_pause_ends budget_pause_ends_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_pause_ends
    ADD CONSTRAINT budget_pause_ends_pkey PRIMARY KEY (pause_id);

--
-- Name: budget_pauses budget_pauses_paused_by_run_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_pauses
    ADD CONSTRAINT budget_pauses_paused_by_run_id_key UNIQUE (paused_by_run_id);

--
-- Name: budget_pauses budget_pauses_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_pauses
    ADD CONSTRAINT budget_pauses_pkey PRIMARY KEY (id);

--
-- Name: budget_reservations budget_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_reservations
    ADD CONSTRAINT budget_reservations_pkey PRIMARY KEY (idempotency_key);

--
-- Name: budget_zones budget_zones_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_zones
    ADD CONSTRAINT budget_zones_pkey PRIMARY KEY (time_zone);

--
-- Name: budgets budgets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budgets
    ADD CONSTRAINT budgets_pkey PRIMARY KEY (id);

--
-- Name: call_embeddings call_embeddings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.call_embeddings
    ADD CONSTRAINT call_embeddings_pkey PRIMARY KEY (call_key);

--
-- Name: cost_per_run_days cost_per_run_days_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.cost_per_run_days
    ADD CONSTRAINT cost_per_run_days_pkey PRIMARY KEY (zone, day, kind, key);

--
-- Name: cost_per_run_stale cost_per_run_stale_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.cost_per_run_stale
    ADD CONSTRAINT cost_per_run_stale_pkey PRIMARY KEY (zone, kind, key);

--
-- Name: metric_histograms metric_histograms_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.metric_histograms
    ADD CONSTRAINT metric_histograms_pkey PRIMARY KEY (histogram, shard, bucket);

--
-- Name: metric_ledger_totals metric_ledger_totals_model_kind_user_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.metric_ledger_totals
    ADD CONSTRAINT metric_ledger_totals_model_kind_user_id_key UNIQUE NULLS NOT DISTINCT (model, kind, user_id);

--
-- Name: metric_run_counts metric_run_counts_shard_status_tier_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.metric_run_counts
    ADD CONSTRAINT metric_run_counts_shard_status_tier_key UNIQUE NULLS NOT DISTINCT (shard, status, tier);

--
-- Name: model_downgrades model_downgrades_model_effective_from_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_downgrades
    ADD CONSTRAINT model_downgrades_model_effective_from_key UNIQUE (model, effective_from);

--
-- Name: model_downgrades model_downgrades_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_downgrades
    ADD CONSTRAINT model_downgrades_pkey PRIMARY KEY (id);

--
-- Name: model_price_rates model_price_rates_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_price_rates
    ADD CONSTRAINT model_price_rates_pkey PRIMARY KEY (price_id, service_tier, long_context);

--
-- Name: model_prices model_prices_model_effective_from_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_prices
    ADD CONSTRAINT model_prices_model_effective_from_key UNIQUE (model, effective_from);

--
-- Name: model_prices model_prices_model_version_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_prices
    ADD CONSTRAINT model_prices_model_version_key UNIQUE (model, version);

--
-- Name: model_prices model_prices_not_negative; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.model_prices
    ADD CONSTRAINT model_prices_not_negative CHECK (((input_per_million >= (0)::numeric) AND (cached_input_per_million >= (0)::numeric) AND (output_per_million >= (0)::numeric) AND (embedding_input_per_million >= (0)::numeric))) NOT VALID;

--
-- Name: model_prices model_prices_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_prices
    ADD CONSTRAINT model_prices_pkey PRIMARY KEY (id);

--
-- Name: rate_limit_hours rate_limit_hours_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rate_limit_hours
    ADD CONSTRAINT rate_limit_hours_pkey PRIMARY KEY (model, hour);

--
-- Name: rate_limit_state rate_limit_state_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rate_limit_state
    ADD CONSTRAINT rate_limit_state_pkey PRIMARY KEY (model);

--
-- Name: rate_limits rate_limits_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rate_limits
    ADD CONSTRAINT rate_limits_pkey PRIMARY KEY (model);

--
-- Name: reconciliation_entries reconciliation_entries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reconciliation_entries
    ADD CONSTRAINT reconciliation_entries_pkey PRIMARY KEY (ledger_entry_id);

--
-- Name: reconciliation_imports reconciliation_imports_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reconciliation_imports
    ADD CONSTRAINT reconciliation_imports_pkey PRIMARY KEY (id);

--
-- Name: report_deliveries report_deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.report_deliveries
    ADD CONSTRAINT report_deliveries_pkey PRIMARY KEY (id);

--
-- Name: rollup_months rollup_months_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rollup_months
    ADD CONSTRAINT rollup_months_pkey PRIMARY KEY (zone, month);

--
-- Name: rollup_pending rollup_pending_bucket; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rollup_pending
    ADD CONSTRAINT rollup_pending_bucket UNIQUE NULLS NOT DISTINCT (slot, shard, model, kind, entry_type, status);

--
-- Name: rollup_pending_users rollup_pending_users_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rollup_pending_users
    ADD CONSTRAINT rollup_pending_users_pkey PRIMARY KEY (user_id, at);

--
-- Name: rollup_queue rollup_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rollup_queue
    ADD CONSTRAINT rollup_queue_pkey PRIMARY KEY (entry_id);

--
-- Name: rollup_verifications rollup_verifications_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rollup_verifications
    ADD CONSTRAINT rollup_verifications_pkey PRIMARY KEY (id);

--
-- Name: rollup_zones rollup_zones_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rollup_zones
    ADD CONSTRAINT rollup_zones_pkey PRIMARY KEY (zone);

--
-- Name: run_attempts run_attempts_idempotency_key_generation_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_attempts
    ADD CONSTRAINT run_attempts_idempotency_key_generation_key UNIQUE (idempotency_key, generation);

--
-- Name: run_attempts run_attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_attempts
    ADD CONSTRAINT run_attempts_pkey PRIMARY KEY (id);

--
-- Name: run_attempts run_attempts_temporal_run_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_attempts
    ADD CONSTRAINT run_attempts_temporal_run_id_key UNIQUE (temporal_run_id);

--
-- Name: run_duplicates run_duplicates_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_duplicates
    ADD CONSTRAINT run_duplicates_pkey PRIMARY KEY (temporal_run_id);

--
-- Name: run_rollup_queue run_rollup_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_rollup_queue
    ADD CONSTRAINT run_rollup_queue_pkey PRIMARY KEY (id);

--
-- Name: run_rollups run_rollups_bucket; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_rollups
    ADD CONSTRAINT run_rollups_bucket UNIQUE NULLS NOT DISTINCT (zone, day, user_id, task_id, status, tier);

--
-- Name: runs runs_idempotency_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_idempotency_key_key UNIQUE (idempotency_key);

--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);

--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (name);

--
-- Name: task_versions task_versions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.task_versions
    ADD CONSTRAINT task_versions_pkey PRIMARY KEY (task_id, fingerprint);

--
-- Name: usage_day_totals usage_day_totals_bucket; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_day_totals
    ADD CONSTRAINT usage_day_totals_bucket UNIQUE NULLS NOT DISTINCT (zone, day, model, kind, entry_type, status);

--
-- Name: usage_day_users usage_day_users_bucket; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_day_users
    ADD CONSTRAINT usage_day_users_bucket UNIQUE NULLS NOT DISTINCT (zone, day, user_id, task_id, entry_type);

--
-- Name: usage_exceptions usage_exceptions_idempotency_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_exceptions
    ADD CONSTRAINT usage_exceptions_idempotency_key_key UNIQUE (idempotency_key);

--
-- Name: usage_exceptions usage_exceptions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_exceptions
    ADD CONSTRAINT usage_exceptions_pkey PRIMARY KEY (id);

--
-- Name: usage_ledger usage_ledger_idempotency_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger
    ADD CONSTRAINT usage_ledger_idempotency_key_key UNIQUE (idempotency_key);

--
-- Name: usage_ledger usage_ledger_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger
    ADD CONSTRAINT usage_ledger_pkey PRIMARY KEY (id);

--
-- Name: usage_ledger usage_ledger_reason_not_blank; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.usage_ledger
    ADD CONSTRAINT usage_ledger_reason_not_blank CHECK ((btrim(reason, ' 	
'::text) <> ''::text)) NOT VALID;

--
-- Name: usage_month_rollups usage_month_rollups_bucket; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_month_rollups
    ADD CONSTRAINT usage_month_rollups_bucket UNIQUE NULLS NOT DISTINCT (zone, month, user_id, model, kind, entry_type, status);

--
-- Name: usage_rollups usage_rollups_bucket; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_rollups
    ADD CONSTRAINT usage_rollups_bucket UNIQUE NULLS NOT DISTINCT (zone, day, user_id, task_id, model, kind, entry_type, status);

--
-- Name: budget_pauses_task; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX budget_pauses_task ON public.budget_pauses USING btree (task_id, paused_at);

--
-- Name: budget_reservations_open; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX budget_reservations_open ON public.budget_reservations USING btree (user_id, time_zone, month) WHERE (status = 'open'::text);

--
-- Name: budget_reservations_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX budget_reservations_run ON public.budget_reservations USING btree (run_id) WHERE (status = 'open'::text);

--
-- Name: budgets_scope_effective; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX budgets_scope_effective ON public.budgets USING btree (COALESCE(user_id, ''::text), effective_from);

--
-- Name: budgets_user_effective; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX budgets_user_effective ON public.budgets USING btree (user_id, effective_from DESC);

--
-- Name: cost_per_run_days_key; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX cost_per_run_days_key ON public.cost_per_run_days USING btree (zone, kind, key, day);

--
-- Name: memories_execution; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX memories_execution ON public.memories USING btree (COALESCE(temporal_run_id, run_workflow_id));

--
-- Name: provider_usage_rows_import; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX provider_usage_rows_import ON public.provider_usage_rows USING btree (import_id);

--
-- Name: reconciliation_entries_key; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX reconciliation_entries_key ON public.reconciliation_entries USING btree (provider, day);

--
-- Name: report_deliveries_month_once; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX report_deliveries_month_once ON public.report_deliveries USING btree (month) WHERE complete;

--
-- Name: report_deliveries_partial_once; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX report_deliveries_partial_once ON public.report_deliveries USING btree (month, report_sha256) WHERE (NOT complete);

--
-- Name: run_duplicates_detected_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX run_duplicates_detected_at ON public.run_duplicates USING btree (detected_at);

--
-- Name: runs_cheap_workflow; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_cheap_workflow ON public.runs USING btree (workflow_id) WHERE (tier = 'cheap'::text);

--
-- Name: runs_claimed_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_claimed_at ON public.runs USING btree (claimed_at);

--
-- Name: runs_task_minute; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_task_minute ON public.runs USING btree (task_id, scheduled_minute DESC);

--
-- Name: runs_user_task_claimed; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_user_task_claimed ON public.runs USING btree (user_id, task_id, claimed_at);

--
-- Name: usage_exceptions_created_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_exceptions_created_at ON public.usage_exceptions USING btree (created_at);

--
-- Name: usage_ledger_created_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_ledger_created_at ON public.usage_ledger USING btree (created_at);

--
-- Name: usage_ledger_model_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_ledger_model_created ON public.usage_ledger USING btree (model, created_at);

--
-- Name: usage_ledger_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_ledger_run ON public.usage_ledger USING btree (run_id);

--
-- Name: usage_ledger_user_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_ledger_user_created ON public.usage_ledger USING btree (user_id, created_at);

--
-- Name: usage_ledger_workflow; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_ledger_workflow ON public.usage_ledger USING btree (workflow_id);

--
-- Name: budget_forecasts budget_forecasts_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budget_forecasts_append_only BEFORE DELETE OR UPDATE ON public.budget_forecasts FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: budget_forecasts budget_forecasts_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budget_forecasts_no_truncate BEFORE TRUNCATE ON public.budget_forecasts FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: budget_pause_ends budget_pause_ends_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budget_pause_ends_append_only BEFORE DELETE OR UPDATE ON public.budget_pause_ends FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: budget_pause_ends budget_pause_ends_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budget_pause_ends_no_truncate BEFORE TRUNCATE ON public.budget_pause_ends FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: budget_pauses budget_pauses_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budget_pauses_append_only BEFORE DELETE OR UPDATE ON public.budget_pauses FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: budget_pauses budget_pauses_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budget_pauses_no_truncate BEFORE TRUNCATE ON public.budget_pauses FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: budgets budgets_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budgets_append_only BEFORE DELETE OR UPDATE ON public.budgets FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: budgets budgets_created_by; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budgets_created_by BEFORE INSERT ON public.budgets FOR EACH ROW EXECUTE FUNCTION public.stamp_created_by();

--
-- Name: budgets budgets_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budgets_no_truncate BEFORE TRUNCATE ON public.budgets FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: budgets budgets_track_zone; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER budgets_track_zone AFTER INSERT ON public.budgets FOR EACH ROW EXECUTE FUNCTION public.budget_track_zone();

--
-- Name: model_downgrades model_downgrades_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_downgrades_append_only BEFORE DELETE OR UPDATE ON public.model_downgrades FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: model_downgrades model_downgrades_created_by; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_downgrades_created_by BEFORE INSERT ON public.model_downgrades FOR EACH ROW EXECUTE FUNCTION public.stamp_created_by();

--
-- Name: model_price_rates model_price_rates_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_price_rates_append_only BEFORE DELETE OR UPDATE ON public.model_price_rates FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: model_price_rates model_price_rates_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_price_rates_no_truncate BEFORE TRUNCATE ON public.model_price_rates FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: model_prices model_prices_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_prices_append_only BEFORE DELETE OR UPDATE ON public.model_prices FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: model_prices model_prices_created_by; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_prices_created_by BEFORE INSERT ON public.model_prices FOR EACH ROW EXECUTE FUNCTION public.stamp_created_by();

--
-- Name: model_prices model_prices_dated_now; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_prices_dated_now BEFORE INSERT ON public.model_prices FOR EACH ROW EXECUTE FUNCTION public.refuse_backdated_price();

--
-- Name: model_prices model_prices_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_prices_no_truncate BEFORE TRUNCATE ON public.model_prices FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: provider_usage_rows provider_usage_rows_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER provider_usage_rows_append_only BEFORE DELETE OR UPDATE ON public.provider_usage_rows FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: provider_usage_rows provider_usage_rows_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER provider_usage_rows_no_truncate BEFORE TRUNCATE ON public.provider_usage_rows FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: rate_limit_state rate_limit_state_hours; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER rate_limit_state_hours AFTER UPDATE ON public.rate_limit_state FOR EACH ROW WHEN (((new.waited > old.waited) OR (new.waited_us > old.waited_us) OR (new.throttled > old.throttled))) EXECUTE FUNCTION public.rate_limit_count_hour();

--
-- Name: reconciliation_entries reconciliation_entries_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER reconciliation_entries_append_only BEFORE DELETE OR UPDATE ON public.reconciliation_entries FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: reconciliation_entries reconciliation_entries_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER reconciliation_entries_no_truncate BEFORE TRUNCATE ON public.reconciliation_entries FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: reconciliation_imports reconciliation_imports_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER reconciliation_imports_append_only BEFORE DELETE OR UPDATE ON public.reconciliation_imports FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: reconciliation_imports reconciliation_imports_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER reconciliation_imports_no_truncate BEFORE TRUNCATE ON public.reconciliation_imports FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: rollup_queue rollup_queue_metrics_out; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER rollup_queue_metrics_out AFTER DELETE ON public.rollup_queue REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.metric_ledger_fold();

--
-- Name: rollup_queue rollup_queue_pending_out; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER rollup_queue_pending_out AFTER DELETE ON public.rollup_queue REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.rollup_pending_change();

--
-- Name: rollup_verifications rollup_verifications_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER rollup_verifications_append_only BEFORE DELETE OR UPDATE ON public.rollup_verifications FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: rollup_verifications rollup_verifications_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER rollup_verifications_no_truncate BEFORE TRUNCATE ON public.rollup_verifications FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: run_duplicates run_duplicates_metric_counts; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER run_duplicates_metric_counts AFTER INSERT OR DELETE ON public.run_duplicates FOR EACH ROW EXECUTE FUNCTION public.metric_count_duplicate();

--
-- Name: runs runs_metric_counts; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_metric_counts AFTER INSERT OR DELETE ON public.runs FOR EACH ROW EXECUTE FUNCTION public.metric_count_run();

--
-- Name: runs runs_metric_counts_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_metric_counts_update AFTER UPDATE OF status, tier, duration_ms ON public.runs FOR EACH ROW WHEN (((old.status IS DISTINCT FROM new.status) OR (old.tier IS DISTINCT FROM new.tier) OR (old.duration_ms IS DISTINCT FROM new.duration_ms))) EXECUTE FUNCTION public.metric_count_run();

--
-- Name: runs runs_queue_rollups_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_queue_rollups_insert AFTER INSERT ON public.runs REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION public.queue_runs_for_rollups();

--
-- Name: runs runs_queue_rollups_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_queue_rollups_update AFTER UPDATE ON public.runs REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION public.queue_runs_for_rollups();

--
-- Name: task_versions task_versions_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER task_versions_append_only BEFORE DELETE OR UPDATE ON public.task_versions FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: task_versions task_versions_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER task_versions_no_truncate BEFORE TRUNCATE ON public.task_versions FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: usage_exceptions usage_exceptions_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER usage_exceptions_append_only BEFORE DELETE OR UPDATE ON public.usage_exceptions FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: usage_exceptions usage_exceptions_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER usage_exceptions_no_truncate BEFORE TRUNCATE ON public.usage_exceptions FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: usage_ledger usage_ledger_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER usage_ledger_append_only BEFORE DELETE OR UPDATE ON public.usage_ledger FOR EACH ROW EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: usage_ledger usage_ledger_booked; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER usage_ledger_booked AFTER INSERT ON public.usage_ledger FOR EACH ROW EXECUTE FUNCTION public.book_ledger_entry();

--
-- Name: usage_ledger usage_ledger_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER usage_ledger_no_truncate BEFORE TRUNCATE ON public.usage_ledger FOR EACH STATEMENT EXECUTE FUNCTION public.forbid_append_only_change();

--
-- Name: usage_ledger usage_ledger_stamped; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER usage_ledger_stamped BEFORE INSERT ON public.usage_ledger FOR EACH ROW EXECUTE FUNCTION public.stamp_ledger_entry();

--
-- Name: budget_months budget_months_time_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_months
    ADD CONSTRAINT budget_months_time_zone_fkey FOREIGN KEY (time_zone) REFERENCES public.budget_zones(time_zone);

--
-- Name: budget_pause_ends budget_pause_ends_pause_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_pause_ends
    ADD CONSTRAINT budget_pause_ends_pause_id_fkey FOREIGN KEY (pause_id) REFERENCES public.budget_pauses(id);

--
-- Name: cost_per_run_days cost_per_run_days_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.cost_per_run_days
    ADD CONSTRAINT cost_per_run_days_zone_fkey FOREIGN KEY (zone) REFERENCES public.rollup_zones(zone) ON DELETE CASCADE;

--
-- Name: cost_per_run_stale cost_per_run_stale_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.cost_per_run_stale
    ADD CONSTRAINT cost_per_run_stale_zone_fkey FOREIGN KEY (zone) REFERENCES public.rollup_zones(zone) ON DELETE CASCADE;

--
-- Name: model_price_rates model_price_rates_price_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_price_rates
    ADD CONSTRAINT model_price_rates_price_id_fkey FOREIGN KEY (price_id) REFERENCES public.model_prices(id);

--
-- Name: provider_usage_rows provider_usage_rows_import_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_usage_rows
    ADD CONSTRAINT provider_usage_rows_import_id_fkey FOREIGN KEY (import_id) REFERENCES public.reconciliation_imports(id);

--
-- Name: reconciliation_entries reconciliation_entries_import_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reconciliation_entries
    ADD CONSTRAINT reconciliation_entries_import_id_fkey FOREIGN KEY (import_id) REFERENCES public.reconciliation_imports(id);

--
-- Name: reconciliation_entries reconciliation_entries_ledger_entry_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reconciliation_entries
    ADD CONSTRAINT reconciliation_entries_ledger_entry_id_fkey FOREIGN KEY (ledger_entry_id) REFERENCES public.usage_ledger(id);

--
-- Name: rollup_months rollup_months_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.rollup_months
    ADD CONSTRAINT rollup_months_zone_fkey FOREIGN KEY (zone) REFERENCES public.rollup_zones(zone) ON DELETE CASCADE;

--
-- Name: run_attempts run_attempts_idempotency_key_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_attempts
    ADD CONSTRAINT run_attempts_idempotency_key_fkey FOREIGN KEY (idempotency_key) REFERENCES public.runs(idempotency_key);

--
-- Name: run_duplicates run_duplicates_idempotency_key_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_duplicates
    ADD CONSTRAINT run_duplicates_idempotency_key_fkey FOREIGN KEY (idempotency_key) REFERENCES public.runs(idempotency_key);

--
-- Name: run_rollups run_rollups_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_rollups
    ADD CONSTRAINT run_rollups_zone_fkey FOREIGN KEY (zone) REFERENCES public.rollup_zones(zone) ON DELETE CASCADE;

--
-- Name: usage_day_totals usage_day_totals_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_day_totals
    ADD CONSTRAINT usage_day_totals_zone_fkey FOREIGN KEY (zone) REFERENCES public.rollup_zones(zone) ON DELETE CASCADE;

--
-- Name: usage_day_users usage_day_users_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_day_users
    ADD CONSTRAINT usage_day_users_zone_fkey FOREIGN KEY (zone) REFERENCES public.rollup_zones(zone) ON DELETE CASCADE;

--
-- Name: usage_ledger usage_ledger_original_entry_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger
    ADD CONSTRAINT usage_ledger_original_entry_id_fkey FOREIGN KEY (original_entry_id) REFERENCES public.usage_ledger(id);

--
-- Name: usage_ledger usage_ledger_reconciliation_import_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger
    ADD CONSTRAINT usage_ledger_reconciliation_import_id_fkey FOREIGN KEY (reconciliation_import_id) REFERENCES public.reconciliation_imports(id);

--
-- Name: usage_month_rollups usage_month_rollups_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_month_rollups
    ADD CONSTRAINT usage_month_rollups_zone_fkey FOREIGN KEY (zone) REFERENCES public.rollup_zones(zone) ON DELETE CASCADE;

--
-- Name: usage_rollups usage_rollups_zone_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_rollups
    ADD CONSTRAINT usage_rollups_zone_fkey FOREIGN KEY (zone) REFERENCES public.rollup_zones(zone) ON DELETE CASCADE;

--
-- Name: SCHEMA public; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA public TO cronledger_readonly;
GRANT USAGE ON SCHEMA public TO cronledger_worker;
GRANT USAGE ON SCHEMA public TO cronledger_operator;

--
-- Name: TABLE budgets; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budgets TO cronledger_readonly;
GRANT SELECT ON TABLE public.budgets TO cronledger_worker;
GRANT SELECT ON TABLE public.budgets TO cronledger_operator;

--
-- Name: FUNCTION add_budget(p_user_id text, p_monthly_limit_usd numeric, p_time_zone text, p_effective_from timestamp with time zone, p_source text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.add_budget(p_user_id text, p_monthly_limit_usd numeric, p_time_zone text, p_effective_from timestamp with time zone, p_source text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.add_budget(p_user_id text, p_monthly_limit_usd numeric, p_time_zone text, p_effective_from timestamp with time zone, p_source text) TO cronledger_operator;

--
-- Name: FUNCTION add_downgrade(p_model text, p_cheap_model text, p_effective_from timestamp with time zone, p_source text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.add_downgrade(p_model text, p_cheap_model text, p_effective_from timestamp with time zone, p_source text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.add_downgrade(p_model text, p_cheap_model text, p_effective_from timestamp with time zone, p_source text) TO cronledger_operator;

--
-- Name: FUNCTION add_price(p_model text, p_version text, p_effective_from timestamp with time zone, p_effective_to timestamp with time zone, p_long_context_above bigint, p_source text, p_rates jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.add_price(p_model text, p_version text, p_effective_from timestamp with time zone, p_effective_to timestamp with time zone, p_long_context_above bigint, p_source text, p_rates jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.add_price(p_model text, p_version text, p_effective_from timestamp with time zone, p_effective_to timestamp with time zone, p_long_context_above bigint, p_source text, p_rates jsonb) TO cronledger_operator;

--
-- Name: TABLE usage_ledger; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.usage_ledger TO cronledger_readonly;
GRANT SELECT ON TABLE public.usage_ledger TO cronledger_worker;
GRANT SELECT ON TABLE public.usage_ledger TO cronledger_operator;

--
-- Name: FUNCTION adjust_entry(p_key text, p_entry_id bigint, p_reason text, p_amount numeric); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.adjust_entry(p_key text, p_entry_id bigint, p_reason text, p_amount numeric) FROM PUBLIC;
GRANT ALL ON FUNCTION public.adjust_entry(p_key text, p_entry_id bigint, p_reason text, p_amount numeric) TO cronledger_operator;

--
-- Name: FUNCTION apply_rate_limits(p_models text[], p_requests_per_minute integer[], p_tokens_per_minute bigint[]); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.apply_rate_limits(p_models text[], p_requests_per_minute integer[], p_tokens_per_minute bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION public.apply_rate_limits(p_models text[], p_requests_per_minute integer[], p_tokens_per_minute bigint[]) TO cronledger_operator;

--
-- Name: FUNCTION book_usage(p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text, p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint, p_cache_write_5m bigint, p_cache_write_1h bigint, p_service_tier text, p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamp with time zone, p_usage_received_at timestamp with time zone); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.book_usage(p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text, p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint, p_cache_write_5m bigint, p_cache_write_1h bigint, p_service_tier text, p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamp with time zone, p_usage_received_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION public.book_usage(p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text, p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint, p_cache_write_5m bigint, p_cache_write_1h bigint, p_service_tier text, p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamp with time zone, p_usage_received_at timestamp with time zone) TO cronledger_worker;

--
-- Name: FUNCTION budget_cap_choice(p_calls jsonb, p_models text[], p_default_worst numeric, p_cap numeric, p_may_downgrade boolean, p_at timestamp with time zone, OUT choice text, OUT models text[], OUT costs numeric[], OUT downgrades boolean, OUT worst numeric); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.budget_cap_choice(p_calls jsonb, p_models text[], p_default_worst numeric, p_cap numeric, p_may_downgrade boolean, p_at timestamp with time zone, OUT choice text, OUT models text[], OUT costs numeric[], OUT downgrades boolean, OUT worst numeric) FROM PUBLIC;
GRANT ALL ON FUNCTION public.budget_cap_choice(p_calls jsonb, p_models text[], p_default_worst numeric, p_cap numeric, p_may_downgrade boolean, p_at timestamp with time zone, OUT choice text, OUT models text[], OUT costs numeric[], OUT downgrades boolean, OUT worst numeric) TO cronledger_worker;

--
-- Name: FUNCTION budget_cheap_worst_cases(p_calls jsonb, p_models text[], p_may_downgrade boolean, p_at timestamp with time zone, OUT models text[], OUT costs numeric[], OUT downgrades boolean, OUT worst numeric); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.budget_cheap_worst_cases(p_calls jsonb, p_models text[], p_may_downgrade boolean, p_at timestamp with time zone, OUT models text[], OUT costs numeric[], OUT downgrades boolean, OUT worst numeric) FROM PUBLIC;

--
-- Name: FUNCTION budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamp with time zone); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION public.budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamp with time zone) TO cronledger_worker;
GRANT ALL ON FUNCTION public.budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamp with time zone) TO cronledger_readonly;

--
-- Name: FUNCTION budget_pauses_due(p_at timestamp with time zone); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.budget_pauses_due(p_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION public.budget_pauses_due(p_at timestamp with time zone) TO cronledger_worker;

--
-- Name: TABLE model_price_rates; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.model_price_rates TO cronledger_readonly;
GRANT SELECT ON TABLE public.model_price_rates TO cronledger_worker;
GRANT SELECT ON TABLE public.model_price_rates TO cronledger_operator;

--
-- Name: FUNCTION call_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, r public.model_price_rates); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.call_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, r public.model_price_rates) FROM PUBLIC;
GRANT ALL ON FUNCTION public.call_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, r public.model_price_rates) TO cronledger_readonly;
GRANT ALL ON FUNCTION public.call_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, r public.model_price_rates) TO cronledger_worker;

--
-- Name: FUNCTION claim_and_reserve(p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_supersedes_run_id text, p_calls jsonb, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.claim_and_reserve(p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_supersedes_run_id text, p_calls jsonb, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric) FROM PUBLIC;
GRANT ALL ON FUNCTION public.claim_and_reserve(p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_supersedes_run_id text, p_calls jsonb, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric) TO cronledger_worker;

--
-- Name: FUNCTION claim_run(p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_supersedes_run_id text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.claim_run(p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_supersedes_run_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.claim_run(p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_supersedes_run_id text) TO cronledger_worker;

--
-- Name: FUNCTION complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb) TO cronledger_worker;

--
-- Name: FUNCTION credit_user(p_key text, p_original_entry_id bigint, p_reason text, p_user_id text, p_cost_usd numeric); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.credit_user(p_key text, p_original_entry_id bigint, p_reason text, p_user_id text, p_cost_usd numeric) FROM PUBLIC;
GRANT ALL ON FUNCTION public.credit_user(p_key text, p_original_entry_id bigint, p_reason text, p_user_id text, p_cost_usd numeric) TO cronledger_operator;

--
-- Name: FUNCTION expire_reservations(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.expire_reservations() FROM PUBLIC;
GRANT ALL ON FUNCTION public.expire_reservations() TO cronledger_worker;

--
-- Name: TABLE model_prices; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.model_prices TO cronledger_readonly;
GRANT SELECT ON TABLE public.model_prices TO cronledger_worker;
GRANT SELECT ON TABLE public.model_prices TO cronledger_operator;

--
-- Name: FUNCTION is_long_context(p public.model_prices, p_prompt bigint); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.is_long_context(p public.model_prices, p_prompt bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION public.is_long_context(p public.model_prices, p_prompt bigint) TO cronledger_readonly;
GRANT ALL ON FUNCTION public.is_long_context(p public.model_prices, p_prompt bigint) TO cronledger_worker;
GRANT ALL ON FUNCTION public.is_long_context(p public.model_prices, p_prompt bigint) TO cronledger_operator;

--
-- Name: FUNCTION metric_add_run(p_status text, p_tier text, p_duration_ms bigint, p_sign integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.metric_add_run(p_status text, p_tier text, p_duration_ms bigint, p_sign integer) FROM PUBLIC;

--
-- Name: FUNCTION metric_observe(p_histogram text, p_ms bigint, p_sign integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.metric_observe(p_histogram text, p_ms bigint, p_sign integer) FROM PUBLIC;

--
-- Name: FUNCTION metric_rebuild(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.metric_rebuild() FROM PUBLIC;

--
-- Name: FUNCTION price_call(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.price_call(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices) FROM PUBLIC;
GRANT ALL ON FUNCTION public.price_call(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices) TO cronledger_readonly;
GRANT ALL ON FUNCTION public.price_call(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices) TO cronledger_worker;

--
-- Name: FUNCTION price_class(p_rate numeric, p public.model_prices, p_at timestamp with time zone, what text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.price_class(p_rate numeric, p public.model_prices, p_at timestamp with time zone, what text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.price_class(p_rate numeric, p public.model_prices, p_at timestamp with time zone, what text) TO cronledger_readonly;
GRANT ALL ON FUNCTION public.price_class(p_rate numeric, p public.model_prices, p_at timestamp with time zone, what text) TO cronledger_worker;

--
-- Name: FUNCTION price_in_force(p_model text, p_at timestamp with time zone); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.price_in_force(p_model text, p_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION public.price_in_force(p_model text, p_at timestamp with time zone) TO cronledger_worker;
GRANT ALL ON FUNCTION public.price_in_force(p_model text, p_at timestamp with time zone) TO cronledger_operator;

--
-- Name: FUNCTION price_rates(p public.model_prices, p_tier text, p_long boolean); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.price_rates(p public.model_prices, p_tier text, p_long boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION public.price_rates(p public.model_prices, p_tier text, p_long boolean) TO cronledger_readonly;
GRANT ALL ON FUNCTION public.price_rates(p public.model_prices, p_tier text, p_long boolean) TO cronledger_worker;
GRANT ALL ON FUNCTION public.price_rates(p public.model_prices, p_tier text, p_long boolean) TO cronledger_operator;

--
-- Name: FUNCTION price_tier(p_tier text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.price_tier(p_tier text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.price_tier(p_tier text) TO cronledger_readonly;
GRANT ALL ON FUNCTION public.price_tier(p_tier text) TO cronledger_worker;
GRANT ALL ON FUNCTION public.price_tier(p_tier text) TO cronledger_operator;

--
-- Name: FUNCTION price_version_at(p_model text, p_at timestamp with time zone); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.price_version_at(p_model text, p_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION public.price_version_at(p_model text, p_at timestamp with time zone) TO cronledger_readonly;
GRANT ALL ON FUNCTION public.price_version_at(p_model text, p_at timestamp with time zone) TO cronledger_worker;
GRANT ALL ON FUNCTION public.price_version_at(p_model text, p_at timestamp with time zone) TO cronledger_operator;

--
-- Name: FUNCTION rate_limit_acquire(p_model text, p_tokens bigint, p_waited_us bigint); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rate_limit_acquire(p_model text, p_tokens bigint, p_waited_us bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION public.rate_limit_acquire(p_model text, p_tokens bigint, p_waited_us bigint) TO cronledger_worker;

--
-- Name: FUNCTION rate_limit_hold(p_model text, p_after_ms bigint, p_throttled boolean); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rate_limit_hold(p_model text, p_after_ms bigint, p_throttled boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION public.rate_limit_hold(p_model text, p_after_ms bigint, p_throttled boolean) TO cronledger_worker;

--
-- Name: FUNCTION reconciliation_keys(p_import_id bigint); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.reconciliation_keys(p_import_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION public.reconciliation_keys(p_import_id bigint) TO cronledger_worker;
GRANT ALL ON FUNCTION public.reconciliation_keys(p_import_id bigint) TO cronledger_readonly;

--
-- Name: FUNCTION reconciliation_ledger_side(p_provider text, p_from date, p_to date); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.reconciliation_ledger_side(p_provider text, p_from date, p_to date) FROM PUBLIC;
GRANT ALL ON FUNCTION public.reconciliation_ledger_side(p_provider text, p_from date, p_to date) TO cronledger_worker;
GRANT ALL ON FUNCTION public.reconciliation_ledger_side(p_provider text, p_from date, p_to date) TO cronledger_readonly;

--
-- Name: FUNCTION record_applied_tasks(p_task_ids text[]); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_applied_tasks(p_task_ids text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_applied_tasks(p_task_ids text[]) TO cronledger_operator;

--
-- Name: FUNCTION record_budget_event_delivery(p_event_id text, p_ok boolean, p_error text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_budget_event_delivery(p_event_id text, p_ok boolean, p_error text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_budget_event_delivery(p_event_id text, p_ok boolean, p_error text) TO cronledger_worker;

--
-- Name: FUNCTION record_budget_pause(p_task_id text, p_user_id text, p_reason text, p_month date, p_time_zone text, p_limit numeric, p_run_id text, p_at timestamp with time zone); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_budget_pause(p_task_id text, p_user_id text, p_reason text, p_month date, p_time_zone text, p_limit numeric, p_run_id text, p_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_budget_pause(p_task_id text, p_user_id text, p_reason text, p_month date, p_time_zone text, p_limit numeric, p_run_id text, p_at timestamp with time zone) TO cronledger_worker;

--
-- Name: FUNCTION record_budget_resume(p_pause_id bigint, p_at timestamp with time zone, p_cause text, p_skipped_slots integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_budget_resume(p_pause_id bigint, p_at timestamp with time zone, p_cause text, p_skipped_slots integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_budget_resume(p_pause_id bigint, p_at timestamp with time zone, p_cause text, p_skipped_slots integer) TO cronledger_worker;

--
-- Name: FUNCTION record_forecast(p_user_id text, p_zone text, p_month date, p_day date, p_median numeric, p_high numeric, p_limit numeric, p_spent numeric, p_reserved numeric, p_all_slots_median numeric, p_all_slots_high numeric, p_spend_by_day jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_forecast(p_user_id text, p_zone text, p_month date, p_day date, p_median numeric, p_high numeric, p_limit numeric, p_spent numeric, p_reserved numeric, p_all_slots_median numeric, p_all_slots_high numeric, p_spend_by_day jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_forecast(p_user_id text, p_zone text, p_month date, p_day date, p_median numeric, p_high numeric, p_limit numeric, p_spent numeric, p_reserved numeric, p_all_slots_median numeric, p_all_slots_high numeric, p_spend_by_day jsonb) TO cronledger_worker;

--
-- Name: FUNCTION record_reconciliation(p_provider text, p_source text, p_from date, p_to date, p_pages_sha256 text, p_scope jsonb, p_rows jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_reconciliation(p_provider text, p_source text, p_from date, p_to date, p_pages_sha256 text, p_scope jsonb, p_rows jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_reconciliation(p_provider text, p_source text, p_from date, p_to date, p_pages_sha256 text, p_scope jsonb, p_rows jsonb) TO cronledger_operator;

--
-- Name: FUNCTION record_rejected_run(p_task_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_reason text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_rejected_run(p_task_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_rejected_run(p_task_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamp with time zone, p_worker_id text, p_manual boolean, p_reason text) TO cronledger_worker;

--
-- Name: FUNCTION record_report_delivery(p_month text, p_time_zone text, p_complete boolean, p_report_sha256 text, p_target text, p_workflow_id text, p_attempt integer, p_response_status integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_report_delivery(p_month text, p_time_zone text, p_complete boolean, p_report_sha256 text, p_target text, p_workflow_id text, p_attempt integer, p_response_status integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_report_delivery(p_month text, p_time_zone text, p_complete boolean, p_report_sha256 text, p_target text, p_workflow_id text, p_attempt integer, p_response_status integer) TO cronledger_worker;

--
-- Name: TABLE rollup_verifications; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rollup_verifications TO cronledger_readonly;

--
-- Name: FUNCTION record_rollup_verification(p_months integer, p_rows_checked bigint, p_differences bigint, p_sample jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_rollup_verification(p_months integer, p_rows_checked bigint, p_differences bigint, p_sample jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_rollup_verification(p_months integer, p_rows_checked bigint, p_differences bigint, p_sample jsonb) TO cronledger_worker;

--
-- Name: FUNCTION record_task_versions(p_versions jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_task_versions(p_versions jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_task_versions(p_versions jsonb) TO cronledger_operator;

--
-- Name: TABLE usage_exceptions; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.usage_exceptions TO cronledger_readonly;
GRANT SELECT ON TABLE public.usage_exceptions TO cronledger_worker;

--
-- Name: FUNCTION record_usage_exception(p_key text, p_user_id text, p_workflow_id text, p_run_id text, p_task_id text, p_model text, p_provider_model text, p_kind text, p_status text, p_attempt integer, p_raw_usage jsonb, p_reason text, p_provider_request_id text, p_worker_id text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.record_usage_exception(p_key text, p_user_id text, p_workflow_id text, p_run_id text, p_task_id text, p_model text, p_provider_model text, p_kind text, p_status text, p_attempt integer, p_raw_usage jsonb, p_reason text, p_provider_request_id text, p_worker_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.record_usage_exception(p_key text, p_user_id text, p_workflow_id text, p_run_id text, p_task_id text, p_model text, p_provider_model text, p_kind text, p_status text, p_attempt integer, p_raw_usage jsonb, p_reason text, p_provider_request_id text, p_worker_id text) TO cronledger_worker;

--
-- Name: FUNCTION release_reservations(p_run_id text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.release_reservations(p_run_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.release_reservations(p_run_id text) TO cronledger_worker;

--
-- Name: FUNCTION reprice_usage(p_from timestamp with time zone, p_to timestamp with time zone, p_versions jsonb, p_rates jsonb, p_downgrade jsonb, p_models text[]); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.reprice_usage(p_from timestamp with time zone, p_to timestamp with time zone, p_versions jsonb, p_rates jsonb, p_downgrade jsonb, p_models text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION public.reprice_usage(p_from timestamp with time zone, p_to timestamp with time zone, p_versions jsonb, p_rates jsonb, p_downgrade jsonb, p_models text[]) TO cronledger_worker;
GRANT ALL ON FUNCTION public.reprice_usage(p_from timestamp with time zone, p_to timestamp with time zone, p_versions jsonb, p_rates jsonb, p_downgrade jsonb, p_models text[]) TO cronledger_readonly;

--
-- Name: FUNCTION reserve_budget(p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric, p_may_wait boolean); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.reserve_budget(p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric, p_may_wait boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION public.reserve_budget(p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer, p_at timestamp with time zone, p_max_cost_per_run numeric, p_may_wait boolean) TO cronledger_worker;

--
-- Name: FUNCTION rollup_add_to_buckets(p_table text, p_bucket text[], p_delta text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_add_to_buckets(p_table text, p_bucket text[], p_delta text) FROM PUBLIC;

--
-- Name: FUNCTION rollup_coarser_bucket(p_table text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_coarser_bucket(p_table text) FROM PUBLIC;

--
-- Name: FUNCTION rollup_coarser_select(p_table text, p_source text, p_where text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_coarser_select(p_table text, p_source text, p_where text) FROM PUBLIC;

--
-- Name: FUNCTION rollup_cost_per_run_after_fold(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_cost_per_run_after_fold() FROM PUBLIC;

--
-- Name: FUNCTION rollup_cost_per_run_month(p_zone text, p_month text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_cost_per_run_month(p_zone text, p_month text) FROM PUBLIC;

--
-- Name: FUNCTION rollup_cost_per_run_recompute(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_cost_per_run_recompute() FROM PUBLIC;

--
-- Name: FUNCTION rollup_finish_month_rollups(p_zone text, p_month text, p_last_entry_id bigint); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_finish_month_rollups(p_zone text, p_month text, p_last_entry_id bigint) FROM PUBLIC;

--
-- Name: FUNCTION rollup_fold_queues_into_rollups(p_limit integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_fold_queues_into_rollups(p_limit integer) FROM PUBLIC;

--
-- Name: FUNCTION rollup_same_bucket(p_bucket text[], a text, b text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollup_same_bucket(p_bucket text[], a text, b text) FROM PUBLIC;

--
-- Name: FUNCTION rollups_clear_month(p_zone text, p_month text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollups_clear_month(p_zone text, p_month text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.rollups_clear_month(p_zone text, p_month text) TO cronledger_worker;

--
-- Name: FUNCTION rollups_finish_month(p_zone text, p_month text, p_last_entry_id bigint); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollups_finish_month(p_zone text, p_month text, p_last_entry_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION public.rollups_finish_month(p_zone text, p_month text, p_last_entry_id bigint) TO cronledger_worker;

--
-- Name: FUNCTION rollups_fold_queues(p_limit integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollups_fold_queues(p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.rollups_fold_queues(p_limit integer) TO cronledger_worker;

--
-- Name: FUNCTION rollups_rebuild_day(p_zone text, p_day date); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollups_rebuild_day(p_zone text, p_day date) FROM PUBLIC;
GRANT ALL ON FUNCTION public.rollups_rebuild_day(p_zone text, p_day date) TO cronledger_worker;

--
-- Name: FUNCTION rollups_recompute_cost_per_run(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollups_recompute_cost_per_run() FROM PUBLIC;
GRANT ALL ON FUNCTION public.rollups_recompute_cost_per_run() TO cronledger_worker;

--
-- Name: FUNCTION rollups_register_zone(p_zone text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollups_register_zone(p_zone text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.rollups_register_zone(p_zone text) TO cronledger_worker;

--
-- Name: FUNCTION rollups_reset_pending(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.rollups_reset_pending() FROM PUBLIC;
GRANT ALL ON FUNCTION public.rollups_reset_pending() TO cronledger_worker;

--
-- Name: FUNCTION stage_embedding(p_call_key text, p_embedding jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.stage_embedding(p_call_key text, p_embedding jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.stage_embedding(p_call_key text, p_embedding jsonb) TO cronledger_worker;

--
-- Name: FUNCTION store_memory_and_complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb, p_workflow_id text, p_memory_run_id text, p_task_id text, p_user_id text, p_content text, p_embedding jsonb, p_embedding_key text, p_input_truncated_from bigint); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.store_memory_and_complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb, p_workflow_id text, p_memory_run_id text, p_task_id text, p_user_id text, p_content text, p_embedding jsonb, p_embedding_key text, p_input_truncated_from bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION public.store_memory_and_complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb, p_workflow_id text, p_memory_run_id text, p_task_id text, p_user_id text, p_content text, p_embedding jsonb, p_embedding_key text, p_input_truncated_from bigint) TO cronledger_worker;

--
-- Name: FUNCTION usage_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices, p_at timestamp with time zone); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.usage_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices, p_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION public.usage_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices, p_at timestamp with time zone) TO cronledger_readonly;
GRANT ALL ON FUNCTION public.usage_cost(p_kind text, p_prompt bigint, p_cached bigint, p_write_5m bigint, p_write_1h bigint, p_completion bigint, p_tier text, p public.model_prices, p_at timestamp with time zone) TO cronledger_worker;

--
-- Name: FUNCTION worst_case_at_rates(p_kind text, p_prompt bigint, p_completion bigint, r public.model_price_rates); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.worst_case_at_rates(p_kind text, p_prompt bigint, p_completion bigint, r public.model_price_rates) FROM PUBLIC;
GRANT ALL ON FUNCTION public.worst_case_at_rates(p_kind text, p_prompt bigint, p_completion bigint, r public.model_price_rates) TO cronledger_worker;

--
-- Name: FUNCTION worst_case_call_cost(p_kind text, p_prompt bigint, p_completion bigint, p_tier text, p public.model_prices); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.worst_case_call_cost(p_kind text, p_prompt bigint, p_completion bigint, p_tier text, p public.model_prices) FROM PUBLIC;
GRANT ALL ON FUNCTION public.worst_case_call_cost(p_kind text, p_prompt bigint, p_completion bigint, p_tier text, p public.model_prices) TO cronledger_worker;

--
-- Name: FUNCTION worst_case_cost(p_call jsonb, p_model text, p_at timestamp with time zone); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.worst_case_cost(p_call jsonb, p_model text, p_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION public.worst_case_cost(p_call jsonb, p_model text, p_at timestamp with time zone) TO cronledger_worker;

--
-- Name: TABLE applied_tasks; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.applied_tasks TO cronledger_readonly;
GRANT SELECT ON TABLE public.applied_tasks TO cronledger_worker;
GRANT SELECT ON TABLE public.applied_tasks TO cronledger_operator;

--
-- Name: TABLE budget_events; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budget_events TO cronledger_readonly;
GRANT SELECT ON TABLE public.budget_events TO cronledger_worker;

--
-- Name: TABLE budget_forecasts; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budget_forecasts TO cronledger_worker;
GRANT SELECT ON TABLE public.budget_forecasts TO cronledger_readonly;

--
-- Name: TABLE budget_months; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budget_months TO cronledger_readonly;
GRANT SELECT ON TABLE public.budget_months TO cronledger_worker;

--
-- Name: TABLE budget_pause_ends; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budget_pause_ends TO cronledger_worker;
GRANT SELECT ON TABLE public.budget_pause_ends TO cronledger_readonly;

--
-- Name: TABLE budget_pauses; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budget_pauses TO cronledger_worker;
GRANT SELECT ON TABLE public.budget_pauses TO cronledger_readonly;

--
-- Name: TABLE budget_pause_intervals; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budget_pause_intervals TO cronledger_worker;
GRANT SELECT ON TABLE public.budget_pause_intervals TO cronledger_readonly;

--
-- Name: TABLE budget_reservations; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budget_reservations TO cronledger_readonly;
GRANT SELECT ON TABLE public.budget_reservations TO cronledger_worker;

--
-- Name: TABLE budget_zones; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.budget_zones TO cronledger_readonly;

--
-- Name: TABLE cost_per_run_days; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.cost_per_run_days TO cronledger_worker;
GRANT SELECT ON TABLE public.cost_per_run_days TO cronledger_readonly;

--
-- Name: TABLE cost_per_run_stale; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.cost_per_run_stale TO cronledger_worker;
GRANT SELECT ON TABLE public.cost_per_run_stale TO cronledger_readonly;

--
-- Name: TABLE metric_entry_figures; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.metric_entry_figures TO cronledger_readonly;

--
-- Name: TABLE metric_histograms; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.metric_histograms TO cronledger_readonly;

--
-- Name: TABLE metric_ledger_totals; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.metric_ledger_totals TO cronledger_readonly;

--
-- Name: TABLE metric_run_counts; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.metric_run_counts TO cronledger_readonly;

--
-- Name: TABLE model_downgrades; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.model_downgrades TO cronledger_readonly;
GRANT SELECT ON TABLE public.model_downgrades TO cronledger_worker;
GRANT SELECT ON TABLE public.model_downgrades TO cronledger_operator;

--
-- Name: TABLE provider_usage_rows; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.provider_usage_rows TO cronledger_worker;
GRANT SELECT ON TABLE public.provider_usage_rows TO cronledger_readonly;
GRANT SELECT ON TABLE public.provider_usage_rows TO cronledger_operator;

--
-- Name: TABLE rate_limit_hours; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rate_limit_hours TO cronledger_readonly;

--
-- Name: TABLE rate_limit_state; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rate_limit_state TO cronledger_readonly;
GRANT SELECT ON TABLE public.rate_limit_state TO cronledger_worker;

--
-- Name: TABLE rate_limits; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rate_limits TO cronledger_readonly;
GRANT SELECT ON TABLE public.rate_limits TO cronledger_worker;
GRANT SELECT ON TABLE public.rate_limits TO cronledger_operator;

--
-- Name: TABLE reconciliation_entries; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.reconciliation_entries TO cronledger_worker;
GRANT SELECT ON TABLE public.reconciliation_entries TO cronledger_readonly;
GRANT SELECT ON TABLE public.reconciliation_entries TO cronledger_operator;

--
-- Name: TABLE reconciliation_imports; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.reconciliation_imports TO cronledger_worker;
GRANT SELECT ON TABLE public.reconciliation_imports TO cronledger_readonly;
GRANT SELECT ON TABLE public.reconciliation_imports TO cronledger_operator;

--
-- Name: TABLE report_deliveries; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.report_deliveries TO cronledger_readonly;
GRANT SELECT ON TABLE public.report_deliveries TO cronledger_worker;

--
-- Name: TABLE rollup_months; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rollup_months TO cronledger_readonly;
GRANT SELECT ON TABLE public.rollup_months TO cronledger_worker;

--
-- Name: TABLE rollup_pending; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rollup_pending TO cronledger_worker;
GRANT SELECT ON TABLE public.rollup_pending TO cronledger_readonly;

--
-- Name: TABLE rollup_pending_users; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rollup_pending_users TO cronledger_worker;
GRANT SELECT ON TABLE public.rollup_pending_users TO cronledger_readonly;

--
-- Name: TABLE rollup_queue; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rollup_queue TO cronledger_readonly;
GRANT SELECT ON TABLE public.rollup_queue TO cronledger_worker;

--
-- Name: TABLE rollup_zones; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.rollup_zones TO cronledger_readonly;
GRANT SELECT ON TABLE public.rollup_zones TO cronledger_worker;

--
-- Name: TABLE run_attempts; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.run_attempts TO cronledger_readonly;
GRANT SELECT ON TABLE public.run_attempts TO cronledger_worker;

--
-- Name: TABLE run_duplicates; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.run_duplicates TO cronledger_readonly;
GRANT SELECT ON TABLE public.run_duplicates TO cronledger_worker;

--
-- Name: TABLE run_rollup_queue; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.run_rollup_queue TO cronledger_readonly;
GRANT SELECT ON TABLE public.run_rollup_queue TO cronledger_worker;

--
-- Name: TABLE run_rollups; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.run_rollups TO cronledger_readonly;
GRANT SELECT ON TABLE public.run_rollups TO cronledger_worker;

--
-- Name: TABLE runs; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.runs TO cronledger_readonly;
GRANT SELECT ON TABLE public.runs TO cronledger_worker;

--
-- Name: TABLE schema_migrations; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.schema_migrations TO cronledger_readonly;
GRANT SELECT ON TABLE public.schema_migrations TO cronledger_worker;

--
-- Name: TABLE task_versions; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.task_versions TO cronledger_worker;
GRANT SELECT ON TABLE public.task_versions TO cronledger_operator;

--
-- Name: TABLE usage_day_totals; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.usage_day_totals TO cronledger_readonly;
GRANT SELECT ON TABLE public.usage_day_totals TO cronledger_worker;

--
-- Name: TABLE usage_day_users; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.usage_day_users TO cronledger_readonly;
GRANT SELECT ON TABLE public.usage_day_users TO cronledger_worker;

--
-- Name: TABLE usage_month_rollups; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.usage_month_rollups TO cronledger_readonly;
GRANT SELECT ON TABLE public.usage_month_rollups TO cronledger_worker;

--
-- Name: TABLE usage_rollups; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.usage_rollups TO cronledger_readonly;
GRANT SELECT ON TABLE public.usage_rollups TO cronledger_worker;

--
-- Name: DEFAULT PRIVILEGES FOR TABLES; Type: DEFAULT ACL; Schema: public; Owner: -
--

ALTER DEFAULT PRIVILEGES FOR ROLE cronledger_owner IN SCHEMA public GRANT SELECT ON TABLES  TO cronledger_worker;
ALTER DEFAULT PRIVILEGES FOR ROLE cronledger_owner IN SCHEMA public GRANT SELECT ON TABLES  TO cronledger_readonly;

--
-- PostgreSQL database dump complete
--
