import type { TemporalMode, TemporalTls } from '../../src/config';

/** What the global setup hands every test file through `inject('stack')`. */
export interface TestStack {
  /** gRPC address of the one Temporal the suite shares (one namespace per test file). */
  temporalAddress: string;
  /** `dev`: the dev server (default); `server`: the Temporal server on PostgreSQL (CRONLEDGER_TEST_TEMPORAL=server). */
  temporalMode: TemporalMode;
  /** Server mode: the frontend requires this client certificate (mutual TLS); the dev server has none. */
  temporalTls?: TemporalTls;
  uiUrl: string;
  /** Absolute path of the temporal binary, for tests that start a server of their own. */
  temporalCli: string;
  /** A superuser connection to the `postgres` database of the suite's cluster, for creating databases. */
  adminDatabaseUrl: string;
  /** The owner role (owns the tables, runs migrations), the worker role and the operator role, at the template database. */
  ownerDatabaseUrl: string;
  workerDatabaseUrl: string;
  operatorDatabaseUrl: string;
  /** The admin page's SELECT-only role at the template database. */
  readonlyDatabaseUrl: string;
  /** Migrated database that every test context clones (`create database x template y`). */
  templateDatabase: string;
  dataDir: string;
  /**
   * The workflow code bundled once for the whole run (webpack takes seconds of CPU): every in-process worker and worker
   * process of every file loads this file instead of bundling its own.
   */
  workflowBundlePath: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    stack: TestStack;
  }
}
