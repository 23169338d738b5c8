import { Connection, isGrpcServiceError } from '@temporalio/client';
import Long from 'long';
import pg from 'pg';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  repoRoot,
  stackFilePath,
  TEMPORAL_SERVICES,
  type RecordedProcess,
  type StackFile,
  type TemporalClusterState,
  type TemporalService,
  type TemporalTls,
} from '../config';
import { SEARCH_ATTRIBUTES } from '../constants';
import { UserError } from '../errors';
import { isPortFree, LOCALHOST, stablePorts } from './ports';
import { TEMPORAL_ROLE } from './postgres';
import { isOurProcess, logTail, processStartTime, sleep, spawnDetached, stopProcess } from './processes';
import { requireStackFile, updateStackFile } from './stack-file';
import type { TemporalServerBinaries } from './temporal-server-binaries';
import { childEnvironment } from './child-env';
import { ensureTemporalCertificates, stackConnectionOptions } from './temporal-tls';

/**
 * `dev up --temporal server`: the Temporal server with PostgreSQL persistence and visibility, shaped like a production
 * cluster. Its four services (frontend, history, matching, worker) run as four processes from one config,
 * deploy/temporal/cronledger.yaml (docker-compose.yml mounts the same file), in databases of the stack's own
 * PostgreSQL that belong to a role of their own. The Web UI server is a fifth process, pointed at the frontend.
 * Stopping and starting again keeps every schedule and run: they live in PostgreSQL.
 */

export const TEMPORAL_CONFIG_DIR = join(repoRoot(), 'deploy', 'temporal');
/** The server reads <config dir>/<env>.yaml: `--env cronledger` selects cronledger.yaml. */
export const TEMPORAL_CONFIG_ENV = 'cronledger';
export const TEMPORAL_DATABASES = { temporal: 'temporal', visibility: 'temporal_visibility' } as const;
/** The schemas embedded in temporal-sql-tool, so no schema directory has to be found on disk. */
const SCHEMA_NAMES = { temporal: 'postgresql/v12/temporal', visibility: 'postgresql/v12/visibility' } as const;
const READY_TIMEOUT_MS = 120_000;
const RETENTION_SECONDS = 7 * 24 * 3600;
/** temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD. */
const INDEXED_VALUE_TYPE_KEYWORD = 2;
const GRPC_NOT_FOUND = 5;
const GRPC_ALREADY_EXISTS = 6;
/** Where the worker service runs each namespace's schedules (go.temporal.io/server common/primitives). */
const PER_NAMESPACE_WORKER_TASK_QUEUE = 'temporal-sys-per-ns-tq';

type ClusterPart = TemporalService | 'ui';
const serverRootOf = (dataDir: string): string => join(dataDir, 'temporal-server');
const uiRootOf = (dataDir: string): string => join(dataDir, 'temporal-ui');
export const clusterLogOf = (dataDir: string, part: ClusterPart): string => join(dataDir, 'logs', `temporal-${part}.log`);

/** Fresh ports for the services besides the frontend's gRPC port and the UI's (the stack's temporal.port and uiPort). */
export async function planCluster(binaries: TemporalServerBinaries, frontendPort: number): Promise<TemporalClusterState> {
  // Below 32768 (stablePorts): a restart finds them free, and the cluster_membership table keeps membership ports in a
  // smallint (above 32767 a service dies at start).
  const free = await stablePorts(12);
  const next = (): number => free.pop()!;
  const service = (grpc: number) => ({ grpc, membership: next(), metrics: next() });
  return {
    binaries,
    ports: {
      frontend: service(frontendPort),
      history: service(next()),
      matching: service(next()),
      worker: service(next()),
      frontendHttp: next(),
    },
    databases: { ...TEMPORAL_DATABASES },
    processes: {},
  };
}

