-- Reconciliation against the provider's own usage and cost reports (docs/reconciliation.md).
--
-- An import records what one `cronledger reconcile` read (provider, API or saved file, day range, the pages' hash, who
-- and when) and the provider's rows, each under its key: day (UTC), model, token class (or a cost line item the key
-- cannot place), service tier, with the project or workspace and API key it came from. Matching is per
-- (provider, day, model, token class, tier): the ledger knows no project, so the rows of the projects and keys the
-- operator named as cronledger's (in_scope) are summed on the provider's side. For each key the provider reports, the
-- difference between what it says now and what the ledger's usage plus the reconciliation entries already booked hold
-- is booked as one reconciliation entry: so re-importing the same pages books nothing, and a later import of a changed
-- day books only the change. A key only the ledger has is listed, never booked: a provider's silence about a day is
-- not a zero (its reports come late).

create table reconciliation_imports (
  id            bigserial   primary key,
  provider      text        not null check (provider in ('openai', 'anthropic')),
  source        text        not null check (source in ('api', 'file')),
  from_day      date        not null,
  to_day        date        not null,
  -- sha-256 of the pages read, in the order read
  pages_sha256  text        not null check (pages_sha256 ~ '^[0-9a-f]{64}$'),
  -- the projects, workspaces and API keys taken as cronledger's ({"projects": [...], "apiKeys": [...]} or {"all": true})
  scope         jsonb       not null,
  imported_at   timestamptz not null default now(),
  created_by    text        not null,
  check (to_day >= from_day)
);

