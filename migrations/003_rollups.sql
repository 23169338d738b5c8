-- Daily usage rollups: derived data, rebuildable from usage_ledger at any time (`cronledger rollups rebuild`).
--
-- A bucket is (time zone, local day, user, model, kind, entry_type, status). Days are local to the zone, so a report
-- whose month follows --tz reads whole buckets. Each zone that reports are asked for is tracked in rollup_zones.
--
-- Never missing an entry: the ledger's id sequence is no watermark on its own, because ids are taken at insert time
-- and a transaction that commits late (or an entry back-dated with an old created_at) lands behind a watermark that
-- already moved past it. Instead an AFTER INSERT trigger queues every new entry for every tracked zone in
-- rollup_pending, inside the inserting transaction: the queue row becomes visible exactly when the entry does.
-- A refresh takes queued ids, finds the buckets they touch and recomputes those buckets wholly from the raw ledger
-- (a late entry reopens its bucket), then advances the zone's watermark (refreshed_at, last_entry_id, entries_folded).

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

-- The foreign key costs a primary-key probe per queued row; it also makes PostgreSQL refuse a plain TRUNCATE of the
-- ledger outright (a table referenced by another cannot be truncated alone), before the append-only trigger.
create table rollup_pending (
  zone      text   not null references rollup_zones (zone) on delete cascade,
  entry_id  bigint not null references usage_ledger (id),
  primary key (zone, entry_id)
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
  constraint usage_rollups_bucket unique nulls not distinct (zone, day, user_id, model, kind, entry_type, status)
);

-- Statement-level, with a transition table: one insert into the queue per ledger statement, however many rows.
create function queue_usage_for_rollups() returns trigger language plpgsql as $$
begin
  insert into rollup_pending (zone, entry_id)
  select z.zone, n.id from inserted n cross join rollup_zones z
  on conflict do nothing;
  return null;
end
$$;

create trigger usage_ledger_queue_rollups after insert on usage_ledger
  referencing new table as inserted
  for each statement execute function queue_usage_for_rollups();

-- UTC is tracked from the start; other zones are registered the first time a report asks for them.
insert into rollup_zones (zone) values ('UTC');

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
create unique index report_deliveries_month_once on report_deliveries (month) where complete;
create unique index report_deliveries_partial_once on report_deliveries (month, report_sha256) where not complete;
