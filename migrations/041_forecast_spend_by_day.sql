-- The recorded forecast keeps its steps: what can be spent by the end of each day (in the budget's zone) on which a
-- slot runs, median and high, as [{day, medianUsd, highUsd}] with exact decimal strings, so the admin page draws the
-- band as the schedules spend (flat over a weekday task's weekend). Null when a row has no steps: the chart then
-- draws a straight band.
alter table budget_forecasts add column spend_by_day jsonb;

drop function record_forecast(text, text, date, date, numeric, numeric, numeric, numeric, numeric, numeric, numeric);

-- What the budget sweep writes of a forecast: the day's row (the day's first forecast stands) and, when every slot left
-- at the median cost would go over the limit, the month's event (its forecast_usd that figure). The every-slot figures
-- left out are the forecast's own (no slot blocked or skipped). Returns the IDs of events recorded now, for the sweep to
-- deliver.
create function record_forecast(p_user_id text, p_zone text, p_month date, p_day date, p_median numeric, p_high numeric,
  p_limit numeric, p_spent numeric, p_reserved numeric, p_all_slots_median numeric default null,
  p_all_slots_high numeric default null, p_spend_by_day jsonb default null)
returns jsonb language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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
revoke execute on function record_forecast(text, text, date, date, numeric, numeric, numeric, numeric, numeric, numeric, numeric, jsonb)
  from public;
grant execute on function record_forecast(text, text, date, date, numeric, numeric, numeric, numeric, numeric, numeric, numeric, jsonb)
  to cronledger_worker;