/**
 * The variables deploy/temporal/cronledger.yaml reads, for this stack. The four services get the same ones, so they
 * run from the same rendered config; docker-compose.yml sets the same names (test/unit/docker-compose.test.ts).
 */
export function temporalServerEnvironment(stack: StackFile, dataDir: string): Record<string, string> {
  const c = requireCluster(stack);
  const password = stack.postgres.passwords?.temporal;
  if (!password) throw new UserError(`the stack in ${stackFilePath(dataDir)} has no password for Temporal's database role; run \`dev up\``);
  return {
    POSTGRES_SEEDS: LOCALHOST,
    DB_PORT: String(stack.postgres.port),
    POSTGRES_USER: TEMPORAL_ROLE,
    POSTGRES_PWD: password,
    TEMPORAL_DB: c.databases.temporal,
    TEMPORAL_VISIBILITY_DB: c.databases.visibility,
    BIND_ON_IP: LOCALHOST,
    FRONTEND_GRPC_PORT: String(stack.temporal.port),
    FRONTEND_HTTP_PORT: String(c.ports.frontendHttp),
    FRONTEND_MEMBERSHIP_PORT: String(c.ports.frontend.membership),
    HISTORY_GRPC_PORT: String(c.ports.history.grpc),
    HISTORY_MEMBERSHIP_PORT: String(c.ports.history.membership),
    MATCHING_GRPC_PORT: String(c.ports.matching.grpc),
    MATCHING_MEMBERSHIP_PORT: String(c.ports.matching.membership),
    WORKER_GRPC_PORT: String(c.ports.worker.grpc),
    WORKER_MEMBERSHIP_PORT: String(c.ports.worker.membership),
    DYNAMIC_CONFIG_FILE_PATH: join(serverRootOf(dataDir), 'config', 'dynamicconfig.yaml'),
    TLS_CERTS_DIR: requireTls(stack).dir,
  };
}

function requireTls(stack: StackFile): TemporalTls {
  if (!stack.temporal.tls)
    throw new UserError('this stack has no Temporal TLS certificates recorded; run `cronledger dev up --temporal server`');
  return stack.temporal.tls;
}

/** The command line of one service: global flags, then `start --service <name>`. */
export function temporalServiceArgs(configRoot: string, service: TemporalService): string[] {
  return ['--root', configRoot, '--config', 'config', '--env', TEMPORAL_CONFIG_ENV, '--allow-no-auth', 'start', '--service', service];
}

function requireCluster(stack: StackFile): TemporalClusterState {
  if (!stack.temporal.server) throw new UserError('this stack runs the Temporal dev server, not `--temporal server`');
  return stack.temporal.server;
}

const partMarkers = (dataDir: string, part: ClusterPart): string[] =>
  part === 'ui' ? [uiRootOf(dataDir), 'start'] : [serverRootOf(dataDir), `--service ${part}`];

export function clusterPartRunning(stack: StackFile, dataDir: string, part: ClusterPart): boolean {
  const p = stack.temporal.server?.processes[part];
  return Boolean(p && isOurProcess(p.pid, partMarkers(dataDir, part), p.startTime));
}

/** Whether any process of the cluster runs (one is enough for `dev down` to have work). */
export function clusterAnyRunning(stack: StackFile, dataDir: string): boolean {
  return ([...TEMPORAL_SERVICES, 'ui'] as const).some((part) => clusterPartRunning(stack, dataDir, part));
}

export function clusterAllRunning(stack: StackFile, dataDir: string): boolean {
  return ([...TEMPORAL_SERVICES, 'ui'] as const).every((part) => clusterPartRunning(stack, dataDir, part));
}

/**
 * Starts what is not running of the cluster recorded in stack.json (PostgreSQL must run already): schema, services,
 * namespaces with their search attributes, Web UI. Returns the pids by part.
 */
