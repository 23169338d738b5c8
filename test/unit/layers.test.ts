import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { expect, it } from 'vitest';

/**
 * The house reads top to bottom, and an import may only run down (or stay within its layer). docs/development.md's "Layers"
 * section lists the same order. A new top-level module must be placed here, or this test fails on it.
 */
const LAYERS: string[][] = [
  // the worker process, like the CLI, puts the parts together (its activities get the task schedules' slot times)
  ['cli', 'admin', 'worker.ts'],
  ['schedules', 'dev'],
  ['tasks'],
  ['worker-setup.ts'],
  ['workflows'],
  ['activities'],
  ['reports'],
  ['forecast'],
  ['budgets'],
  ['ledger', 'ratelimits', 'reconcile'],
  ['models', 'db'],
  [
    'config.ts',
    'constants.ts',
    'client.ts',
    'payload-codec.ts',
    'money.ts',
    'errors.ts',
    'time-zone.ts',
    'text-table.ts',
    'progress-bar.ts',
    'hash.ts',
    'input-file.ts',
    'loopback.ts',
    'json-number-text.ts',
    'temporal-reads.ts',
    'task-note.ts',
  ],
];

const src = resolve(import.meta.dirname, '..', '..', 'src');

function layerOf(file: string): number {
  const parts = relative(src, file).split('/');
  // An import specifier has no extension: `../errors` names src/errors.ts.
  const top = parts.length === 1 && !parts[0].endsWith('.ts') && !LAYERS.flat().includes(parts[0]) ? `${parts[0]}.ts` : parts[0];
  const index = LAYERS.findIndex((names) => names.includes(top));
  if (index < 0)
    throw new Error(`src/${top} has no layer: add it to LAYERS in test/unit/layers.test.ts and to docs/development.md's Layers`);
  return index;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sourceFiles(path) : name.endsWith('.ts') ? [path] : [];
  });
}

/** Every relative import (value, type, re-export or dynamic) of every file under src, with both ends' layers. */
export function upwardImports(): string[] {
  const upward: string[] = [];
  for (const file of sourceFiles(src)) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^import\s+)'(\.{1,2}\/[^']+)'/gm)) {
      const target = resolve(dirname(file), m[1]);
      if (layerOf(target) < layerOf(file)) upward.push(`${relative(src, file)} imports ${relative(src, target)}`);
    }
  }
  return upward;
}

it('no module imports a layer above its own', () => {
  expect(upwardImports()).toEqual([]);
});

it('the check sees imports: the CLI imports lower layers, so its files have downward imports', () => {
  const main = readFileSync(join(src, 'cli', 'main.ts'), 'utf8');
  expect(main).toMatch(/import\('\.\/commands\//);
  expect(layerOf(join(src, 'cli', 'main.ts'))).toBeLessThan(layerOf(join(src, 'errors.ts')));
});
