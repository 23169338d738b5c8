import { spawnSync } from 'node:child_process';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compiledCli, compiledWorker } from '../../bin/compiled.js';
import { repoRoot } from '../../src/config';
import { runCli } from '../support/cli';

// bin/cronledger.js and bin/worker.js run the CLI and the worker compiled once per version of src/ (bin/compiled.js)
// instead of through tsx.
describe('the compiled CLI and worker', () => {
  const envWithoutDataDir = () => {
    const env = { ...process.env };
    delete env.CRONLEDGER_DATA_DIR;
    return env;
  };

  it('is cached under .cache/cli/ and compiled once for the same sources', async () => {
    const main = await compiledCli();
    expect(relative(repoRoot(), main)).toMatch(/^\.cache\/cli\/[0-9a-f]{16}\/main\.js$/);
    expect(await compiledCli()).toBe(main);
    expect(await compiledWorker()).toBe(join(main, '..', 'worker.js'));
  });

  it('keeps each module its source file URL, so paths relative to a module stay those of the checkout', async () => {
    // repoRoot() is src/config.ts's directory's parent: in a bundle without the source URLs it would be .cache/cli.
    const direct = spawnSync(process.execPath, [await compiledCli(), 'dev', 'status'], { env: envWithoutDataDir(), encoding: 'utf8' });
    expect(direct.stdout).toContain(`no stack in ${join(repoRoot(), '.cronledger')};`);
    const r = await runCli(['dev', 'status'], envWithoutDataDir());
    expect(r.stdout).toBe(direct.stdout);
  });

  it('prints what the TypeScript sources print through tsx', async () => {
    const tsx = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'tasks', '--help'], {
      cwd: repoRoot(),
      encoding: 'utf8',
    });
    const r = await runCli(['tasks', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Usage: cronledger tasks');
    expect({ code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ code: tsx.status, stdout: tsx.stdout, stderr: tsx.stderr });
  });

  it("runs the worker: with no stack to connect to it stops with the fix, naming the checkout's data dir", () => {
    const env = { ...envWithoutDataDir(), TEMPORAL_ADDRESS: '', DATABASE_URL: '' };
    const compiled = spawnSync(process.execPath, ['bin/worker.js'], { cwd: repoRoot(), env, encoding: 'utf8' });
    expect(compiled.status).toBe(1);
    expect(compiled.stderr).toContain(`worker failed: no running stack found in ${join(repoRoot(), '.cronledger')} `);
  });
});