export async function startTemporalCluster(
  dataDir: string,
  opts: { namespaces?: string[] } = {},
): Promise<{ pids: Partial<Record<ClusterPart, number>>; alreadyRunning: boolean }> {
  const stack = requireStackFile(dataDir);
  const cluster = requireCluster(stack);
  const namespaces = [...new Set(['default', stack.namespace, ...(opts.namespaces ?? [])])];
  const alreadyRunning = clusterAllRunning(stack, dataDir);
  if (!alreadyRunning) {
    await ensureTemporalCertificates(requireTls(stack));
    const env = childEnvironment([], temporalServerEnvironment(stack, dataDir));
    await setUpSchemas(stack, cluster, env.POSTGRES_PWD ?? '');
    writeConfigFiles(dataDir, stack);
    const missing = TEMPORAL_SERVICES.filter((s) => !clusterPartRunning(stack, dataDir, s));
    await checkPortsFree(dataDir, stack, missing);
    await forgetStoppedMembers(stack, cluster, env.POSTGRES_PWD ?? '', missing);
    const spawnService = async (service: TemporalService) => {
      const pid = await spawnDetached(cluster.binaries.server, temporalServiceArgs(serverRootOf(dataDir), service), {
        cwd: serverRootOf(dataDir),
        // each service its own metrics port (the config's default, 8000, is one container's); 0: any free port
        env: { ...env, TEMPORAL_METRICS_PORT: String(cluster.ports[service].metrics ?? 0) },
        logFile: clusterLogOf(dataDir, service),
        banner: `temporal server ${service} (frontend 127.0.0.1:${stack.temporal.port}), db ${cluster.databases.temporal}`,
      });
      recordProcess(dataDir, service, pid);
    };
    try {
      // The frontend alone first: every service writes the cluster's metadata record when it starts, and on a fresh
      // database two doing it at once make one exit ("SaveClusterMetadata encountered version mismatch").
      if (missing.includes('frontend')) {
        await spawnService('frontend');
        await (await waitForFrontend(dataDir, ['frontend'])).close();
      }
      for (const service of missing.filter((s) => s !== 'frontend')) await spawnService(service);
    } catch (err) {
      await stopTemporalCluster(dataDir);
      throw err;
    }
  }
  try {
    const connection = await waitForFrontend(dataDir, TEMPORAL_SERVICES);
    try {
      await registerNamespaces(connection, namespaces);
    } finally {
      await connection.close();
    }
    if (!clusterPartRunning(requireStackFile(dataDir), dataDir, 'ui')) await startUi(dataDir);
    await waitForUi(dataDir);
  } catch (err) {
    if (!alreadyRunning) await stopTemporalCluster(dataDir); // a cluster that never became ready is of no use to anyone
    throw err;
  }
  const processes = requireStackFile(dataDir).temporal.server!.processes;
  const pids = Object.fromEntries(Object.entries(processes).map(([part, p]) => [part, p.pid]));
  return { pids, alreadyRunning };
}

/** Stops the Web UI, then the services (frontend first, so no new work arrives). Returns the pids it stopped. */
export async function stopTemporalCluster(dataDir: string): Promise<number[]> {
  const stack = requireStackFile(dataDir);
  const stopped: number[] = [];
  for (const part of ['ui', 'frontend', 'worker', 'matching', 'history'] as const) {
    const p = stack.temporal.server?.processes[part];
    if (p && clusterPartRunning(stack, dataDir, part)) {
      await stopProcess(p.pid, 20_000);
      stopped.push(p.pid);
    }
  }
  if (stack.temporal.server) updateStackFile(dataDir, (s) => (s.temporal.server!.processes = {}));
  return stopped;
}

function recordProcess(dataDir: string, part: ClusterPart, pid: number): void {
  const p: RecordedProcess = { pid, startTime: processStartTime(pid) };
  updateStackFile(dataDir, (s) => (s.temporal.server!.processes[part] = p));
}

