import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_TASK_QUEUE } from './constants';
import { UserError } from './errors';

/** The checkout this code runs from (migrations, prices and examples are found relative to it). */
export const repoRoot = (): string => resolve(dirname(fileURLToPath(import.meta.url)), '..');

export const defaultDataDir = (): string => join(repoRoot(), '.cronledger');

/** CRONLEDGER_DATA_DIR, else `.cronledger/` in the checkout. Everything `dev up` starts lives here. */
export const dataDir = (): string => resolve(process.env.CRONLEDGER_DATA_DIR ?? defaultDataDir());

/** What `dev up` wrote about the stack it started; every other command finds the stack through it. */
export interface StackFile {
  temporal: { address: string; uiUrl: string; port: number; uiPort: number; pid: number; cli: string; dbFile: string };
  postgres: { databaseUrl: string; port: number; clusterDir: string; external: boolean };
  namespace: string;
  workers: { pid: number; log: string }[];
}

export const stackFilePath = (dir = dataDir()): string => join(dir, 'stack.json');

export function readStackFile(dir = dataDir()): StackFile | undefined {
  const path = stackFilePath(dir);
  if (!existsSync(path)) return undefined;
  return JSON.parse(readFileSync(path, 'utf8')) as StackFile;
}

export interface Connections {
  temporalAddress: string;
  namespace: string;
  databaseUrl: string;
  /** Base URL of the Web UI, for links; undefined when pointed at a server we did not start. */
  uiUrl?: string;
  taskQueue: string;
}

/**
 * Where Temporal and PostgreSQL are: TEMPORAL_ADDRESS / DATABASE_URL win, then the stack in the data folder.
 * Fails with the fix when neither says.
 */
export function resolveConnections(
  env: NodeJS.ProcessEnv = process.env,
  needs: { temporal?: boolean; db?: boolean } = { temporal: true, db: true },
): Connections {
  const stack = readStackFile();
  const temporalAddress = env.TEMPORAL_ADDRESS ?? stack?.temporal.address;
  const databaseUrl = env.DATABASE_URL ?? stack?.postgres.databaseUrl;
  const missing = [needs.temporal && !temporalAddress && 'TEMPORAL_ADDRESS', needs.db && !databaseUrl && 'DATABASE_URL']
    .filter(Boolean)
    .join(' and ');
  if (missing) {
    throw new UserError(
      `no running stack found in ${dataDir()} and ${missing} not set.\n` +
        `Start one with \`npx cronledger dev up\`, or set ${missing} (and CRONLEDGER_DATA_DIR if your stack lives elsewhere).`,
    );
  }
  const uiUrl =
    env.TEMPORAL_UI_URL ?? (stack && stack.temporal.address === temporalAddress ? stack.temporal.uiUrl : undefined);
  return {
    temporalAddress: temporalAddress ?? '',
    namespace: env.TEMPORAL_NAMESPACE ?? stack?.namespace ?? 'default',
    databaseUrl: databaseUrl ?? '',
    uiUrl,
    taskQueue: env.CRONLEDGER_TASK_QUEUE ?? DEFAULT_TASK_QUEUE,
  };
}

/** Link to a workflow in the Temporal Web UI. */
export function workflowUrl(conn: Pick<Connections, 'uiUrl' | 'namespace'>, workflowId: string, runId?: string): string | undefined {
  if (!conn.uiUrl) return undefined;
  const base = `${conn.uiUrl}/namespaces/${encodeURIComponent(conn.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
  return runId ? `${base}/${encodeURIComponent(runId)}/history` : base;
}

/** process.env without its undefined entries, the shape @temporalio/envconfig takes. */
export function definedEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
}

/** A database URL fit to print: the password, if any, is masked. */
export function redactDatabaseUrl(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '(unparseable DATABASE_URL)';
  }
}
