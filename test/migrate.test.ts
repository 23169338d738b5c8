import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { BASELINE_MIGRATION, migrateDatabase, migrationFiles, squashedMigrations } from '../src/db/migrate';
import { UserError } from '../src/errors';
import { runCli } from './support/cli';
import { freshDatabase } from './support/context';

/** What the migration runner promises: one transaction per file, recorded, idempotent, safe to run concurrently. */

async function query<T extends pg.QueryResultRow>(databaseUrl: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

const recorded = async (databaseUrl: string) =>
  (await query<{ name: string }>(databaseUrl, 'select name from schema_migrations order by name')).map((r) => r.name);

const tables = async (databaseUrl: string) =>
  (await query<{ name: string }>(databaseUrl, `select tablename as name from pg_tables where schemaname = 'public' order by 1`)).map(
    (r) => r.name,
  );

describe('migrate', () => {
  it('builds a fresh database from the baseline and what follows it once, however many runners start at the same moment', async () => {
    const db = await freshDatabase('migrate_fresh');
    try {
      const files = await migrationFiles();
      expect(files[0]).toBe(BASELINE_MIGRATION);
      const runs = await Promise.all([1, 2, 3].map(() => migrateDatabase(db.ownerDatabaseUrl)));
      expect(runs.flat()).toEqual(files);
      expect(await migrateDatabase(db.ownerDatabaseUrl)).toEqual([]);
      expect(await recorded(db.ownerDatabaseUrl)).toEqual(files);
    } finally {
      await db.drop();
    }
  });

  it('leaves alone a recorded migration that is newer than this code (a later release migrated the database)', async () => {
    const db = await freshDatabase('migrate_newer');
    try {
      await migrateDatabase(db.ownerDatabaseUrl);
      await query(db.ownerDatabaseUrl, `insert into schema_migrations (name) values ('999_from_a_later_release.sql')`);
      expect(await migrateDatabase(db.ownerDatabaseUrl)).toEqual([]);
      expect(await recorded(db.ownerDatabaseUrl)).toEqual([...(await migrationFiles()), '999_from_a_later_release.sql']);
    } finally {
      await db.drop();
    }
  });

  it('refuses a database migrated before the baseline, names what it found and how to start afresh, and changes nothing', async () => {
    const db = await freshDatabase('migrate_squashed');
    try {
      // What the runner left in a database that ran the first two migrations that the baseline replaced.
      await query(
        db.ownerDatabaseUrl,
        `create table schema_migrations (name text primary key, applied_at timestamptz not null default now());
         insert into schema_migrations (name) values ('001_runs.sql'), ('002_ledger.sql');
         create table runs (id bigserial primary key, idempotency_key text not null unique)`,
      );
      const before = { recorded: await recorded(db.ownerDatabaseUrl), tables: await tables(db.ownerDatabaseUrl) };

      const err = await migrateDatabase(db.ownerDatabaseUrl).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(UserError);
      const message = (err as Error).message;
      expect(message).toContain(`database ${db.name} was migrated before its migrations were squashed into ${BASELINE_MIGRATION}`);
      expect(message).toContain('records 001_runs.sql, 002_ledger.sql');
      expect(message).toContain('npx cronledger dev down && rm -rf ');
      expect(message).toContain(`dropdb ${db.name} && createdb -O cronledger_owner ${db.name}`);
      expect(message).toContain('`npx cronledger db migrate`');
      expect({ recorded: await recorded(db.ownerDatabaseUrl), tables: await tables(db.ownerDatabaseUrl) }).toEqual(before);

      // The same through the CLI: one message, a non-zero exit, no stack trace.
      const cli = await runCli(['db', 'migrate'], { ...process.env, DATABASE_OWNER_URL: db.ownerDatabaseUrl });
      expect(cli.code).not.toBe(0);
      expect(cli.stderr).toContain('records 001_runs.sql, 002_ledger.sql');
      expect(cli.stderr).not.toMatch(/^\s+at /m);
      expect(await recorded(db.ownerDatabaseUrl)).toEqual(before.recorded);
    } finally {
      await db.drop();
    }
  });

  it('counts as squashed the names 001 to 021 but the baseline, and no later number', () => {
    expect(
      squashedMigrations([
        '001_baseline.sql',
        '021_budget_decision_cheap_models_when_needed.sql',
        '005_app_role_grants.sql',
        '022_next.sql',
        '999_x.sql',
      ]),
    ).toEqual(['005_app_role_grants.sql', '021_budget_decision_cheap_models_when_needed.sql']);
  });
});