/** The committed config and dynamic config, copied at every start, so edits in the checkout apply on the next one. */
function writeConfigFiles(dataDir: string, stack: StackFile): void {
  const configDir = join(serverRootOf(dataDir), 'config');
  mkdirSync(configDir, { recursive: true, mode: 0o700 });
  copyFileSync(join(TEMPORAL_CONFIG_DIR, `${TEMPORAL_CONFIG_ENV}.yaml`), join(configDir, `${TEMPORAL_CONFIG_ENV}.yaml`));
  copyFileSync(join(TEMPORAL_CONFIG_DIR, 'dynamicconfig.yaml'), join(configDir, 'dynamicconfig.yaml'));
  const uiConfigDir = join(uiRootOf(dataDir), 'config');
  mkdirSync(uiConfigDir, { recursive: true, mode: 0o700 });
  // The Web UI server's own config (no secrets): the frontend to talk to, and where to listen.
  const ui = [
    `temporalGrpcAddress: ${stack.temporal.address}`,
    `host: ${LOCALHOST}`,
    `port: ${stack.temporal.uiPort}`,
    'enableUi: true',
    'hideLogs: true',
    `defaultNamespace: ${stack.namespace}`,
    // The frontend requires a client certificate; the UI server shows the stack's and checks the frontend's name.
    'tls:',
    `  caFile: ${join(requireTls(stack).dir, 'ca.crt')}`,
    `  certFile: ${join(requireTls(stack).dir, 'client.crt')}`,
    `  keyFile: ${join(requireTls(stack).dir, 'client.key')}`,
    `  serverName: ${requireTls(stack).serverName}`,
    '  enableHostVerification: true',
    'cors:',
    '  cookieInsecure: true # plain http on loopback, as the dev server',
    '  allowOrigins:',
    `    - ${stack.temporal.uiUrl}`,
    '',
  ];
  writeFileSync(join(uiConfigDir, `${TEMPORAL_CONFIG_ENV}.yaml`), ui.join('\n'), { mode: 0o600 });
}

async function checkPortsFree(dataDir: string, stack: StackFile, services: TemporalService[]): Promise<void> {
  const c = requireCluster(stack);
  const ports: [string, number][] = services.flatMap((s): [string, number][] => [
    [`${s} gRPC`, s === 'frontend' ? stack.temporal.port : c.ports[s].grpc],
    [`${s} membership`, c.ports[s].membership],
    ...(c.ports[s].metrics ? [[`${s} metrics`, c.ports[s].metrics] as [string, number]] : []),
    ...(s === 'frontend' ? [['frontend HTTP', c.ports.frontendHttp] as [string, number]] : []),
  ]);
  if (!clusterPartRunning(stack, dataDir, 'ui')) ports.push(['Web UI', stack.temporal.uiPort]);
  for (const [what, port] of ports) {
    if (!(await isPortFree(port))) {
      throw new UserError(
        `port ${port} (Temporal ${what}, recorded in ${stackFilePath(dataDir)}) is taken by another process.\n` +
          `Stop that process, or delete ${stackFilePath(dataDir)} so that \`dev up\` picks new ports.`,
      );
    }
  }
}

const execFileAsync = promisify(execFile);

/**
 * temporal-sql-tool: the versioning tables (setup-schema -v 0.0, which leaves an existing schema alone), then every
 * schema version up to the one this server needs (update-schema, a no-op when current). Safe on every start.
 */
