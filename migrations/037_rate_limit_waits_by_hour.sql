-- Rate-limit waits and 429s per model and UTC hour, for the admin page ("this hour", "last 24 hours"); /metrics keeps
-- serving rate_limit_state's totals. A trigger on rate_limit_state adds each change of its counters to the hour it
-- happened in, so rate_limit_acquire and rate_limit_hold stay as they are: a call that waited is counted when it is
-- admitted (with the whole time it waited), a 429 when the provider's Retry-After is recorded. Rows are written only
-- when a call waited or was throttled, never for a call admitted at once.
create table rate_limit_hours (
  model     text        not null,
  hour      timestamptz not null,  -- the UTC hour's start
  waited    bigint      not null default 0 check (waited >= 0),
  waited_us bigint      not null default 0 check (waited_us >= 0),
  throttled bigint      not null default 0 check (throttled >= 0),
  primary key (model, hour)
);

create function rate_limit_count_hour() returns trigger language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
  insert into rate_limit_hours as h (model, hour, waited, waited_us, throttled)
  values (new.model, date_trunc('hour', now(), 'UTC'), new.waited - old.waited, new.waited_us - old.waited_us,
          new.throttled - old.throttled)
  on conflict (model, hour) do update
    set waited = h.waited + excluded.waited, waited_us = h.waited_us + excluded.waited_us, throttled = h.throttled + excluded.throttled;
  return null;
end
$$;
create trigger rate_limit_state_hours after update on rate_limit_state for each row
  when (new.waited > old.waited or new.waited_us > old.waited_us or new.throttled > old.throttled)
  execute function rate_limit_count_hour();

-- The admin page reads it (cronledger_readonly, by the schema's default privileges); workers only write it, through
-- rate_limit_acquire and rate_limit_hold.
revoke select on rate_limit_hours from cronledger_worker;
