-- The ledger database's schema, created directly. db/schema.sql is its pg_dump (npm run db:schema); later migrations
-- (022 on) change it one step at a time.
--
-- Roles: migrations run as the owner of every object here (cronledger_owner). Workers, the CLI and reports connect as
-- cronledger_app, which may append to the ledger and the prices and read them, but not change, delete, truncate,
-- alter or drop them, nor switch off their triggers (only an owner may) or set session_replication_role (only a
-- superuser may); the append-only triggers stay as a second guard against the owner. The admin page connects as
-- cronledger_readonly: SELECT on what it shows. Both roles are created before migrating, by `cronledger dev up` or a
-- DBA (docs/production.md, "Database roles"); their passwords never belong in a migration. The grants are at the end of this file.
do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    raise exception 'role cronledger_app does not exist'
      using hint = 'create it first, as a superuser or CREATEROLE user: create role cronledger_app login password ''...'' (see docs/production.md, "Database roles")';
  end if;
end
$$;

-- ===================================================================================================================
-- Runs
-- ===================================================================================================================

-- One row per claimed slot: its current owner. The unique idempotency key (cron:<taskId>:<YYYY-MM-DDTHH:MMZ>, or
-- manual:<taskId>:<start time> for `tasks trigger`) is the second guard against duplicate runs: whoever inserts it first
-- runs the slot, everyone else stops. A claim has generations: a retry (input.retry.supersedesRunId) takes it over with
-- one compare-and-set update (claim_run), only from the named owner and only while the claim is not completed or
-- blocked. Schedule firings and native backfills never re-claim. A run records the budget tier it ran at, and a
-- blocked run why (limit, spent, reserved) in budget.
create table runs (
  id               bigserial primary key,
  idempotency_key  text        not null unique,
  task_id          text        not null,
  user_id          text        not null,
  workflow_id      text        not null,
  temporal_run_id  text        not null,
  scheduled_minute timestamptz not null,
  status           text        not null default 'running' check (status in ('running', 'completed', 'failed', 'cancelled', 'blocked')),
  claimed_by       text        not null,
  claimed_at       timestamptz not null default now(),
  finished_at      timestamptz,
  duration_ms      bigint,
  error            text,
  generation       integer     not null default 1 check (generation >= 1),
  manual           boolean     not null default false,
  tier             text        check (tier in ('default', 'cheap', 'blocked')),
  budget           jsonb
);

-- Every execution that ever owned a slot, so a retried slot shows each generation side by side.
create table run_attempts (
  id               bigserial   primary key,
  idempotency_key  text        not null references runs (idempotency_key),
  generation       integer     not null check (generation >= 1),
  workflow_id      text        not null,
  temporal_run_id  text        not null unique,
  -- 'stale': the execution closed without bookkeeping (terminated, timed out) and a retry superseded it
  status           text        not null default 'running' check (status in ('running', 'completed', 'failed', 'cancelled', 'stale', 'blocked')),
  claimed_by       text        not null,
  started_at       timestamptz not null default now(),
  finished_at      timestamptz,
  error            text,
  unique (idempotency_key, generation)
);

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

-- What a run remembers: its reply and the reply's embedding, written by the embed step. Keyed by the execution
-- (memories_execution), so a retried slot may store its own. input_truncated_from: the token count before the embed
-- step truncated a reply longer than the model's input limit.
create table memories (
  run_workflow_id      text        not null,
  task_id              text        not null,
  user_id              text        not null,
  content              text        not null,
  embedding            jsonb       not null,
  created_at           timestamptz not null default now(),
  temporal_run_id      text,
  input_truncated_from bigint
);

-- The task IDs of the last `cronledger tasks apply`, so `backfill --all` and `tasks list` can find a task applied a
-- moment ago: Temporal's schedule list reads visibility, which is eventually consistent, while this row is written
-- before `tasks apply` returns. Readers take the union with the schedule list and describe each schedule, so a row
-- here never stands in for a schedule that is gone.
create table applied_tasks (
  task_id     text        primary key,
  applied_at  timestamptz not null default now()
);

-- ===================================================================================================================
-- The ledger
-- ===================================================================================================================

-- Prices are data. A change is a new version row that takes effect at effective_from; rows are never edited.
-- Per-million prices allow 12 fractional digits, so the per-token price (divided by 10^6) fits the 18 of cost_usd exactly.
create table model_prices (
  id                          bigserial primary key,
  model                       text           not null,
  version                     text           not null,
  effective_from              timestamptz    not null,
  input_per_million           numeric(30, 12),
  cached_input_per_million    numeric(30, 12),
  output_per_million          numeric(30, 12),
  embedding_input_per_million numeric(30, 12),
  source                      text           not null,
  created_at                  timestamptz    not null default now(),
  unique (model, version),
  unique (model, effective_from)
);

