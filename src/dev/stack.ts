import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { defaultDataDir, readStackFile, redactDatabaseUrl, stackFilePath, type StackFile } from '../config';
import { DEFAULT_TASK_QUEUE } from '../constants';
import { migrateDatabase } from '../db/migrate';
import { parseDatabaseUrl } from '../db/pool';
import { generatePassword, generatePasswords, type RolePasswords } from '../db/roles';
import { UserError } from '../errors';
import { freePorts, isPortFree, LOCALHOST } from './ports';
import {
  checkClusterReachable,
  clusterDirOf,
  databaseUrlFor,
  ensurePostgresBinDir,
  postgresLogOf,
  postgresPid,
  startPostgres,
  stopPostgres,
} from './postgres';
import { requireStackFile, updateStackFile, writeStackFile } from './stack-file';
import { findTemporalCli, resolveTemporalCli } from './temporal-cli';
import { startTemporal, stopTemporal, temporalLogOf, temporalRunning } from './temporal-server';
import { startWorkers, stopWorkers, workerId, workerRunning, type WorkerState } from './workers';
import { adminRunning, startAdmin, stopAdmin } from './admin-process';

/**
 * The local stack behind `cronledger dev up|down|status` and the test suite: the Temporal dev server (with its
 * Web UI), a private PostgreSQL cluster and N worker processes, all recorded in <dataDir>/stack.json.
 * Each data dir is its own stack on its own ports, so several live side by side.
 */

export { startTemporal, stopTemporal } from './temporal-server';

/** The well-known ports, taken by the checkout's default data dir when free so that links and habits just work. */
const DEFAULT_TEMPORAL_PORT = 7233;
const DEFAULT_UI_PORT = 8233;

export interface StartStackOptions {
  dataDir: string;
  workers: number;
  /** Namespaces to create besides `default` (the tests use one per test file). */
  namespaces?: string[];
  /** Use this PostgreSQL instead of a private cluster (`dev up` passes DATABASE_URL). */
  externalDatabaseUrl?: string;
  /** The owner role of that external PostgreSQL, to migrate it (`dev up` passes DATABASE_OWNER_URL). */
  externalOwnerDatabaseUrl?: string;
  taskQueue?: string;
  log?: (line: string) => void;
  /** Start the admin page too (default); the test suite's shared stack does not need it. */
  admin?: boolean;
}

export interface StackUp {
  stack: StackFile;
  temporal: { pid: number; alreadyRunning: boolean };
  postgres: { pid?: number; alreadyRunning: boolean; external: boolean };
  /** null: not migrated, because an external database came without DATABASE_OWNER_URL. */
  migrationsApplied: string[] | null;
  workers: WorkerState[];
  taskQueue: string;
  admin: Awaited<ReturnType<typeof startAdmin>>;
}

/** Starts whatever part of the stack is not running yet; running parts are left as they are. */
export async function startStack(opts: StartStackOptions): Promise<StackUp> {
  const dataDir = resolve(opts.dataDir);
  const log = opts.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const taskQueue = opts.taskQueue ?? DEFAULT_TASK_QUEUE;
  makePrivateDirs(dataDir);

  // Tools and checks first, one at a time: a first run may build the temporal CLI or apt-install PostgreSQL,
  // each printing progress, and what can be known to fail fails before anything starts.
  const cli = await resolveTemporalCli();
  if (!opts.externalDatabaseUrl) {
    await ensurePostgresBinDir(log);
    checkClusterReachable(dataDir);
  }
  writeStackFile(dataDir, await planStack(dataDir, cli.path, opts.externalDatabaseUrl, opts.externalOwnerDatabaseUrl));

  // Whatever the parts create (the Temporal SQLite file, logs) is for this user only; children inherit the umask.
  const umask = process.umask(0o077);
  try {
    // Side by side, and both settled before anything is reported, so an error never races a half-started part.
    const [temporal, postgres] = settledOrThrow(
      await Promise.allSettled([startTemporal(dataDir, { namespaces: opts.namespaces }), startLedgerDatabase(dataDir, log)]),
    );
    const ownerUrl = requireStackFile(dataDir).postgres.ownerDatabaseUrl;
    const migrationsApplied = ownerUrl ? await migrateDatabase(ownerUrl, 'DATABASE_OWNER_URL') : null;
    const workers = await startWorkers(dataDir, opts.workers, taskQueue);
    const admin =
      opts.admin === false
        ? { skipped: 'not asked for' }
        : await startAdmin(dataDir, { preferDefaultPort: dataDir === resolve(defaultDataDir()) });
    return { stack: requireStackFile(dataDir), temporal, postgres, migrationsApplied, workers, taskQueue, admin };
  } catch (err) {
    // Whatever did start keeps running (its logs may say why the rest did not); say how to see and stop it.
    const stack = requireStackFile(dataDir);
    const somethingRuns =
      temporalRunning(stack) ||
      Boolean(postgresPid(dataDir)) ||
      stack.workers.some((w) => workerRunning(w, dataDir)) ||
      adminRunning(stack.admin, dataDir);
    if (err instanceof UserError && somethingRuns) {
      throw new UserError(
        `${err.message}\nParts that did start are still running: \`cronledger dev status\` shows them, \`cronledger dev down\` stops them.`,
      );
    }
    throw err;
  } finally {
    process.umask(umask);
  }
}

