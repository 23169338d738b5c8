import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  appendFileSync,
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, parse } from 'node:path';
import pg from 'pg';
import { adoptByOwner, ensureRoles, OPERATOR_ROLE, OWNER_ROLE, READONLY_ROLE, WORKER_ROLE, type RolePasswords } from '../db/roles';
import { UserError } from '../errors';
import { childEnvironment } from './child-env';
import { LOCALHOST } from './ports';
import { isOurProcess, logTail } from './processes';
import { findOnPath } from './temporal-cli';

/**
 * A private PostgreSQL cluster for the dev stack and the tests, from Debian's `postgresql` package: its own
 * directory (0700), its own port on 127.0.0.1, no system service touched. Every connection, even a local one,
 * authenticates with a SCRAM password: other users of this machine get neither a superuser (which could run
 * programs through COPY ... TO PROGRAM) nor the ledger. The passwords are generated and kept in the 0600 stack file.
 */

export const LEDGER_DATABASE = 'cronledger';
const DEBIAN_PG_ROOT = '/usr/lib/postgresql';
const SUPERUSER = 'postgres';

export const clusterDirOf = (dataDir: string): string => join(dataDir, 'postgres');
export const postgresLogOf = (dataDir: string): string => join(dataDir, 'logs', 'postgres.log');

export type ClusterRole = 'superuser' | 'owner' | 'worker' | 'operator' | 'readonly';
const ROLE_NAMES: Record<ClusterRole, string> = {
  superuser: SUPERUSER,
  owner: OWNER_ROLE,
  worker: WORKER_ROLE,
  operator: OPERATOR_ROLE,
  readonly: READONLY_ROLE,
};

/** A URL for one of the cluster's roles, password included (keep it out of output: redactDatabaseUrl). */
export function databaseUrlFor(
  port: number,
  role: ClusterRole,
  passwords: Pick<RolePasswords, 'superuser' | 'owner'> & Partial<RolePasswords>,
  database = LEDGER_DATABASE,
): string {
  const password = passwords[role];
  // Stack files written before a role existed get its password at the next `dev up`.
  if (password === undefined) throw new UserError(`the stack has no password for ${ROLE_NAMES[role]} yet; run \`cronledger dev up\` once`);
  return `postgres://${ROLE_NAMES[role]}:${password}@${LOCALHOST}:${port}/${database}`;
}

/** Only password logins, and only from this machine. */
const PG_HBA = `# written by cronledger at every start: SCRAM passwords for every connection, local or 127.0.0.1
local all all scram-sha-256
host  all all 127.0.0.1/32 scram-sha-256
`;

