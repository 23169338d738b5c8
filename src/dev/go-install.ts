import { spawn } from 'node:child_process';
import { accessSync, constants, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { UserError } from '../errors';
import { processExists } from './processes';

/**
 * Go binaries that the stack runs (the temporal CLI, the Temporal server and its schema tool, the Web UI server), each
 * found through an environment override, then the cache under ~/.cache/cronledger, else built there once with
 * `go install` from the Go module proxy, with progress shown.
 */

export interface GoBinary {
  /** What the user reads in progress lines and errors, e.g. `temporal CLI`. */
  label: string;
  /** The Go package and version to `go install`. */
  pkg: string;
  version: string;
  /** The file name go install writes (the package's last path element). */
  binary: string;
  /** The folder under ~/.cache/cronledger, one per package and version (the server and the UI both build a `server`). */
  cacheFolder: string;
  /** The environment variable that points at an existing binary instead. */
  envOverride: string;
  /** Shown while building, e.g. `~4-5 min on 2 cores`. */
  expectedBuildTime: string;
}

export type GoBinarySource = 'env' | 'PATH' | 'cache' | 'built';

export interface ResolvedBinary {
  path: string;
  source: GoBinarySource;
}

/** Outside the checkout, so a fresh clone or `git clean` does not cost another multi-minute build. */
export function goBinaryCacheDir(folder: string, env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'cronledger', folder);
}

/** An executable called `name` on PATH, if any. */
export function findOnPath(name: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (dir && isExecutable(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/** The binary without building anything: the env override, then (when given a name) PATH, then the cache. */
export function findGoBinary(b: GoBinary, env: NodeJS.ProcessEnv = process.env, pathName?: string): ResolvedBinary | undefined {
  const explicit = env[b.envOverride];
  if (explicit) {
    if (!isExecutable(explicit)) {
      throw new UserError(
        `${b.envOverride}=${explicit} is not an executable file; point it at a ${b.label} binary (${b.pkg}@${b.version}) or unset it to use the cache`,
      );
    }
    return { path: resolve(explicit), source: 'env' }; // absolute: @temporalio/testing requires it
  }
  const onPath = pathName ? findOnPath(pathName, env) : undefined;
  if (onPath) return { path: onPath, source: 'PATH' };
  const cached = join(goBinaryCacheDir(b.cacheFolder, env), b.binary);
  if (isExecutable(cached)) return { path: cached, source: 'cache' };
  return undefined;
}

/** The binary, building it into the cache with `go install` when nothing else has it (minutes, once). */
export async function resolveGoBinary(
  b: GoBinary,
  env: NodeJS.ProcessEnv = process.env,
  progress: NodeJS.WriteStream = process.stderr,
  pathName?: string,
): Promise<ResolvedBinary> {
  return findGoBinary(b, env, pathName) ?? { path: await buildGoBinary(b, env, progress), source: 'built' };
}

async function buildGoBinary(b: GoBinary, env: NodeJS.ProcessEnv, progress: NodeJS.WriteStream): Promise<string> {
  const cacheDir = goBinaryCacheDir(b.cacheFolder, env);
  const go = findOnPath('go', env) ?? ['/usr/local/go/bin/go', '/usr/lib/go/bin/go'].find(isExecutable);
  if (!go) {
    throw new UserError(
      `the ${b.label} was not found (not in ${b.envOverride}, not in ${cacheDir}) and Go is not installed to build it.\n` +
        `Install Go 1.21 or newer (https://go.dev/dl/; it fetches the toolchain the module needs), ` +
        `or set ${b.envOverride} to an existing ${b.label} binary.`,
    );
  }
  mkdirSync(cacheDir, { recursive: true });
  removeAbandonedBuilds(cacheDir);
  // go install writes into GOBIN; a private GOBIN plus rename means a killed build never leaves a half binary.
  const gobin = mkdtempSync(join(cacheDir, `.build-${process.pid}-`));
  const target = join(cacheDir, b.binary);
  try {
    await runGoInstall(go, b, { ...env, GOBIN: gobin }, cacheDir, progress);
    renameSync(join(gobin, b.binary), target);
  } finally {
    rmSync(gobin, { recursive: true, force: true });
  }
  return target;
}

function runGoInstall(go: string, b: GoBinary, env: NodeJS.ProcessEnv, cwd: string, out: NodeJS.WriteStream): Promise<void> {
  const started = Date.now();
  const tty = Boolean(out.isTTY);
  let compiled = 0;
  let downloaded = 0;
  const tail: string[] = [];
  const line = () =>
    `${b.label} ${b.version}: building with go (first time only, ${b.expectedBuildTime}): ` +
    `${downloaded} modules downloaded, ${compiled} packages compiled, ${formatElapsed(Date.now() - started)}`;
  // A terminal gets one line redrawn every second; a log gets a fresh line every 10 s.
  const draw = () => out.write(tty ? `\r${line()}` : `${line()}\n`);
  out.write(`${line()}\n`);
  const timer = setInterval(draw, tty ? 1000 : 10_000);

  return new Promise((resolve, reject) => {
    const child = spawn(go, ['install', '-v', `${b.pkg}@${b.version}`], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
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
          `building the ${b.label} failed (go install exited with ${signal ?? code}). Last output:\n${tail.join('\n')}\n` +
            `Fix the Go setup (proxy access, disk space) and retry, or set ${b.envOverride} to an existing ${b.label} binary.`,
        ),
      );
    });
    function finish(err?: Error) {
      clearInterval(timer);
      if (tty) out.write('\n');
      if (err) reject(err);
      else {
        out.write(`${b.label} ${b.version}: built in ${formatElapsed(Date.now() - started)}\n`);
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

export function isExecutable(path: string): boolean {
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
