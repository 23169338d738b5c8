-- What the rollup queue holds, summed as it changes, so that a read of the month "current" (stored rollups plus what
-- the queue still holds: the admin overview) costs what the folded month costs, however many entries wait:
--   rollup_pending        the queued entries per 15-minute slot of their instant, model, kind, entry type and status
--   rollup_pending_users  the queued usage entries per user and UTC day (per 15-minute slot on a month's first and
--                         last UTC day, where zones' months begin and end)
-- The queue's own triggers keep them: a queue row in adds its entry, a queue row out (the fold, which deletes what it
-- folded in the same transaction) takes it out again, so at every snapshot they hold exactly the queued entries. Like
-- the queue they name no zone: a 15-minute slot falls in one local day of every zone whose offset is a whole number of
-- quarter hours (every zone's, today), and `rollups verify` checks them against the queue and the ledger.
-- rollup_pending is split into 8 shards by backend, like the metric counters (migrations/025_metric_counters.sql), so
-- concurrent bookings rarely share a row; each queue row records its shard, so the fold takes an entry out of the row
-- it went into, and a row back at zero entries is deleted (its own condition, so a concurrent addition keeps it).
-- rollup_pending_users rows are one user's: only that user's bookings share them, as they share budget_months.

alter table rollup_queue add column shard smallint not null default (pg_backend_pid() % 8)::smallint;

create function rollup_pending_slot(p_at timestamptz) returns timestamptz language sql immutable as $$
  select date_bin('15 minutes', p_at, timestamptz '2000-01-01 00:00:00+00')
$$;

-- A month begins and ends on its first or its last UTC day in every zone (offsets -12 to +14 hours).
create function rollup_pending_user_at(p_at timestamptz) returns timestamptz language sql immutable as $$
  select case when extract(day from p_at at time zone 'UTC') = 1 or extract(day from (p_at at time zone 'UTC') + interval '1 day') = 1
              then rollup_pending_slot(p_at)
              else date_trunc('day', p_at at time zone 'UTC') at time zone 'UTC' end
$$;

create table rollup_pending (
  slot                 timestamptz     not null,
  shard                smallint        not null,
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
  constraint rollup_pending_bucket unique nulls not distinct (slot, shard, model, kind, entry_type, status)
);

create table rollup_pending_users (
  user_id       text        not null,
  at            timestamptz not null,
  usage_entries bigint      not null,
  primary key (user_id, at)
);

-- The summed queue rows of `changed` (the queue rows the statement added or deleted), with their sign.
create function rollup_pending_change() returns trigger language plpgsql security definer
set search_path = pg_catalog, public, pg_temp as $$
declare
  v_sign integer := case tg_op when 'INSERT' then 1 else -1 end;
begin
  insert into rollup_pending as p (slot, shard, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
                                   completion_tokens, reasoning_tokens, cost_usd)
  select rollup_pending_slot(l.created_at), c.shard, l.model, l.kind, l.entry_type, l.status, v_sign * count(*),
         v_sign * sum(l.prompt_tokens), v_sign * sum(l.cached_prompt_tokens), v_sign * sum(l.completion_tokens),
         v_sign * sum(l.reasoning_tokens), v_sign * sum(l.cost_usd)
    from changed c join usage_ledger l on l.id = c.entry_id
   group by 1, 2, 3, 4, 5, 6
   order by 1, 2, 3, 4, 5, 6
  on conflict on constraint rollup_pending_bucket do update
    set entries = p.entries + excluded.entries, prompt_tokens = p.prompt_tokens + excluded.prompt_tokens,
        cached_prompt_tokens = p.cached_prompt_tokens + excluded.cached_prompt_tokens,
        completion_tokens = p.completion_tokens + excluded.completion_tokens,
        reasoning_tokens = p.reasoning_tokens + excluded.reasoning_tokens, cost_usd = p.cost_usd + excluded.cost_usd;
  insert into rollup_pending_users as u (user_id, at, usage_entries)
  select l.user_id, rollup_pending_user_at(l.created_at), v_sign * count(*)
    from changed c join usage_ledger l on l.id = c.entry_id
   where l.entry_type = 'usage'
   group by 1, 2
   order by 1, 2
  on conflict (user_id, at) do update set usage_entries = u.usage_entries + excluded.usage_entries;
  if v_sign < 0 then
    delete from rollup_pending where entries = 0;
    delete from rollup_pending_users where usage_entries = 0;
  end if;
  return null;
end
$$;

create trigger rollup_queue_pending_in after insert on rollup_queue referencing new table as changed
  for each statement execute function rollup_pending_change();
create trigger rollup_queue_pending_out after delete on rollup_queue referencing old table as changed
  for each statement execute function rollup_pending_change();

-- Both recomputed from the queue (`rollups rebuild`, and here for what is queued now). The share lock on the queue
-- waits for open ledger writers and folds and holds new ones until the commit, so the recomputation sees every
-- queued entry whose addition it replaces.
create function rollups_reset_pending() returns void language plpgsql security definer
set search_path = pg_catalog, public, pg_temp as $$
begin
  lock table rollup_queue in share mode;
  delete from rollup_pending;
  delete from rollup_pending_users;
  insert into rollup_pending (slot, shard, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
                              completion_tokens, reasoning_tokens, cost_usd)
  select rollup_pending_slot(l.created_at), q.shard, l.model, l.kind, l.entry_type, l.status, count(*), sum(l.prompt_tokens),
         sum(l.cached_prompt_tokens), sum(l.completion_tokens), sum(l.reasoning_tokens), sum(l.cost_usd)
    from rollup_queue q join usage_ledger l on l.id = q.entry_id
   group by 1, 2, 3, 4, 5, 6;
  insert into rollup_pending_users (user_id, at, usage_entries)
  select l.user_id, rollup_pending_user_at(l.created_at), count(*)
    from rollup_queue q join usage_ledger l on l.id = q.entry_id
   where l.entry_type = 'usage'
   group by 1, 2;
end
$$;

revoke all on function rollups_reset_pending() from public;
grant execute on function rollups_reset_pending() to cronledger_worker;

select rollups_reset_pending();