async function setUpSchemas(stack: StackFile, cluster: TemporalClusterState, password: string): Promise<void> {
  for (const which of ['temporal', 'visibility'] as const) {
    const base = ['--plugin', 'postgres12', '--ep', LOCALHOST, '-p', String(stack.postgres.port), '-u', TEMPORAL_ROLE];
    const db = ['--db', cluster.databases[which]];
    for (const step of [
      ['setup-schema', '-v', '0.0'],
      ['update-schema', '--schema-name', SCHEMA_NAMES[which]],
    ]) {
      try {
        // The password reaches the tool through its environment, never its command line (visible in ps).
        await execFileAsync(cluster.binaries.sqlTool, [...base, ...db, ...step], {
          env: childEnvironment([], { SQL_PASSWORD: password }),
          maxBuffer: 16 * 1024 * 1024,
        });
      } catch (err) {
        const e = err as { stderr?: string; stdout?: string; message: string };
        throw new UserError(
          `temporal-sql-tool ${step[0]} failed for database ${cluster.databases[which]}:\n` +
            `${(e.stderr || e.stdout || e.message).trim().split('\n').slice(-15).join('\n')}`,
        );
      }
    }
  }
}

/**
 * Deletes the membership records (cluster_membership) of these services, which are not running: each service's
 * process heartbeats its record, and a starting service takes every record heartbeated within the last 20 s as a peer
 * to join (ringpop's bootstrap, go.temporal.io/server common/membership/ringpop). The frontend, started alone, then
 * cannot join its stopped peers and stays "not healthy" past our 120 s wait: a start within 20 s of a stop failed
 * that way every time (stop, then start at once or 12 s later), while 25 s later it took 3 s. These records name our
 * own ports on this machine, and their processes are gone, so none of them is a live peer.
 */
async function forgetStoppedMembers(
  stack: StackFile,
  cluster: TemporalClusterState,
  password: string,
  stopped: readonly TemporalService[],
): Promise<void> {
  const client = new pg.Client({
    host: LOCALHOST,
    port: stack.postgres.port,
    user: TEMPORAL_ROLE,
    password,
    database: cluster.databases.temporal,
  });
  await client.connect();
  try {
    const ports = stopped.map((s) => cluster.ports[s].membership);
    await client.query('delete from cluster_membership where rpc_address = $1 and rpc_port = any($2::int[])', [LOCALHOST, ports]);
  } finally {
    await client.end();
  }
}

/** Polls until the frontend answers, failing early with the end of a log if one of these services exits. */
async function waitForFrontend(dataDir: string, services: readonly TemporalService[]): Promise<Connection> {
  const stack = requireStackFile(dataDir);
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let lastError: string;
  for (;;) {
    checkServicesAlive(dataDir, services);
    try {
      const connection = await Connection.connect({ ...stackConnectionOptions(stack), connectTimeout: '2s' });
      try {
        await connection.withDeadline(Date.now() + 5_000, () => connection.workflowService.getSystemInfo({}));
        return connection;
      } catch (err) {
        await connection.close();
        throw err;
      }
    } catch (err) {
      lastError = err instanceof Error ? err.message : String(err);
    }
    if (Date.now() > deadline) {
      throw new UserError(
        `the Temporal frontend at ${stack.temporal.address} did not answer within ${READY_TIMEOUT_MS / 1000}s (${lastError}). ` +
          `From ${clusterLogOf(dataDir, 'frontend')}:\n${logTail(clusterLogOf(dataDir, 'frontend'))}`,
      );
    }
    await sleep(500);
  }
}

function checkServicesAlive(dataDir: string, services: readonly TemporalService[]): void {
  const stack = requireStackFile(dataDir);
  for (const service of services) {
    if (!clusterPartRunning(stack, dataDir, service)) {
      const log = clusterLogOf(dataDir, service);
      throw new UserError(`the Temporal ${service} service exited while starting. From ${log}:\n${logTail(log)}`);
    }
  }
}

/**
 * Each namespace (created if missing) with cronledger's search attributes (Keyword), waiting until it is usable
 * end to end: a visibility query with the attributes succeeds (a new namespace reaches the services' caches only after
 * a refresh), history answers, and the worker service polls it (else schedules would not fire yet). The frontend
 * answers before the other services have joined its membership ring; this is what `dev up` waits for.
 */
