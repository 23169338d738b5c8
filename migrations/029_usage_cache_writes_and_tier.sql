-- Everything a call's price depends on, on its ledger row: the prompt tokens written to the provider's cache (for 5
-- minutes and for 1 hour; like cache reads, parts of prompt_tokens) and the service tier the provider says served the
-- call (null: standard, or not said). Rows written earlier wrote no cache and named no tier.
alter table usage_ledger add column cache_write_5m_tokens bigint not null default 0 check (cache_write_5m_tokens >= 0);
alter table usage_ledger add column cache_write_1h_tokens bigint not null default 0 check (cache_write_1h_tokens >= 0);
alter table usage_ledger add column service_tier text;
alter table usage_ledger add constraint usage_ledger_cache_parts_of_prompt
  check (cached_prompt_tokens + cache_write_5m_tokens + cache_write_1h_tokens <= prompt_tokens);

-- book_usage records them (src/ledger/record-usage.ts passes them after the reasoning tokens).
drop function book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint, text, text,
                         bigint, timestamptz, timestamptz);
create function book_usage(
  p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text,
  p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint,
  p_cache_write_5m bigint, p_cache_write_1h bigint, p_service_tier text,
  p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamptz,
  p_usage_received_at timestamptz
) returns usage_ledger language plpgsql as $$
declare
  v_at timestamptz := coalesce(p_occurred_at, now());
  v_price model_prices := price_in_force(p_model, v_at);
  v_row usage_ledger;
begin
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, provider_model, kind,
                            status, attempt, prompt_tokens, cached_prompt_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
                            completion_tokens, reasoning_tokens, service_tier, cost_usd, price_version, provider_request_id,
                            worker_id, input_truncated_from, created_at, usage_received_at, booked_at)
  values (p_key, 'usage', p_user_id, p_run_id, p_workflow_id, p_task_id, p_model, p_provider_model, p_kind,
          p_status, p_attempt, p_prompt, p_cached, p_cache_write_5m, p_cache_write_1h, p_completion, p_reasoning, p_service_tier,
          usage_cost(p_kind, p_prompt, p_cached, p_completion, v_price, v_at), v_price.version, p_provider_request_id, p_worker_id,
          p_input_truncated_from, v_at, p_usage_received_at, clock_timestamp())
  on conflict (idempotency_key) do nothing
  returning * into v_row;
  if found then
    return v_row;
  end if;
  -- A statement of its own: it sees the row that a concurrent booking of the same key committed while we waited.
  select * into v_row from usage_ledger where idempotency_key = p_key;
  return v_row;
end
$$;
revoke execute on function book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint,
  bigint, bigint, text, text, text, bigint, timestamptz, timestamptz) from public;
grant execute on function book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint,
  bigint, bigint, text, text, text, bigint, timestamptz, timestamptz) to cronledger_app;
