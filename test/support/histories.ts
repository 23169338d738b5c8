import { join } from 'node:path';

/** Where the committed workflow histories live (replayed by test/unit/replay.test.ts, recorded by test/replay-fresh.test.ts). */
export const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'histories');

/** One history per path a run can take, and one per other workflow. */
export const FIXTURE_NAMES = [
  'scheduled-run-schedule-started',
  'scheduled-run-duplicate',
  'scheduled-run-failed',
  'scheduled-run-retry-takes-over',
  'scheduled-run-billed-retry',
  'scheduled-run-blocked',
  'scheduled-run-blocked-again',
  'scheduled-run-downgraded',
  'scheduled-run-blocked-paused',
  'scheduled-run-waited',
  'monthly-report',
  'budget-sweep',
  'rollup-refresh',
  'reconcile-daily',
];
