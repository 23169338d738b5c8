import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { repoRoot } from '../config';
import { migrateDatabase } from '../db/migrate';
import { generatePasswords } from '../db/roles';
import { UserError } from '../errors';
import { freePort } from './ports';
import { databaseUrlFor, findPostgresBinDir, startPostgres, stopPostgres } from './postgres';

/**
 * db/schema.sql: the schema the migrations build, as `pg_dump --schema-only` prints it for a freshly migrated database,
 * so every table, function body and grant can be read in one file. test/schema-dump.test.ts fails when the migrations
 * and the file disagree; this module's command writes it again.
 */
export const SCHEMA_FILE = 'db/schema.sql';
export const REGENERATE_SCHEMA_COMMAND = 'npm run db:schema';

/** pg_dump --schema-only of the database at databaseUrl, by the pg_dump of the cluster the tests and the dev stack run. */
export async function dumpSchema(databaseUrl: string): Promise<string> {
  const binDir = findPostgresBinDir();
  if (!binDir) throw new UserError('pg_dump was not found under /usr/lib/postgresql/*/bin or on PATH; run `npx cronledger dev install`');
  const url = new URL(databaseUrl);
  // The password reaches pg_dump through its environment, never argv.
  const { stdout } = await promisify(execFile)(
    join(binDir, 'pg_dump'),
    [
      '--schema-only',
      '--no-owner',
      '--host',
      url.hostname,
      '--port',
      url.port,
      '--username',
      decodeURIComponent(url.username),
      url.pathname.slice(1),
    ],
    { env: { ...process.env, PGPASSWORD: decodeURIComponent(url.password) }, maxBuffer: 64 * 1024 * 1024 },
  );
  return normaliseSchemaDump(stdout);
}

/**
 * What varies between two dumps of the same schema goes: the versions of the server and of pg_dump, the session
 * settings pg_dump prints for a restore, and the `\restrict` lines that newer pg_dump versions print with a random key.
 * Runs of blank lines become one.
 */
export function normaliseSchemaDump(dump: string): string {
  const kept = dump
    .split('\n')
    .filter(
      (line) =>
        !/^-- Dumped (from database|by pg_dump) version /.test(line) &&
        !/^\\(un)?restrict /.test(line) &&
        !/^SET [a-z_]+ = /.test(line) &&
        !line.startsWith("SELECT pg_catalog.set_config('search_path', '', false);"),
    );
  const header = `-- ${SCHEMA_FILE}: written by \`${REGENERATE_SCHEMA_COMMAND}\` from a freshly migrated database; do not edit.\n`;
  return `${header}${kept
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim()}\n`;
}

/** Migrates a fresh database in a private cluster of its own (a temp dir, stopped and removed after) and dumps it. */
export async function freshSchemaDump(): Promise<string> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cronledger-schema-'));
  const passwords = generatePasswords();
  try {
    const { port } = await startPostgres({ dataDir, port: await freePort(), passwords, log: () => undefined });
    await migrateDatabase(databaseUrlFor(port, 'owner', passwords));
    return await dumpSchema(databaseUrlFor(port, 'superuser', passwords));
  } finally {
    await stopPostgres(dataDir).catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** `npm run db:schema`: writes db/schema.sql; with --check, only says whether it is current (exit 1 if not). */
async function main(): Promise<void> {
  const path = join(repoRoot(), SCHEMA_FILE);
  const dump = await freshSchemaDump();
  if (process.argv.includes('--check')) {
    const current = readFileSync(path, 'utf8') === dump;
    process.stdout.write(
      current ? `${SCHEMA_FILE} is current\n` : `${SCHEMA_FILE} differs from the migrations; run \`${REGENERATE_SCHEMA_COMMAND}\`\n`,
    );
    process.exitCode = current ? 0 : 1;
    return;
  }
  writeFileSync(path, dump);
  process.stdout.write(`wrote ${SCHEMA_FILE} (${dump.split('\n').length - 1} lines)\n`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((err: Error) => {
    process.stderr.write(`${err instanceof UserError ? err.message : err.stack}\n`);
    process.exitCode = 1;
  });
}
