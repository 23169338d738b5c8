import { findGoBinary, goBinaryCacheDir, resolveGoBinary, type GoBinary, type ResolvedBinary } from './go-install';

export { findOnPath } from './go-install';

/**
 * Finds the `temporal` CLI (its dev server runs Temporal and the Web UI locally), building it once if needed.
 * v1.5.1 is the newest release whose go.mod allows `go install` (later ones carry a replace directive).
 *
 * Its SQLite driver is raised from v1.34.1 to v1.44.3, the version Temporal itself moved to for the same bug
 * (temporalio/temporal#9198): with v1.34.1 a persistence call cancelled under load can leave the dev server's SQLite
 * connection answering every later query with "interrupted (9)", so the namespace reads as missing and nothing runs
 * until a restart (docs/decisions/dev-server-sqlite-interrupt.md).
 */
export const TEMPORAL_CLI_VERSION = 'v1.5.1';
export const TEMPORAL_CLI_SQLITE_PIN = 'modernc.org/sqlite@v1.44.3';

export const TEMPORAL_CLI: GoBinary = {
  label: 'temporal CLI',
  pkg: 'github.com/temporalio/cli/cmd/temporal',
  version: TEMPORAL_CLI_VERSION,
  binary: 'temporal',
  cacheFolder: `temporal-${TEMPORAL_CLI_VERSION}-sqlite-${TEMPORAL_CLI_SQLITE_PIN.split('@')[1]}`,
  envOverride: 'CRONLEDGER_TEMPORAL_CLI',
  expectedBuildTime: '~5-6 min on 2 cores',
  dependencyPins: [TEMPORAL_CLI_SQLITE_PIN],
};

export type TemporalCliSource = 'CRONLEDGER_TEMPORAL_CLI' | 'PATH' | 'cache' | 'built';

export interface TemporalCli {
  path: string;
  source: TemporalCliSource;
}

export function temporalCliCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return goBinaryCacheDir(TEMPORAL_CLI.cacheFolder, env);
}

/** The binary without building anything: CRONLEDGER_TEMPORAL_CLI, then PATH, then the cache. */
export function findTemporalCli(env: NodeJS.ProcessEnv = process.env): TemporalCli | undefined {
  const found = findGoBinary(TEMPORAL_CLI, env, 'temporal');
  return found && withCliSource(found);
}

/** The binary, building it into the cache with `go install` when nothing else has it (minutes, once). */
export async function resolveTemporalCli(
  env: NodeJS.ProcessEnv = process.env,
  progress: NodeJS.WriteStream = process.stderr,
): Promise<TemporalCli> {
  return withCliSource(await resolveGoBinary(TEMPORAL_CLI, env, progress, 'temporal'));
}

function withCliSource(b: ResolvedBinary): TemporalCli {
  return { path: b.path, source: b.source === 'env' ? 'CRONLEDGER_TEMPORAL_CLI' : b.source };
}