/** Debian installs each major version side by side under /usr/lib/postgresql/<major>/bin; take the newest. */
export function findPostgresBinDir(): string | undefined {
  const majors = existsSync(DEBIAN_PG_ROOT)
    ? readdirSync(DEBIAN_PG_ROOT)
        .filter((v) => /^\d+$/.test(v) && existsSync(join(DEBIAN_PG_ROOT, v, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (majors.length > 0) return join(DEBIAN_PG_ROOT, majors[0], 'bin');
  const initdb = findOnPath('initdb'); // other systems (Homebrew, Fedora) put them on PATH
  return initdb && existsSync(join(dirname(initdb), 'pg_ctl')) ? dirname(initdb) : undefined;
}

/** The server binaries, installing Debian's `postgresql` package when we are root and may. */
export async function ensurePostgresBinDir(log: (line: string) => void): Promise<string> {
  const found = findPostgresBinDir();
  if (found) return found;
  const aptGet = findOnPath('apt-get');
  if (!isRoot() || !aptGet) {
    throw new UserError(
      `PostgreSQL server binaries (initdb, pg_ctl) were not found in ${DEBIAN_PG_ROOT}/*/bin or on PATH.\n` +
        (aptGet ? 'Install them with `sudo apt-get install -y postgresql`' : 'Install the PostgreSQL server package') +
        ', or set DATABASE_URL to a PostgreSQL you already run.',
    );
  }
  log('PostgreSQL not found: installing the Debian package `postgresql` (apt-get)...');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update'], ['install', '-y', '--no-install-recommends', 'postgresql']]) {
    const { code, output } = await run(aptGet, args, { env, echo: true });
    if (code !== 0)
      throw new UserError(`apt-get ${args.join(' ')} failed (exit ${code}):\n${tail(output)}\nFix apt and retry, or set DATABASE_URL.`);
  }
  const installed = findPostgresBinDir();
  if (!installed) throw new UserError(`apt-get installed postgresql but no initdb appeared under ${DEBIAN_PG_ROOT}/*/bin`);
  return installed;
}

/** The running postmaster of the cluster in dataDir, from its postmaster.pid (pid on line 1, port on line 4). */
function runningPostmaster(dataDir: string): { pid: number; port: number } | undefined {
  try {
    const lines = readFileSync(join(clusterDirOf(dataDir), 'postmaster.pid'), 'utf8').split('\n');
    const pid = Number(lines[0]);
    // The cluster dir on its command line ties the pid to this stack, even after the pid was reused.
    return isOurProcess(pid, ['postgres', clusterDirOf(dataDir)]) ? { pid, port: Number(lines[3]) } : undefined;
  } catch {
    return undefined;
  }
}

export const postgresPid = (dataDir: string): number | undefined => runningPostmaster(dataDir)?.pid;

export interface StartedPostgres {
  databaseUrl: string;
  port: number;
  pid: number;
  alreadyRunning: boolean;
}

/**
 * Creates (first time) and starts the cluster in <dataDir>/postgres on port, and makes sure the roles and database
 * `cronledger` (owned by the owner role) exist, with these passwords.
 */
export async function startPostgres(opts: {
  dataDir: string;
  port: number;
  passwords: RolePasswords;
  log: (line: string) => void;
}): Promise<StartedPostgres> {
  const { dataDir, port, passwords, log } = opts;
  const clusterDir = clusterDirOf(dataDir);
  const running = runningPostmaster(dataDir);
  if (running) {
    // Its own port wins over the one asked for: it may have been started before stack.json was lost.
    await ensureDatabase(running.port, passwords, clusterDir);
    return { databaseUrl: databaseUrlFor(running.port, 'worker', passwords), port: running.port, pid: running.pid, alreadyRunning: true };
  }
  const binDir = await ensurePostgresBinDir(log);
  const owner = checkClusterReachable(dataDir);
  const logFile = postgresLogOf(dataDir);
  mkdirSync(dirname(logFile), { recursive: true, mode: 0o700 });
  appendFileSync(logFile, '', { mode: 0o600 });
  chmodSync(logFile, 0o600);
  if (owner) {
    chownSync(logFile, owner.uid, owner.gid); // pg_ctl opens the log as the postgres user,
    chmodSync(dirname(logFile), 0o701); // which may enter (not list) the logs dir
  }

  if (!existsSync(join(clusterDir, 'PG_VERSION'))) {
    log(`creating the PostgreSQL cluster in ${clusterDir}`);
    rmSync(clusterDir, { recursive: true, force: true }); // what a killed initdb left behind is worth nothing
    mkdirSync(clusterDir, { recursive: true, mode: 0o700 });
    if (owner) chownSync(clusterDir, owner.uid, owner.gid);
    // The superuser's password reaches initdb through a 0600 file of the cluster's account, never argv; created
    // exclusively under a random name, so nothing planted there is followed or reused.
    const pwfile = join(dataDir, `.initdb-password-${randomBytes(8).toString('hex')}`);
    writeFileSync(pwfile, `${passwords.superuser}\n`, { mode: 0o600, flag: 'wx' });
    if (owner) chownSync(pwfile, owner.uid, owner.gid);
    const initdbArgs = [
      '-D',
      clusterDir,
      '-U',
      SUPERUSER,
      '-A',
      'scram-sha-256',
      `--pwfile=${pwfile}`,
      '-E',
      'UTF8',
      '--locale=C',
      '--no-sync',
    ];
    const init = await run(join(binDir, 'initdb'), initdbArgs, { cwd: clusterDir, as: owner }).finally(() =>
      rmSync(pwfile, { force: true }),
    );
    if (init.code !== 0) throw new UserError(`initdb failed in ${clusterDir} (exit ${init.code}):\n${tail(init.output)}`);
    appendFileSync(
      join(clusterDir, 'postgresql.conf'),
      "\n# cronledger: port, address and socket dir, rewritten at every start\ninclude_if_exists = 'cronledger.conf'\n",
    );
    writeClusterFile(join(clusterDir, 'pg_hba.conf'), PG_HBA, owner);
  }
  writeClusterFile(join(clusterDir, 'cronledger.conf'), clusterSettings(clusterDir, port), owner);

  const start = await run(join(binDir, 'pg_ctl'), ['-D', clusterDir, '-l', logFile, '-w', '-t', '60', 'start'], {
    cwd: clusterDir,
    as: owner,
  });
  const pid = postgresPid(dataDir);
  if (start.code !== 0 || !pid) {
    throw new UserError(
      `PostgreSQL did not start on ${LOCALHOST}:${port} (pg_ctl exit ${start.code}). From ${logFile}:\n${logTail(logFile)}`,
    );
  }
  await ensureDatabase(port, passwords, clusterDir);
  return { databaseUrl: databaseUrlFor(port, 'worker', passwords), port, pid, alreadyRunning: false };
}

/** Fast shutdown (disconnects clients, no crash recovery on the next start). Returns whether it was running. */
export async function stopPostgres(dataDir: string): Promise<boolean> {
  if (!postgresPid(dataDir)) return false;
  const binDir = findPostgresBinDir();
  if (!binDir)
    throw new UserError(`PostgreSQL is running in ${clusterDirOf(dataDir)} but pg_ctl is gone; stop it with kill ${postgresPid(dataDir)}`);
  const clusterDir = clusterDirOf(dataDir);
  const stop = await run(join(binDir, 'pg_ctl'), ['-D', clusterDir, '-m', 'fast', '-w', '-t', '60', 'stop'], {
    cwd: clusterDir,
    as: isRoot() ? postgresAccount() : undefined,
  });
  if (stop.code !== 0) throw new UserError(`pg_ctl stop failed for ${clusterDir} (exit ${stop.code}):\n${tail(stop.output)}`);
  return true;
}

/** How long dropDatabaseWhenIdle waits for a database's sessions to end by themselves. */
const SESSIONS_END_WAIT_MS = 10_000;

/**
 * Drops a scratch database (a test's, a bench's) once its sessions have ended, and only then ends what is left (`with
 * (force)`). node-postgres's pool.end() resolves before its connections have closed: a session that a force drop ends
 * while it is still reading its Terminate sends its client a FATAL error, which a pool without an error listener throws
 * as an uncaught exception; and a drop meanwhile can be refused ("being accessed by other users", 55006), even with
 * force, when a backend is slow to exit on a loaded machine. A session still open after the wait is a leak: named on
 * stderr, then ended. A refused drop is tried again, 5 times at most.
 */
export async function dropDatabaseWhenIdle(admin: pg.Client, database: string): Promise<void> {
  const deadline = Date.now() + SESSIONS_END_WAIT_MS;
  const sessions = async (): Promise<number> =>
    (await admin.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where datname = $1', [database])).rows[0].n;
  let left = await sessions();
  while (left > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    left = await sessions();
  }
  if (left > 0)
    process.stderr.write(`${left} session(s) still open on ${database} after ${SESSIONS_END_WAIT_MS} ms; dropping it with force\n`);
  for (let attempt = 1; ; attempt++) {
    try {
      return void (await admin.query(`drop database if exists "${database}" with (force)`));
    } catch (err) {
      if ((err as { code?: string }).code !== '55006' || attempt === 5) throw err;
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}

/**
 * Immediate shutdown, as a power cut would leave it for the database: every server process is killed, nothing in the
 * WAL buffers is written, and the next start runs crash recovery. Only for tests of what survives a crash.
 */
export async function crashPostgres(dataDir: string): Promise<void> {
  const binDir = findPostgresBinDir();
  if (!binDir) throw new UserError(`pg_ctl not found: cannot stop the cluster in ${clusterDirOf(dataDir)}`);
  const clusterDir = clusterDirOf(dataDir);
  const stop = await run(join(binDir, 'pg_ctl'), ['-D', clusterDir, '-m', 'immediate', '-w', '-t', '60', 'stop'], {
    cwd: clusterDir,
    as: isRoot() ? postgresAccount() : undefined,
  });
  if (stop.code !== 0) throw new UserError(`pg_ctl stop -m immediate failed for ${clusterDir} (exit ${stop.code}):\n${tail(stop.output)}`);
}

function clusterSettings(clusterDir: string, port: number): string {
  // A Unix socket path may not exceed 107 bytes; for deep data dirs go TCP-only rather than fail.
  const socketDir = join(clusterDir, `.s.PGSQL.${port}`).length <= 107 ? clusterDir : '';
  const quote = (s: string) => `'${s.replaceAll("'", "''")}'`;
  return [
    `port = ${port}`,
    `listen_addresses = ${quote(LOCALHOST)}`,
    // Inside the cluster dir, so several clusters (and the system one) never fight over /var/run/postgresql.
    `unix_socket_directories = ${quote(socketDir)}`,
    'unix_socket_permissions = 0700',
    // Logs, written by the logging collector or pg_ctl, readable by the cluster's account only.
    'log_file_mode = 0600',
    "password_encryption = 'scram-sha-256'",
    '',
  ].join('\n');
}

/**
 * The roles with the stack's passwords, and database `cronledger` owned by the owner role. A cluster made by an
 * older cronledger trusted every local connection: there the first connection (trusted, whatever the password) sets
 * the passwords, the owner adopts the tables, and pg_hba.conf is replaced by password-only rules and reloaded.
 */
async function ensureDatabase(port: number, passwords: RolePasswords, clusterDir: string): Promise<void> {
  await withSuperuser(port, passwords, 'postgres', async (client) => {
    await client.query(`set password_encryption = 'scram-sha-256'`);
    await client.query(`alter role ${SUPERUSER} password ${client.escapeLiteral(passwords.superuser)}`);
    await ensureRoles(client, passwords);
    const exists = await client.query('select 1 from pg_database where datname = $1', [LEDGER_DATABASE]);
    if (exists.rowCount === 0) await client.query(`create database ${LEDGER_DATABASE} owner ${OWNER_ROLE}`);
    if (readFileSync(join(clusterDir, 'pg_hba.conf'), 'utf8') !== PG_HBA) {
      writeClusterFile(join(clusterDir, 'pg_hba.conf'), PG_HBA, isRoot() ? postgresAccount() : undefined);
      await client.query('select pg_reload_conf()');
    }
  });
  await withSuperuser(port, passwords, LEDGER_DATABASE, (client) => adoptByOwner(client, LEDGER_DATABASE));
}

/** The role the Temporal server (`dev up --temporal server`) connects as: it owns Temporal's databases and nothing else. */
export const TEMPORAL_ROLE = 'temporal';

/**
 * Temporal's role, with this password, and its databases (history and visibility), owned by it so that the schema
 * tool may create their tables. The ledger's roles get nothing in them, nor Temporal's role anything in the ledger.
 */
export async function ensureTemporalDatabases(
  port: number,
  passwords: RolePasswords,
  temporalPassword: string,
  databases: string[],
): Promise<string> {
  await withSuperuser(port, passwords, 'postgres', async (client) => {
    await client.query(`set password_encryption = 'scram-sha-256'`);
    const exists = await client.query('select 1 from pg_roles where rolname = $1', [TEMPORAL_ROLE]);
    const verb = exists.rowCount === 0 ? 'create' : 'alter';
    await client.query(`${verb} role ${TEMPORAL_ROLE} login password ${client.escapeLiteral(temporalPassword)}`);
    for (const database of databases) {
      const found = await client.query('select 1 from pg_database where datname = $1', [database]);
      if (found.rowCount === 0) await client.query(`create database ${client.escapeIdentifier(database)} owner ${TEMPORAL_ROLE}`);
    }
  });
  return TEMPORAL_ROLE;
}

/** A file the server reads: 0600, and as root owned by the account the cluster runs as. */
function writeClusterFile(path: string, content: string, owner: Account | undefined): void {
  writeFileSync(path, content, { mode: 0o600 });
  chmodSync(path, 0o600);
  if (owner) chownSync(path, owner.uid, owner.gid);
}

async function withSuperuser(port: number, passwords: RolePasswords, database: string, fn: (c: pg.Client) => Promise<void>): Promise<void> {
  const client = new pg.Client({
    connectionString: databaseUrlFor(port, 'superuser', passwords, database),
    connectionTimeoutMillis: 10_000,
  });
  await client.connect();
  try {
    await fn(client);
  } finally {
    await client.end();
  }
}

interface Account {
  uid: number;
  gid: number;
  groups: number[];
}

const isRoot = (): boolean => process.getuid?.() === 0;

/** initdb and postgres refuse to run as root, so as root the cluster belongs to Debian's `postgres` user. */
function postgresAccount(): Account {
  try {
    const [uid, gid] = ['-u', '-g'].map((flag) => Number(runSync('id', [flag, 'postgres'])));
    const groups = runSync('id', ['-G', 'postgres']).split(/\s+/).map(Number);
    return { uid, gid, groups };
  } catch {
    throw new UserError(
      "running as root, PostgreSQL must run as the `postgres` user, which does not exist. Install Debian's `postgresql` package (it creates the user) or run as a normal user.",
    );
  }
}

/**
 * As root, the account the cluster runs as, once it is sure to reach <dataDir>/postgres (so that `dev up` can
 * check this before starting anything). Not root: the cluster runs as us, nothing to check.
 */
export function checkClusterReachable(dataDir: string): Account | undefined {
  if (!isRoot()) return undefined;
  const account = postgresAccount();
  makeTraversable(dataDir, clusterDirOf(dataDir), account);
  return account;
}

/**
 * The postgres user must be able to walk down to its cluster. The data dir is ours, so it gets traverse (not read)
 * permission for others; any directory above it is the user's to change, so we only name it.
 */
function makeTraversable(dataDir: string, clusterDir: string, account: Account): void {
  const mode = statSync(dataDir).mode;
  if (!canTraverse(dataDir, account)) chmodSync(dataDir, (mode & 0o7777) | 0o001);
  for (let dir = dirname(dataDir); ; dir = dirname(dir)) {
    if (!canTraverse(dir, account)) {
      throw new UserError(
        `PostgreSQL runs as the postgres user, which cannot enter ${dir} (mode ${(statSync(dir).mode & 0o777).toString(8)}) ` +
          `on the way to ${clusterDir}.\nPut the data dir somewhere it can reach (CRONLEDGER_DATA_DIR=/var/tmp/cronledger), ` +
          `or allow it with \`chmod o+x ${dir}\`.`,
      );
    }
    if (dir === parse(dir).root) break;
  }
}

function canTraverse(dir: string, account: Account): boolean {
  const st = statSync(dir);
  if (st.uid === account.uid) return (st.mode & 0o100) !== 0;
  if (account.groups.includes(st.gid)) return (st.mode & 0o010) !== 0;
  return (st.mode & 0o001) !== 0;
}

function runSync(command: string, args: string[]): string {
  return execFileSync(command, args, { encoding: 'utf8' }).trim();
}

interface RunResult {
  code: number;
  output: string;
}

/** Runs a command to completion, as the postgres account when given (via runuser), collecting its output. */
function run(
  command: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; as?: Account; echo?: boolean },
): Promise<RunResult> {
  const [cmd, argv] = opts.as ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
  return new Promise((resolve, reject) => {
    // detached: a Ctrl-C during `dev up` must not reach the postmaster that pg_ctl leaves running.
    const child = spawn(cmd, argv, {
      cwd: opts.cwd,
      env: opts.env ?? childEnvironment([]),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    const collect = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (opts.echo) process.stderr.write(chunk);
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    child.once('error', (err) => reject(new UserError(`could not run ${cmd}: ${err.message}`)));
    child.once('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

const tail = (output: string, lines = 20): string => output.trimEnd().split('\n').slice(-lines).join('\n');
