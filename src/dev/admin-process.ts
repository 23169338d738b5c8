import { join } from 'node:path';
import { repoRoot, secretSetting, temporalTlsEnv, type StackFile } from '../config';
import { UserError } from '../errors';
import { freePorts, isPortFree, LOCALHOST } from './ports';
import { isOurProcess, logTail, processStartTime, sleep, spawnDetached, stopProcess } from './processes';
import { requireStackFile, updateStackFile } from './stack-file';
import { ADMIN_INHERITS, childEnvironment } from './child-env';
import { databaseUrlFor } from './postgres';

/**
 * The dev stack's admin page: `cronledger admin` as a background process on loopback, recorded in stack.json like
 * the workers, connecting as the stack's read-only role (it finds it through CRONLEDGER_DATA_DIR).
 */

type AdminEntry = NonNullable<StackFile['admin']>;

const ADMIN_ENTRY = 'bin/cronledger.js';
/** The port the checkout's default data dir takes when free, beside the Web UI's 8233. */
export const DEFAULT_ADMIN_PORT = 8234;
const READY_TIMEOUT_MS = 60_000;
const adminLogOf = (dataDir: string): string => join(dataDir, 'logs', 'admin.log');
const stackMarker = (dataDir: string): string => `--stack-marker=${dataDir}`;

export const adminRunning = (a: AdminEntry | undefined, dataDir: string): boolean =>
  Boolean(a) && isOurProcess(a!.pid, [ADMIN_ENTRY, 'admin', stackMarker(dataDir)], a!.startTime);

/** Starts the admin page unless it runs already; returns its state, or why it was not started. */
export async function startAdmin(
  dataDir: string,
  opts: { preferDefaultPort: boolean },
): Promise<{ url: string; pid: number; alreadyRunning: boolean } | { skipped: string }> {
  const stack = requireStackFile(dataDir);
  if (adminRunning(stack.admin, dataDir)) return { url: stack.admin!.url, pid: stack.admin!.pid, alreadyRunning: true };
  if (stack.postgres.external && !secretSetting('CRONLEDGER_ADMIN_DATABASE_URL')) {
    return {
      skipped: 'set CRONLEDGER_ADMIN_DATABASE_URL (the SELECT-only role cronledger_readonly) to start it with an external database',
    };
  }
  const port =
    stack.admin?.port && (await isPortFree(stack.admin.port))
      ? stack.admin.port
      : opts.preferDefaultPort && (await isPortFree(DEFAULT_ADMIN_PORT))
        ? DEFAULT_ADMIN_PORT
        : (await freePorts(1))[0];
  const log = adminLogOf(dataDir);
  const pid = await spawnDetached(
    process.execPath,
    [ADMIN_ENTRY, 'admin', '--host', LOCALHOST, '--port', String(port), stackMarker(dataDir)],
    {
      cwd: repoRoot(),
      // By allow-list: the read-only role's URL, never the application role's, another password or a model API key.
      env: childEnvironment(ADMIN_INHERITS, {
        CRONLEDGER_DATA_DIR: dataDir,
        CRONLEDGER_ADMIN_DATABASE_URL: readOnlyDatabaseUrl(stack),
        TEMPORAL_ADDRESS: stack.temporal.address,
        TEMPORAL_NAMESPACE: stack.namespace,
        TEMPORAL_UI_URL: stack.temporal.uiUrl,
        ...temporalTlsEnv(stack.temporal.tls),
      }),
      logFile: log,
      banner: `admin page on ${LOCALHOST}:${port}`,
    },
  );
  const entry: AdminEntry = { pid, startTime: processStartTime(pid), port, url: `http://${LOCALHOST}:${port}`, log };
  updateStackFile(dataDir, (s) => {
    s.admin = entry;
  });
  await waitUntilServing(entry, dataDir);
  return { url: entry.url, pid, alreadyRunning: false };
}

/** CRONLEDGER_ADMIN_DATABASE_URL for an external database, else the stack's own read-only role. */
function readOnlyDatabaseUrl(stack: StackFile): string | undefined {
  const { postgres } = stack;
  if (postgres.external) return secretSetting('CRONLEDGER_ADMIN_DATABASE_URL');
  return postgres.passwords?.readonly ? databaseUrlFor(postgres.port, 'readonly', postgres.passwords) : undefined;
}

export async function stopAdmin(dataDir: string): Promise<number | undefined> {
  const { admin } = requireStackFile(dataDir);
  if (!admin || !adminRunning(admin, dataDir)) return undefined;
  await stopProcess(admin.pid, 10_000);
  return admin.pid;
}

async function waitUntilServing(a: AdminEntry, dataDir: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (!adminRunning(a, dataDir))
      throw new UserError(`the admin page (pid ${a.pid}) exited while starting. From ${a.log}:\n${logTail(a.log)}`);
    const ok = await fetch(`${a.url}/assets/admin.css`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    if (Date.now() > deadline)
      throw new UserError(`the admin page did not answer on ${a.url} within ${READY_TIMEOUT_MS / 1000}s; see ${a.log}`);
    await sleep(250);
  }
}
