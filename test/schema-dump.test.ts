import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { repoRoot } from '../src/config';
import { migrateDatabase } from '../src/db/migrate';
import { dumpSchema, normaliseSchemaDump, REGENERATE_SCHEMA_COMMAND, SCHEMA_FILE } from '../src/dev/schema-dump';
import { freshDatabase } from './support/context';

/** The committed dump is the schema the migrations build, to the last character of every function body and grant. */
it(`${SCHEMA_FILE} is what the migrations build in a fresh database`, async () => {
  const db = await freshDatabase('schema_dump');
  try {
    await migrateDatabase(db.ownerDatabaseUrl);
    const dump = await dumpSchema(db.superuserDatabaseUrl);
    const committed = readFileSync(join(repoRoot(), SCHEMA_FILE), 'utf8');
    expect(dump, `${SCHEMA_FILE} disagrees with migrations/: run \`${REGENERATE_SCHEMA_COMMAND}\` and commit the file`).toBe(committed);
  } finally {
    await db.drop();
  }
});

it('a dump keeps the schema and drops what varies from one pg_dump to the next', () => {
  const raw = [
    '--',
    '-- PostgreSQL database dump',
    '--',
    '',
    '\\restrict Zx1r6mPq0aT2',
    '',
    '-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)',
    '-- Dumped by pg_dump version 17.6',
    '',
    'SET statement_timeout = 0;',
    "SET client_encoding = 'UTF8';",
    "SELECT pg_catalog.set_config('search_path', '', false);",
    '',
    '',
    '',
    'CREATE TABLE public.runs (',
    '    id bigint NOT NULL',
    ');',
    '',
    '\\unrestrict Zx1r6mPq0aT2',
    '',
  ].join('\n');
  const kept = normaliseSchemaDump(raw);
  expect(kept).toContain('CREATE TABLE public.runs (\n    id bigint NOT NULL\n);');
  expect(kept).not.toMatch(/restrict|Dumped|^SET |set_config|\n\n\n/m);
  expect(normaliseSchemaDump(raw.replaceAll('Zx1r6mPq0aT2', 'other').replace('17.6', '18.1'))).toBe(kept);
});
