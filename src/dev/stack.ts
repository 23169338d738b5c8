import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import pg from 'pg';
import {
  defaultDataDir,
  readStackFile,
  redactDatabaseUrl,
  stackFilePath,
  TEMPORAL_SERVICES,
  type StackFile,
  type TemporalMode,
} from '../config';
import { DEFAULT_TASK_QUEUE } from '../constants';
import { migrateDatabase } from '../db/migrate';
import { parseDatabaseUrl } from '../db/pool';
import { generatePassword, generatePasswords, type RolePasswords } from '../db/roles';
import { UserError } from '../errors';
import { freePorts, isPortFree, LOCALHOST, stablePorts } from './ports';
import {
  checkClusterReachable,
  clusterDirOf,
  databaseUrlFor,
  ensurePostgresBinDir,
  ensureTemporalDatabases,
  postgresLogOf,
  postgresPid,
  startPostgres,
  stopPostgres,
} from './postgres';
import { requireStackFile, updateStackFile, writeStackFile } from './stack-file';
import { findTemporalCli, resolveTemporalCli } from './temporal-cli';
import {
  clusterAllRunning,
  clusterAnyRunning,
  clusterLogOf,
  clusterPartRunning,
  planCluster,
  startTemporalCluster,
  stopTemporalCluster,
} from './temporal-cluster';
import { resolveTemporalServerBinaries, type TemporalServerBinaries } from './temporal-server-binaries';
import { startTemporal, stopTemporal, temporalLogOf, temporalRunning } from './temporal-server';
import { temporalTlsOf } from './temporal-tls';
import { startWorkers, stopWorkers, workerId, workerRunning, type WorkerState } from './workers';
import { adminRunning, startAdmin, stopAdmin } from './admin-process';

/**
 * The local stack behind `cronledger dev up|down|status` and the test suite: Temporal with its Web UI (the dev server
 * on SQLite, or with `--temporal server` the Temporal server's four services on PostgreSQL), a private PostgreSQL
 * cluster and N worker processes, all recorded in <dataDir>/stack.json.
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
  /** Which Temporal: `dev` (the dev server) or `server` (the Temporal server on PostgreSQL). Default: the mode the
   * stack file records, else `dev`. */
  temporal?: TemporalMode;
}

export interface StackUp {
  stack: StackFile;
  /** pid: the dev server, or in server mode the frontend; pids: every process of the server mode. */
  temporal: { mode: TemporalMode; pid: number; alreadyRunning: boolean; pids?: Record<string, number> };
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

  const mode = opts.temporal ?? readStackFile(dataDir)?.temporal.mode ?? 'dev';
  if (mode === 'server' && opts.externalDatabaseUrl) {
    throw new UserError(
      "`--temporal server` keeps Temporal in the stack's own PostgreSQL, and DATABASE_URL points elsewhere.\n" +
        'Unset DATABASE_URL (and DATABASE_OWNER_URL) for `dev up --temporal server`, or use the dev server (`--temporal dev`).',
    );
  }
  // Tools and checks first, one at a time: a first run may build the temporal CLI (or the server's binaries) or
  // apt-install PostgreSQL, each printing progress, and what can be known to fail fails before anything starts.
  const cli = mode === 'dev' ? (await resolveTemporalCli()).path : (findTemporalCliOrNull() ?? '');
  const binaries = mode === 'server' ? await resolveTemporalServerBinaries() : undefined;
  if (!opts.externalDatabaseUrl) {
    await ensurePostgresBinDir(log);
    checkClusterReachable(dataDir);
  }
  writeStackFile(dataDir, await planStack(dataDir, { mode, cli, binaries }, opts.externalDatabaseUrl, opts.externalOwnerDatabaseUrl));

