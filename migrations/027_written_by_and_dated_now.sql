-- Who wrote a row, and what only the owner may date in the past.
--
-- created_by: the login role of the session that wrote the row (session_user, also inside a SECURITY DEFINER
-- function), stamped by a trigger so that no caller can name someone else. Rows written earlier have none.
alter table usage_ledger add column created_by text;
alter table model_prices add column created_by text;
alter table budgets add column created_by text;
alter table model_downgrades add column created_by text;

create function stamp_created_by() returns trigger language plpgsql as $$
begin
  new.created_by := session_user;
  return new;
end
$$;

create trigger usage_ledger_created_by before insert on usage_ledger for each row execute function stamp_created_by();
create trigger model_prices_created_by before insert on model_prices for each row execute function stamp_created_by();
create trigger budgets_created_by before insert on budgets for each row execute function stamp_created_by();
create trigger model_downgrades_created_by before insert on model_downgrades for each row execute function stamp_created_by();

-- A correction, credit or reconciliation says why in words: a reason of spaces says nothing. Prices are never negative
-- (a credit is a ledger entry, not a price). NOT VALID: rows already written stay (the tables are append-only); every
-- new row is checked.
alter table usage_ledger add constraint usage_ledger_reason_not_blank check (btrim(reason, E' \t\r\n') <> '') not valid;
alter table model_prices add constraint model_prices_not_negative
  check (input_per_million >= 0 and cached_input_per_million >= 0 and output_per_million >= 0 and embedding_input_per_million >= 0)
  not valid;

-- How far a row written by anyone but the owner may be dated from the database's clock: enough for clocks that differ
-- a little, too little to rewrite a closed day. The owner (migrations, bulk loads of history for tests and benchmarks)
-- may date rows anywhere.
create function backdating_skew() returns interval language sql immutable as $$ select interval '5 minutes' $$;

create function written_by_table_owner(p_table regclass) returns boolean language sql stable as $$
  select pg_has_role(session_user, c.relowner, 'member') from pg_class c where c.oid = p_table
$$;

-- A ledger entry is dated now: book_usage's occurrence time (and any other insert's created_at) within the skew.
create function refuse_misdated_entry() returns trigger language plpgsql as $$
begin
  if abs(extract(epoch from new.created_at - now())) > extract(epoch from backdating_skew())
     and not written_by_table_owner(tg_relid) then
    raise exception 'a ledger entry dated % is refused: entries are dated now (within %), not by the caller', new.created_at, backdating_skew()
      using errcode = 'check_violation';
  end if;
  return new;
end
$$;
create trigger usage_ledger_dated_now before insert on usage_ledger for each row execute function refuse_misdated_entry();

-- A price takes effect from now on: a version dated earlier would re-price calls already booked in the reports that
-- price history (what downgrades saved). A model's first prices may carry their published date while nothing of the
-- model is booked at or after it (a fresh database applying prices/standard.json). A version already in the table
-- passes here: applying the same file again inserts nothing (ON CONFLICT DO NOTHING runs after BEFORE triggers).
create function refuse_backdated_price() returns trigger language plpgsql as $$
begin
  if new.effective_from < now() - backdating_skew() and not written_by_table_owner(tg_relid)
     and not exists (select 1 from model_prices p where p.model = new.model and p.version = new.version and p.effective_from = new.effective_from)
     and exists (select 1 from usage_ledger l where l.model = new.model and l.created_at >= new.effective_from) then
    raise exception 'price version % of % takes effect at %, before calls already booked: a new price takes effect from now on',
      new.version, new.model, new.effective_from
      using errcode = 'check_violation', hint = 'give the version an effectiveFrom of now or later';
  end if;
  return new;
end
$$;
create trigger model_prices_dated_now before insert on model_prices for each row execute function refuse_backdated_price();

-- `cronledger rollups verify`: each run, what it compared and what differed. Append-only; written through
-- record_rollup_verification only, which stamps who ran it.
create table rollup_verifications (
  id           bigserial   primary key,
  verified_at  timestamptz not null default now(),
  created_by   text        not null,
  months       integer     not null check (months >= 0),
  rows_checked bigint      not null check (rows_checked >= 0),
  differences  bigint      not null check (differences >= 0),
  -- the first differences: table, zone, bucket, what the ledger gives and what the rollup holds
  sample       jsonb       not null default '[]'
);
create trigger rollup_verifications_append_only before update or delete on rollup_verifications
  for each row execute function forbid_append_only_change();
create trigger rollup_verifications_no_truncate before truncate on rollup_verifications
  for each statement execute function forbid_append_only_change();
revoke insert, update, delete, truncate on rollup_verifications from cronledger_app;

create function record_rollup_verification(p_months integer, p_rows_checked bigint, p_differences bigint, p_sample jsonb)
returns rollup_verifications language sql security definer set search_path = pg_catalog, public as $$
  insert into rollup_verifications (created_by, months, rows_checked, differences, sample)
  values (session_user, p_months, p_rows_checked, p_differences, coalesce(p_sample, '[]'))
  returning *
$$;
revoke all on function record_rollup_verification(integer, bigint, bigint, jsonb) from public;
grant execute on function record_rollup_verification(integer, bigint, bigint, jsonb) to cronledger_app;
