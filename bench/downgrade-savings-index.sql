-- What the partial index runs_cheap_workflow (migration 018) buys downgradeSavings (src/budgets/downgrade-savings.ts),
-- on the 10,000,000-entry database `bench/report-rollups.ts --entries 10000000 --keep` keeps, whose month has no
-- downgrade. In one transaction, rolled back at the end (model_downgrades is append-only): a downgrade of
-- openai/gpt-4.1-nano to openai/gpt-4o-mini from 2026-06-30 12:00 UTC, the runs claimed in the ten minutes after it
-- marked cheap, then the savings statement's plan with the index and with it dropped (in the transaction too).
--
--   eval "$(npx cronledger dev env)"   # then, as the owner:
--   psql "${DATABASE_OWNER_URL%/*}/cronledger_bench_p3_kept" -f bench/downgrade-savings-index.sql | grep -E 'runs r|Execution'
set jit = off; -- as the application's sessions (src/db/pool.ts)
begin;
insert into model_downgrades (model, cheap_model, effective_from, source)
values ('openai/gpt-4.1-nano', 'openai/gpt-4o-mini', '2026-06-30T12:00Z', 'bench');
update runs set tier = 'cheap' where claimed_at >= '2026-06-30T12:00Z' and claimed_at < '2026-06-30T12:10Z';
select count(*) as cheap_runs from runs where tier = 'cheap';
\set savings 'explain (analyze, costs off, timing off, summary on) select l.kind, l.cost_usd, p.id from usage_ledger l cross join lateral (select d.model as default_model from model_downgrades d where d.cheap_model = l.model and d.effective_from <= l.created_at order by d.effective_from desc limit 1) dm left join lateral (select * from model_prices p where p.model = dm.default_model and p.effective_from <= l.created_at order by p.effective_from desc limit 1) p on true where l.model in (select d.cheap_model from model_downgrades d where d.effective_from < \'2026-07-01Z\') and l.entry_type = \'usage\' and l.created_at >= \'2026-06-01Z\' and l.created_at < \'2026-07-01Z\' and exists (select from runs r where r.workflow_id = l.workflow_id and r.tier = \'cheap\') order by l.id'
:savings;
drop index runs_cheap_workflow;
:savings;
rollback;
