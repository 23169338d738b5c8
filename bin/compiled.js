// The CLI and the worker compiled once per version of src/: esbuild (which tsx brings) bundles src/cli/main.ts and
// src/worker.ts into .cache/cli/<hash of src/, tsconfig.json, this file and esbuild's version>/, and bin/cronledger.js
// and bin/worker.js run them with plain node. Under tsx every start transformed and resolved each of its TypeScript
// modules again: about half a CPU-second of a CLI call, a second and a half of a worker's start. Packages stay external
// (resolved from node_modules as usual), each lazily imported command stays its own chunk, and `import.meta.url` keeps
// naming the source file, so paths relative to a module (repoRoot, assets, the workflow code) are the same as under tsx.
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const ENTRIES = { main: 'src/cli/main.ts', worker: 'src/worker.ts' };
const CACHE = join(root, '.cache', 'cli');
const STALE_MS = 24 * 3600 * 1000; // other versions' builds older than this are removed when a new one is written

/** The path of the compiled CLI for the current sources, compiled first if no build of them is cached. */
export const compiledCli = () => compiled('main');

/** The path of the compiled worker (src/worker.ts) for the current sources, compiled first if no build of them is cached. */
export const compiledWorker = () => compiled('worker');

async function compiled(entry) {
  const dir = join(CACHE, sourcesHash());
  const path = join(dir, `${entry}.js`);
  try {
    statSync(path);
  } catch {
    await compileInto(dir);
  }
  return path;
}

/**
 * Runs an entry point: compiled, or where no build can be written (a read-only checkout) its TypeScript source through
 * tsx. A stack trace names the TypeScript source's lines either way.
 */
export async function runCompiled(entry) {
  let path;
  try {
    path = await compiled(entry);
  } catch {
    (await import('tsx/esm/api')).register();
    await import(pathToFileURL(join(root, ENTRIES[entry])).href);
    return;
  }
  process.setSourceMapsEnabled(true);
  await import(pathToFileURL(path).href);
}

function sourcesHash() {
  const hash = createHash('sha256');
  const esbuildVersion = JSON.parse(readFileSync(createRequire(import.meta.url).resolve('esbuild/package.json'), 'utf8')).version;
  // The checkout's path too: the build holds each module's absolute URL.
  hash.update(`${root}\0esbuild ${esbuildVersion}\0`);
  const files = [...readdirSync(join(root, 'src'), { recursive: true, withFileTypes: true })]
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath ?? e.path, e.name))
    .concat(join(root, 'tsconfig.json'), fileURLToPath(import.meta.url))
    .sort();
  for (const file of files)
    hash
      .update(`${relative(root, file)}\0`)
      .update(readFileSync(file))
      .update('\0');
  return hash.digest('hex').slice(0, 16);
}

/** Builds into a private directory and renames it into place, so concurrent calls never see half a build. */
async function compileInto(dir) {
  const tmp = `${dir}.tmp-${process.pid}`;
  mkdirSync(CACHE, { recursive: true });
  try {
    await build(Object.fromEntries(Object.entries(ENTRIES).map(([name, path]) => [name, join(root, path)])), tmp);
    try {
      renameSync(tmp, dir);
    } catch (err) {
      if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err; // else another call renamed the same build first
    }
    removeStaleBuilds(dir);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/**
 * Compiles one more TypeScript entry point (a benchmark's own worker) into `outdir` exactly as the CLI and the worker
 * are compiled, so that it runs as they run; returns the compiled file's path. Run it with `node --enable-source-maps`.
 */
export async function compileScript(sourcePath, outdir) {
  const name = basename(sourcePath).replace(/\.ts$/, '');
  await build({ [name]: resolve(root, sourcePath) }, outdir);
  return join(outdir, `${name}.js`);
}

async function build(entryPoints, outdir) {
  const esbuild = await import('esbuild');
  try {
    await esbuild.build({
      entryPoints,
      outdir,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      packages: 'external',
      sourcemap: 'linked',
      logLevel: 'silent',
      plugins: [sourceModuleUrls],
    });
  } finally {
    await esbuild.stop();
  }
}

/** `import.meta.url` in a bundled module is the bundle's URL: each source module's becomes its own file's URL. */
const sourceModuleUrls = {
  name: 'source-module-urls',
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, (args) => {
      const source = readFileSync(args.path, 'utf8');
      const rest = source.replaceAll('import.meta.url', '');
      if (rest.includes('import.meta')) {
        return { errors: [{ text: `${relative(root, args.path)}: only import.meta.url is kept in the compiled CLI` }] };
      }
      return { contents: source.replaceAll('import.meta.url', JSON.stringify(pathToFileURL(args.path).href)), loader: 'ts' };
    });
  },
};

function removeStaleBuilds(current) {
  for (const name of readdirSync(CACHE)) {
    const path = join(CACHE, name);
    if (path === current) continue;
    try {
      if (Date.now() - statSync(path).mtimeMs > STALE_MS) rmSync(path, { recursive: true, force: true });
    } catch {
      // removed by another call meanwhile
    }
  }
}
