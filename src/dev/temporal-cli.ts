import { spawn } from 'node:child_process';
import { accessSync, constants, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { UserError } from '../errors';
import { processExists } from './processes';

/**
 * Finds the `temporal` CLI (its dev server runs Temporal and the Web UI locally), building it once if needed.
 * v1.5.1 is the newest release whose go.mod allows `go install` (later ones carry a replace directive).
 */
export const TEMPORAL_CLI_VERSION = 'v1.5.1';
const TEMPORAL_CLI_PACKAGE = 'github.com/temporalio/cli/cmd/temporal';

export type TemporalCliSource = 'CRONLEDGER_TEMPORAL_CLI' | 'PATH' | 'cache' | 'built';

export interface TemporalCli {
  path: string;
  source: TemporalCliSource;
}

/** Outside the checkout, so a fresh clone or `git clean` does not cost another multi-minute build. */
export function temporalCliCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'cronledger', `temporal-${TEMPORAL_CLI_VERSION}`);
}

/** An executable called `name` on PATH, if any. */
export function findOnPath(name: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (dir && isExecutable(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/** The binary without building anything: env override, then PATH, then the cache. */
export function findTemporalCli(env: NodeJS.ProcessEnv = process.env): TemporalCli | undefined {
  const explicit = env.CRONLEDGER_TEMPORAL_CLI;
  if (explicit) {
    if (!isExecutable(explicit)) {
      throw new UserError(
        `CRONLEDGER_TEMPORAL_CLI=${explicit} is not an executable file; point it at a temporal binary or unset it to use PATH or the cache`,
      );
    }
    return { path: resolve(explicit), source: 'CRONLEDGER_TEMPORAL_CLI' }; // absolute: @temporalio/testing requires it
  }
  const onPath = findOnPath('temporal', env);
  if (onPath) return { path: onPath, source: 'PATH' };
  const cached = join(temporalCliCacheDir(env), 'temporal');
  if (isExecutable(cached)) return { path: cached, source: 'cache' };
  return undefined;
}

/** The binary, building it into the cache with `go install` when nothing else has it (minutes, once). */
export async function resolveTemporalCli(
  env: NodeJS.ProcessEnv = process.env,
  progress: NodeJS.WriteStream = process.stderr,
): Promise<TemporalCli> {
  return findTemporalCli(env) ?? { path: await buildTemporalCli(env, progress), source: 'built' };
}

async function buildTemporalCli(env: NodeJS.ProcessEnv, progress: NodeJS.WriteStream): Promise<string> {
  const go = findOnPath('go', env) ?? ['/usr/local/go/bin/go', '/usr/lib/go/bin/go'].find(isExecutable);
  if (!go) {
    throw new UserError(
      `the temporal CLI was not found (not in CRONLEDGER_TEMPORAL_CLI, not on PATH, not in ${temporalCliCacheDir(env)}) ` +
        `and Go is not installed to build it.\nInstall Go 1.21 or newer (https://go.dev/dl/; it fetches the 1.25 toolchain the CLI needs), ` +
        `or set CRONLEDGER_TEMPORAL_CLI to an existing temporal binary.`,
    );
  }
  const cacheDir = temporalCliCacheDir(env);
  mkdirSync(cacheDir, { recursive: true });
  removeAbandonedBuilds(cacheDir);
  // go install writes into GOBIN; a private GOBIN plus rename means a killed build never leaves a half binary.
  const gobin = mkdtempSync(join(cacheDir, `.build-${process.pid}-`));
  const target = join(cacheDir, 'temporal');
  try {
    await runGoInstall(go, { ...env, GOBIN: gobin }, cacheDir, progress);
    renameSync(join(gobin, 'temporal'), target);
  } finally {
    rmSync(gobin, { recursive: true, force: true });
  }
  return target;
}

function runGoInstall(go: string, env: NodeJS.ProcessEnv, cwd: string, out: NodeJS.WriteStream): Promise<void> {
  const started = Date.now();
  const tty = Boolean(out.isTTY);
  let compiled = 0;
  let downloaded = 0;
  const tail: string[] = [];
  const line = () =>
    `temporal CLI ${TEMPORAL_CLI_VERSION}: building with go (first time only, ~4-5 min on 2 cores): ` +
    `${downloaded} modules downloaded, ${compiled} packages compiled, ${formatElapsed(Date.now() - started)}`;
  // A terminal gets one line redrawn every second; a log gets a fresh line every 10 s.
  const draw = () => out.write(tty ? `\r${line()}` : `${line()}\n`);
  out.write(`${line()}\n`);
  const timer = setInterval(draw, tty ? 1000 : 10_000);

  return new Promise((resolve, reject) => {
    const child = spawn(go, ['install', '-v', `${TEMPORAL_CLI_PACKAGE}@${TEMPORAL_CLI_VERSION}`], {
      cwd,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let pending = '';
    const onData = (chunk: Buffer) => {
      pending += chunk.toString('utf8');
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const l of lines) {
        if (l.startsWith('go: downloading ')) downloaded++;
        else if (l.trim() && !l.startsWith('go: ')) compiled++; // -v prints each package path as it is built
        tail.push(l);
        if (tail.length > 30) tail.shift();
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', (err) => finish(new UserError(`could not run ${go}: ${err.message}`)));
    child.on('close', (code, signal) => {
      if (code === 0) return finish();
      finish(
        new UserError(
          `building the temporal CLI failed (go install exited with ${signal ?? code}). Last output:\n${tail.join('\n')}\n` +
            `Fix the Go setup (proxy access, disk space) and retry, or set CRONLEDGER_TEMPORAL_CLI to an existing temporal binary.`,
        ),
      );
    });
    function finish(err?: Error) {
      clearInterval(timer);
      if (tty) out.write('\n');
      if (err) reject(err);
      else {
        out.write(`temporal CLI ${TEMPORAL_CLI_VERSION}: built in ${formatElapsed(Date.now() - started)}\n`);
        resolve();
      }
    }
  });
}

/** A build killed mid-way leaves its private GOBIN (up to 250 MB); remove those whose process is gone. */
function removeAbandonedBuilds(cacheDir: string): void {
  for (const name of readdirSync(cacheDir)) {
    const pid = /^\.build-(\d+)-/.exec(name)?.[1];
    if (pid && !processExists(Number(pid))) rmSync(join(cacheDir, name), { recursive: true, force: true });
  }
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile(); // directories pass the X_OK test too
  } catch {
    return false;
  }
}

function formatElapsed(ms: number): string {
  const s = Math.floor(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`;
}
