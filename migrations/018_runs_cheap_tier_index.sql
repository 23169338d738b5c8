-- What downgrades saved (src/budgets/downgrade-savings.ts) checks each ledger row under a cheap model against the runs
-- that ran at the cheap tier, by workflow_id; runs had no index on it, so with a downgrade in force PostgreSQL scanned
-- every run for tier = 'cheap' (5,000,001 runs: 180 ms against 5 ms with this index, BENCHMARKS.md P3). Partial: only
-- the downgraded runs, a small share of all, are in it, and no other run's insert or update pays for it.
--
-- Built in the migration's transaction (the runner applies each file in one), not CONCURRENTLY: the build holds a
-- SHARE lock on runs, so claims and closes wait for it. It reads the table once and sorts only the cheap runs:
-- 232 ms at 5,000,001 runs (751 MB, in cache) on the development machine; read from disk, as long as reading the
-- table takes. For a larger table create it CONCURRENTLY by hand before migrating (`if not exists` then skips it).
create index if not exists runs_cheap_workflow on runs (workflow_id) where tier = 'cheap';
