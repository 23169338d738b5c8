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
create unique index budgets_scope_effective on budgets (coalesce(user_id, ''), effective_from);
create index budgets_user_effective on budgets (user_id, effective_from desc);

create trigger budgets_append_only before update or delete on budgets
  for each row execute function forbid_append_only_change();
create trigger budgets_no_truncate before truncate on budgets
  for each statement execute function forbid_append_only_change();

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
create trigger model_downgrades_append_only before update or delete on model_downgrades
  for each row execute function forbid_append_only_change();

-- Month-to-date spend per (user, zone, local month), kept by the ledger's own insert trigger below, in the same
-- transaction as the entry. The guard reads one row (and locks it), never scans the ledger.
-- Every zone any budget uses is tracked for every user, so a budget that changes zone finds its month already summed.
create table budget_zones (
  time_zone  text primary key,
  added_at   timestamptz not null default now()
);
insert into budget_zones (time_zone) values ('UTC');

create table budget_months (
  user_id    text            not null,
  time_zone  text            not null references budget_zones (time_zone),
  month      date            not null, -- the first day of the month, local to time_zone
  spent_usd  numeric(38, 18) not null default 0,
  primary key (user_id, time_zone, month)
);

-- Open reservations: the worst case of a call that has been allowed to start and is not booked yet. Keyed like the
-- ledger entry that settles it (<runId>:<step>:<attempt>). Closed by the booking (settled), by the run's own cleanup
-- (released), or by the sweeper once expires_at has passed (expired). Only open rows count as reserved.
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
create index budget_reservations_open on budget_reservations (user_id, time_zone, month) where status = 'open';
create index budget_reservations_run on budget_reservations (run_id) where status = 'open';

-- Threshold events (80 %, 100 %): one per user, zone and month, recorded once; delivered at least once under event_id.
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
  unique (user_id, time_zone, month, threshold)
);

-- Runs record the tier they ran at, and a blocked run why (limit, spent, reserved).
alter table runs add column tier text check (tier in ('default', 'cheap', 'blocked'));
alter table runs add column budget jsonb;
alter table runs drop constraint runs_status_check;
alter table runs add constraint runs_status_check check (status in ('running', 'completed', 'failed', 'cancelled', 'blocked'));
alter table run_attempts drop constraint run_attempts_status_check;
alter table run_attempts add constraint run_attempts_status_check
  check (status in ('running', 'completed', 'failed', 'cancelled', 'stale', 'blocked'));

-- In the ledger's transaction: add the entry (usage, adjustment, credit, reconciliation alike) to the user's month in
-- every tracked zone, and settle the reservation with the entry's key. This lives in SQL, not in the ledger's
-- TypeScript, so the ledger layer never imports budgets and no writer of the ledger can forget it.
-- The shared advisory lock lets many bookings run at once, but none while a new zone is being seeded (below).
create function budget_book_ledger_entry() returns trigger language plpgsql as $$
begin
  perform pg_advisory_xact_lock_shared(hashtextextended('cronledger-budget-zones', 0));
  insert into budget_months as m (user_id, time_zone, month, spent_usd)
  select new.user_id, z.time_zone, (date_trunc('month', new.created_at at time zone z.time_zone))::date, new.cost_usd
    from budget_zones z order by z.time_zone
  on conflict (user_id, time_zone, month) do update set spent_usd = m.spent_usd + excluded.spent_usd;
  update budget_reservations set status = 'settled', closed_at = now(), settled_entry_id = new.id
   where idempotency_key = new.idempotency_key and status = 'open';
  return null;
end
$$;
create trigger usage_ledger_budget_months after insert on usage_ledger
  for each row execute function budget_book_ledger_entry();

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
create trigger budgets_track_zone after insert on budgets
  for each row execute function budget_track_zone();

-- Entries booked before this migration.
insert into budget_months (user_id, time_zone, month, spent_usd)
select user_id, 'UTC', (date_trunc('month', created_at at time zone 'UTC'))::date, sum(cost_usd) from usage_ledger group by 1, 3;

do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    -- Budgets, downgrades and new zones are appended; the month summary and reservations are kept current.
    grant select, insert on budgets, model_downgrades, budget_zones to cronledger_app;
    grant select, insert, update on budget_months, budget_reservations, budget_events to cronledger_app;
    grant usage on sequence budgets_id_seq, model_downgrades_id_seq to cronledger_app;
  end if;
end
$$;