  // Whatever the parts create (the Temporal SQLite file, logs) is for this user only; children inherit the umask.
  const umask = process.umask(0o077);
  try {
    const [temporal, postgres] =
      mode === 'dev'
        ? // Side by side, and both settled before anything is reported, so an error never races a half-started part.
          settledOrThrow(
            await Promise.allSettled([
              startTemporal(dataDir, { namespaces: opts.namespaces }).then((t) => ({ mode, ...t })),
              startLedgerDatabase(dataDir, log),
            ]),
          )
        : await startServerMode(dataDir, opts.namespaces, log);
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
      clusterAnyRunning(stack, dataDir) ||
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

/** Server mode: Temporal keeps its state in the stack's PostgreSQL, so that comes first. */
async function startServerMode(
  dataDir: string,
  namespaces: string[] | undefined,
  log: (line: string) => void,
): Promise<[StackUp['temporal'], StackUp['postgres']]> {
  const postgres = await startLedgerDatabase(dataDir, log);
  const stack = requireStackFile(dataDir);
  const passwords = withAllPasswords(stack.postgres.passwords);
  const temporalPassword = stack.postgres.passwords?.temporal;
  if (!temporalPassword) throw new Error("planStack gives a server-mode stack a password for Temporal's role");
  await ensureTemporalDatabases(stack.postgres.port, passwords, temporalPassword, Object.values(stack.temporal.server!.databases));
  const started = await startTemporalCluster(dataDir, { namespaces });
  const temporal = { mode: 'server' as const, pid: started.pids.frontend ?? 0, alreadyRunning: started.alreadyRunning, pids: started.pids };
  return [temporal, postgres];
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
  /** Server mode: the pids of the services and the Web UI server it stopped. */
  temporalServerPids: number[];
  postgresPid?: number;
  adminPid?: number;
}

/** Stops workers first (they finish in-flight tasks against a live server), then Temporal, then PostgreSQL. */
export async function stopStack(dataDir: string): Promise<StackDown> {
  dataDir = resolve(dataDir);
  if (!readStackFile(dataDir)) return { found: false, workers: [], temporalServerPids: [] };
  const adminPid = await stopAdmin(dataDir);
  const workers = await stopWorkers(dataDir);
  // Both modes: a stack switched from one to the other may still run the first (dev up refuses that, but be sure).
  const temporalPid = await stopTemporal(dataDir);
  const temporalServerPids = await stopTemporalCluster(dataDir);
  // Also when DATABASE_URL made this stack external: a private cluster from an earlier `dev up` may still run.
  const pgPid = postgresPid(dataDir);
  const postgresStopped = await stopPostgres(dataDir);
  return { found: true, workers, temporalPid, temporalServerPids, postgresPid: postgresStopped ? pgPid : undefined, adminPid };
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
  /** mode: `dev` or `server`; in server mode pid is the frontend's, dbFile null, and services lists every process. */
  temporal: {
    mode: TemporalMode;
    running: boolean;
    pid: number | null;
    port: number | null;
    uiPort: number | null;
    dbFile: string | null;
    log: string;
    /** metricsUrl: a Temporal service's own Prometheus metrics (null for the Web UI, and where stack.json records no port). */
    services: { name: string; running: boolean; pid: number | null; log: string; metricsUrl: string | null }[];
  };
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
      temporal: {
        mode: 'dev',
        running: false,
        pid: null,
        port: null,
        uiPort: null,
        dbFile: null,
        log: temporalLogOf(dataDir),
        services: [],
      },
      postgres: { running: false, external: false, pid: null, port: null, clusterDir: null, log: null },
      workers: [],
      admin: { running: false, pid: null, log: null },
    };
  }
  const t = stack.temporal;
  const p = stack.postgres;
  const mode = t.mode ?? 'dev';
  const tRunning = mode === 'dev' ? temporalRunning(stack) : clusterAllRunning(stack, dataDir);
  const services = (mode === 'server' ? ([...TEMPORAL_SERVICES, 'ui'] as const) : []).map((name) => {
    const running = clusterPartRunning(stack, dataDir, name);
    const metricsPort = name === 'ui' ? undefined : t.server!.ports[name].metrics;
    const metricsUrl = metricsPort ? `http://${LOCALHOST}:${metricsPort}/metrics` : null;
    return { name, running, pid: running ? t.server!.processes[name]!.pid : null, log: clusterLogOf(dataDir, name), metricsUrl };
  });
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
      mode,
      running: tRunning,
      pid: mode === 'dev' ? (tRunning ? t.pid : null) : (services.find((s) => s.name === 'frontend')?.pid ?? null),
      port: t.port,
      uiPort: t.uiPort,
      dbFile: mode === 'dev' ? t.dbFile : null,
      log: mode === 'dev' ? temporalLogOf(dataDir) : clusterLogOf(dataDir, 'frontend'),
      services,
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
  temporal: { mode: TemporalMode; cli: string; binaries?: TemporalServerBinaries },
  externalDatabaseUrl: string | undefined,
  externalOwnerUrl: string | undefined,
): Promise<StackFile> {
  const { mode, cli, binaries } = temporal;
  const existing = readStackFile(dataDir);
  const postgres: StackFile['postgres'] = externalDatabaseUrl
    ? externalPostgres(externalDatabaseUrl, externalOwnerUrl)
    : existing && !existing.postgres.external
      ? { ...existing.postgres, passwords: withAllPasswords(existing.postgres.passwords) } // older stacks had none, or fewer
      : await privatePostgres(dataDir);
  if (mode === 'server' && postgres.passwords && !postgres.passwords.temporal) {
    postgres.passwords = { ...postgres.passwords, temporal: generatePassword() };
  }
  if (existing) {
    checkModeSwitch(dataDir, existing, mode);
    // Each mode keeps its own state (the SQLite file, the PostgreSQL databases), so switching back finds it again.
    const server = binaries
      ? { ...(existing.temporal.server ?? (await planCluster(binaries, existing.temporal.port))), binaries }
      : existing.temporal.server;
    const tls = mode === 'server' ? temporalTlsOf(dataDir) : undefined;
    return { ...existing, temporal: { ...existing.temporal, mode, cli, server, tls }, postgres };
  }

  const [port, uiPort] = await temporalPorts(dataDir);
  return {
    temporal: {
      mode,
      address: `${LOCALHOST}:${port}`,
      uiUrl: `http://${LOCALHOST}:${uiPort}`,
      port,
      uiPort,
      pid: 0,
      cli,
      dbFile: join(dataDir, 'temporal.db'),
      server: binaries ? await planCluster(binaries, port) : undefined,
      tls: mode === 'server' ? temporalTlsOf(dataDir) : undefined,
    },
    postgres,
    namespace: 'default',
    workers: [],
  };
}

