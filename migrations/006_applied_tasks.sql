-- The task IDs of the last `cronledger tasks apply`, so `backfill --all` and `tasks list` can find a task applied a
-- moment ago: Temporal's schedule list reads visibility, which is eventually consistent, while this row is written
-- before `tasks apply` returns. Readers take the union with the schedule list and describe each schedule, so a row
-- here never stands in for a schedule that is gone.
create table applied_tasks (
  task_id     text        primary key,
  applied_at  timestamptz not null default now()
);

do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    grant select, insert, update, delete on applied_tasks to cronledger_app;
  end if;
end
$$;
