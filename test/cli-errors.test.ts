import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { runCli } from './support/cli';

/** Commands pointed at services that are not there say which one and how to fix it, without a stack trace. */
const env = {
  ...process.env,
  CRONLEDGER_DATA_DIR: mkdtempSync(join(tmpdir(), 'cronledger-nostack-')),
  TEMPORAL_ADDRESS: '127.0.0.1:1',
  DATABASE_URL: 'postgres://postgres:secret@127.0.0.1:1/cronledger',
};

it.each([
  [['runs'], /cannot reach PostgreSQL at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/cronledger .* fix DATABASE_URL/],
  [['ledger', '--json'], /cannot reach PostgreSQL/],
  [['tasks', 'apply', 'examples/tasks.json'], /cannot reach Temporal at 127\.0\.0\.1:1 .* fix TEMPORAL_ADDRESS/],
])('%j', async (args, message) => {
  const r = await runCli(args, env);
  expect(r.code).not.toBe(0);
  expect(r.stderr).toMatch(message);
  expect(r.stderr).not.toContain('secret');
  expect(r.stderr).not.toMatch(/\n\s+at /);
});

it('with no stack and no environment, names both variables and `dev up`', async () => {
  const { TEMPORAL_ADDRESS: _t, DATABASE_URL: _d, ...bare } = env;
  const r = await runCli(['tasks', 'list'], bare);
  expect(r.code).not.toBe(0);
  expect(r.stderr).toMatch(/no running stack found in .* TEMPORAL_ADDRESS and DATABASE_URL not set/);
  expect(r.stderr).toContain('npx cronledger dev up');
});
