-- One row per claimed schedule slot. The unique idempotency key (cron:<taskId>:<YYYY-MM-DDTHH:MMZ>) is the
-- second guard against duplicate runs: whoever inserts it first runs the slot, everyone else stops.
create table runs (
  id               bigserial primary key,
  idempotency_key  text        not null unique,
  task_id          text        not null,
  user_id          text        not null,
  workflow_id      text        not null,
  temporal_run_id  text        not null,
  scheduled_minute timestamptz not null,
  status           text        not null default 'running' check (status in ('running', 'completed', 'failed')),
  claimed_by       text        not null,
  claimed_at       timestamptz not null default now(),
  finished_at      timestamptz,
  duration_ms      bigint,
  error            text
);
create index runs_task_minute on runs (task_id, scheduled_minute desc);
create index runs_claimed_at on runs (claimed_at);

-- Executions that found their slot already claimed and stopped before any model call.
-- Kept so reports can show duplicate-skipped work as its own slice.
create table run_duplicates (
  temporal_run_id  text primary key,
  workflow_id      text        not null,
  idempotency_key  text        not null references runs (idempotency_key),
  task_id          text        not null,
  user_id          text        not null,
  detected_by      text        not null,
  detected_at      timestamptz not null default now()
);
create index run_duplicates_detected_at on run_duplicates (detected_at);

-- What a run remembers: its reply and the reply's embedding, written by the embed step.
create table memories (
  run_workflow_id  text primary key,
  task_id          text        not null,
  user_id          text        not null,
  content          text        not null,
  embedding        jsonb       not null,
  created_at       timestamptz not null default now()
);
