import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { repoRoot, type TemporalMode } from '../../src/config';
import { migrateDatabase } from '../../src/db/migrate';
import { OWNER_ROLE } from '../../src/db/roles';
import { databaseUrlFor } from '../../src/dev/postgres';
import { startStack, stopStack } from '../../src/dev/stack';
import { resolveTemporalCli } from '../../src/dev/temporal-cli';
import type { TestStack } from './provided';

const TEMPLATE_DATABASE = 'cronledger_template';

/**
 * One real stack for the whole run (Temporal dev server, private PostgreSQL, no workers) in a fresh temp dir.
 * With CRONLEDGER_TEST_TEMPORAL=server the stack runs the Temporal server on PostgreSQL instead of the dev server
 * (`dev up --temporal server`); scripts/test.sh runs the scheduling tests that way too.
 * Test files share it without seeing each other: each gets its own namespace and its own clone of a migrated
 * template database. The temporal binary comes from the usual resolution, so CRONLEDGER_TEMPORAL_CLI is honoured.
 * As in production, the template is migrated by the owner role and tests connect as the application role.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const temporalMode = testTemporalMode(process.env.CRONLEDGER_TEST_TEMPORAL);
  const dataDir = mkdtempSync(join(tmpdir(), 'cronledger-test-'));
  const teardown = async () => {
    await stopStack(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  };
  const started = Date.now();
  try {
    // No externalDatabaseUrl: a DATABASE_URL in the developer's shell must never receive test databases.
    const up = await startStack({ dataDir, workers: 0, namespaces: testFileNamespaces(), admin: false, temporal: temporalMode });
    const { port, passwords } = up.stack.postgres;
    if (!passwords) throw new Error('the test stack has no role passwords in its stack file');
    const adminDatabaseUrl = databaseUrlFor(port, 'superuser', passwords, 'postgres');
    await createTemplateDatabase(adminDatabaseUrl, databaseUrlFor(port, 'owner', passwords, TEMPLATE_DATABASE));
    const provided: TestStack = {
      temporalAddress: up.stack.temporal.address,
      temporalMode,
      uiUrl: up.stack.temporal.uiUrl,
      // Some tests start a private dev server whatever the mode (a server whose visibility never catches up).
      temporalCli: up.stack.temporal.cli || (await resolveTemporalCli()).path,
      adminDatabaseUrl,
      ownerDatabaseUrl: databaseUrlFor(port, 'owner', passwords, TEMPLATE_DATABASE),
      appDatabaseUrl: databaseUrlFor(port, 'app', passwords, TEMPLATE_DATABASE),
      readonlyDatabaseUrl: databaseUrlFor(port, 'readonly', passwords, TEMPLATE_DATABASE),
      templateDatabase: TEMPLATE_DATABASE,
      dataDir,
    };
    project.provide('stack', provided);
    process.stderr.write(
      `test stack up in ${((Date.now() - started) / 1000).toFixed(1)}s: Temporal ${temporalMode === 'server' ? 'server on PostgreSQL' : 'dev server'} ` +
        `${provided.temporalAddress}, UI ${provided.uiUrl}\n`,
    );
  } catch (err) {
    await teardown().catch(() => undefined);
    throw err;
  }
  return teardown;
}

function testTemporalMode(value: string | undefined): TemporalMode {
  if (value === undefined || value === '' || value === 'dev') return 'dev';
  if (value === 'server') return 'server';
  throw new Error(`CRONLEDGER_TEST_TEMPORAL=${value} is not a Temporal mode; use dev (the default) or server`);
}

/** A namespace per test file, named after it (test/backfill.test.ts -> backfill), created when the server starts. */
function testFileNamespaces(): string[] {
  const testDir = join(repoRoot(), 'test');
  const files = readdirSync(testDir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.test.ts'));
  return [...new Set(files.map((f) => basename(f, '.test.ts')))];
}

async function createTemplateDatabase(adminDatabaseUrl: string, ownerTemplateUrl: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminDatabaseUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${TEMPLATE_DATABASE} owner ${OWNER_ROLE}`);
  } finally {
    await admin.end();
  }
  // Closes its pool before returning: Postgres refuses to copy a database in use.
  await migrateDatabase(ownerTemplateUrl);
}