/** The data dir and its logs 0700, and what an older cronledger left readable there 0600. */
function makePrivateDirs(dataDir: string): void {
  mkdirSync(join(dataDir, 'logs'), { recursive: true, mode: 0o700 });
  // As root the data dir keeps o+x (traverse, not read) for the postgres account: checkClusterReachable adds it.
  chmodSync(dataDir, 0o700);
  chmodSync(join(dataDir, 'logs'), 0o700);
  for (const file of ['stack.json', 'temporal.db', 'temporal.db-wal', 'temporal.db-shm']) {
    if (existsSync(join(dataDir, file))) chmodSync(join(dataDir, file), 0o600);
  }
}

export interface StackDown {
  found: boolean;
  workers: { id: string; pid: number }[];
  temporalPid?: number;
  postgresPid?: number;
  adminPid?: number;
}

/** Stops workers first (they finish in-flight tasks against a live server), then Temporal, then PostgreSQL. */
export async function stopStack(dataDir: string): Promise<StackDown> {
  dataDir = resolve(dataDir);
  if (!readStackFile(dataDir)) return { found: false, workers: [] };
  const adminPid = await stopAdmin(dataDir);
  const workers = await stopWorkers(dataDir);
  const temporalPid = await stopTemporal(dataDir);
  // Also when DATABASE_URL made this stack external: a private cluster from an earlier `dev up` may still run.
  const pgPid = postgresPid(dataDir);
  const postgresStopped = await stopPostgres(dataDir);
  return { found: true, workers, temporalPid, postgresPid: postgresStopped ? pgPid : undefined, adminPid };
}

export interface StackStatus {
  dataDir: string;
  stackFile: string;
  /** False when `dev up` never ran for this data dir. */
  exists: boolean;
  temporalAddress: string | null;
  uiUrl: string | null;
  /** The admin page `dev up` started, while it runs. */
  adminUrl: string | null;
  databaseUrl: string | null;
  temporalCli: string | null;
  namespace: string | null;
  temporal: { running: boolean; pid: number | null; port: number | null; uiPort: number | null; dbFile: string | null; log: string };
  postgres: { running: boolean; external: boolean; pid: number | null; port: number | null; clusterDir: string | null; log: string | null };
  /** metricsUrl: the worker's Temporal SDK runtime metrics (Prometheus text). */
  workers: { id: string; running: boolean; pid: number; log: string; metricsUrl: string | null }[];
  admin: { running: boolean; pid: number | null; log: string | null };
}

export async function stackStatus(dataDir: string): Promise<StackStatus> {
  dataDir = resolve(dataDir);
  const stack = readStackFile(dataDir);
  const base = { dataDir, stackFile: stackFilePath(dataDir), exists: Boolean(stack) };
  if (!stack) {
    return {
      ...base,
      temporalAddress: null,
      uiUrl: null,
      adminUrl: null,
      databaseUrl: null,
      temporalCli: findTemporalCliOrNull(),
      namespace: null,
      temporal: { running: false, pid: null, port: null, uiPort: null, dbFile: null, log: temporalLogOf(dataDir) },
      postgres: { running: false, external: false, pid: null, port: null, clusterDir: null, log: null },
      workers: [],
      admin: { running: false, pid: null, log: null },
    };
  }
  const t = stack.temporal;
  const p = stack.postgres;
  const tRunning = temporalRunning(stack);
  const pgPid = p.external ? undefined : postgresPid(dataDir);
  return {
    ...base,
    temporalAddress: t.address,
    uiUrl: t.uiUrl,
    adminUrl: adminRunning(stack.admin, dataDir) ? stack.admin!.url : null,
    databaseUrl: redactDatabaseUrl(p.databaseUrl), // `dev env` is the one place that prints passwords
    temporalCli: t.cli,
    namespace: stack.namespace,
    temporal: {
      running: tRunning,
      pid: tRunning ? t.pid : null,
      port: t.port,
      uiPort: t.uiPort,
      dbFile: t.dbFile,
      log: temporalLogOf(dataDir),
    },
    postgres: {
      running: p.external ? await answers(p.databaseUrl) : Boolean(pgPid),
      external: p.external,
      pid: pgPid ?? null,
      port: p.port,
      clusterDir: p.external ? null : p.clusterDir,
      log: p.external ? null : postgresLogOf(dataDir),
    },
    workers: stack.workers.map((w) => ({
      id: workerId(w),
      running: workerRunning(w, dataDir),
      pid: w.pid,
      log: w.log,
      metricsUrl: w.metricsPort ? `http://${LOCALHOST}:${w.metricsPort}/metrics` : null,
    })),
    admin: {
      running: adminRunning(stack.admin, dataDir),
      pid: adminRunning(stack.admin, dataDir) ? stack.admin!.pid : null,
      log: stack.admin?.log ?? null,
    },
  };
}

