import pg from 'pg';
import { redactDatabaseUrl } from '../config';
import { UserError } from '../errors';

// Return bigint and numeric columns as strings: they hold token counts and exact money, never JS numbers.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => v);
pg.types.setTypeParser(pg.types.builtins.NUMERIC, (v) => v);

export type Pool = pg.Pool;

/**
 * A host that never answers (a blackholed address, a socket nobody accepts on) fails a connection attempt after this
 * long instead of the kernel's two minutes; queries themselves are not limited (a rollup rebuild may take a while).
 */
export const CONNECT_TIMEOUT_MS = 5_000;

/** node-postgres's own default: a connection idle this long is closed. */
const DEFAULT_IDLE_TIMEOUT_MS = 10_000;

/**
 * How long the worker keeps an idle connection: longer than the minute between two cron slots, so that a worker
 * running every minute's runs keeps its sessions. A new session costs PostgreSQL about 25 ms of CPU (authentication,
 * then compiling the run path's plpgsql functions and planning their statements, which a session keeps); with the
 * 10 s default, every slot's burst after a quiet minute reopened the pool's connections.
 */
export const WORKER_IDLE_TIMEOUT_MS = 5 * 60_000;

/** The worker process's pool: up to 10 connections, each kept WORKER_IDLE_TIMEOUT_MS when idle. */
export function createWorkerPool(databaseUrl: string): pg.Pool {
  return createPool(databaseUrl, 10, CONNECT_TIMEOUT_MS, WORKER_IDLE_TIMEOUT_MS);
}

/**
 * Each client's own connection attempt times out after connectTimeoutMs, while a query that merely waits its turn for
 * a busy pool's connection waits as long as it takes. The pool's own connectionTimeoutMillis would fail that query
 * too ("timeout exceeded when trying to connect"): in CI the admin page's queries queued that long on its
 * 4 connections and the page answered 500.
 */
export function createPool(
  databaseUrl: string,
  max = 10,
  connectTimeoutMs = CONNECT_TIMEOUT_MS,
  idleTimeoutMs = DEFAULT_IDLE_TIMEOUT_MS,
): pg.Pool {
  class ClientWithConnectTimeout extends pg.Client {
    constructor(config?: string | pg.ClientConfig) {
      super({ ...(typeof config === 'string' ? { connectionString: config } : config), connectionTimeoutMillis: connectTimeoutMs });
    }
  }
  const pool = new pg.Pool({
    connectionString: withoutJit(databaseUrl),
    max,
    idleTimeoutMillis: idleTimeoutMs,
    Client: ClientWithConnectTimeout,
  });
  // When the server closes an idle connection (a restart, a failover), the pool emits 'error' and drops it; with no
  // listener Node treats that as an uncaught exception and every worker process dies with the database. Queries
  // in flight fail on their own and are retried by their callers; the next query opens a fresh connection.
  pool.on('error', (err) => {
    process.stderr.write(`PostgreSQL closed an idle connection (${err.message}); the next query reconnects\n`);
  });
  return pool;
}

/**
 * The URL with JIT compilation off for its sessions. The reports' and the admin page's queries return a few thousand
 * rows or fewer, but some are planned at a cost above jit_above_cost (a join the planner cannot rule out, a queue
 * whose size it cannot know), and compiling one took about 200 ms at 10,000,000 ledger rows, for a plan that then ran
 * in under a millisecond (BENCHMARKS.md, P3). A string that is no URL is left as it is.
 */
function withoutJit(databaseUrl: string): string {
  try {
    return withSessionSetting(databaseUrl, 'jit=off');
  } catch {
    return databaseUrl;
  }
}

/** The URL with a setting for every session, as a libpq `options` startup parameter (`-c name=value`). */
function withSessionSetting(databaseUrl: string, setting: string): string {
  const url = new URL(databaseUrl);
  const options = url.searchParams.get('options');
  url.searchParams.set('options', `${options ? `${options} ` : ''}-c ${setting}`);
  return url.toString();
}

/**
 * The same database URL with every session read-only (default_transaction_read_only, as a libpq `options` startup
 * parameter, so it holds from the first statement): the admin page's second guard beside its SELECT-only role.
 */
export function readOnlySessionUrl(databaseUrl: string): string {
  return withSessionSetting(databaseUrl, 'default_transaction_read_only=on');
}

/** A postgres:// URL, or a UserError that names the variable without echoing its value (it may hold a password). */
export function parseDatabaseUrl(variable: string, value: string): URL {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  // A Unix socket URL (postgres:///db?host=/run/postgresql) has no host part but a host parameter.
  if (!url || !/^postgres(ql)?:$/.test(url.protocol) || !(url.hostname || url.searchParams.get('host'))) {
    throw new UserError(
      `${variable} is not a PostgreSQL URL (its value is not shown: it may hold a password); use postgres://user:password@host:5432/database`,
    );
  }
  return url;
}

/**
 * A pool whose first connection has succeeded; otherwise a UserError naming the variable the URL came from, with
 * the password hidden, and the fix.
 */
export async function connectPool(databaseUrl: string, variable = 'DATABASE_URL', max = 4): Promise<pg.Pool> {
  parseDatabaseUrl(variable, databaseUrl);
  const pool = createPool(databaseUrl, max);
  try {
    await pool.query('select 1');
    return pool;
  } catch (err) {
    await pool.end().catch(() => undefined);
    const why = /timeout/i.test((err as Error).message) ? `no answer within ${CONNECT_TIMEOUT_MS / 1000}s` : (err as Error).message;
    throw new UserError(
      `cannot reach PostgreSQL at ${redactDatabaseUrl(databaseUrl)} (${why}); start it with \`npx cronledger dev up\` or fix ${variable}`,
    );
  }
}

/** Runs fn in one transaction, rolling back on any error. */
export async function inTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/**
 * `create(pool)` made once per pool (so once per worker process) and kept while the pool lives: for a client that
 * remembers what it read (the limited models, the prices in force) across activities.
 */
export function onePerPool<T extends object>(create: (pool: pg.Pool) => T): (pool: pg.Pool) => T {
  const made = new WeakMap<pg.Pool, T>();
  return (pool) => {
    let it = made.get(pool);
    if (!it) made.set(pool, (it = create(pool)));
    return it;
  };
}
