import pg from 'pg';
import { readStackFile } from '../../src/config';
import { migrateDatabase } from '../../src/db/migrate';
import { createPool } from '../../src/db/pool';
import { OWNER_ROLE } from '../../src/db/roles';
import { databaseUrlFor, dropDatabaseWhenIdle, type ClusterRole } from '../../src/dev/postgres';
import { applyPrices, loadPricesFile } from '../../src/ledger/prices';

/**
 * A database of the bench's own on the local stack's PostgreSQL (`npx cronledger dev up --workers 0`), migrated as
 * the owner, with the standard prices, and used as cronledger_worker like the real thing. close() drops it.
 */
export interface ScratchDatabase {
  name: string;
  port: number;
  /** The scratch database (or another one of the cluster) as each role, e.g. for pgbench or the owner's bulk loads. */
  urlAs(role: ClusterRole, database?: string): string;
  /** The worker role's pool. */
  pool: pg.Pool;
  close(): Promise<void>;
}

/**
 * `kept`: the database is named `prefix` (no pid), reused when it exists and left in place by close(), so a second
 * measurement of a large load need not load it again (drop it by hand when done). `existed` says it was reused.
 */
export async function scratchDatabase(
  prefix: string,
  poolSize: number,
  { kept = false }: { kept?: boolean } = {},
): Promise<ScratchDatabase & { existed: boolean }> {
  const stack = readStackFile()?.postgres;
  const passwords = stack?.passwords;
  if (!stack || !passwords) throw new Error('no local stack: run `npx cronledger dev up --workers 0` first');
  const name = kept ? prefix : `${prefix}_${process.pid}`;
  const admin = new pg.Client({ connectionString: databaseUrlFor(stack.port, 'superuser', passwords, 'postgres') });
  await admin.connect();
  const existed = kept && (await admin.query('select 1 from pg_database where datname = $1', [name])).rowCount === 1;
  if (!existed) await admin.query(`create database ${name} owner ${OWNER_ROLE}`);
  const urlAs = (role: ClusterRole, database = name): string => databaseUrlFor(stack.port, role, passwords, database);
  const pool = createPool(urlAs('worker'), poolSize);
  const close = async (): Promise<void> => {
    await pool.end().catch(() => undefined);
    if (kept) return void (await admin.end());
    await dropDatabaseWhenIdle(admin, name);
    await admin.end();
  };
  try {
    await migrateDatabase(urlAs('owner'));
    if (!existed) {
      const operator = createPool(urlAs('operator'), 1);
      await applyPrices(operator, loadPricesFile('prices/standard.json'), 'bench').finally(() => operator.end());
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { name, port: stack.port, urlAs, pool, close, existed };
}
