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

-- Every billed model call, plus corrections. Append-only: enforced below by triggers.
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
  -- usage rows carry what was called; every other row explains itself and points at what it corrects
  check (entry_type <> 'usage' or (model is not null and kind is not null and price_version is not null and attempt is not null)),
  check (entry_type = 'usage' or reason is not null),
  check (entry_type not in ('adjustment', 'reconciliation') or original_entry_id is not null)
);
create index usage_ledger_created_at on usage_ledger (created_at);
create index usage_ledger_user_created on usage_ledger (user_id, created_at);
create index usage_ledger_run on usage_ledger (run_id);
create index usage_ledger_model_created on usage_ledger (model, created_at);

create function forbid_append_only_change() returns trigger language plpgsql as $$
begin
  raise exception '% is append-only: % is not allowed', tg_table_name, tg_op
    using errcode = 'restrict_violation',
          hint = 'append a correcting entry (cronledger ledger adjust / ledger credit, or a new prices version) instead';
end
$$;

create trigger usage_ledger_append_only before update or delete on usage_ledger
  for each row execute function forbid_append_only_change();
create trigger usage_ledger_no_truncate before truncate on usage_ledger
  for each statement execute function forbid_append_only_change();
create trigger model_prices_append_only before update or delete on model_prices
  for each row execute function forbid_append_only_change();
create trigger model_prices_no_truncate before truncate on model_prices
  for each statement execute function forbid_append_only_change();
