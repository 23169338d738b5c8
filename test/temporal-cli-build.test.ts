import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { findOnPath } from '../src/dev/go-install';
import { findTemporalCli, TEMPORAL_CLI_SQLITE_PIN } from '../src/dev/temporal-cli';

/**
 * The dev server the tests (and `dev up`) run is the temporal CLI built with the SQLite driver raised past the bug that
 * wedges it under load ("interrupted (9)" on every query; docs/decisions/dev-server-sqlite-interrupt.md). `go version -m`
 * reads the module versions the binary was linked with.
 */
it('the temporal CLI that runs the dev server is linked with the pinned SQLite driver', async () => {
  const cli = findTemporalCli();
  expect(cli, 'no temporal CLI found; run ./scripts/install.sh').toBeDefined();
  const go = findOnPath('go') ?? '/usr/local/go/bin/go';
  const { stdout } = await promisify(execFile)(go, ['version', '-m', cli!.path]);
  const [module, version] = TEMPORAL_CLI_SQLITE_PIN.split('@');
  const linked = /^\s*dep\s+(\S+)\s+(\S+)/gm;
  const deps = new Map([...stdout.matchAll(linked)].map((m) => [m[1], m[2]]));
  expect(
    deps.get(module!),
    `${cli!.path} (found through ${cli!.source}) is linked with ${module} ${deps.get(module!)}; ` +
      `remove it from CRONLEDGER_TEMPORAL_CLI or PATH so that ./scripts/install.sh builds the pinned one`,
  ).toBe(version);
});
