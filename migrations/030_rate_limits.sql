-- Provider rate limits shared by every worker process. A provider answers 429 beyond its requests and tokens per
-- minute, per model; a thousand slots at 09:00 would meet that wall together. Each model call first asks
-- rate_limit_acquire for capacity: under one row lock per model, it admits the call or says how long to wait, so the
-- workers' calls together stay within the limits however many processes send them, and a worker that dies holds
-- nothing (capacity is time, not a lease).
--
-- The rule: a generic cell rate algorithm per limit. Each admitted request adds its cost, in microseconds of the
-- limit's rate, to a debt that drains at one second per second; a request is admitted only if the debt plus its cost
-- stays within a 6-second burst. At a rate of limit / 66 s, whatever is admitted within any 60 seconds is at most the
-- limit (cost in the window <= burst + 60 s, times the rate), so a provider counting over a sliding minute never sees
-- more than its limit. A single request larger than the burst is admitted when nothing is owed.
--
-- A provider's Retry-After (its 429 or 503) holds the model for everyone until then (rate_limit_hold). Counters of
-- waits, the time waited and the 429s seen feed /metrics and the admin page.

create table rate_limits (
  model               text primary key,
  requests_per_minute integer check (requests_per_minute between 1 and 1000000000),
  tokens_per_minute   bigint  check (tokens_per_minute between 1 and 1000000000000),
  applied_at          timestamptz not null default now(),
  applied_by          text        not null default session_user,
  check (requests_per_minute is not null or tokens_per_minute is not null)
);

create table rate_limit_state (
  model           text primary key,
  -- Theoretical arrival times (epoch microseconds): when each limit's debt will have drained.
  requests_tat_us bigint not null default 0,
  tokens_tat_us   bigint not null default 0,
  -- A provider's Retry-After, epoch microseconds: no call of the model is admitted before it.
  held_until_us   bigint not null default 0,
  admitted        bigint not null default 0,
  waited          bigint not null default 0,
  waited_us       bigint not null default 0,
  throttled       bigint not null default 0
);

create function rate_limit_now_us() returns bigint language sql volatile as $$
  select (extract(epoch from clock_timestamp()) * 1000000)::bigint
$$;

-- The cost of `p_units` at `p_per_minute` units a minute, in whole microseconds, rounded up: 66 s of capacity per
-- minute's limit (see above).
create function rate_limit_cost_us(p_units bigint, p_per_minute bigint) returns bigint language sql immutable as $$
  select (p_units * 66000000 + p_per_minute - 1) / p_per_minute
$$;

-- Admits one call of p_tokens tokens (its prompt and its output cap, as providers count them) to p_model, or returns
-- how many microseconds to wait before asking again (nothing is taken then). 0: admitted. A model without a limit is
-- always admitted. p_waited_us: how long this call has waited so far, counted when it is admitted.
create function rate_limit_acquire(p_model text, p_tokens bigint, p_waited_us bigint) returns bigint
language plpgsql security definer set search_path = pg_catalog, public as $$
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

-- A provider said "retry after p_after_ms" (429 or 503) for p_model: every worker's next call of it waits until then.
-- p_throttled: the answer was a 429, counted for /metrics.
create function rate_limit_hold(p_model text, p_after_ms bigint, p_throttled boolean) returns void
language plpgsql security definer set search_path = pg_catalog, public as $$
begin
  insert into rate_limit_state (model) values (p_model) on conflict do nothing;
  update rate_limit_state
     set held_until_us = greatest(held_until_us, rate_limit_now_us() + greatest(p_after_ms, 0) * 1000),
         throttled = throttled + p_throttled::int
   where model = p_model;
end
$$;

revoke all on function rate_limit_acquire(text, bigint, bigint) from public;
revoke all on function rate_limit_hold(text, bigint, boolean) from public;
grant execute on function rate_limit_acquire(text, bigint, bigint) to cronledger_app;
grant execute on function rate_limit_hold(text, bigint, boolean) to cronledger_app;
-- `cronledger limits apply` replaces the limits; workers only read them (through rate_limit_acquire).
grant select, insert, update, delete on rate_limits to cronledger_app;
