import type { Client } from '@temporalio/client';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { connectClient } from '../../src/client';
import { formatFigures } from '../support/chaos-figures';
import { TemporalProcess } from '../support/temporal-process';
import type { ChaosEnv } from './chaos-env';
import { createFaultContext } from './fault-context';
import { runTemporalRestart } from './temporal-restart';

/**
 * R2, short form: a private Temporal dev server (its own SQLite file; the suite's server stays up) SIGKILLed while
 * every-minute schedules fire, and restarted on the same file after a slot has passed. Waits on real minute
 * boundaries, so it takes about three minutes.
 */
let env: ChaosEnv;
let close: () => Promise<void>;
let server: TemporalProcess;
let client: Client;
let dir: string;

beforeAll(async () => {
  ({ env, close } = await createFaultContext(import.meta.url));
  dir = mkdtempSync(join(tmpdir(), 'cronledger-temporal-restart-'));
  server = await TemporalProcess.create({
    cli: inject('stack').temporalCli,
    dbFilename: join(dir, 'temporal.db'),
    namespaces: [],
    logFile: join(dir, 'temporal.log'),
  });
  await server.start();
  client = await connectClient({ temporalAddress: server.address, namespace: 'default' });
  env = { ...env, client, temporalAddress: server.address, namespace: 'default' };
});

afterAll(async () => {
  await client?.connection.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
  await close?.();
});

it('R2: a Temporal server SIGKILLed across a slot and restarted on its SQLite file catches the slot up, and nothing runs twice', async () => {
  const tasks = 3;
  const r = await runTemporalRestart(env, server, { tasks });
  process.stdout.write(`${formatFigures(r.figures)}\n`);

  expect(r.missed).toHaveLength(tasks);
  for (const m of r.missed) {
    expect(m.status, m.workflowId).toBe('COMPLETED');
    expect(m.startedAfterRestartMs, `${m.workflowId} started after the restart`).toBeGreaterThanOrEqual(0);
  }
  expect(r.gaps).toEqual([]);
  expect(r.figures.notCompleted).toBe(0);
  expect(r.figures.duplicates).toBe(0);
  expect(r.figures.unbookedUnexplained).toBe(0);
  expect(r.figures.ledgerRowsNotBilled).toBe(0);
  expect(r.figures.billed).toBe(2 * r.figures.slots);
}, 600_000);
