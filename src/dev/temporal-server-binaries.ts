import { findGoBinary, resolveGoBinary, type GoBinary, type ResolvedBinary } from './go-install';

/**
 * The binaries of `dev up --temporal server`: the Temporal server (frontend, history, matching and worker services),
 * its schema tool (temporal-sql-tool, which carries the PostgreSQL schemas embedded) and the Web UI server. Both the
 * server and the UI build a binary named `server`, so each version has its own cache folder.
 * v1.29.1 and v2.42.1 are the versions inside the temporal CLI v1.5.1, so both modes run the same Temporal.
 */
export const TEMPORAL_SERVER_VERSION = 'v1.29.1';
export const TEMPORAL_UI_VERSION = 'v2.42.1';

export const TEMPORAL_SERVER: GoBinary = {
  label: 'Temporal server',
  pkg: 'go.temporal.io/server/cmd/server',
  version: TEMPORAL_SERVER_VERSION,
  binary: 'server',
  cacheFolder: `temporal-server-${TEMPORAL_SERVER_VERSION}`,
  envOverride: 'CRONLEDGER_TEMPORAL_SERVER',
  expectedBuildTime: '~3 min with a warm Go cache, more when cold',
};

export const TEMPORAL_SQL_TOOL: GoBinary = {
  label: 'Temporal schema tool',
  pkg: 'go.temporal.io/server/cmd/tools/sql',
  version: TEMPORAL_SERVER_VERSION,
  binary: 'sql',
  cacheFolder: `temporal-server-${TEMPORAL_SERVER_VERSION}`,
  envOverride: 'CRONLEDGER_TEMPORAL_SQL_TOOL',
  expectedBuildTime: '~1 min after the server',
};

export const TEMPORAL_UI_SERVER: GoBinary = {
  label: 'Temporal Web UI server',
  pkg: 'github.com/temporalio/ui-server/v2/cmd/server',
  version: TEMPORAL_UI_VERSION,
  binary: 'server',
  cacheFolder: `temporal-ui-${TEMPORAL_UI_VERSION}`,
  envOverride: 'CRONLEDGER_TEMPORAL_UI_SERVER',
  expectedBuildTime: '~20 s with a warm Go cache, minutes when cold',
};

const ALL = [TEMPORAL_SERVER, TEMPORAL_SQL_TOOL, TEMPORAL_UI_SERVER] as const;

export interface TemporalServerBinaries {
  server: string;
  sqlTool: string;
  ui: string;
}

/** The three binaries without building anything, or undefined when one is missing. */
export function findTemporalServerBinaries(env: NodeJS.ProcessEnv = process.env): TemporalServerBinaries | undefined {
  const [server, sqlTool, ui] = ALL.map((b) => findGoBinary(b, env));
  return server && sqlTool && ui ? { server: server.path, sqlTool: sqlTool.path, ui: ui.path } : undefined;
}

/** The three binaries, building the missing ones one after another (two cores: parallel builds gain nothing). */
export async function resolveTemporalServerBinaries(
  env: NodeJS.ProcessEnv = process.env,
  progress: NodeJS.WriteStream = process.stderr,
): Promise<TemporalServerBinaries & { sources: ResolvedBinary['source'][] }> {
  const resolved: ResolvedBinary[] = [];
  for (const b of ALL) resolved.push(await resolveGoBinary(b, env, progress));
  const [server, sqlTool, ui] = resolved;
  return { server: server.path, sqlTool: sqlTool.path, ui: ui.path, sources: resolved.map((r) => r.source) };
}
