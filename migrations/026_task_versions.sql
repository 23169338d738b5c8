-- Every version of every task that `cronledger tasks apply` applied: the task ID, its fingerprint (the schedule's
-- action names these two and nothing else), the definition as applied, when and by which database user. A run loads
-- its definition (user, prompt, models, output cap) from here in its first step, so whoever can start a workflow in
-- Temporal can only run what an apply recorded. A version is recorded once (applying it again adds nothing) and never
-- changed or removed: an older version stays a version that was applied.
create table task_versions (
  task_id     text        not null,
  fingerprint text        not null,
  definition  jsonb       not null,
  applied_at  timestamptz not null default now(),
  applied_by  text        not null default session_user,
  primary key (task_id, fingerprint)
);

create trigger task_versions_append_only before update or delete on task_versions
  for each row execute function forbid_append_only_change();
create trigger task_versions_no_truncate before truncate on task_versions
  for each statement execute function forbid_append_only_change();

grant select, insert on task_versions to cronledger_app;

-- A run whose task and fingerprint match no applied version ends `rejected`, before any claim or model call, under a
-- row of its own (key `rejected:<Temporal run ID>`), so it never takes a slot's claim.
alter table runs drop constraint runs_status_check;
alter table runs add constraint runs_status_check
  check (status in ('running', 'completed', 'failed', 'cancelled', 'blocked', 'rejected'));

-- What users asked their agents, like memories: not the admin page's business.
do $$ begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then revoke all on task_versions from cronledger_readonly; end if;
end $$;
