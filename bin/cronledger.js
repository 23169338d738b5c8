#!/usr/bin/env node
// Runs the CLI compiled from src/ (bin/compiled-cli.js: compiled on the first call after src/ changes, so there is no
// build step to forget), or through tsx where no build can be written (a read-only checkout).
import { pathToFileURL } from 'node:url';

let main;
try {
  main = await (await import('./compiled-cli.js')).compiledCli();
} catch {
  main = undefined;
}
if (main) {
  process.setSourceMapsEnabled(true); // a stack trace names the TypeScript source's lines, as under tsx
  await import(pathToFileURL(main).href);
} else {
  (await import('tsx/esm/api')).register();
  await import('../src/cli/main.ts');
}
