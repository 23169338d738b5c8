import { spawn } from 'node:child_process';
import { accessSync, constants, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { UserError } from '../errors';
import { processExists } from './processes';

/**
 * Go binaries that the stack runs (the temporal CLI, the Temporal server and its schema tool, the Web UI server), each
 * found through an environment override, then the cache under ~/.cache/cronledger, else built there once from the Go
 * module proxy, with progress shown: `go install pkg@version`, or, for a binary with dependency pins, `go build` in a
 * scratch module that requires the package and the pins (go install can't raise a dependency's version).
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
  /** Dependencies raised above what the package's go.mod requires (`module@version`), each for a bug it fixes. */
  dependencyPins?: string[];
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
    await runGoBuild(go, b, { ...env, GOBIN: gobin }, gobin, progress);
    renameSync(join(gobin, b.binary), target);
  } finally {
    rmSync(gobin, { recursive: true, force: true });
  }
  return target;
}

/** Builds b into gobin: go install, or with pins go get + go build in a scratch module under gobin. */
async function runGoBuild(go: string, b: GoBinary, env: NodeJS.ProcessEnv, gobin: string, out: NodeJS.WriteStream): Promise<void> {
  const pins = b.dependencyPins ?? [];
  const progress = buildProgress(b, out);
  try {
    if (pins.length === 0) {
      await runGo(go, ['install', '-v', `${b.pkg}@${b.version}`], gobin, env, b, progress);
    } else {
      const moduleDir = join(gobin, 'module');
      mkdirSync(moduleDir);
      writeFileSync(join(moduleDir, 'go.mod'), 'module cronledger.local/build\n\ngo 1.21\n');
      // A build-tagged import keeps the package required (and its go.sum lines) once go get has added it.
      writeFileSync(join(moduleDir, 'tools.go'), `//go:build tools\n\npackage tools\n\nimport _ "${b.pkg}"\n`);
      const moduleEnv = { ...env, GOFLAGS: '-mod=mod' };
      await runGo(go, ['get', `${b.pkg}@${b.version}`, ...pins], moduleDir, moduleEnv, b, progress);
      await runGo(go, ['build', '-v', '-o', join(gobin, b.binary), b.pkg], moduleDir, moduleEnv, b, progress);
    }
    progress.done();
  } catch (err) {
    progress.done(err as Error);
    throw err;
  }
}

interface BuildProgress {
  onLine(line: string): void;
  tail: string[];
  done(err?: Error): void;
}

function buildProgress(b: GoBinary, out: NodeJS.WriteStream): BuildProgress {
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
  return {
    tail,
    onLine(l) {
      if (l.startsWith('go: downloading ')) downloaded++;
      else if (l.trim() && !l.startsWith('go: ')) compiled++; // -v prints each package path as it is built
      tail.push(l);
      if (tail.length > 30) tail.shift();
    },
    done(err) {
      clearInterval(timer);
      if (tty) out.write('\n');
      if (!err) out.write(`${b.label} ${b.version}: built in ${formatElapsed(Date.now() - started)}\n`);
    },
  };
}

function runGo(go: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, b: GoBinary, progress: BuildProgress): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(go, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let pending = '';
    const onData = (chunk: Buffer) => {
      pending += chunk.toString('utf8');
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const l of lines) progress.onLine(l);
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', (err) => reject(new UserError(`could not run ${go}: ${err.message}`)));
    child.on('close', (code, signal) => {
      if (code === 0) return resolve();
      reject(
        new UserError(
          `building the ${b.label} failed (go ${args[0]} exited with ${signal ?? code}). Last output:\n${progress.tail.join('\n')}\n` +
            `Fix the Go setup (proxy access, disk space) and retry, or set ${b.envOverride} to an existing ${b.label} binary.`,
        ),
      );
    });
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
