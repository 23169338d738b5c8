import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool';
import { applyPrices, loadPricesFile } from '../../src/ledger/prices';
import { formatFigures } from '../support/chaos-figures';
import { PrivatePostgres } from '../support/private-postgres';
import type { ChaosEnv } from './chaos-env';
import { createFaultContext } from './fault-context';
import { runPostgresOutage } from './outages';

/**
 * R3, short form: the ledger's PostgreSQL stopped in the middle of a burst. It is a private cluster, so the suite's
 * shared one stays up; Temporal is the suite's server (this file's namespace).
 */
let env: ChaosEnv;
let close: () => Promise<void>;
let postgres: PrivatePostgres;
let pool: pg.Pool;
let operatorPool: pg.Pool;
let dataDir: string;

beforeAll(async () => {
  ({ env, close } = await createFaultContext(import.meta.url));
  dataDir = mkdtempSync(join(tmpdir(), 'cronledger-pg-outage-'));
  postgres = await PrivatePostgres.create(dataDir);
  pool = createPool(postgres.databaseUrl);
  operatorPool = createPool(postgres.operatorDatabaseUrl, 2);
  await applyPrices(operatorPool, loadPricesFile('prices/standard.json'), 'test');
  env = { ...env, pool, operatorPool, databaseUrl: postgres.databaseUrl };
});

afterAll(async () => {
  await pool?.end();
  await operatorPool?.end();
  await postgres?.destroy();
  rmSync(dataDir, { recursive: true, force: true });
  await close?.();
});

it('R3: with PostgreSQL down for 15 s mid-burst, runs wait and finish: none lost, none twice, no provider call repeated', async () => {
  const slots = 30;
  const r = await runPostgresOutage(env, postgres, { slots, outageMs: 15_000 });
  process.stdout.write(`${formatFigures(r.figures)}\n`);

  // Calls answered while the database was down: their usage waited, durable in Temporal, for the booking step.
  expect(Number(r.figures.extra['calls billed while PostgreSQL was down'])).toBeGreaterThan(0);
  expect(r.failedSlots).toEqual([]);
  expect(r.figures.completed).toBe(slots);
  expect(r.figures.duplicates).toBe(0);
  expect(r.figures.unbookedUnexplained).toBe(0);
  expect(r.figures.ledgerRowsNotBilled).toBe(0);
  expect(r.repeatedCalls).toBe(0);
  expect(r.figures.billed).toBe(2 * slots);
  expect(r.figures.ledgerRows).toBe(2 * slots);
}, 600_000);
