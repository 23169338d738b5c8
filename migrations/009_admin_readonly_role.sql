-- The admin page (`cronledger admin`) reads and never writes, so it connects as cronledger_readonly: SELECT on the
-- tables it shows and nothing else (not memories: what users asked their agents is not the admin page's business).
-- Like cronledger_app, the role is created before migrating, by `cronledger dev up` or a DBA (README, "Database
-- roles"); a database without it is migrated all the same and the admin page then needs CRONLEDGER_ADMIN_DATABASE_URL.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    revoke all on all tables in schema public from cronledger_readonly;
    grant usage on schema public to cronledger_readonly;
    grant select on usage_ledger, model_prices, runs, run_attempts, run_duplicates, usage_exceptions, rollup_zones,
      rollup_months, rollup_pending, usage_rollups, applied_tasks, report_deliveries, schema_migrations, budgets,
      model_downgrades, budget_zones, budget_months, budget_reservations, budget_events to cronledger_readonly;
    -- Tables added later are readable by it, never writable; test/grants.test.ts keeps its allow-list.
    alter default privileges in schema public grant select on tables to cronledger_readonly;
  end if;
end
$$;

-- Booking lag: the moment the provider's usage came back to the worker, set by the booking path; the row's
-- created_at is the commit. Null on rows booked before this migration and on corrections (no provider call).
alter table usage_ledger add column usage_received_at timestamptz;
