-- Recovering a slot: a claim has generations. The runs row is the slot's *current* owner (one per idempotency key);
-- run_attempts keeps every execution that ever owned it, so a retried slot shows each generation side by side.
-- A retry (input.retry.supersedesRunId) takes the claim over with one compare-and-set update: only from the named
-- owner and only while the claim is not completed. Schedule firings and native backfills never re-claim.
alter table runs add column generation integer not null default 1 check (generation >= 1);
-- manual triggers (`tasks trigger`) claim manual:<taskId>:<start time>, never a slot key
alter table runs add column manual boolean not null default false;
alter table runs drop constraint runs_status_check;
alter table runs add constraint runs_status_check check (status in ('running', 'completed', 'failed', 'cancelled'));

create table run_attempts (
  id               bigserial   primary key,
  idempotency_key  text        not null references runs (idempotency_key),
  generation       integer     not null check (generation >= 1),
  workflow_id      text        not null,
  temporal_run_id  text        not null unique,
  -- 'stale': the execution closed without bookkeeping (terminated, timed out) and a retry superseded it
  status           text        not null default 'running' check (status in ('running', 'completed', 'failed', 'cancelled', 'stale')),
  claimed_by       text        not null,
  started_at       timestamptz not null default now(),
  finished_at      timestamptz,
  error            text,
  unique (idempotency_key, generation)
);

insert into run_attempts (idempotency_key, generation, workflow_id, temporal_run_id, status, claimed_by, started_at, finished_at, error)
select idempotency_key, generation, workflow_id, temporal_run_id, status, claimed_by, claimed_at, finished_at, error from runs;

-- Ledger keys name the execution: <temporal run id>:<step>:<attempt>, and run_id holds Temporal's run ID, which a
-- retry and a reset both change. The workflow ID (the slot) has its own column. Rows booked before this migration
-- keep their old keys, run_id = workflow ID and workflow_id null: the ledger is append-only, even for migrations.
alter table usage_ledger add column workflow_id text;
-- The embedding step truncates a reply longer than the model's input limit: the token count before truncation.
alter table usage_ledger add column input_truncated_from bigint check (input_truncated_from >= 0);
create index usage_ledger_workflow on usage_ledger (workflow_id);

-- Usage the provider reported that can't be booked as a ledger row (invalid counts, or no price in force when it
-- came back). Never nowhere: it lands here, append-only, with the raw counts and why, for reports and a human.
create table usage_exceptions (
  id                   bigserial   primary key,
  idempotency_key      text        not null unique,
  user_id              text        not null,
  workflow_id          text,
  run_id               text,
  task_id              text,
  model                text        not null,
  provider_model       text,
  kind                 text        not null check (kind in ('chat', 'embedding')),
  status               text        not null check (status in ('ok', 'failed')),
  attempt              integer     not null check (attempt >= 1),
  raw_usage            jsonb       not null,
  reason               text        not null,
  provider_request_id  text,
  worker_id            text,
  created_at           timestamptz not null default now()
);
create index usage_exceptions_created_at on usage_exceptions (created_at);

create trigger usage_exceptions_append_only before update or delete on usage_exceptions
  for each row execute function forbid_append_only_change();
create trigger usage_exceptions_no_truncate before truncate on usage_exceptions
  for each statement execute function forbid_append_only_change();

-- A retried slot may store its own memory: keyed by the execution, not the slot.
alter table memories add column temporal_run_id text;
alter table memories add column input_truncated_from bigint;
alter table memories drop constraint memories_pkey;
create unique index memories_execution on memories (coalesce(temporal_run_id, run_workflow_id));