create table provider_usage_rows (
  import_id     bigint      not null references reconciliation_imports (id),
  day           date        not null,
  model         text        not null,
  -- input, cached_input, cache_write_5m, cache_write_1h, output, embedding, or line_item (model is then the line's text)
  token_class   text        not null,
  service_tier  text        not null,
  project_id    text,
  api_key_id    text,
  -- from the usage report (null on a cost line) and from the cost report (null on a usage line)
  tokens        bigint      check (tokens >= 0),
  cost_usd      numeric(38, 18),
  in_scope      boolean     not null,
  check ((tokens is null) <> (cost_usd is null))
);
create index provider_usage_rows_import on provider_usage_rows (import_id);

-- A reconciliation entry points at its import; an adjustment still points at the entry it corrects.
alter table usage_ledger add column reconciliation_import_id bigint references reconciliation_imports (id);
alter table usage_ledger drop constraint usage_ledger_check4;
alter table usage_ledger add constraint usage_ledger_adjustment_points_at_entry
  check (entry_type <> 'adjustment' or original_entry_id is not null);
alter table usage_ledger add constraint usage_ledger_reconciliation_points_at_import
  check (entry_type <> 'reconciliation' or original_entry_id is not null or reconciliation_import_id is not null);

-- The key and the token difference of each reconciliation entry (its USD difference is the ledger row's cost_usd).
create table reconciliation_entries (
  ledger_entry_id bigint primary key references usage_ledger (id),
  import_id       bigint not null references reconciliation_imports (id),
  provider        text   not null,
  day             date   not null,
  model           text   not null,
  token_class     text   not null,
  service_tier    text   not null,
  tokens          bigint not null
);
create index reconciliation_entries_key on reconciliation_entries (provider, day);

do $$
declare
  t text;
begin
  foreach t in array array['reconciliation_imports', 'provider_usage_rows', 'reconciliation_entries'] loop
    execute format('create trigger %I before update or delete on %I for each row execute function forbid_append_only_change()',
                   t || '_append_only', t);
    execute format('create trigger %I before truncate on %I for each statement execute function forbid_append_only_change()',
                   t || '_no_truncate', t);
  end loop;
end
$$;

-- The ledger's usage of one provider over a day range, per key: tokens of the class and their USD at the rates the
-- entry was booked with (the classes of an entry sum to its cost_usd exactly: call_cost is linear in the tokens).
-- A model's provider is its prefix: anthropic/... is Anthropic's, any other model went to the OpenAI-compatible endpoint.
create function reconciliation_ledger_side(p_provider text, p_from date, p_to date)
returns table (day date, model text, token_class text, service_tier text, ledger_model text, tokens bigint, cost_usd numeric)
language sql stable set search_path = pg_catalog, public, pg_temp as $$
  select (l.created_at at time zone 'UTC')::date, coalesce(l.provider_model, regexp_replace(l.model, '^[^/]*/', '')),
         c.token_class, price_tier(l.service_tier), max(l.model), sum(c.tokens)::bigint,
         sum(call_cost(l.kind, c.prompt, c.cached, c.write_5m, c.write_1h, c.completion,
                       price_rates(p, price_tier(l.service_tier), is_long_context(p, l.prompt_tokens))))
    from usage_ledger l
    join model_prices p on p.model = l.model and p.version = l.price_version
    cross join lateral (values
      ('input', l.prompt_tokens - l.cached_prompt_tokens - l.cache_write_5m_tokens - l.cache_write_1h_tokens,
                l.prompt_tokens - l.cached_prompt_tokens - l.cache_write_5m_tokens - l.cache_write_1h_tokens, 0::bigint, 0::bigint, 0::bigint, 0::bigint),
      ('cached_input', l.cached_prompt_tokens, l.cached_prompt_tokens, l.cached_prompt_tokens, 0, 0, 0),
      ('cache_write_5m', l.cache_write_5m_tokens, l.cache_write_5m_tokens, 0, l.cache_write_5m_tokens, 0, 0),
      ('cache_write_1h', l.cache_write_1h_tokens, l.cache_write_1h_tokens, 0, 0, l.cache_write_1h_tokens, 0),
      ('output', l.completion_tokens, 0, 0, 0, 0, l.completion_tokens)
    ) c(token_class, tokens, prompt, cached, write_5m, write_1h, completion)
   where l.entry_type = 'usage' and l.kind = 'chat' and c.tokens > 0
     and (l.model like 'anthropic/%') = (p_provider = 'anthropic')
     and l.created_at >= p_from::timestamp at time zone 'UTC' and l.created_at < (p_to + 1)::timestamp at time zone 'UTC'
   group by 1, 2, 3, 4
  union all
  select (l.created_at at time zone 'UTC')::date, coalesce(l.provider_model, regexp_replace(l.model, '^[^/]*/', '')),
         'embedding', price_tier(l.service_tier), max(l.model), sum(l.prompt_tokens)::bigint, sum(l.cost_usd)
    from usage_ledger l
   where l.entry_type = 'usage' and l.kind = 'embedding' and l.prompt_tokens > 0
     and (l.model like 'anthropic/%') = (p_provider = 'anthropic')
     and l.created_at >= p_from::timestamp at time zone 'UTC' and l.created_at < (p_to + 1)::timestamp at time zone 'UTC'
   group by 1, 2, 4
$$;

-- Each key of a provider over a day range: the provider's figures in import p_import_id (null where it reports none),
-- the ledger's, and the reconciliation entries booked before. side: both, provider (the ledger has none) or ledger.
create function reconciliation_keys(p_import_id bigint)
returns table (day date, model text, token_class text, service_tier text, side text, ledger_model text,
               provider_tokens bigint, provider_usd numeric, ledger_tokens bigint, ledger_usd numeric,
               booked_tokens bigint, booked_usd numeric)
language sql stable set search_path = pg_catalog, public, pg_temp as $$
  with i as (select * from reconciliation_imports where id = p_import_id),
  p as (
    select r.day, r.model, r.token_class, r.service_tier, sum(r.tokens)::bigint as tokens, sum(r.cost_usd) as usd
      from provider_usage_rows r, i where r.import_id = i.id and r.in_scope and r.day between i.from_day and i.to_day
     group by 1, 2, 3, 4
  ),
  l as (select s.* from i, reconciliation_ledger_side(i.provider, i.from_day, i.to_day) s),
  b as (
    select e.day, e.model, e.token_class, e.service_tier, sum(e.tokens)::bigint as tokens, sum(u.cost_usd) as usd
      from reconciliation_entries e join usage_ledger u on u.id = e.ledger_entry_id, i
     where e.provider = i.provider and e.day between i.from_day and i.to_day and e.import_id < i.id
     group by 1, 2, 3, 4
  )
  select k.day, k.model, k.token_class, k.service_tier,
         case when p.day is null then 'ledger' when l.day is null then 'provider' else 'both' end,
         l.ledger_model, p.tokens, p.usd, coalesce(l.tokens, 0), coalesce(l.cost_usd, 0), coalesce(b.tokens, 0), coalesce(b.usd, 0)
    from (select day, model, token_class, service_tier from p union select day, model, token_class, service_tier from l
          union select day, model, token_class, service_tier from b) k
    left join p using (day, model, token_class, service_tier)
    left join l using (day, model, token_class, service_tier)
    left join b using (day, model, token_class, service_tier)
   order by 1, 2, 3, 4
$$;

-- `cronledger reconcile`: records the import and its rows, then books, for each key the provider reports, the
-- difference between the provider and the ledger plus what reconciliation booked before, in one transaction. Imports
-- of one provider take turns (an advisory lock), so two at once never book one difference twice. p_rows:
-- [{day, model, tokenClass, serviceTier, projectId, apiKeyId, tokens (decimal string) | costUsd (decimal string), inScope}].
-- Returns {importId, keys: [...each key's figures and what this import booked...]}.
create function record_reconciliation(p_provider text, p_source text, p_from date, p_to date, p_pages_sha256 text,
  p_scope jsonb, p_rows jsonb)
returns jsonb language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
  v_import reconciliation_imports;
  k record;
  v_tokens bigint;
  v_usd numeric;
  v_entry_id bigint;
  v_model text;
  v_keys jsonb := '[]';
begin
  perform pg_advisory_xact_lock(hashtextextended('cronledger-reconcile-' || p_provider, 0));
  insert into reconciliation_imports (provider, source, from_day, to_day, pages_sha256, scope, created_by)
  values (p_provider, p_source, p_from, p_to, p_pages_sha256, p_scope, session_user)
  returning * into v_import;
  insert into provider_usage_rows (import_id, day, model, token_class, service_tier, project_id, api_key_id, tokens, cost_usd, in_scope)
  select v_import.id, r.day, r.model, r."tokenClass", r."serviceTier", r."projectId", r."apiKeyId", r.tokens::bigint,
         r."costUsd"::numeric(38, 18), r."inScope"
    from jsonb_to_recordset(p_rows) as r(day date, model text, "tokenClass" text, "serviceTier" text, "projectId" text,
                                         "apiKeyId" text, tokens text, "costUsd" text, "inScope" boolean);
  for k in select * from reconciliation_keys(v_import.id) loop
    v_tokens := case when k.provider_tokens is null then 0 else k.provider_tokens - k.ledger_tokens - k.booked_tokens end;
    v_usd := case when k.provider_usd is null then 0 else k.provider_usd - k.ledger_usd - k.booked_usd end;
    v_entry_id := null;
    if k.side <> 'ledger' and (v_tokens <> 0 or v_usd <> 0) then
      v_model := coalesce(k.ledger_model,
                          (select u.model from usage_ledger u where u.provider_model = k.model and u.entry_type = 'usage' limit 1),
                          case when k.token_class = 'line_item' then p_provider || ' line item' else p_provider || '/' || k.model end);
      insert into usage_ledger (idempotency_key, entry_type, reconciliation_import_id, reason, user_id, model, provider_model, kind,
                                service_tier, cost_usd)
      values (format('reconciliation:%s:%s:%s:%s:%s:%s', v_import.id, p_provider, k.day, k.model, k.token_class, k.service_tier),
              'reconciliation', v_import.id,
              format('%s reports %s tokens / %s USD for %s %s %s (%s tier); the ledger holds %s / %s and reconciliation booked %s / %s before import %s',
                     p_provider, coalesce(k.provider_tokens::text, 'no'), coalesce(k.provider_usd::text, 'no'), k.day, k.model,
                     k.token_class, k.service_tier, k.ledger_tokens, k.ledger_usd, k.booked_tokens, k.booked_usd, v_import.id),
              'reconciliation:' || p_provider, v_model, k.model,
              case when k.token_class = 'embedding' then 'embedding' when k.token_class = 'line_item' then null else 'chat' end,
              k.service_tier, v_usd)
      returning id into v_entry_id;
      insert into reconciliation_entries (ledger_entry_id, import_id, provider, day, model, token_class, service_tier, tokens)
      values (v_entry_id, v_import.id, p_provider, k.day, k.model, k.token_class, k.service_tier, v_tokens);
    end if;
    v_keys := v_keys || jsonb_build_object(
      'day', k.day, 'model', k.model, 'tokenClass', k.token_class, 'serviceTier', k.service_tier, 'side', k.side,
      'providerTokens', k.provider_tokens::text, 'providerUsd', k.provider_usd::text,
      'ledgerTokens', k.ledger_tokens::text, 'ledgerUsd', k.ledger_usd::text,
      'bookedBeforeTokens', k.booked_tokens::text, 'bookedBeforeUsd', k.booked_usd::text,
      'entryId', v_entry_id::text,
      'bookedTokens', case when v_entry_id is null then '0' else v_tokens::text end,
      'bookedUsd', case when v_entry_id is null then '0' else v_usd::text end);
  end loop;
  return jsonb_build_object('importId', v_import.id::text, 'importedAt', v_import.imported_at, 'keys', v_keys);
end
$$;

revoke execute on function reconciliation_ledger_side(text, date, date), reconciliation_keys(bigint),
  record_reconciliation(text, text, date, date, text, jsonb, jsonb) from public;
grant execute on function record_reconciliation(text, text, date, date, text, jsonb, jsonb) to cronledger_operator;
-- The report, the admin page and /metrics read the keys of an import (pure reads of tables these roles may read).
grant execute on function reconciliation_ledger_side(text, date, date), reconciliation_keys(bigint) to cronledger_worker;
do $$
begin
  if exists (select 1 from pg_roles where rolname = 'cronledger_readonly') then
    grant execute on function reconciliation_ledger_side(text, date, date), reconciliation_keys(bigint) to cronledger_readonly;
  end if;
end
$$;
grant select on reconciliation_imports, provider_usage_rows, reconciliation_entries to cronledger_operator;