/** Ports and paths: those already in stack.json (same ports, same SQLite file on every restart), else fresh ones. */
async function planStack(
  dataDir: string,
  cli: string,
  externalDatabaseUrl: string | undefined,
  externalOwnerUrl: string | undefined,
): Promise<StackFile> {
  const existing = readStackFile(dataDir);
  const postgres = externalDatabaseUrl
    ? externalPostgres(externalDatabaseUrl, externalOwnerUrl)
    : existing && !existing.postgres.external
      ? { ...existing.postgres, passwords: withAllPasswords(existing.postgres.passwords) } // older stacks had none, or fewer
      : await privatePostgres(dataDir);
  if (existing) return { ...existing, temporal: { ...existing.temporal, cli }, postgres };

  const [port, uiPort] = await temporalPorts(dataDir);
  return {
    temporal: {
      address: `${LOCALHOST}:${port}`,
      uiUrl: `http://${LOCALHOST}:${uiPort}`,
      port,
      uiPort,
      pid: 0,
      cli,
      dbFile: join(dataDir, 'temporal.db'),
    },
    postgres,
    namespace: 'default',
    workers: [],
  };
}

async function temporalPorts(dataDir: string): Promise<[number, number]> {
  const isDefault = dataDir === resolve(defaultDataDir());
  if (isDefault && (await isPortFree(DEFAULT_TEMPORAL_PORT)) && (await isPortFree(DEFAULT_UI_PORT))) {
    return [DEFAULT_TEMPORAL_PORT, DEFAULT_UI_PORT];
  }
  const [port, uiPort] = await freePorts(2);
  return [port, uiPort];
}

async function privatePostgres(dataDir: string): Promise<StackFile['postgres']> {
  const [port] = await freePorts(1);
  const passwords = generatePasswords();
  return {
    databaseUrl: databaseUrlFor(port, 'app', passwords),
    ownerDatabaseUrl: databaseUrlFor(port, 'owner', passwords),
    port,
    clusterDir: clusterDirOf(dataDir),
    external: false,
    passwords,
  };
}

function externalPostgres(databaseUrl: string, ownerDatabaseUrl: string | undefined): StackFile['postgres'] {
  const url = parseDatabaseUrl('DATABASE_URL', databaseUrl);
  if (ownerDatabaseUrl) parseDatabaseUrl('DATABASE_OWNER_URL', ownerDatabaseUrl);
  return { databaseUrl, ownerDatabaseUrl: ownerDatabaseUrl ?? null, port: Number(url.port || 5432), clusterDir: '', external: true };
}

async function startLedgerDatabase(dataDir: string, log: (line: string) => void): Promise<StackUp['postgres']> {
  const { postgres } = requireStackFile(dataDir);
  if (postgres.external) return { external: true, alreadyRunning: true };
  if (!postgresPid(dataDir) && !(await isPortFree(postgres.port))) {
    throw new UserError(
      `port ${postgres.port} (PostgreSQL, recorded in ${stackFilePath(dataDir)}) is taken by another process.\n` +
        `Stop that process, or delete ${stackFilePath(dataDir)} so that \`dev up\` picks new ports.`,
    );
  }
  const passwords = withAllPasswords(postgres.passwords);
  const started = await startPostgres({ dataDir, port: postgres.port, passwords, log });
  updateStackFile(dataDir, (s) => {
    s.postgres.port = started.port;
    s.postgres.passwords = passwords;
    s.postgres.databaseUrl = databaseUrlFor(started.port, 'app', passwords);
    s.postgres.ownerDatabaseUrl = databaseUrlFor(started.port, 'owner', passwords);
  });
  return { external: false, pid: started.pid, alreadyRunning: started.alreadyRunning };
}

/** The stack's role passwords, generating those an older stack file lacks (the read-only role came later). */
function withAllPasswords(passwords: StackFile['postgres']['passwords']): RolePasswords {
  if (!passwords) return generatePasswords();
  return { ...passwords, readonly: passwords.readonly ?? generatePassword() };
}

function settledOrThrow<A, B>([a, b]: [PromiseSettledResult<A>, PromiseSettledResult<B>]): [A, B] {
  if (a.status === 'rejected') throw a.reason;
  if (b.status === 'rejected') throw b.reason;
  return [a.value, b.value];
}

async function answers(databaseUrl: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

function findTemporalCliOrNull(): string | null {
  try {
    return findTemporalCli()?.path ?? null;
  } catch {
    return null; // a bad CRONLEDGER_TEMPORAL_CLI is reported by `dev up`, not by a status query
  }
}
