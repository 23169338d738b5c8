-- `prices apply` (as cronledger_operator) compares a version already in the table with the file's, rate set by rate set
-- (price_rates), and lists the versions in force (price_version_at): pure reads of model_prices and model_price_rates,
-- which the operator may read already.
grant execute on function price_rates(model_prices, text, boolean), price_version_at(text, timestamptz),
  price_tier(text), is_long_context(model_prices, bigint) to cronledger_operator;