/** The two modes share ports: switching needs the running one stopped first. */
function checkModeSwitch(dataDir: string, existing: StackFile, mode: TemporalMode): void {
  const current = existing.temporal.mode ?? 'dev';
  if (current === mode) return;
  if (temporalRunning(existing) || clusterAnyRunning(existing, dataDir)) {
    throw new UserError(
      `this stack runs Temporal as \`--temporal ${current}\`, and \`--temporal ${mode}\` was asked for.\n` +
        `Stop it first with \`cronledger dev down\`, then \`cronledger dev up --temporal ${mode}\` (each mode keeps its own data).`,
    );
  }
}

async function temporalPorts(dataDir: string): Promise<[number, number]> {
  const isDefault = dataDir === resolve(defaultDataDir());
  if (isDefault && (await isPortFree(DEFAULT_TEMPORAL_PORT)) && (await isPortFree(DEFAULT_UI_PORT))) {
    return [DEFAULT_TEMPORAL_PORT, DEFAULT_UI_PORT];
  }
  // recorded in the stack file and used again at the next `dev up`
  const [port, uiPort] = await stablePorts(2);
  return [port, uiPort];
}

async function privatePostgres(dataDir: string): Promise<StackFile['postgres']> {
  const [port] = await freePorts(1);
  const passwords = generatePasswords();
  return {
    databaseUrl: databaseUrlFor(port, 'worker', passwords),
    operatorDatabaseUrl: databaseUrlFor(port, 'operator', passwords),
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
    s.postgres.databaseUrl = databaseUrlFor(started.port, 'worker', passwords);
    s.postgres.operatorDatabaseUrl = databaseUrlFor(started.port, 'operator', passwords);
    s.postgres.ownerDatabaseUrl = databaseUrlFor(started.port, 'owner', passwords);
  });
  return { external: false, pid: started.pid, alreadyRunning: started.alreadyRunning };
}

/** The stack's role passwords, generating those an older stack file lacks (roles added later: read-only, worker, operator). */
function withAllPasswords(passwords: StackFile['postgres']['passwords']): RolePasswords & { temporal?: string } {
  if (!passwords) return generatePasswords();
  const { superuser, owner, temporal } = passwords;
  return {
    superuser,
    owner,
    worker: passwords.worker ?? generatePassword(),
    operator: passwords.operator ?? generatePassword(),
    readonly: passwords.readonly ?? generatePassword(),
    ...(temporal === undefined ? {} : { temporal }),
  };
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
