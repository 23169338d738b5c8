-- The admin page (as cronledger_readonly) shows what downgrades saved, which prices each downgraded call at its default
-- model with usage_cost: the booking's own cost rule, so the read-only role may run it and what it calls. They are
-- pure functions (they read the row they are given and write nothing), so this grants no write.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    grant execute on function usage_cost(text, bigint, bigint, bigint, model_prices, timestamptz),
      price_class(numeric, model_prices, timestamptz, text),
      call_cost(text, bigint, bigint, bigint, numeric, numeric, numeric, numeric) to cronledger_readonly;
  end if;
end
$$;
