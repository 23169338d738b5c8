import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Pool } from 'pg';
import { dataDir, redactDatabaseUrl, repoRoot } from '../config';
import { UserError } from '../errors';
import { connectPool } from './pool';
import { OWNER_ROLE } from './roles';

/**
 * A deliberately small migration runner (graphile-worker style): numbered plain SQL files, only ever appended,
 * each applied in its own transaction and recorded in schema_migrations. An advisory lock makes concurrent
 * runners (N workers starting at once) safe, and a second run does nothing. A recorded name with no file (a newer
 * release's migration) is left alone. About 50 lines, so no dependency.
 */
const MIGRATION_LOCK_ID = 727_001;

/**
 * 001_baseline.sql creates the schema that migrations 001 to 021 built one step at a time; those files are gone and
 * their numbers are never reused. A database that recorded any of them was built by them: nothing is applied to it.
 */
export const BASELINE_MIGRATION = '001_baseline.sql';
const LAST_SQUASHED = 21;

/** The names in schema_migrations that only a database migrated before the baseline can hold. */
export const squashedMigrations = (recorded: Iterable<string>): string[] =>
  [...recorded].filter((name) => name !== BASELINE_MIGRATION && /^\d{3}_/.test(name) && Number(name.slice(0, 3)) <= LAST_SQUASHED).sort();

export const migrationsDir = (): string => join(repoRoot(), 'migrations');

/** The migration files in dir, in the order they apply. */
export const migrationFiles = async (dir = migrationsDir()): Promise<string[]> =>
  (await readdir(dir)).filter((f) => /^\d{3}_[a-z0-9_]+\.sql$/.test(f)).sort();

export async function migrate(pool: Pool, dir = migrationsDir()): Promise<string[]> {
  const files = await migrationFiles(dir);
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
    await client.query(`create table if not exists schema_migrations (
      name text primary key, applied_at timestamptz not null default now())`);
    const done = new Set((await client.query<{ name: string }>('select name from schema_migrations')).rows.map((r) => r.name));
    const squashed = squashedMigrations(done);
    if (squashed.length > 0) {
      const database = (await client.query<{ db: string }>('select current_database() as db')).rows[0].db;
      throw new UserError(
        `database ${database} was migrated before its migrations were squashed into ${BASELINE_MIGRATION}: its schema_migrations ` +
          `records ${squashed.join(', ')}, which no longer exist. Nothing was applied. Start afresh with an empty database: ` +
          `for the local stack, \`npx cronledger dev down && rm -rf ${dataDir()} && npx cronledger dev up\` (this deletes the ` +
          `stack's data); for another database, \`dropdb ${database} && createdb -O ${OWNER_ROLE} ${database}\`, then ` +
          '`npx cronledger db migrate`.',
      );
    }
    for (const file of files) {
      if (done.has(file)) continue;
      const sql = await readFile(join(dir, file), 'utf8');
      await client.query('begin');
      try {
        await client.query(sql);
        await client.query('insert into schema_migrations (name) values ($1)', [file]);
        await client.query('commit');
      } catch (err) {
        await client.query('rollback');
        const { message, hint } = err as { message: string; hint?: string };
        throw new UserError(`migration ${file} failed: ${message}${hint ? `\nHint: ${hint}` : ''}`);
      }
      applied.push(file);
    }
  } finally {
    await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]).catch(() => undefined);
    client.release();
  }
  return applied;
}

/**
 * `cronledger db migrate` and `dev up`: connects as the owner role (ownerDatabaseUrl, named by `variable` in errors)
 * and applies what is pending. Only the owner may: the application role can create no table.
 */
export async function migrateDatabase(ownerDatabaseUrl: string, variable = 'DATABASE_OWNER_URL'): Promise<string[]> {
  const pool = await connectPool(ownerDatabaseUrl, variable, 1);
  try {
    return await migrate(pool);
  } catch (err) {
    // A database error here (permission denied, no schema to create in) means the wrong role, not a bug.
    if (!(err instanceof UserError) && typeof (err as { code?: unknown }).code === 'string') {
      throw new UserError(
        `the role in ${variable} (${redactDatabaseUrl(ownerDatabaseUrl)}) may not migrate: ${(err as Error).message}.\n` +
          'Point DATABASE_OWNER_URL at the role that owns the tables, not at the application role.',
      );
    }
    throw err;
  } finally {
    await pool.end();
  }
}
