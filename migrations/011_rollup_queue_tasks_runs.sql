-- Rollups without a hot row, with a task dimension, and run counts rolled up too.
--
-- 1. The queue. 003 queued one rollup_pending row per tracked zone for every entry, with foreign keys to rollup_zones
--    and usage_ledger: every writer probed (and key-share locked) the same rollup_zones rows. rollup_queue holds one
--    row per entry, whatever the zones, and references nothing: a writer inserts its ids and touches no shared row.
--    The guarantee of 003 stands: the queue row is inserted by the entry's own transaction, so it becomes visible
--    exactly when the entry does (a late commit or a back-dated entry is queued all the same). A refresh folds each
--    queued entry into every tracked zone in one transaction, then deletes its queue row. Refreshes and builds take
--    one advisory lock in turn (rollups-write.ts), so a zone registered while a refresh runs is built only after that
--    refresh committed, from a snapshot that holds every entry the refresh consumed.
-- 2. task_id joins the bucket: the admin page's per-task cost series read rollups, not the month's ledger.
-- 3. run_rollups: runs per (zone, local day of claimed_at, user, task, status, tier), kept the same way from
--    run_rollup_queue, which the runs table's own triggers fill with the old and the new (claimed_at, user, task) of
--    every inserted or updated run. Reports and the admin page count runs from it instead of scanning the month's runs.

-- Writers are held off until this migration commits (the queues change hands below).
lock table usage_ledger in share row exclusive mode;
lock table runs in share row exclusive mode;

drop trigger usage_ledger_queue_rollups on usage_ledger;
drop function queue_usage_for_rollups();
drop table rollup_pending;

create table rollup_queue (
  entry_id  bigint primary key
);

create function queue_entries_for_rollups() returns trigger language plpgsql as $$
begin
  insert into rollup_queue (entry_id) select id from inserted;
  return null;
end
$$;
create trigger usage_ledger_queue_rollups after insert on usage_ledger
  referencing new table as inserted
  for each statement execute function queue_entries_for_rollups();

-- The bucket gains task_id. Rollups are derived data: the months built so far are recomputed here, from the ledger.
alter table usage_rollups drop constraint usage_rollups_bucket;
alter table usage_rollups add column task_id text;
alter table usage_rollups add constraint usage_rollups_bucket
  unique nulls not distinct (zone, day, user_id, task_id, model, kind, entry_type, status);
delete from usage_rollups;
insert into usage_rollups (zone, day, user_id, task_id, model, kind, entry_type, status, entries, prompt_tokens,
                           cached_prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id)
select m.zone, (l.created_at at time zone m.zone)::date, l.user_id, l.task_id, l.model, l.kind, l.entry_type, l.status,
       count(*), sum(l.prompt_tokens)::bigint, sum(l.cached_prompt_tokens)::bigint, sum(l.completion_tokens)::bigint,
       sum(l.reasoning_tokens)::bigint, sum(l.cost_usd), min(l.id), max(l.id)
  from rollup_months m
  join usage_ledger l on to_char(l.created_at at time zone m.zone, 'YYYY-MM') = m.month
 group by 1, 2, 3, 4, 5, 6, 7, 8;

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

-- The claimed runs a bucket holds, found without scanning the day's runs of everyone else.
create index runs_user_task_claimed on runs (user_id, task_id, claimed_at);

create table run_rollup_queue (
  id          bigserial   primary key,
  claimed_at  timestamptz not null,
  user_id     text        not null,
  task_id     text        not null
);

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
create trigger runs_queue_rollups_insert after insert on runs
  referencing new table as new_runs
  for each statement execute function queue_runs_for_rollups();
create trigger runs_queue_rollups_update after update on runs
  referencing old table as old_runs new table as new_runs
  for each statement execute function queue_runs_for_rollups();

insert into run_rollups (zone, day, user_id, task_id, status, tier, runs)
select m.zone, (r.claimed_at at time zone m.zone)::date, r.user_id, r.task_id, r.status, r.tier, count(*)
  from rollup_months m
  join runs r on to_char(r.claimed_at at time zone m.zone, 'YYYY-MM') = m.month
 group by 1, 2, 3, 4, 5, 6;

do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    grant select, insert, delete on rollup_queue, run_rollups, run_rollup_queue to cronledger_app;
    grant usage on sequence run_rollup_queue_id_seq to cronledger_app;
  end if;
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    grant select on rollup_queue, run_rollups, run_rollup_queue to cronledger_readonly;
  end if;
end
$$;
