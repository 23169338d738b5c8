-- Rollups whose size does not grow with the ledger, for the report and the admin page (P3).
--
-- usage_rollups (003, 011) hold a row per (zone, local day, user, task, model, kind, entry_type, status): at 500 users
-- that is about 60,000 rows a month, and summing their numeric costs is what the report and the overview pay for.
-- Three coarser rollups of the same rows:
--   usage_month_rollups  per (zone, local month, user, model, kind, entry_type, status): the report's by-user cut;
--   usage_day_totals     per (zone, local day, model, kind, entry_type, status): totals, by day, by model, by status,
--                        and the admin page's daily spend;
--   usage_day_users      per (zone, local day, user, task, entry_type): the admin page's daily spend per user and per
--                        task (its anomaly series), a quarter of the daily rollups' rows.
-- Both are kept by the same refresh from the same queue, in the same transaction as usage_rollups (the batch's
-- additions to usage_rollups, summed once more), and rebuilt with them: derived data of derived data, never apart.
-- The application role may insert and delete them, not update them, like usage_rollups.

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

-- A refresh running meanwhile (an older worker's) would change usage_rollups behind the copy below: hold it off.
lock table usage_rollups in share mode;

insert into usage_month_rollups (zone, month, user_id, model, kind, entry_type, status, entries, prompt_tokens,
                                 cached_prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id)
select zone, to_char(day, 'YYYY-MM'), user_id, model, kind, entry_type, status, sum(entries), sum(prompt_tokens),
       sum(cached_prompt_tokens), sum(completion_tokens), sum(reasoning_tokens), sum(cost_usd), min(first_entry_id), max(last_entry_id)
  from usage_rollups
 group by zone, to_char(day, 'YYYY-MM'), user_id, model, kind, entry_type, status;

insert into usage_day_totals (zone, day, model, kind, entry_type, status, entries, prompt_tokens, cached_prompt_tokens,
                              completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id)
select zone, day, model, kind, entry_type, status, sum(entries), sum(prompt_tokens), sum(cached_prompt_tokens),
       sum(completion_tokens), sum(reasoning_tokens), sum(cost_usd), min(first_entry_id), max(last_entry_id)
  from usage_rollups
 group by zone, day, model, kind, entry_type, status;

insert into usage_day_users (zone, day, user_id, task_id, entry_type, entries, prompt_tokens, cached_prompt_tokens,
                             completion_tokens, reasoning_tokens, cost_usd, first_entry_id, last_entry_id)
select zone, day, user_id, task_id, entry_type, sum(entries), sum(prompt_tokens), sum(cached_prompt_tokens),
       sum(completion_tokens), sum(reasoning_tokens), sum(cost_usd), min(first_entry_id), max(last_entry_id)
  from usage_rollups
 group by zone, day, user_id, task_id, entry_type;

do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_app') then
    grant select, insert, delete on usage_month_rollups, usage_day_totals, usage_day_users to cronledger_app;
  end if;
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    grant select on usage_month_rollups, usage_day_totals, usage_day_users to cronledger_readonly;
  end if;
end
$$;
