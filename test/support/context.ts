import type { Client } from '@temporalio/client';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { inject } from 'vitest';
import { connectClient } from '../../src/client';
import { temporalTlsEnv, type TemporalTls } from '../../src/config';
import { createPool } from '../../src/db/pool';
import { OWNER_ROLE } from '../../src/db/roles';
import { dropDatabaseWhenIdle } from '../../src/dev/postgres';
import './provided';

export interface TestContext {
  /** The test file's own Temporal namespace, named after the file. */
  namespace: string;
  temporalAddress: string;
  /** Server mode: the client certificate the suite's Temporal requires (undefined on the dev server). */
  temporalTls?: TemporalTls;
  /** A fresh, migrated database for this context only, as the worker role (what workers and the reading CLI use). */
  databaseUrl: string;
  pool: pg.Pool;
  /** The same database as the operator role: credits, adjustments, prices, budgets and applied task versions. */
  operatorDatabaseUrl: string;
  operatorPool: pg.Pool;
  /** The same database as the owner role, for what only migrations may do (tests of the triggers, the grants). */
  ownerDatabaseUrl: string;
  /** A pool as the owner: loads history (ledger rows dated in the past), which only the owner may write. */
  ownerPool: pg.Pool;
  /** The same database as the admin page's SELECT-only role. */
  readonlyDatabaseUrl: string;
  client: Client;
  /** Unique per context, so workers of one test never pick up another's tasks. */
  taskQueue: string;
  /**
   * Environment for CLI subprocesses (runCli) that points them at this context and nothing else (in server mode with
   * the client certificate: strip TEMPORAL_TLS_* when pointing it at another server).
   */
  env: NodeJS.ProcessEnv;
  close(): Promise<void>;
}

let contexts = 0;

/** Call with `import.meta.url` in beforeAll; call close() in afterAll. */
export async function createTestContext(importMetaUrl: string): Promise<TestContext> {
  const stack = inject('stack');
  const namespace = basename(fileURLToPath(importMetaUrl), '.test.ts');
  const database = `t_${namespace.replace(/[^a-z0-9]/gi, '_')}_${process.pid}_${++contexts}`.toLowerCase().slice(0, 63);
  await asAdmin(stack.adminDatabaseUrl, (admin) =>
    admin.query(`create database "${database}" template ${stack.templateDatabase} owner ${OWNER_ROLE}`),
  );
  const databaseUrl = withDatabase(stack.workerDatabaseUrl, database);
  const operatorDatabaseUrl = withDatabase(stack.operatorDatabaseUrl, database);
  const ownerDatabaseUrl = withDatabase(stack.ownerDatabaseUrl, database);
  const readonlyDatabaseUrl = withDatabase(stack.readonlyDatabaseUrl, database);
  const pool = createPool(databaseUrl);
  const ownerPool = createPool(ownerDatabaseUrl, 4);
  const operatorPool = createPool(operatorDatabaseUrl, 4);
  const client = await connectClient({ temporalAddress: stack.temporalAddress, namespace, temporalTls: stack.temporalTls });
  await client.connection.workflowService.describeNamespace({ namespace }).catch((err: Error) => {
    throw new Error(
      `namespace ${namespace} does not exist on the test server (${err.message}); the global setup creates one per test/**/*.test.ts file`,
    );
  });
  // An empty data dir: CLI subprocesses must not find a developer's `dev up` stack, only the env below.
  const dataDir = mkdtempSync(join(tmpdir(), `cronledger-ctx-${namespace}-`));
  const taskQueue = `${namespace}-${randomUUID().slice(0, 8)}`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...temporalTlsEnv(stack.temporalTls),
    TEMPORAL_ADDRESS: stack.temporalAddress,
    TEMPORAL_NAMESPACE: namespace,
    DATABASE_URL: databaseUrl,
    DATABASE_OPERATOR_URL: operatorDatabaseUrl,
    DATABASE_OWNER_URL: ownerDatabaseUrl,
    CRONLEDGER_TASK_QUEUE: taskQueue,
    CRONLEDGER_DATA_DIR: dataDir,
  };
  return {
    namespace,
    temporalAddress: stack.temporalAddress,
    temporalTls: stack.temporalTls,
    databaseUrl,
    pool,
    operatorDatabaseUrl,
    operatorPool,
    ownerDatabaseUrl,
    ownerPool,
    readonlyDatabaseUrl,
    client,
    taskQueue,
    env,
    async close() {
      await client.connection.close();
      await pool.end();
      await ownerPool.end();
      await operatorPool.end();
      await asAdmin(stack.adminDatabaseUrl, (admin) => dropDatabaseWhenIdle(admin, database));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface FreshDatabase {
  name: string;
  /** As the owner role, which migrates. */
  ownerDatabaseUrl: string;
  /** As the superuser, which may dump everything. */
  superuserDatabaseUrl: string;
  drop(): Promise<void>;
}

/** An empty database in the suite's cluster, owned by the owner role and not migrated: what `db migrate` meets first. */
export async function freshDatabase(prefix: string): Promise<FreshDatabase> {
  const stack = inject('stack');
  const name = `${prefix}_${randomUUID().slice(0, 8)}`;
  await asAdmin(stack.adminDatabaseUrl, (admin) => admin.query(`create database ${name} owner ${OWNER_ROLE}`));
  return {
    name,
    ownerDatabaseUrl: withDatabase(stack.ownerDatabaseUrl, name),
    superuserDatabaseUrl: withDatabase(stack.adminDatabaseUrl, name),
    drop: () => asAdmin(stack.adminDatabaseUrl, (admin) => dropDatabaseWhenIdle(admin, name)),
  };
}

/** Runs `work` on a connection of its own to the cluster as its superuser, closed afterwards. */
async function asAdmin<T>(adminDatabaseUrl: string, work: (admin: pg.Client) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: adminDatabaseUrl });
  await admin.connect();
  try {
    return await work(admin);
  } finally {
    await admin.end();
  }
}

function withDatabase(databaseUrl: string, database: string): string {
  const url = new URL(databaseUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

/** An environment without the suite server's client certificate, for a CLI pointed at a test's private dev server. */
export const withoutTls = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(env).filter(([k]) => !k.startsWith('TEMPORAL_TLS_')));
