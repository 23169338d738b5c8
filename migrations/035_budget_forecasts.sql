-- The month-end forecast (src/forecast/): one row per user, budget zone, month and day, recorded by the budget sweep the
-- first time it forecasts that day, and never changed, so a past month's first-day forecast can be held against what
-- was spent. Money is exact (numeric(38,18)), like the ledger's.
create table budget_forecasts (
  user_id text not null,
  time_zone text not null,
  month date not null,
  day date not null,
  -- spent + reserved + every task's slots left × its median (p95) cost per run
  median_usd numeric(38,18) not null,
  high_usd numeric(38,18) not null,
  limit_usd numeric(38,18),
  spent_usd numeric(38,18) not null,
  reserved_usd numeric(38,18) not null,
  computed_at timestamptz not null default now(),
  primary key (user_id, time_zone, month, day)
);
create trigger budget_forecasts_append_only before update or delete on budget_forecasts
  for each row execute function forbid_append_only_change();
create trigger budget_forecasts_no_truncate before truncate on budget_forecasts
  for each statement execute function forbid_append_only_change();

-- The forecast's own budget event: `forecast-over-limit`, when the median forecast first goes over the limit, once per
-- user and month, delivered like the 80 % and 100 % events (threshold 100, its forecast kept beside the figures).
alter table budget_events add column kind text not null default 'threshold' check (kind in ('threshold', 'forecast-over-limit'));
alter table budget_events add column forecast_usd numeric(38,18);
alter table budget_events drop constraint budget_events_user_id_time_zone_month_threshold_key;
alter table budget_events add constraint budget_events_once unique (user_id, time_zone, month, threshold, kind);

-- What the budget sweep writes of a forecast: the day's row (the day's first forecast stands) and, when the median is
-- over the limit, the month's event. Returns the IDs of events recorded now, for the sweep to deliver.
create function record_forecast(p_user_id text, p_zone text, p_month date, p_day date, p_median numeric, p_high numeric,
  p_limit numeric, p_spent numeric, p_reserved numeric)
returns jsonb language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
  v_event_ids jsonb := '[]'::jsonb;
begin
  insert into budget_forecasts (user_id, time_zone, month, day, median_usd, high_usd, limit_usd, spent_usd, reserved_usd)
  values (p_user_id, p_zone, p_month, p_day, p_median, p_high, p_limit, p_spent, p_reserved)
  on conflict do nothing;
  if p_limit is not null and p_median > p_limit then
    with inserted as (
      insert into budget_events (event_id, user_id, time_zone, month, threshold, kind, limit_usd, spent_usd, reserved_usd, forecast_usd)
      values (format('budget-forecast:%s:%s:%s', p_user_id, p_zone, to_char(p_month, 'YYYY-MM')), p_user_id, p_zone, p_month, 100,
              'forecast-over-limit', p_limit, p_spent, p_reserved, p_median)
      on conflict do nothing
      returning event_id
    )
    select coalesce(jsonb_agg(to_jsonb(event_id)), '[]'::jsonb) into v_event_ids from inserted;
  end if;
  return v_event_ids;
end
$$;
revoke execute on function record_forecast(text, text, date, date, numeric, numeric, numeric, numeric, numeric) from public;
grant execute on function record_forecast(text, text, date, date, numeric, numeric, numeric, numeric, numeric) to cronledger_worker;