-- Every billed model call, plus corrections. Append-only: enforced by triggers (below) and by the application role's
-- privileges. Usage keys name the execution, <temporal run id>:<step>:<attempt>; run_id holds Temporal's run ID, which
-- a retry and a reset both change, and workflow_id the slot's workflow. input_truncated_from: the token count before
-- the embedding step truncated its input. usage_received_at: when the provider's usage came back to the worker;
-- booked_at: when the booking committed, as closely as a row can know it (clock_timestamp() as the row is formed, in
-- book_usage's single-statement transaction). The admin page's booking-lag histogram runs from one to the other;
-- usage_received_at is null on corrections (no provider call).
create table usage_ledger (
  id                   bigserial primary key,
  idempotency_key      text            not null unique,
  entry_type           text            not null check (entry_type in ('usage', 'adjustment', 'credit', 'reconciliation')),
  original_entry_id    bigint          references usage_ledger (id),
  reason               text,
  user_id              text            not null,
  run_id               text,
  task_id              text,
  model                text,
  provider_model       text,
  kind                 text            check (kind in ('chat', 'embedding')),
  status               text            not null default 'ok' check (status in ('ok', 'failed')),
  attempt              integer         check (attempt >= 1),
  prompt_tokens        bigint          not null default 0 check (prompt_tokens >= 0),
  cached_prompt_tokens bigint          not null default 0 check (cached_prompt_tokens >= 0 and cached_prompt_tokens <= prompt_tokens),
  completion_tokens    bigint          not null default 0 check (completion_tokens >= 0),
  reasoning_tokens     bigint          not null default 0 check (reasoning_tokens >= 0 and reasoning_tokens <= completion_tokens),
  cost_usd             numeric(38, 18) not null,
  price_version        text,
  provider_request_id  text,
  worker_id            text,
  created_at           timestamptz     not null default now(),
  workflow_id          text,
  input_truncated_from bigint          check (input_truncated_from >= 0),
  usage_received_at    timestamptz,
  booked_at            timestamptz     default clock_timestamp(),
  -- usage rows carry what was called; every other row explains itself and points at what it corrects
  check (entry_type <> 'usage' or (model is not null and kind is not null and price_version is not null and attempt is not null)),
  check (entry_type = 'usage' or reason is not null),
  check (entry_type not in ('adjustment', 'reconciliation') or original_entry_id is not null)
);

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

-- ===================================================================================================================
-- Rollups: derived data, rebuildable from usage_ledger and runs at any time (`cronledger rollups rebuild`)
-- ===================================================================================================================
--
-- A usage bucket is (time zone, local day, user, task, model, kind, entry_type, status). Days are local to the zone, so
-- a report whose month follows --tz reads whole buckets. Each zone that reports are asked for is tracked in
-- rollup_zones; UTC is tracked from the start.
--
-- Never missing an entry: the ledger's id sequence is no watermark on its own, because ids are taken at insert time and
-- a transaction that commits late (or an entry back-dated with an old created_at) lands behind a watermark that already
-- moved past it. Instead the ledger's AFTER INSERT trigger queues every new entry in rollup_queue, inside the inserting
-- transaction: the queue row becomes visible exactly when the entry does. rollup_queue references nothing, so a writer
-- touches no shared row. A refresh takes queued ids, finds the buckets they touch in every tracked zone, recomputes
-- those buckets wholly from the raw ledger (a late entry reopens its bucket), deletes the queue rows and advances each
-- zone's watermark, in one transaction. Refreshes and builds take one advisory lock in turn (src/reports/rollups-write.ts),
-- so a zone registered while a refresh runs is built only after that refresh committed, from a snapshot that holds
-- every entry the refresh consumed. Runs are rolled up the same way from run_rollup_queue, which the runs table's own
-- triggers fill with the old and the new (claimed_at, user, task) of every inserted or updated run.

create table rollup_zones (
  zone            text        primary key,
  registered_at   timestamptz not null default now(),
  -- watermark: when the last refresh ran, the highest ledger id folded in so far and how many entries were folded
  refreshed_at    timestamptz,
  last_entry_id   bigint      not null default 0,
  entries_folded  bigint      not null default 0
);

-- Months whose buckets were computed in full from the raw ledger for a zone; from then on the queue keeps them current.
create table rollup_months (
  zone      text        not null references rollup_zones (zone) on delete cascade,
  month     text        not null check (month ~ '^\d{4}-(0[1-9]|1[0-2])$'),
  built_at  timestamptz not null default now(),
  primary key (zone, month)
);

create table rollup_queue (
  entry_id  bigint primary key
);

create table usage_rollups (
  zone                 text            not null references rollup_zones (zone) on delete cascade,
  day                  date            not null,
  user_id              text            not null,
  model                text,
  kind                 text,
  entry_type           text            not null,
  status               text            not null,
  entries              bigint          not null,
  prompt_tokens        bigint          not null,
  cached_prompt_tokens bigint          not null,
  completion_tokens    bigint          not null,
  reasoning_tokens     bigint          not null,
  cost_usd             numeric(38, 18) not null,
  first_entry_id       bigint          not null,
  last_entry_id        bigint          not null,
  task_id              text,
  constraint usage_rollups_bucket unique nulls not distinct (zone, day, user_id, task_id, model, kind, entry_type, status)
);

-- Three coarser cuts of usage_rollups, so the report and the admin page read rows that do not grow with the ledger:
--   usage_month_rollups  per (zone, local month, user, model, kind, entry_type, status): the report's by-user cut;
--   usage_day_totals     per (zone, local day, model, kind, entry_type, status): totals, by day, by model, by status,
--                        and the admin page's daily spend;
--   usage_day_users      per (zone, local day, user, task, entry_type): the admin page's daily spend per user and per
--                        task (its anomaly series).
-- They are kept by the same refresh from the same queue, in the same transaction as usage_rollups (the batch's
-- additions to usage_rollups, summed once more), and rebuilt with them: derived data of derived data, never apart.
create table usage_month_rollups (
  zone                 text            not null references rollup_zones (zone) on delete cascade,
  month                text            not null check (month ~ '^\d{4}-(0[1-9]|1[0-2])$'),
  user_id              text            not null,
  model                text,
  kind                 text,
  entry_type           text            not null,
  status               text            not null,
  entries              bigint          not null,
  prompt_tokens        bigint          not null,
  cached_prompt_tokens bigint          not null,
  completion_tokens    bigint          not null,
  reasoning_tokens     bigint          not null,
  cost_usd             numeric(38, 18) not null,
  first_entry_id       bigint          not null,
  last_entry_id        bigint          not null,
  constraint usage_month_rollups_bucket unique nulls not distinct (zone, month, user_id, model, kind, entry_type, status)
);

create table usage_day_totals (
  zone                 text            not null references rollup_zones (zone) on delete cascade,
  day                  date            not null,
  model                text,
  kind                 text,
  entry_type           text            not null,
  status               text            not null,
  entries              bigint          not null,
  prompt_tokens        bigint          not null,
  cached_prompt_tokens bigint          not null,
  completion_tokens    bigint          not null,
  reasoning_tokens     bigint          not null,
  cost_usd             numeric(38, 18) not null,
  first_entry_id       bigint          not null,
  last_entry_id        bigint          not null,
  constraint usage_day_totals_bucket unique nulls not distinct (zone, day, model, kind, entry_type, status)
);

create table usage_day_users (
  zone                 text            not null references rollup_zones (zone) on delete cascade,
  day                  date            not null,
  user_id              text            not null,
  task_id              text,
  entry_type           text            not null,
  entries              bigint          not null,
  prompt_tokens        bigint          not null,
  cached_prompt_tokens bigint          not null,
  completion_tokens    bigint          not null,
  reasoning_tokens     bigint          not null,
  cost_usd             numeric(38, 18) not null,
  first_entry_id       bigint          not null,
  last_entry_id        bigint          not null,
  constraint usage_day_users_bucket unique nulls not distinct (zone, day, user_id, task_id, entry_type)
);

-- Runs per local day of their claim. A run's bucket is (day, user, task); its status and tier split the count.
create table run_rollups (
  zone     text   not null references rollup_zones (zone) on delete cascade,
  day      date   not null,
  user_id  text   not null,
  task_id  text   not null,
  status   text   not null,
  tier     text,
  runs     bigint not null,
  constraint run_rollups_bucket unique nulls not distinct (zone, day, user_id, task_id, status, tier)
);

create table run_rollup_queue (
  id          bigserial   primary key,
  claimed_at  timestamptz not null,
  user_id     text        not null,
  task_id     text        not null
);

-- ===================================================================================================================
-- Reports
-- ===================================================================================================================

-- One delivery per month. A report generated after the month ended is `complete` and is posted once, ever.
-- A report of a month still under way (`report deliver` for the current month) is posted once per distinct content,
-- so it never blocks the final delivery once the month is over.
create table report_deliveries (
  id             bigserial   primary key,
  month          text        not null check (month ~ '^\d{4}-(0[1-9]|1[0-2])$'),
  time_zone      text        not null,
  complete       boolean     not null,
  report_sha256  text        not null,
  -- scheme and host of the webhook only: its path is a secret
  target         text        not null,
  workflow_id    text,
  attempt        integer,
  response_status integer,
  delivered_at   timestamptz not null default now()
);

-- ===================================================================================================================
-- Budgets
-- ===================================================================================================================

-- Budgets are data with versions, like prices: a change is a new row that takes effect at effective_from, and rows are
-- never edited. user_id null is the default budget for every user without one of their own. No row in force: no limit.
create table budgets (
  id                 bigserial       primary key,
  user_id            text,
  monthly_limit_usd  numeric(38, 18) not null check (monthly_limit_usd >= 0),
  time_zone          text            not null default 'UTC',
  effective_from     timestamptz     not null default now(),
  source             text            not null,
  created_at         timestamptz     not null default now()
);

-- Each default chat (or embedding) model's cheap model, versioned the same way. cheap_model null ends a downgrade.
create table model_downgrades (
  id              bigserial   primary key,
  model           text        not null,
  cheap_model     text,
  effective_from  timestamptz not null default now(),
  source          text        not null,
  created_at      timestamptz not null default now(),
  unique (model, effective_from)
);

-- Month-to-date spend per (user, zone, local month) is budget_months.spent_usd plus the month's shards plus its
-- deltas, read through the budget_month_spent view. Every zone any budget uses is tracked for every user (budget_zones),
-- so a budget that changes zone finds its month already summed.
--
-- A booking adds its cost to a row of its own session: budget_month_shards, one row per (user, zone, month, backend),
-- `shard` being pg_backend_pid(). Two transactions in progress never share a backend, so two bookings never wait for
-- each other's row, however many run for one user, and no lock order between them can deadlock. The update touches no
-- indexed column, so it is a HOT update: the dead versions are pruned from the page, and a month's rows stay one live
-- version each. The budget decision locks the month's budget_months row; bookings never take it. The sweeper folds
-- shards and deltas into budget_months (budget_fold_all_deltas). Nothing appends deltas; the sweeper still folds any.
--
-- Why the decision is exact: it reads spent (the three sources) and the open reservations in ONE statement, so one
-- snapshot. A booking B adds to its shard and settles its reservation R in one transaction. If B committed before the
-- snapshot, B is in its shard (spent) and R is settled (not reserved); if after, B is not in the shard and R is open
-- (reserved at its worst case, at least B's cost). Either way once. The fold commits atomically, and skips a month
-- whose row a decision holds.
create table budget_zones (
  time_zone  text primary key,
  added_at   timestamptz not null default now()
);

create table budget_months (
  user_id    text            not null,
  time_zone  text            not null references budget_zones (time_zone),
  month      date            not null, -- the first day of the month, local to time_zone
  spent_usd  numeric(38, 18) not null default 0,
  primary key (user_id, time_zone, month)
);

create table budget_month_deltas (
  user_id     text            not null,
  time_zone   text            not null, -- one of budget_zones (no foreign key: its check would lock the zone row per booking)
  month       date            not null, -- the first day of the month, local to time_zone
  amount_usd  numeric(38, 18) not null
);

create table budget_month_shards (
  user_id    text            not null,
  time_zone  text            not null, -- one of budget_zones (no foreign key: its check would lock the zone row per booking)
  month      date            not null, -- the first day of the month, local to time_zone
  shard      integer         not null, -- the booking's backend (pg_backend_pid())
  spent_usd  numeric(38, 18) not null,
  primary key (user_id, time_zone, month, shard)
) with (fillfactor = 50); -- room on each page for the HOT updates

-- Spent per (user, zone, month), from all three sources in one snapshot; every reader goes through it.
create view budget_month_spent as
select user_id, time_zone, month, sum(spent_usd) as spent_usd
  from (select user_id, time_zone, month, spent_usd from budget_months
        union all
        select user_id, time_zone, month, amount_usd from budget_month_deltas
        union all
        select user_id, time_zone, month, spent_usd from budget_month_shards) s
 group by user_id, time_zone, month;

-- Open reservations: the worst case of a call that has been allowed to start and is not booked yet. Keyed like the
-- ledger entry that settles it (<runId>:<step>:<attempt>). Closed by the booking (settled), by the run's own cleanup
-- (released), or by the sweeper once expires_at has passed (expired). Only open rows that have not expired count as
-- reserved.
create table budget_reservations (
  idempotency_key  text            primary key,
  user_id          text            not null,
  time_zone        text            not null,
  month            date            not null,
  amount_usd       numeric(38, 18) not null check (amount_usd >= 0),
  model            text            not null,
  tier             text            not null check (tier in ('default', 'cheap')),
  workflow_id      text,
  run_id           text,
  status           text            not null default 'open' check (status in ('open', 'settled', 'released', 'expired')),
  expires_at       timestamptz     not null,
  created_at       timestamptz     not null default now(),
  closed_at        timestamptz,
  settled_entry_id bigint
);

-- Threshold events (80 %, 100 %): one per user, zone and month, recorded once; delivered at least once under event_id.
-- The sweeper re-delivers events that no run delivered, backing off per event from last_attempt_at.
create table budget_events (
  event_id      text        primary key,
  user_id       text        not null,
  time_zone     text        not null,
  month         date        not null,
  threshold     integer     not null check (threshold in (80, 100)),
  limit_usd     numeric(38, 18) not null,
  spent_usd     numeric(38, 18) not null,
  reserved_usd  numeric(38, 18) not null,
  created_at    timestamptz not null default now(),
  delivered_at  timestamptz,
  attempts      integer     not null default 0,
  last_error    text,
  last_attempt_at timestamptz,
  unique (user_id, time_zone, month, threshold)
);

-- UTC is tracked from the start, for rollups and for budgets; other zones are added the first time they are used.
insert into rollup_zones (zone) values ('UTC');
insert into budget_zones (time_zone) values ('UTC');

-- ===================================================================================================================
-- Indexes
-- ===================================================================================================================

create index runs_task_minute on runs (task_id, scheduled_minute desc);
create index runs_claimed_at on runs (claimed_at);
-- the claimed runs a run-rollup bucket holds, found without scanning the day's runs of everyone else
create index runs_user_task_claimed on runs (user_id, task_id, claimed_at);
-- What downgrades saved (src/budgets/downgrade-savings.ts) checks each ledger row under a cheap model against the runs
-- that ran at the cheap tier, by workflow_id. Partial: only the downgraded runs, a small share of all, are in it, and
-- no other run's insert or update pays for it.
create index runs_cheap_workflow on runs (workflow_id) where tier = 'cheap';
create index run_duplicates_detected_at on run_duplicates (detected_at);
create unique index memories_execution on memories (coalesce(temporal_run_id, run_workflow_id));

create index usage_ledger_created_at on usage_ledger (created_at);
create index usage_ledger_user_created on usage_ledger (user_id, created_at);
create index usage_ledger_run on usage_ledger (run_id);
create index usage_ledger_model_created on usage_ledger (model, created_at);
create index usage_ledger_workflow on usage_ledger (workflow_id);
create index usage_exceptions_created_at on usage_exceptions (created_at);

create unique index report_deliveries_month_once on report_deliveries (month) where complete;
create unique index report_deliveries_partial_once on report_deliveries (month, report_sha256) where not complete;

create unique index budgets_scope_effective on budgets (coalesce(user_id, ''), effective_from);
create index budgets_user_effective on budgets (user_id, effective_from desc);
create index budget_month_deltas_month on budget_month_deltas (user_id, time_zone, month);
create index budget_reservations_open on budget_reservations (user_id, time_zone, month) where status = 'open';
create index budget_reservations_run on budget_reservations (run_id) where status = 'open';

-- ===================================================================================================================
-- Functions
-- ===================================================================================================================
--
-- Errors a user can cause carry their own SQLSTATE so the TypeScript side maps them back to its UserError classes:
--   CL001  no price in force (NoPriceError); DETAIL is JSON {"model", "at", "what"}.

create function forbid_append_only_change() returns trigger language plpgsql as $$
begin
  raise exception '% is append-only: % is not allowed', tg_table_name, tg_op
    using errcode = 'restrict_violation',
          hint = 'append a correcting entry (cronledger ledger adjust / ledger credit, or a new prices version) instead';
end
$$;

-- Statement-level, with a transition table: one insert into the queue per ledger statement, however many rows.
create function queue_entries_for_rollups() returns trigger language plpgsql as $$
begin
  insert into rollup_queue (entry_id) select id from inserted;
  return null;
end
$$;

-- Statement-level like the ledger's: a claim, a re-claim (which moves claimed_at) and a close each queue the run's
-- bucket before and after, so the old bucket loses the run and the new one gains it.
create function queue_runs_for_rollups() returns trigger language plpgsql as $$
begin
  if tg_op = 'UPDATE' then
    insert into run_rollup_queue (claimed_at, user_id, task_id)
    select claimed_at, user_id, task_id from old_runs
    union select claimed_at, user_id, task_id from new_runs;
  else
    insert into run_rollup_queue (claimed_at, user_id, task_id) select claimed_at, user_id, task_id from new_runs;
  end if;
  return null;
end
$$;

-- In the ledger's transaction: add the entry (usage, adjustment, credit, reconciliation alike) to this session's shard
-- of the user's month in every tracked zone (zones in order: one statement's rows are locked in one order), and settle
-- the reservation with the entry's key. This lives in SQL, not in the ledger's TypeScript, so the ledger layer never
-- imports budgets and no writer of the ledger can forget it. The shared advisory lock lets many bookings run at once,
-- but none while a new zone is being seeded (budget_track_zone).
create function budget_book_ledger_entry() returns trigger language plpgsql as $$
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_month_shards as s (user_id, time_zone, month, shard, spent_usd)
  select new.user_id, z.time_zone, (date_trunc('month', new.created_at at time zone z.time_zone))::date, pg_backend_pid(), new.cost_usd
    from budget_zones z order by z.time_zone
  on conflict (user_id, time_zone, month, shard) do update set spent_usd = s.spent_usd + excluded.spent_usd;
  update budget_reservations set status = 'settled', closed_at = now(), settled_entry_id = new.id
   where idempotency_key = new.idempotency_key and status = 'open';
  return null;
end
$$;

-- A budget in a zone not tracked yet: sum the whole ledger into that zone's months once, while no booking runs
-- (the exclusive advisory lock waits for bookings in flight, which hold it shared until they commit).
create function budget_track_zone() returns trigger language plpgsql as $$
begin
  if exists (select 1 from budget_zones where time_zone = new.time_zone) then return null; end if;
  perform pg_advisory_xact_lock(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_zones (time_zone) values (new.time_zone) on conflict do nothing;
  if not found then return null; end if;
  insert into budget_months (user_id, time_zone, month, spent_usd)
  select l.user_id, new.time_zone, (date_trunc('month', l.created_at at time zone new.time_zone))::date, sum(l.cost_usd)
    from usage_ledger l group by 1, 3;
  return null;
end
$$;

-- The newest price version of a model in force at an instant (src/ledger/prices.ts priceInForce does the same).
create function price_in_force(p_model text, p_at timestamptz) returns model_prices language plpgsql stable as $$
declare
  p model_prices;
begin
  select * into p from model_prices where model = p_model and effective_from <= p_at order by effective_from desc limit 1;
  if not found then
    raise exception 'no price in force for model "%" at %', p_model, p_at
      using errcode = 'CL001', detail = json_build_object('model', p_model, 'at', p_at, 'what', 'price')::text;
  end if;
  return p;
end
$$;

-- A price class of a version, or the no-price error naming it (NoPriceError's wording: "input price (version v1)").
create function price_class(p_rate numeric, p model_prices, p_at timestamptz, what text) returns numeric language plpgsql immutable as $$
begin
  if p_rate is null then
    raise exception 'no % price (version %) in force for model "%" at %', what, p.version, p.model, p_at
      using errcode = 'CL001',
            detail = json_build_object('model', p.model, 'at', p_at, 'what', format('%s price (version %s)', what, p.version))::text;
  end if;
  return p_rate;
end
$$;

-- THE cost of one call at a version's rates: the only place cronledger computes it (the booking and the budget
-- decision both call it; test/support/cost-oracle.ts recomputes it independently for the tests). Uncached prompt at
-- input, cached prompt at cached input (input when the version has none), completion at output, an embedding's input
-- at the embedding rate. Exact: prices have 12 fractional digits and 0.000001 adds 6, so every product has 18, the
-- ledger's scale; multiplying (never dividing, which rounds to a chosen scale) keeps numeric exact. Null when a rate the
-- call needs is null; callers raise the error. LANGUAGE sql, immutable and a single expression: inlined into the
-- statement that calls it, so it costs no function call.
create function call_cost(p_kind text, p_prompt bigint, p_cached bigint, p_completion bigint,
                          p_input numeric, p_cached_input numeric, p_output numeric, p_embedding_input numeric)
returns numeric language sql immutable as $$
  select case when p_kind = 'embedding' then p_embedding_input * p_prompt * 0.000001
              else p_input * (p_prompt - p_cached) * 0.000001 + coalesce(p_cached_input, p_input) * p_cached * 0.000001
                   + p_output * p_completion * 0.000001 end
$$;

-- call_cost at one price version, after checking that every price class the call needs is there (price_class raises
-- CL001 naming the one that is missing).
create function usage_cost(p_kind text, p_prompt bigint, p_cached bigint, p_completion bigint, p model_prices, p_at timestamptz)
returns numeric language plpgsql stable as $$
begin
  if p_kind = 'embedding' then
    perform price_class(p.embedding_input_per_million, p, p_at, 'embedding input');
  else
    perform price_class(p.input_per_million, p, p_at, 'input');
    perform price_class(p.output_per_million, p, p_at, 'output');
  end if;
  return call_cost(p_kind, p_prompt, p_cached, p_completion, p.input_per_million, p.cached_input_per_million,
                   p.output_per_million, p.embedding_input_per_million);
end
$$;

-- The worst-case cost of one planned call ({kind, prompt, cached, completion}) on a model, at the price in force; raises
-- CL001 when there is none.
create function worst_case_cost(p_call jsonb, p_model text, p_at timestamptz) returns numeric language sql stable as $$
  select usage_cost(p_call ->> 'kind', (p_call ->> 'prompt')::bigint, (p_call ->> 'cached')::bigint, (p_call ->> 'completion')::bigint,
                    price_in_force(p_model, p_at), p_at)
$$;

-- One booking, one statement: the price in force at p_occurred_at (else now()), the exact cost, and the insert under
-- the idempotency key (its triggers add to the month's spend, settle the reservation and queue the rollups). Returns the
-- row, new or already there (a retried booking), so the caller can check that an existing row describes the same call.
-- Validation of the counts stays in TypeScript (validateUsage), before the call.
create function book_usage(
  p_key text, p_user_id text, p_run_id text, p_workflow_id text, p_task_id text, p_model text, p_provider_model text,
  p_kind text, p_status text, p_attempt integer, p_prompt bigint, p_cached bigint, p_completion bigint, p_reasoning bigint,
  p_provider_request_id text, p_worker_id text, p_input_truncated_from bigint, p_occurred_at timestamptz,
  p_usage_received_at timestamptz
) returns usage_ledger language plpgsql as $$
declare
  v_at timestamptz := coalesce(p_occurred_at, now());
  v_price model_prices := price_in_force(p_model, v_at);
  v_row usage_ledger;
begin
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, provider_model, kind,
                            status, attempt, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens,
                            cost_usd, price_version, provider_request_id, worker_id, input_truncated_from, created_at,
                            usage_received_at, booked_at)
  values (p_key, 'usage', p_user_id, p_run_id, p_workflow_id, p_task_id, p_model, p_provider_model, p_kind,
          p_status, p_attempt, p_prompt, p_cached, p_completion, p_reasoning,
          usage_cost(p_kind, p_prompt, p_cached, p_completion, v_price, v_at), v_price.version, p_provider_request_id, p_worker_id,
          p_input_truncated_from, v_at, p_usage_received_at, clock_timestamp())
  on conflict (idempotency_key) do nothing
  returning * into v_row;
  if found then
    return v_row;
  end if;
  -- A statement of its own: it sees the row that a concurrent booking of the same key committed while we waited.
  select * into v_row from usage_ledger where idempotency_key = p_key;
  return v_row;
end
$$;

-- Spent (all three sources, through the view) and reserved (open, unexpired reservations) of one user's month, in one
-- statement, without a lock. plpgsql, so the statement's plan is kept for the session.
create function budget_month_figures(p_user_id text, p_zone text, p_month date, p_at timestamptz, out spent numeric, out reserved numeric)
language plpgsql stable as $$
begin
  select coalesce((select s.spent_usd from budget_month_spent s where s.user_id = p_user_id and s.time_zone = p_zone and s.month = p_month), 0),
         (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = p_zone and r.month = p_month and r.status = 'open' and r.expires_at > p_at)
    into spent, reserved;
end
$$;

-- The budget guard's decision and reservation (src/budgets/reserve.ts says what it decides and why), one statement.
-- p_calls: [{step, attempt, kind, model, prompt, cached, completion}] with worst-case counts. Returns JSON, every amount
-- an exact decimal string.
--
-- Everything that needs no lock comes first: the budget in force, each call's key and its worst case at its own model
-- (one statement that joins the prices in force and inlines call_cost). Then the user's month row is locked and, while
-- it is held, only: spent, reserved and whether the keys were reserved already (one statement, so one snapshot: the
-- budget tables' comment says why that is exact), the choice, the reservation inserts and the threshold events. The
-- cheap models are priced under the lock, and only when the choice needs them (past 80 %, or no room for the default
-- models). No network round trip happens while the lock is held. Expired reservations are not counted; the sweeper
-- closes them (src/budgets/reserve.ts sweepAllExpired).
--
-- How the transaction commits depends on whether another decision held the month row:
--   - free: taken at once, and the commit is synchronous as usual; the decision is durable when it returns.
--   - held: we queued. Then the commit is asynchronous (set_config(..., true): this transaction only), so the
--     decisions queued behind us get the row once our commit record is in the WAL buffers, not after our fsync:
--     otherwise each decision of a busy user would wait for every earlier one's disk flush in turn. The result says
--     awaitDurability, and the caller must wait for the WAL to reach disk before it acts on the decision
--     (src/budgets/reserve.ts decideThenAwaitDurability, test/decision-durability.test.ts).
create function reserve_budget(
  p_user_id text, p_run_id text, p_workflow_id text, p_calls jsonb, p_may_downgrade boolean, p_expiry_seconds integer,
  p_at timestamptz
) returns jsonb language plpgsql as $$
declare
  v_at timestamptz := coalesce(p_at, now());
  v_budget budgets;
  v_month date;
  v_keys text[];
  v_steps text[];
  v_models text[];
  v_costs numeric[];
  v_cheap_models text[];
  v_cheap_costs numeric[];
  v_priced boolean;
  v_downgrades boolean;
  v_default_worst numeric;
  v_cheap_worst numeric;
  v_spent numeric;
  v_reserved numeric;
  v_retried boolean;
  v_used numeric;
  v_limit numeric;
  v_band text;
  v_tier text;
  v_worst numeric;
  v_event_ids jsonb := '[]'::jsonb;
  v_contended boolean := false;
  v_created integer;
  v_figures record;   -- spent and reserved of a user without a budget
begin
  select b.* into v_budget from (
    (select * from budgets where user_id = p_user_id and effective_from <= v_at order by effective_from desc limit 1)
    union all
    (select * from budgets where user_id is null and effective_from <= v_at order by effective_from desc limit 1)
  ) b order by b.user_id is null limit 1;
  if not found then
    v_month := (date_trunc('month', v_at at time zone 'UTC'))::date;
    v_figures := budget_month_figures(p_user_id, 'UTC', v_month, v_at);
    return jsonb_build_object('tier', 'default', 'models', (select jsonb_object_agg(c ->> 'step', c ->> 'model') from jsonb_array_elements(p_calls) c),
      'worstCaseUsd', '0', 'eventIds', '[]'::jsonb, 'limitUsd', null, 'spentUsd', v_figures.spent::text,
      'reservedUsd', v_figures.reserved::text, 'timeZone', 'UTC', 'month', to_char(v_month, 'YYYY-MM'),
      'awaitDurability', false);
  end if;
  v_month := (date_trunc('month', v_at at time zone v_budget.time_zone))::date;
  v_limit := v_budget.monthly_limit_usd;

  -- Lock-free: each call's key and its worst case at its own model, and their sum, as arrays in the calls' order. The
  -- cheap models are priced further down, only when the choice needs them.
  select array_agg(p_run_id || ':' || w.step || ':' || w.attempt order by w.n), array_agg(w.step order by w.n),
         array_agg(w.model order by w.n), array_agg(w.cost order by w.n), bool_and(w.cost is not null), sum(w.cost)
    into v_keys, v_steps, v_models, v_costs, v_priced, v_default_worst
    from (select e.n, e.step, e.attempt, e.model,
                 call_cost(e.kind, e.prompt, e.cached, e.completion, p.input_per_million, p.cached_input_per_million,
                           p.output_per_million, p.embedding_input_per_million) as cost
            from (select j.n, j.c ->> 'step' as step, j.c ->> 'attempt' as attempt, j.c ->> 'model' as model, j.c ->> 'kind' as kind,
                         (j.c ->> 'prompt')::bigint as prompt, (j.c ->> 'cached')::bigint as cached, (j.c ->> 'completion')::bigint as completion
                    from jsonb_array_elements(p_calls) with ordinality j(c, n) offset 0) e -- OFFSET 0: each field read once
            left join lateral (select * from model_prices m where m.model = e.model and m.effective_from <= v_at
                                order by m.effective_from desc limit 1) p on true) w;
  if not v_priced then
    -- a model or a price class without a price in force: worst_case_cost raises the error that names it
    perform worst_case_cost(c, c ->> 'model', v_at) from jsonb_array_elements(p_calls) c;
  end if;

  -- The lock on the user's month row, taken at once when free; otherwise the insert creates it (the month's first
  -- decision, uncontended), or finds it there (DO NOTHING takes no lock) or being created by a concurrent decision:
  -- then we queue, and commit asynchronously (see above).
  perform from budget_months m where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month
     for update skip locked;
  if not found then
    insert into budget_months (user_id, time_zone, month) values (p_user_id, v_budget.time_zone, v_month) on conflict do nothing;
    get diagnostics v_created = row_count;
    v_contended := v_created = 0;
    perform from budget_months m where m.user_id = p_user_id and m.time_zone = v_budget.time_zone and m.month = v_month for update;
    if v_contended then
      perform set_config('synchronous_commit', 'off', true);
    end if;
  end if;

  -- Under the lock, one statement and so one snapshot: spent, reserved (open and not expired), and whether these keys
  -- were reserved already (a retried request). The keys are probed one by one through the primary key
  -- (LATERAL ... LIMIT 1): a join on `= any(keys)` is planned as a sequential scan while the table's statistics are
  -- young.
  select coalesce((select s.spent_usd from budget_month_spent s where s.user_id = p_user_id and s.time_zone = v_budget.time_zone and s.month = v_month), 0),
         (select coalesce(sum(r.amount_usd), 0) from budget_reservations r
           where r.user_id = p_user_id and r.time_zone = v_budget.time_zone and r.month = v_month and r.status = 'open' and r.expires_at > v_at),
         exists (select from unnest(v_keys) k(key) cross join lateral (select from budget_reservations r where r.idempotency_key = k.key limit 1) r)
    into v_spent, v_reserved, v_retried;

  if v_retried then
    -- the reservation already made for these keys, as it was made
    return (
      select jsonb_build_object('tier', min(r.tier), 'models', jsonb_object_agg(k.step, coalesce(r.model, k.model)),
               'worstCaseUsd', coalesce(sum(r.amount_usd), 0)::text)
        from unnest(v_keys, v_steps, v_models) k(key, step, model) left join budget_reservations r on r.idempotency_key = k.key
    ) || jsonb_build_object('eventIds', '[]'::jsonb, 'limitUsd', v_limit::text, 'spentUsd', v_spent::text,
           'reservedUsd', v_reserved::text, 'timeZone', v_budget.time_zone, 'month', to_char(v_month, 'YYYY-MM'),
           'awaitDurability', v_contended);
  end if;

  v_used := v_spent + v_reserved;
  -- the bands of src/budgets/tier.ts tierFor: blocked from 100 %, cheap from 80 % (exactly 80 % is cheap), and the
  -- default models in the default band if their worst case fits, else the cheap ones if theirs fits, else blocked
  v_band := case when v_used * 100 >= v_limit * 100 then 'blocked' when v_used * 100 >= v_limit * 80 then 'cheap' else 'default' end;
  if v_band = 'default' and v_used + v_default_worst <= v_limit then
    v_tier := 'default';
    v_worst := v_default_worst;
  else
    -- The cheap models (each call's own when it has none, or when the run may not downgrade) and their worst cases,
    -- priced now that the choice needs them. This is under the lock, but only for decisions past 80 % or without room
    -- for the default models.
    select array_agg(w.cheap_model order by w.n), array_agg(w.cheap_cost order by w.n), bool_and(w.cheap_cost is not null),
           bool_or(w.cheap_model <> w.model), sum(w.cheap_cost)
      into v_cheap_models, v_cheap_costs, v_priced, v_downgrades, v_cheap_worst
      from (select u.n, u.model, d.cheap_model,
                   call_cost(j.c ->> 'kind', (j.c ->> 'prompt')::bigint, (j.c ->> 'cached')::bigint, (j.c ->> 'completion')::bigint,
                             q.input_per_million, q.cached_input_per_million, q.output_per_million, q.embedding_input_per_million) as cheap_cost
              from unnest(v_models) with ordinality u(model, n)
              join jsonb_array_elements(p_calls) with ordinality j(c, n) using (n)
              cross join lateral (
                select coalesce(case when p_may_downgrade then
                         (select g.cheap_model from model_downgrades g where g.model = u.model and g.effective_from <= v_at
                           order by g.effective_from desc limit 1) end, u.model) as cheap_model) d
              left join lateral (select * from model_prices m where m.model = d.cheap_model and m.effective_from <= v_at
                                  order by m.effective_from desc limit 1) q on true) w;
    if not v_priced then
      perform worst_case_cost(c, m, v_at)
         from jsonb_array_elements(p_calls) with ordinality j(c, n) join unnest(v_cheap_models) with ordinality u(m, n) using (n);
    end if;
    if (v_band = 'cheap' or (v_band = 'default' and v_downgrades)) and v_used + v_cheap_worst <= v_limit then
      v_tier := 'cheap';
      v_worst := v_cheap_worst;
      v_models := v_cheap_models;
      v_costs := v_cheap_costs;
    else
      v_tier := 'blocked';
      v_worst := v_cheap_worst; -- the last tier tried (the default one, without downgrades, costs the same)
    end if;
  end if;

  if v_tier <> 'blocked' then
    insert into budget_reservations (idempotency_key, user_id, time_zone, month, amount_usd, model, tier, workflow_id, run_id, expires_at)
    select k.key, p_user_id, v_budget.time_zone, v_month, k.cost, k.model, v_tier, p_workflow_id, p_run_id,
           v_at + make_interval(secs => p_expiry_seconds)
      from unnest(v_keys, v_models, v_costs) k(key, model, cost);
  end if;

  -- threshold events reached with this decision's reservation (a blocked run counts as 100 %), once per user and month
  if v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * 80 then
    with inserted as (
      insert into budget_events (event_id, user_id, time_zone, month, threshold, limit_usd, spent_usd, reserved_usd)
      select format('budget:%s:%s:%s:%s', p_user_id, v_budget.time_zone, to_char(v_month, 'YYYY-MM'), t), p_user_id,
             v_budget.time_zone, v_month, t, v_limit, v_spent,
             v_reserved + case when v_tier = 'blocked' then 0 else v_worst end
        from unnest(array[80, 100]) t
       where v_tier = 'blocked' or (v_used + v_worst) * 100 >= v_limit * t
      on conflict do nothing
      returning event_id, threshold
    )
    select coalesce(jsonb_agg(to_jsonb(event_id) order by threshold), '[]'::jsonb) into v_event_ids from inserted;
  end if;

  return jsonb_build_object('tier', v_tier, 'worstCaseUsd', v_worst::text, 'eventIds', v_event_ids, 'limitUsd', v_limit::text,
           'spentUsd', v_spent::text, 'reservedUsd', v_reserved::text, 'timeZone', v_budget.time_zone,
           'month', to_char(v_month, 'YYYY-MM'), 'awaitDurability', v_contended)
      || case when v_tier = 'blocked' then '{}'::jsonb else jsonb_build_object('models', jsonb_object(v_steps, v_models)) end;
end
$$;

-- Claims a slot (see src/db/runs.ts claimRun): the first insert of the key wins (generation 1); the execution that owns
-- it already is still the owner (its claim retried); a retry takes the claim over only from the execution it names and
-- only while that claim is not completed or blocked; anyone else is recorded as a duplicate. Returns ClaimOutcome's JSON.
create function claim_run(
  p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamptz,
  p_worker_id text, p_manual boolean, p_supersedes_run_id text
) returns jsonb language plpgsql as $$
declare
  v_generation integer;
  v_owner runs;
begin
  insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, claimed_by, manual)
  values (p_key, p_task_id, p_user_id, p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual)
  on conflict (idempotency_key) do nothing
  returning generation into v_generation;
  if not found and p_supersedes_run_id is not null and p_supersedes_run_id <> p_run_id then
    update runs set generation = generation + 1, workflow_id = p_workflow_id, temporal_run_id = p_run_id, claimed_by = p_worker_id,
                    status = 'running', claimed_at = now(), finished_at = null, duration_ms = null, error = null
     where idempotency_key = p_key and temporal_run_id = p_supersedes_run_id and status not in ('completed', 'blocked')
     returning generation into v_generation;
    if found then
      update run_attempts set status = 'stale', finished_at = now() where temporal_run_id = p_supersedes_run_id and status = 'running';
    end if;
  end if;
  if v_generation is not null then
    insert into run_attempts (idempotency_key, generation, workflow_id, temporal_run_id, claimed_by)
    values (p_key, v_generation, p_workflow_id, p_run_id, p_worker_id);
    return jsonb_build_object('claimed', true, 'ownerWorkflowRunId', p_run_id, 'generation', v_generation);
  end if;
  -- A statement of its own: it sees the claim that a concurrent insert of the same key committed while we waited.
  select * into v_owner from runs where idempotency_key = p_key;
  if v_owner.temporal_run_id = p_run_id then
    return jsonb_build_object('claimed', true, 'ownerWorkflowRunId', p_run_id, 'generation', v_owner.generation);
  end if;
  insert into run_duplicates (temporal_run_id, workflow_id, idempotency_key, task_id, user_id, detected_by)
  values (p_run_id, p_workflow_id, p_key, p_task_id, p_user_id, p_worker_id) on conflict do nothing;
  return jsonb_build_object('claimed', false, 'ownerWorkflowRunId', v_owner.temporal_run_id, 'generation', v_owner.generation,
                            'ownerStatus', v_owner.status);
end
$$;

-- The claim, then (only when it is this execution's) the budget decision and reservation, in one statement and so in
-- one transaction and one durable commit: a run that wins (or already owns) its claim reserves in the same transaction;
-- a run that does not win it reserves nothing. reserve_budget comes last, so the user's month row is locked only for
-- the rest of the statement and the commit. Run again by the same execution (a local activity re-run after its worker
-- died), it returns the same claim (the owner's branch of claim_run) and the same reservation (reserve_budget's
-- retried-request branch). Returns {"claim": ClaimOutcome, "decision": ReserveDecision or null}.
create function claim_and_reserve(
  p_key text, p_task_id text, p_user_id text, p_workflow_id text, p_run_id text, p_scheduled_minute timestamptz,
  p_worker_id text, p_manual boolean, p_supersedes_run_id text,
  p_calls jsonb, p_expiry_seconds integer, p_at timestamptz
) returns jsonb language plpgsql as $$
declare
  v_claim jsonb := claim_run(p_key, p_task_id, p_user_id, p_workflow_id, p_run_id, p_scheduled_minute, p_worker_id, p_manual,
                             p_supersedes_run_id);
begin
  if not (v_claim ->> 'claimed')::boolean then
    return jsonb_build_object('claim', v_claim, 'decision', null);
  end if;
  return jsonb_build_object('claim', v_claim,
           'decision', reserve_budget(p_user_id, p_run_id, p_workflow_id, p_calls, true, p_expiry_seconds, p_at));
end
$$;

-- The sweeper's fold (src/workflows/budget-sweep.ts, every minute): shards and deltas into budget_months, so each
-- month keeps a few rows. It never waits: month rows a decision holds are skipped, and so are shard rows a booking in
-- flight holds (SKIP LOCKED), so it can't deadlock with a booking that adds to several shards. A month's row and what
-- is folded into it change in one transaction, so every reader sees the fold wholly or not at all.
-- Returns how many rows were folded.
create function budget_fold_all_deltas() returns integer language plpgsql as $$
declare
  v_folded integer;
begin
  insert into budget_months (user_id, time_zone, month)
  select user_id, time_zone, month from budget_month_deltas
  union
  select user_id, time_zone, month from budget_month_shards
  order by 1, 2, 3
  on conflict do nothing;
  with locked as materialized (
    select m.user_id, m.time_zone, m.month from budget_months m
     where (m.user_id, m.time_zone, m.month) in (select d.user_id, d.time_zone, d.month from budget_month_deltas d
                                                 union all
                                                 select s.user_id, s.time_zone, s.month from budget_month_shards s)
     order by 1, 2, 3
       for update of m skip locked
  ), shards as materialized (
    select s.user_id, s.time_zone, s.month, s.shard from budget_month_shards s join locked l using (user_id, time_zone, month)
     order by 1, 2, 3, 4
       for update of s skip locked
  ), folded as (
    delete from budget_month_deltas d using locked l
     where d.user_id = l.user_id and d.time_zone = l.time_zone and d.month = l.month
    returning d.user_id, d.time_zone, d.month, d.amount_usd
  ), folded_shards as (
    delete from budget_month_shards s using shards h
     where s.user_id = h.user_id and s.time_zone = h.time_zone and s.month = h.month and s.shard = h.shard
    returning s.user_id, s.time_zone, s.month, s.spent_usd
  ), sums as (
    select f.user_id, f.time_zone, f.month, sum(f.amount) as amount, count(*) as n
      from (select user_id, time_zone, month, amount_usd as amount from folded
            union all
            select user_id, time_zone, month, spent_usd from folded_shards) f
     group by 1, 2, 3
  ), updated as (
    update budget_months m set spent_usd = m.spent_usd + s.amount from sums s
     where m.user_id = s.user_id and m.time_zone = s.time_zone and m.month = s.month
    returning s.n
  )
  select coalesce(sum(u.n), 0) into v_folded from updated u;
  return v_folded;
end
$$;

-- ===================================================================================================================
-- Triggers
-- ===================================================================================================================

-- Append-only: the ledger, the prices, the unbookable usage and the budgets (model_downgrades has no truncate guard).
create trigger usage_ledger_append_only before update or delete on usage_ledger
  for each row execute function forbid_append_only_change();
create trigger usage_ledger_no_truncate before truncate on usage_ledger
  for each statement execute function forbid_append_only_change();
create trigger model_prices_append_only before update or delete on model_prices
  for each row execute function forbid_append_only_change();
create trigger model_prices_no_truncate before truncate on model_prices
  for each statement execute function forbid_append_only_change();
create trigger usage_exceptions_append_only before update or delete on usage_exceptions
  for each row execute function forbid_append_only_change();
create trigger usage_exceptions_no_truncate before truncate on usage_exceptions
  for each statement execute function forbid_append_only_change();
create trigger budgets_append_only before update or delete on budgets
  for each row execute function forbid_append_only_change();
create trigger budgets_no_truncate before truncate on budgets
  for each statement execute function forbid_append_only_change();
create trigger model_downgrades_append_only before update or delete on model_downgrades
  for each row execute function forbid_append_only_change();

-- What every ledger entry does in its own transaction: queue the rollups, add to the month's spend, settle its reservation.
create trigger usage_ledger_queue_rollups after insert on usage_ledger
  referencing new table as inserted
  for each statement execute function queue_entries_for_rollups();
create trigger usage_ledger_budget_months after insert on usage_ledger
  for each row execute function budget_book_ledger_entry();
create trigger budgets_track_zone after insert on budgets
  for each row execute function budget_track_zone();
create trigger runs_queue_rollups_insert after insert on runs
  referencing new table as new_runs
  for each statement execute function queue_runs_for_rollups();
create trigger runs_queue_rollups_update after update on runs
  referencing old table as old_runs new table as new_runs
  for each statement execute function queue_runs_for_rollups();

-- ===================================================================================================================
-- Grants
-- ===================================================================================================================

-- Start from nothing, then grant exactly what the application does (test/grants.test.ts holds the allow-list).
revoke all on all tables in schema public from public, cronledger_app;
revoke all on all sequences in schema public from public, cronledger_app;
grant usage on schema public to cronledger_app;

-- The ledger and the prices: append and read. Unbookable usage, budgets and downgrades: appended, never changed.
grant select, insert on usage_ledger, model_prices, usage_exceptions, budgets, model_downgrades, budget_zones to cronledger_app;
-- Runs are claimed, then completed or failed; every execution that owned a slot is recorded and then closed.
grant select, insert, update on runs, run_attempts to cronledger_app;
grant select, insert on run_duplicates, memories, report_deliveries to cronledger_app;
grant select, insert, update, delete on applied_tasks to cronledger_app;
-- Rollups are derived data the application keeps current (and may rebuild), so it rewrites them.
grant select, insert, update on rollup_zones, rollup_months to cronledger_app;
grant select, insert, delete on usage_rollups, rollup_queue, run_rollups, run_rollup_queue, usage_month_rollups,
  usage_day_totals, usage_day_users to cronledger_app;
-- The month summary, reservations and events are kept current; shards are added to by bookings (insert or update) and
-- taken by the sweeper's fold (delete); deltas are only folded.
grant select, insert, update on budget_months, budget_reservations, budget_events to cronledger_app;
grant select, insert, update, delete on budget_month_shards to cronledger_app;
grant select, insert, delete on budget_month_deltas to cronledger_app;
grant select on budget_month_spent, schema_migrations to cronledger_app;
-- nextval for the bigserial ids (USAGE does not allow setval).
grant usage on all sequences in schema public to cronledger_app;

-- Functions are executable by PUBLIC unless revoked: only the application role runs these (SECURITY INVOKER: they run
-- with its own privileges, which already allow exactly their reads and writes). The trigger functions run as triggers.
revoke execute on function price_in_force(text, timestamptz), price_class(numeric, model_prices, timestamptz, text),
  call_cost(text, bigint, bigint, bigint, numeric, numeric, numeric, numeric),
  usage_cost(text, bigint, bigint, bigint, model_prices, timestamptz), worst_case_cost(jsonb, text, timestamptz),
  book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint, text, text, bigint, timestamptz, timestamptz),
  budget_month_figures(text, text, date, timestamptz), reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz),
  claim_run(text, text, text, text, text, timestamptz, text, boolean, text),
  claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz),
  budget_fold_all_deltas() from public;
