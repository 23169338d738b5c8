import { findGoBinary, goBinaryCacheDir, resolveGoBinary, type GoBinary, type ResolvedBinary } from './go-install';

export { findOnPath } from './go-install';

/**
 * Finds the `temporal` CLI (its dev server runs Temporal and the Web UI locally), building it once if needed.
 * v1.5.1 is the newest release whose go.mod allows `go install` (later ones carry a replace directive).
 */
export const TEMPORAL_CLI_VERSION = 'v1.5.1';

export const TEMPORAL_CLI: GoBinary = {
  label: 'temporal CLI',
  pkg: 'github.com/temporalio/cli/cmd/temporal',
  version: TEMPORAL_CLI_VERSION,
  binary: 'temporal',
  cacheFolder: `temporal-${TEMPORAL_CLI_VERSION}`,
  envOverride: 'CRONLEDGER_TEMPORAL_CLI',
  expectedBuildTime: '~4-5 min on 2 cores',
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
