-- Who may write what. Migrations run as the owner of these tables; workers, the CLI and reports connect as
-- cronledger_app, which may append to the ledger and the prices and read them, but not change, delete, truncate,
-- alter or drop them, nor switch off their triggers (only an owner may) or set session_replication_role (only a
-- superuser may). The append-only triggers stay as a second guard against the owner.
--
-- The role is created before migrating: by `cronledger dev up`, or by a DBA for an external database (README,
-- "Database roles"). Its password never belongs in a migration.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    raise exception 'role cronledger_app does not exist'
      using hint = 'create it first, as a superuser or CREATEROLE user: create role cronledger_app login password ''...'' (see README, "Database roles")';
  end if;
end
$$;

-- Start from nothing, then grant exactly what the application does.
revoke all on all tables in schema public from public, cronledger_app;
revoke all on all sequences in schema public from public, cronledger_app;
grant usage on schema public to cronledger_app;

-- The ledger and the prices: append and read.
grant select, insert on usage_ledger, model_prices to cronledger_app;
-- Runs are claimed, then completed or failed.
grant select, insert, update on runs to cronledger_app;
grant select, insert on run_duplicates, memories, report_deliveries to cronledger_app;
-- Rollups are derived data the application keeps current (and may rebuild), so it rewrites them.
grant select, insert, update on rollup_zones, rollup_months to cronledger_app;
grant select, insert, delete on rollup_pending, usage_rollups to cronledger_app;
grant select on schema_migrations to cronledger_app;
-- nextval for the bigserial ids (USAGE does not allow setval).
grant usage on all sequences in schema public to cronledger_app;

-- Tables and sequences the owner creates later are readable, never writable, until a migration grants more
-- (test/grants.test.ts fails on any table whose privileges are not on its allow-list).
alter default privileges in schema public grant select on tables to cronledger_app;
alter default privileges in schema public grant usage on sequences to cronledger_app;