async function registerNamespaces(connection: Connection, namespaces: string[]): Promise<void> {
  const names = Object.values(SEARCH_ATTRIBUTES);
  const query = names.map((n) => `${n} = 'ready'`).join(' and ');
  // Each step is retried: a frontend that just started may answer before history and matching have joined it.
  const ensure = async (namespace: string) => {
    try {
      await connection.workflowService.registerNamespace({
        namespace,
        workflowExecutionRetentionPeriod: { seconds: Long.fromNumber(RETENTION_SECONDS) },
      });
    } catch (err) {
      if (!(isGrpcServiceError(err) && err.code === GRPC_ALREADY_EXISTS)) throw err;
    }
    const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
    const missing = names.filter((n) => !(n in (customAttributes ?? {})));
    if (missing.length > 0) {
      await connection.operatorService.addSearchAttributes({
        namespace,
        searchAttributes: Object.fromEntries(missing.map((n) => [n, INDEXED_VALUE_TYPE_KEYWORD])),
      });
    }
    await connection.workflowService.countWorkflowExecutions({ namespace, query });
    // History answers (a workflow that does not exist is NOT_FOUND, not "not enough hosts")...
    try {
      await connection.workflowService.describeWorkflowExecution({ namespace, execution: { workflowId: 'cronledger-readiness-probe' } });
    } catch (err) {
      if (!(isGrpcServiceError(err) && err.code === GRPC_NOT_FOUND)) throw err;
    }
    // ...and the worker service polls the namespace's system task queue through matching: schedules run there.
    const { pollers } = await connection.workflowService.describeTaskQueue({
      namespace,
      taskQueue: { name: PER_NAMESPACE_WORKER_TASK_QUEUE },
    });
    if (!pollers?.length) throw new Error(`no scheduler worker polls ${PER_NAMESPACE_WORKER_TASK_QUEUE} yet`);
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let pending = [...namespaces];
  let lastError = '';
  for (;;) {
    const still: string[] = [];
    for (const namespace of pending) {
      try {
        await ensure(namespace);
      } catch (err) {
        lastError = `${namespace}: ${err instanceof Error ? err.message : String(err)}`;
        still.push(namespace);
      }
    }
    pending = still;
    if (pending.length === 0) return;
    if (Date.now() > deadline) {
      throw new UserError(
        `the Temporal namespaces ${pending.join(', ')} did not become usable within ${READY_TIMEOUT_MS / 1000}s (${lastError})`,
      );
    }
    await sleep(1_000);
  }
}

async function startUi(dataDir: string): Promise<void> {
  const stack = requireStackFile(dataDir);
  const args = ['--root', uiRootOf(dataDir), '--config', 'config', '--env', TEMPORAL_CONFIG_ENV, 'start'];
  const pid = await spawnDetached(stack.temporal.server!.binaries.ui, args, {
    cwd: uiRootOf(dataDir),
    env: childEnvironment([]),
    logFile: clusterLogOf(dataDir, 'ui'),
    banner: `temporal ui-server on ${stack.temporal.uiUrl}, frontend ${stack.temporal.address}`,
  });
  recordProcess(dataDir, 'ui', pid);
}

async function waitForUi(dataDir: string): Promise<void> {
  const stack = requireStackFile(dataDir);
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let lastError: string;
  for (;;) {
    if (!clusterPartRunning(requireStackFile(dataDir), dataDir, 'ui')) {
      const log = clusterLogOf(dataDir, 'ui');
      throw new UserError(`the Temporal Web UI server exited while starting. From ${log}:\n${logTail(log)}`);
    }
    try {
      const res = await fetch(stack.temporal.uiUrl, { signal: AbortSignal.timeout(2_000) });
      if (res.ok) return;
      lastError = `HTTP ${res.status}`;
    } catch (err) {
      lastError = err instanceof Error ? err.message : String(err);
    }
    if (Date.now() > deadline) throw new UserError(`the Temporal Web UI at ${stack.temporal.uiUrl} did not answer (${lastError})`);
    await sleep(200);
  }
}
