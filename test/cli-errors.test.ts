import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redactDatabaseUrl, type StackFile } from '../src/config';
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

/**
 * The CLI imports only the module of the command it runs (src/cli/main.ts). The help, a group's help and a mistyped
 * command must still see what they saw with every module loaded.
 */
describe('the command list', () => {
  const COMMANDS = ['dev', 'db', 'tasks', 'backfill', 'runs', 'prices', 'budgets', 'forecast', 'limits', 'ledger', 'reconcile', 'report'];
  const commandsOf = (help: string) => [...(help.split('Commands:')[1] ?? '').matchAll(/^ {2}([a-z-]+)/gm)].map((m) => m[1]);

  it('--help lists every command, in order', async () => {
    const r = await runCli(['--help'], env);
    expect(r.code, r.stderr).toBe(0);
    const listed = commandsOf(r.stdout);
    expect(listed.filter((c) => COMMANDS.includes(c))).toEqual(COMMANDS);
    expect(listed).toEqual(expect.arrayContaining(['rollups', 'admin', 'help']));
  });

  it("a group's --help lists its subcommands", async () => {
    const r = await runCli(['tasks', '--help'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^Usage: cronledger tasks /m);
    expect(commandsOf(r.stdout)).toEqual(['apply', 'list', 'pause', 'resume', 'delete', 'trigger', 'help']);
  });

  it('a mistyped command is refused with the nearest name', async () => {
    const r = await runCli(['taks', 'list'], env);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("unknown command 'taks'");
    expect(r.stderr).toContain('Did you mean tasks?');
  });
});

describe('the URL redactor', () => {
  it.each([
    ['postgres://app:pw-in-user@db:5432/x', 'postgres://app:***@db:5432/x'],
    ['postgres://app@db:5432/x?password=pw-in-query&sslmode=require', 'postgres://app@db:5432/x?password=***&sslmode=require'],
    ['postgres://app@db/x?sslpassword=pw-ssl', 'postgres://app@db/x?sslpassword=***'],
    ['postgres://app:pw@[not a url', '(unparseable URL, not shown: it may hold a password)'],
  ])('hides the secret in %s', (url, shown) => {
    expect(redactDatabaseUrl(url)).toBe(shown);
  });

  it('is used by `dev status --json` on an external DATABASE_URL, in the user part and as ?password=', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cronledger-external-'));
    const stack: StackFile = {
      temporal: {
        address: '127.0.0.1:1',
        uiUrl: 'http://127.0.0.1:1',
        port: 1,
        uiPort: 1,
        pid: 0,
        cli: '/nonexistent',
        dbFile: join(dir, 'temporal.db'),
      },
      postgres: {
        databaseUrl: 'postgres://app:planted-user-pw@127.0.0.1:1/x?password=planted-query-pw',
        ownerDatabaseUrl: null,
        port: 1,
        clusterDir: '',
        external: true,
      },
      namespace: 'default',
      workers: [],
    };
    writeFileSync(join(dir, 'stack.json'), JSON.stringify(stack), { mode: 0o600 });
    for (const args of [
      ['dev', 'status', '--json'],
      ['dev', 'status'],
    ]) {
      const r = await runCli(args, { ...env, CRONLEDGER_DATA_DIR: dir });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain('postgres://app:***@127.0.0.1:1/x?password=***');
      expect(r.stdout).not.toMatch(/planted-(user|query)-pw/);
    }
  });

  it('is used on ?password= in error messages too', async () => {
    const r = await runCli(['runs'], { ...env, DATABASE_URL: 'postgres://app@127.0.0.1:1/x?password=planted-query-secret' });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('password=***');
    expect(r.stderr).not.toContain('planted-query-secret');
  });
});

/**
 * A host that never answers: a socket that takes connections and then says nothing, like a blackholed address
 * (10.255.255.1 is no use here: without a route it is refused at once). Each command must give up with the fix
 * after its connect timeout, not wait for the kernel's two minutes (runCli fails the test long before that).
 */
describe('a host that never answers', () => {
  let silent: Server;
  const sockets: Socket[] = [];
  let address = '';

  beforeAll(async () => {
    silent = createServer((s) => void sockets.push(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    address = `127.0.0.1:${(silent.address() as { port: number }).port}`;
  });

  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
  });

  it('as DATABASE_URL: a clear error naming the variable, after the connect timeout', async () => {
    const r = await runCli(['runs'], { ...env, DATABASE_URL: `postgres://app:planted-pw@${address}/cronledger` });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`cannot reach PostgreSQL at postgres://app:***@${address}/cronledger (no answer within 5s)`);
    expect(r.stderr).toContain('fix DATABASE_URL');
    expect(r.stderr).not.toContain('planted-pw');
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it('as TEMPORAL_ADDRESS: a clear error naming the variable, after the connect timeout', async () => {
    const r = await runCli(['tasks', 'list'], { ...env, TEMPORAL_ADDRESS: address });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(new RegExp(`cannot reach Temporal at ${address} .*fix TEMPORAL_ADDRESS`));
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it('as DATABASE_OWNER_URL for `db migrate`', async () => {
    const r = await runCli(['db', 'migrate'], { ...env, DATABASE_OWNER_URL: `postgres://owner:planted-pw@${address}/cronledger` });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('(no answer within 5s)');
    expect(r.stderr).toContain('fix DATABASE_OWNER_URL');
    expect(r.stderr).not.toContain('planted-pw');
  });
});
