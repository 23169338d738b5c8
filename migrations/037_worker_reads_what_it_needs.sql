-- The worker role reads what a run, the budget sweep, the monthly report and the rollup refresh read, and what the
-- CLI's reading commands show (they connect as the worker: `report`, `runs`, `ledger`, `budgets status`, `limits`,
-- `rollups verify`, ...). It no longer reads:
-- - memories and call_embeddings: replies and their vectors, written through store_memory_and_complete_run and
--   stage_embedding (SECURITY DEFINER), read by nothing that runs as the worker;
-- - budget_zones: read by the ledger's triggers, which run inside the writing functions, as the owner;
-- - the /metrics counters (metric_*) and rollup_verifications: the admin page reads them, as cronledger_readonly.
-- A table a later migration adds is still readable by the worker by default (032's default privileges), and
-- test/grants.test.ts fails until its allow-list names it.
revoke select on memories, call_embeddings, budget_zones, metric_ledger_totals, metric_run_counts, metric_histograms,
  rollup_verifications from cronledger_worker;
