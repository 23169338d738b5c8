import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { compiledCli } from '../../bin/compiled.js';
import { repoRoot, type TemporalMode } from '../../src/config';
import { migrateDatabase } from '../../src/db/migrate';
import { OWNER_ROLE } from '../../src/db/roles';
import { databaseUrlFor } from '../../src/dev/postgres';
import { startStack, stopStack } from '../../src/dev/stack';
import { resolveTemporalCli } from '../../src/dev/temporal-cli';
import type { TestStack } from './provided';
import { stackReleases } from './stack-releases';
import { writeWorkflowBundle } from './worker-processes';

const TEMPLATE_DATABASE = 'cronledger_template';

/**
 * One real stack for the whole run (Temporal dev server, private PostgreSQL, no workers) in a fresh temp dir.
 * A project whose env sets CRONLEDGER_TEST_TEMPORAL=server (vitest.config.ts's temporal-server project; or the shell's
 * variable) gets the Temporal server on PostgreSQL instead of the dev server (`dev up --temporal server`).
 * Projects that ask for the same kind share one stack (integration and fault); the last of them to finish stops it,
 * as soon as its last file has ended (test/support/project-end-reporter.ts).
 * Test files share it without seeing each other: each gets its own namespace and its own clone of a migrated
 * template database. The temporal binary comes from the usual resolution, so CRONLEDGER_TEMPORAL_CLI is honoured.
 * As in production, the template is migrated by the owner role and tests connect as the application role.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const temporalMode = testTemporalMode(project.config.env?.CRONLEDGER_TEST_TEMPORAL ?? process.env.CRONLEDGER_TEST_TEMPORAL);
  // Vitest loads this file once per project: the stacks live on globalThis so that the projects can share them.
  const stacks = ((globalThis as { cronledgerTestStacks?: Map<TemporalMode, SharedStack> }).cronledgerTestStacks ??= new Map());
  let shared = stacks.get(temporalMode);
  if (!shared) {
    // The dev server takes every test file's namespace as a flag at start; the Temporal server registers each one and
    // waits until it is usable, so it gets only the namespaces of the files it runs.
    const files = temporalMode === 'dev' ? allTestFiles() : (await project.globTestFiles()).testFiles;
    shared = { stack: startTestStack(temporalMode, [...new Set(files.map((f) => basename(f, '.test.ts')))]), users: 0 };
    stacks.set(temporalMode, shared);
  }
  shared.users += 1;
  project.provide('stack', (await shared.stack).provided);
  const { stack } = shared;
  let released: Promise<void> | undefined;
  const release = () =>
    (released ??= (async () => {
      shared.users -= 1;
      if (shared.users === 0) {
        stacks.delete(temporalMode);
        await (await stack).teardown();
      }
    })());
  // Released early once the project's last file has ended (test/support/project-end-reporter.ts); never in watch mode,
  // where files run again.
  if (!project.vitest.config.watch) stackReleases().set(project.name, release);
  return release;
}

interface SharedStack {
  stack: Promise<{ provided: TestStack; teardown: () => Promise<void> }>;
  users: number;
}

async function startTestStack(
  temporalMode: TemporalMode,
  namespaces: string[],
): Promise<{ provided: TestStack; teardown: () => Promise<void> }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cronledger-test-'));
  const teardown = async () => {
    await stopStack(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
    process.stderr.write(`test stack stopped after ${((Date.now() - started) / 1000).toFixed(1)}s: ${kind}\n`);
  };
  const kind = temporalMode === 'server' ? 'Temporal server on PostgreSQL' : 'Temporal dev server';
  const started = Date.now();
  // Bundled while the servers start (they mostly wait on each other); awaited below, so a failure fails the setup.
  const bundling = writeWorkflowBundle(dataDir);
  bundling.catch(() => undefined); // handled where it is awaited; this only keeps it from counting as unhandled meanwhile
  // So is the CLI, once for every test's calls. bin/cronledger.js quietly falls back to tsx when it can't compile: here
  // a failure fails the setup instead of slowing every call.
  const compiling = compiledCli();
  compiling.catch(() => undefined);
  try {
    // No externalDatabaseUrl: a DATABASE_URL in the developer's shell must never receive test databases.
    const up = await startStack({ dataDir, workers: 0, namespaces, admin: false, temporal: temporalMode });
    const { port, passwords } = up.stack.postgres;
    if (!passwords) throw new Error('the test stack has no role passwords in its stack file');
    const adminDatabaseUrl = databaseUrlFor(port, 'superuser', passwords, 'postgres');
    await createTemplateDatabase(adminDatabaseUrl, databaseUrlFor(port, 'owner', passwords, TEMPLATE_DATABASE));
    const provided: TestStack = {
      temporalAddress: up.stack.temporal.address,
      temporalMode,
      temporalTls: up.stack.temporal.tls,
      uiUrl: up.stack.temporal.uiUrl,
      // Some tests start a private dev server whatever the mode (a server whose visibility never catches up).
      temporalCli: up.stack.temporal.cli || (await resolveTemporalCli()).path,
      adminDatabaseUrl,
      ownerDatabaseUrl: databaseUrlFor(port, 'owner', passwords, TEMPLATE_DATABASE),
      workerDatabaseUrl: databaseUrlFor(port, 'worker', passwords, TEMPLATE_DATABASE),
      operatorDatabaseUrl: databaseUrlFor(port, 'operator', passwords, TEMPLATE_DATABASE),
      readonlyDatabaseUrl: databaseUrlFor(port, 'readonly', passwords, TEMPLATE_DATABASE),
      templateDatabase: TEMPLATE_DATABASE,
      dataDir,
      workflowBundlePath: await bundling,
    };
    await compiling;
    process.stderr.write(
      `test stack up in ${((Date.now() - started) / 1000).toFixed(1)}s: ${kind} ` + `${provided.temporalAddress}, UI ${provided.uiUrl}\n`,
    );
    return { provided, teardown };
  } catch (err) {
    await teardown().catch(() => undefined);
    throw err;
  }
}

function testTemporalMode(value: string | undefined): TemporalMode {
  if (value === undefined || value === '' || value === 'dev') return 'dev';
  if (value === 'server') return 'server';
  throw new Error(`CRONLEDGER_TEST_TEMPORAL=${value} is not a Temporal mode; use dev (the default) or server`);
}

/**
 * Every test file under test/ but the unit tests, which need no server (a namespace each, named after the file:
 * test/backfill.test.ts -> backfill).
 */
function allTestFiles(): string[] {
  const testDir = join(repoRoot(), 'test');
  return readdirSync(testDir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.test.ts') && !f.startsWith('unit/'));
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
