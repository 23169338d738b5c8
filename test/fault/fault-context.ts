import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { applyPrices, loadPricesFile } from '../../src/ledger/prices';
import { createTestContext, type TestContext } from '../support/context';
import { startFakeOpenAI } from '../support/fake-openai';
import { workflowBundlePath } from '../support/workers';
import type { ChaosEnv } from './chaos-env';

/**
 * A fault-injection test file's environment: its test context (namespace on the shared server, own database with
 * the standard prices), a fake OpenAI, one workflow bundle for all its worker processes, a folder for their logs.
 * Scenarios that take Temporal or PostgreSQL down replace those with private ones.
 */
export async function createFaultContext(importMetaUrl: string): Promise<{ ctx: TestContext; env: ChaosEnv; close(): Promise<void> }> {
  const ctx = await createTestContext(importMetaUrl);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  const fake = await startFakeOpenAI();
  const workDir = mkdtempSync(join(tmpdir(), `cronledger-fault-${ctx.namespace}-`));
  const env: ChaosEnv = {
    client: ctx.client,
    pool: ctx.pool,
    operatorPool: ctx.operatorPool,
    temporalAddress: ctx.temporalAddress,
    namespace: ctx.namespace,
    databaseUrl: ctx.databaseUrl,
    ownerDatabaseUrl: ctx.ownerDatabaseUrl,
    fake,
    bundlePath: await workflowBundlePath(workDir),
    logDir: join(workDir, 'logs'),
    // CRONLEDGER_FAULT_VERBOSE=1 shows a scenario's progress (kills, restarts, outages) as it happens.
    log: process.env.CRONLEDGER_FAULT_VERBOSE ? (line) => process.stderr.write(`${new Date().toISOString()} ${line}\n`) : () => undefined,
  };
  return {
    ctx,
    env,
    async close() {
      await fake.close();
      await ctx.close();
      // Logs stay when a test failed, so the workers' side of it can be read.
      if (!process.env.CRONLEDGER_KEEP_FAULT_LOGS) rmSync(workDir, { recursive: true, force: true });
    },
  };
}
