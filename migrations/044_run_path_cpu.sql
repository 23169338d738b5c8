-- A run's path asks less of PostgreSQL's CPU, with the same results.
--
-- PostgreSQL 15 plans a LANGUAGE sql function's body at every call that it does not inline (its plan lives as long
-- as the calling statement's execution), where a plpgsql function's plans are kept by the session. So the functions
-- that every run calls once or more are plpgsql: the embedding's staging, the memory with the claim's completion,
-- the completion alone, a call's worst case, and the band and tier of a decision. The worst case reads its price class once into a variable, so that
-- worst_case_at_rates is inlined into it (a function argument that is itself a call, read many times, is not).

create or replace function stage_embedding(p_call_key text, p_embedding jsonb) returns void
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
  insert into call_embeddings (call_key, embedding) values (p_call_key, p_embedding) on conflict (call_key) do nothing;
end
$$;

create or replace function complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text, p_budget jsonb)
returns void language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
  update runs set status = p_status, error = p_error, finished_at = now(), tier = coalesce(p_tier, tier),
         budget = coalesce(p_budget, budget), duration_ms = (extract(epoch from (now() - claimed_at)) * 1000)::bigint
   where idempotency_key = p_key and temporal_run_id = p_run_id and status = 'running';
  update run_attempts set status = p_status, error = p_error, finished_at = now() where temporal_run_id = p_run_id and status = 'running';
end
$$;

create or replace function store_memory_and_complete_run(p_key text, p_run_id text, p_status text, p_error text, p_tier text,
  p_budget jsonb, p_workflow_id text, p_memory_run_id text, p_task_id text, p_user_id text, p_content text, p_embedding jsonb,
  p_embedding_key text, p_input_truncated_from bigint)
returns void language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
  insert into memories (run_workflow_id, temporal_run_id, task_id, user_id, content, embedding, input_truncated_from)
  values (p_workflow_id, p_memory_run_id, p_task_id, p_user_id, p_content,
          coalesce(p_embedding, (select embedding from call_embeddings where call_key = p_embedding_key)), p_input_truncated_from)
  on conflict do nothing;
  perform complete_run(p_key, p_run_id, p_status, p_error, p_tier, p_budget);
end
$$;

create or replace function worst_case_call_cost(p_kind text, p_prompt bigint, p_completion bigint, p_tier text, p model_prices)
returns numeric language plpgsql stable as $$
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

-- The band a month's use is in, and the tier a decision picks: called twice and once by every decision.
create or replace function budget_tier(p_used numeric, p_limit numeric) returns text language plpgsql immutable as $$
begin
  return coalesce((select b.tier from budget_bands() b where p_used * 100 >= p_limit * b.from_percent
                    order by b.from_percent desc limit 1), 'default');
end
$$;

create or replace function budget_choice(p_used numeric, p_limit numeric, p_default_worst numeric, p_cheap_worst numeric,
  p_downgrades boolean) returns text language plpgsql immutable as $$
declare
  v_band text := budget_tier(p_used, p_limit);
begin
  return case when v_band = 'default' and p_used + p_default_worst <= p_limit then 'default'
              when (v_band = 'cheap' or (v_band = 'default' and p_downgrades)) and p_used + p_cheap_worst <= p_limit then 'cheap'
              else 'blocked' end;
end
$$;
