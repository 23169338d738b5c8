import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { claimAndReserve, type PlannedCall } from '../src/budgets/reserve';
import { worstCaseOf } from '../src/budgets/worst-case';
import { createPool } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { PrivatePostgres } from './support/private-postgres';
import { waitFor } from './support/wait';

/**
 * A decision commits synchronously: when claimAndReserve returns, the claim and the reservation are on
 * disk, whether the decision took the user's month row at once or queued behind another one for it. Both are crashed
 * here: a private cluster dies right after claimAndReserve returned, and the claim and the reservation must still be
 * there after crash recovery. The WAL writer is told to flush only every 10 s and never for volume, so a commit that
 * nobody flushed is still in the WAL buffers when the cluster dies, and recovery drops it.
 */
let dataDir: string;
let postgres: PrivatePostgres;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'cronledger-decision-durability-'));
  postgres = await PrivatePostgres.create(dataDir);
  await postgres.configure({ wal_writer_delay: '10s', wal_writer_flush_after: '1GB', autovacuum: 'off' });
  const pool = createPool(postgres.operatorDatabaseUrl);
  try {
    await applyPrices(pool, loadPricesFile('prices/standard.json'), 'test');
    const effectiveFrom = new Date('2026-08-01T00:00:00Z');
    await applyBudgets(pool, { budgets: [{ userId: 'crash-user', monthlyLimitUsd: '1', timeZone: 'UTC', effectiveFrom }] }, 'test');
  } finally {
    await pool.end();
  }
}, 120_000);

afterAll(async () => {
  await postgres?.destroy();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const worstCase = worstCaseOf({ prompt: 'Hello.', maxOutputTokens: 100 }).chat;
const calls: PlannedCall[] = [{ step: 'chat', attempt: 1, kind: 'chat', model: 'openai/gpt-4o-mini', worstCase }];
const at = new Date('2026-08-10T12:00:00Z');

/** claimAndReserve for one slot of crash-task, as a run makes it. */
const decide = (pool: pg.Pool, minute: string, runId: string) =>
  claimAndReserve(
    pool,
    {
      idempotencyKey: `cron:crash-task:${minute}`,
      taskId: 'crash-task',
      userId: 'crash-user',
      workflowId: `wf-${minute}`,
      temporalRunId: runId,
      scheduledMinute: minute,
      workerId: 'test-worker',
    },
    { at, expirySeconds: 3600, calls },
  );

/** After the crash and restart: the slot's claim and the run's reservation, as recovery left them. */
async function survivors(minute: string, runId: string) {
  const after = createPool(postgres.databaseUrl);
  try {
    const runs = await after.query<{ temporal_run_id: string; status: string }>(
      'select temporal_run_id, status from runs where idempotency_key = $1',
      [`cron:crash-task:${minute}`],
    );
    const reservations = await after.query<{ idempotency_key: string; status: string }>(
      'select idempotency_key, status from budget_reservations where run_id = $1',
      [runId],
    );
    return { runs: runs.rows, reservations: reservations.rows };
  } finally {
    await after.end();
  }
}

it('a claim and reservation that claimAndReserve returned survive an immediate crash of PostgreSQL (month row free)', async () => {
  const pool = createPool(postgres.databaseUrl);
  pool.on('error', () => undefined); // the crash below ends the idle connections
  const result = await decide(pool, '2026-08-10T12:00Z', 'run-crash');
  expect(result.claim.claimed).toBe(true);
  expect(result.decision?.tier).toBe('default');
  await postgres.crash();
  await pool.end().catch(() => undefined);

  await postgres.start();
  expect(await survivors('2026-08-10T12:00Z', 'run-crash')).toEqual({
    runs: [{ temporal_run_id: 'run-crash', status: 'running' }],
    reservations: [{ idempotency_key: 'run-crash:chat:1', status: 'open' }],
  });
}, 120_000);

it('so do they when the decision queued behind another one for the month row', async () => {
  const pool = createPool(postgres.databaseUrl);
  pool.on('error', () => undefined);
  const holder = new pg.Client({ connectionString: postgres.ownerDatabaseUrl }); // FOR UPDATE: only the owner may lock the row directly
  holder.on('error', () => undefined);
  await holder.connect();
  const appName = 'crash-queued-decision';
  const queued = createPool(postgres.databaseUrl, 1);
  queued.on('error', () => undefined);
  await queued.query(`set application_name = '${appName}'`);
  // Another decision holds the user's month row (the first test's decision created it) until the queued one waits.
  await holder.query('begin');
  await holder.query(`select 1 from budget_months where user_id = 'crash-user' for update`);
  const result = decide(queued, '2026-08-10T12:01Z', 'run-crash-queued');
  await waitFor(
    async () =>
      (await pool.query(`select 1 from pg_stat_activity where application_name = $1 and wait_event_type = 'Lock'`, [appName])).rowCount ===
      1,
    30_000,
    'the decision queued on the month row',
  );
  await holder.query('commit');
  const decided = await result;
  expect(decided.claim.claimed).toBe(true);
  expect(decided.decision?.tier).toBe('default');
  await postgres.crash();
  await Promise.all([pool.end(), queued.end(), holder.end()].map((p) => p.catch(() => undefined)));

  await postgres.start();
  expect(await survivors('2026-08-10T12:01Z', 'run-crash-queued')).toEqual({
    runs: [{ temporal_run_id: 'run-crash-queued', status: 'running' }],
    reservations: [{ idempotency_key: 'run-crash-queued:chat:1', status: 'open' }],
  });
}, 120_000);