grant execute on function price_in_force(text, timestamptz), price_class(numeric, model_prices, timestamptz, text),
  call_cost(text, bigint, bigint, bigint, numeric, numeric, numeric, numeric),
  usage_cost(text, bigint, bigint, bigint, model_prices, timestamptz), worst_case_cost(jsonb, text, timestamptz),
  book_usage(text, text, text, text, text, text, text, text, text, integer, bigint, bigint, bigint, bigint, text, text, bigint, timestamptz, timestamptz),
  budget_month_figures(text, text, date, timestamptz), reserve_budget(text, text, text, jsonb, boolean, integer, timestamptz),
  claim_run(text, text, text, text, text, timestamptz, text, boolean, text),
  claim_and_reserve(text, text, text, text, text, timestamptz, text, boolean, text, jsonb, integer, timestamptz),
  budget_fold_all_deltas() to cronledger_app;

-- Tables and sequences the owner creates later are readable, never writable, until a migration grants more.
alter default privileges in schema public grant select on tables to cronledger_app;
alter default privileges in schema public grant usage on sequences to cronledger_app;

-- The admin page reads and never writes: SELECT on every table but memories (what users asked their agents is not the
-- admin page's business), and on the tables added later. A database without the role is migrated all the same, and
-- the admin page then needs CRONLEDGER_ADMIN_DATABASE_URL.
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    revoke all on all tables in schema public from cronledger_readonly;
    grant usage on schema public to cronledger_readonly;
    grant select on all tables in schema public to cronledger_readonly;
    revoke select on memories from cronledger_readonly;
    alter default privileges in schema public grant select on tables to cronledger_readonly;
  end if;
end
$$;
