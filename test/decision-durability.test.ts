import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { claimAndReserve, type PlannedCall } from '../src/budgets/reserve';
import { worstCaseOf } from '../src/budgets/worst-case';
import { createPool } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { PrivatePostgres } from './support/private-postgres';

/**
 * The decision commits asynchronously (its month row lock is let go before the fsync) and then waits for durability
 * outside the lock (src/budgets/reserve.ts decideThenAwaitDurability). This crashes a private cluster right after
 * claimAndReserve returned and checks that the claim and the reservation are still there after crash recovery. The
 * WAL writer is told to flush only every 10 s and never for volume, so without the barrier the commit record is still
 * in the WAL buffers when the cluster dies, and recovery drops both.
 */
let dataDir: string;
let postgres: PrivatePostgres;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'cronledger-decision-durability-'));
  postgres = await PrivatePostgres.create(dataDir);
  await postgres.configure({ wal_writer_delay: '10s', wal_writer_flush_after: '1GB', autovacuum: 'off' });
  const pool = createPool(postgres.databaseUrl);
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

it('a claim and reservation that claimAndReserve returned survive an immediate crash of PostgreSQL', async () => {
  const pool = createPool(postgres.databaseUrl);
  pool.on('error', () => undefined); // the crash below ends the idle connections
  const key = 'cron:crash-task:2026-08-10T12:00Z';
  const claim = { idempotencyKey: key, taskId: 'crash-task', userId: 'crash-user', workflowId: `wf-${key}`, temporalRunId: 'run-crash' };
  const worstCase = worstCaseOf({ prompt: 'Hello.', maxOutputTokens: 100 }).chat;
  const calls: PlannedCall[] = [{ step: 'chat', attempt: 1, kind: 'chat', model: 'openai/gpt-4o-mini', worstCase }];
  const at = new Date('2026-08-10T12:00:00Z');
  const result = await claimAndReserve(
    pool,
    { ...claim, scheduledMinute: '2026-08-10T12:00Z', workerId: 'test-worker' },
    { at, expirySeconds: 3600, calls },
  );
  expect(result.claim.claimed).toBe(true);
  expect(result.decision?.tier).toBe('default');
  await postgres.crash();
  await pool.end().catch(() => undefined);

  await postgres.start();
  const after = createPool(postgres.databaseUrl);
  try {
    const runs = await after.query<{ temporal_run_id: string; status: string }>(
      'select temporal_run_id, status from runs where idempotency_key = $1',
      [key],
    );
    expect(runs.rows).toEqual([{ temporal_run_id: 'run-crash', status: 'running' }]);
    const reservations = await after.query<{ idempotency_key: string; status: string }>(
      'select idempotency_key, status from budget_reservations where run_id = $1',
      ['run-crash'],
    );
    expect(reservations.rows).toEqual([{ idempotency_key: 'run-crash:chat:1', status: 'open' }]);
  } finally {
    await after.end();
  }
}, 120_000);
