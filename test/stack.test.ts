import { Connection, WorkflowClient } from '@temporalio/client';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BASELINE_MIGRATION } from '../src/db/migrate';
import { isPortFree } from '../src/dev/ports';
import type { StackFile } from '../src/config';
import { processExists, processStartTime } from '../src/dev/processes';
import { writeStackFile } from '../src/dev/stack-file';
import type { StackStatus } from '../src/dev/stack';
import { startTemporal, stopTemporal } from '../src/dev/stack';
import { runCli } from './support/cli';

/**
 * The local stack as a user drives it: `dev up|status|down` through the real CLI, each stack in its own temp
 * CRONLEDGER_DATA_DIR with its own Temporal dev server, PostgreSQL cluster and workers (not the suite's shared stack).
 */

const dirs: string[] = [];

function stackDir(): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-stack-test-'));
  dirs.push(dir);
  const env: NodeJS.ProcessEnv = { ...process.env, CRONLEDGER_DATA_DIR: dir };
  // Settings that would point the CLI elsewhere, or make `dev up` skip its own PostgreSQL.
  for (const key of ['DATABASE_URL', 'TEMPORAL_ADDRESS', 'TEMPORAL_NAMESPACE', 'TEMPORAL_UI_URL', 'CRONLEDGER_TASK_QUEUE']) delete env[key];
  return { dir, env };
}

async function status(env: NodeJS.ProcessEnv): Promise<StackStatus> {
  const r = await runCli(['dev', 'status', '--json'], env);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as StackStatus;
}

async function withConnection<T>(address: string, fn: (c: Connection) => Promise<T>): Promise<T> {
  const connection = await Connection.connect({ address });
  try {
    return await fn(connection);
  } finally {
    await connection.close();
  }
}

async function migrationsIn(databaseUrl: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    return (await client.query<{ name: string }>('select name from schema_migrations order by name')).rows.map((r) => r.name);
  } finally {
    await client.end();
  }
}

/** The variables `dev env` exports, parsed the way a shell would read its single-quoted values. */
async function devEnv(env: NodeJS.ProcessEnv): Promise<Record<string, string>> {
  const r = await runCli(['dev', 'env'], env);
  expect(r.code, r.stderr).toBe(0);
  return Object.fromEntries(
    [...r.stdout.matchAll(/^export (\w+)='((?:[^']|'\\'')*)'$/gm)].map((m) => [m[1], m[2].replaceAll("'\\''", "'")]),
  );
}

/**
 * Secrets in the shell that runs `dev up` (as a developer's often are), planted in stack a: every child process gets
 * its environment by allow-list, so each must reach only the one process that needs it, or none.
 */
const PLANTED = {
  OPENAI_API_KEY: 'planted-openai-key-for-workers-only',
  ANTHROPIC_API_KEY: 'planted-anthropic-key-for-workers-only',
  CRONLEDGER_ADMIN_TOKEN: 'planted-admin-token-for-the-admin-only',
  DATABASE_SUPERUSER_URL: 'postgres://postgres:planted-superuser-password@db.example:5432/postgres',
  CRONLEDGER_OWNER_PASSWORD: 'planted-owner-password',
  CRONLEDGER_WORKER_PASSWORD: 'planted-worker-password',
  DATABASE_OPERATOR_URL: 'postgres://cronledger_operator:planted-operator-password@db.example:5432/cronledger',
  PGPASSWORD: 'planted-pgpassword',
  AWS_SECRET_ACCESS_KEY: 'planted-unrelated-secret',
};
const a = stackDir();
Object.assign(a.env, PLANTED);
const b = stackDir();
let first: StackStatus;

afterAll(async () => {
  // Whatever a failed test left running goes down too.
  for (const env of [a.env, b.env]) await runCli(['dev', 'down'], env);
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('dev up, status and down', () => {
  beforeAll(async () => {
    // Both stacks start at once, as two developers' stacks would; the second one is checked further down.
    const [r, rb] = await Promise.all([runCli(['dev', 'up', '--workers', '1'], a.env), runCli(['dev', 'up', '--workers', '0'], b.env)]);
    expect(rb.code, rb.stderr).toBe(0);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^Temporal\s+127\.0\.0\.1:\d+\s+\(started, pid \d+\)/m);
    expect(r.stdout).toMatch(/^Web UI\s+http:\/\/127\.0\.0\.1:\d+$/m);
    expect(r.stdout).toMatch(/^PostgreSQL\s+postgres:\/\/cronledger_worker:\*\*\*@127\.0\.0\.1:\d+\/cronledger\s/m);
    expect(r.stdout).toMatch(/^Workers\s+worker-1 \(started, pid \d+\)/m);
    expect(r.stdout).toMatch(/^Admin page\s+http:\/\/127\.0\.0\.1:\d+\s+\(started, pid \d+\)$/m);
    expect(r.stdout).toMatch(/^Budget sweep schedule budget-sweep, every 1 minute \(created\)$/m);
    first = await status(a.env);
  });

  it('reports every part running, with addresses, pids and the temporal binary, and each part answers', async () => {
    expect(first).toMatchObject({
      exists: true,
      dataDir: a.dir,
      temporalAddress: expect.stringMatching(/^127\.0\.0\.1:\d+$/),
      uiUrl: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/),
      adminUrl: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/),
      databaseUrl: expect.stringMatching(/^postgres:\/\/cronledger_worker:\*\*\*@127\.0\.0\.1:\d+\/cronledger$/),
      temporal: { running: true, pid: expect.any(Number), dbFile: join(a.dir, 'temporal.db') },
      postgres: { running: true, external: false, pid: expect.any(Number) },
      workers: [{ id: 'worker-1', running: true, pid: expect.any(Number) }],
      admin: { running: true, pid: expect.any(Number) },
    });
    expect(isAbsolute(first.temporalCli!) && existsSync(first.temporalCli!)).toBe(true);

    const ui = await fetch(first.uiUrl!);
    expect(ui.status).toBe(200);
    // The admin page answers, as the read-only role: the overview of the current month reads the (empty) ledger.
    const overview = await fetch(`${first.adminUrl}/api/overview`, {
      headers: { Authorization: `Bearer ${PLANTED.CRONLEDGER_ADMIN_TOKEN}` },
    });
    expect(overview.status, await overview.clone().text()).toBe(200);
    expect(((await overview.json()) as { spendUsd: string }).spendUsd).toBe('0.000000000000000000');
    expect(await migrationsIn((await devEnv(a.env)).DATABASE_URL)).toContain(BASELINE_MIGRATION);
    const pollers = await withConnection(first.temporalAddress!, async (c) =>
      (await c.workflowService.describeTaskQueue({ namespace: 'default', taskQueue: { name: 'cronledger' } })).pollers.map(
        (p) => p.identity,
      ),
    );
    expect(pollers).toContain('worker-1');
    // Each worker serves the Temporal SDK's runtime metrics on its own port.
    const metrics = await fetch(first.workers[0].metricsUrl!);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/^temporal_\w+/m);
  });

  it('leaves a running stack alone when asked to start it again', async () => {
    const r = await runCli(['dev', 'up', '--workers', '1'], a.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^Temporal\s+.*\(already running, pid \d+\)/m);
    expect(r.stdout).toMatch(/^PostgreSQL\s+.*\(already running, pid \d+\)/m);
    expect(r.stdout).toMatch(/^Budget sweep schedule budget-sweep, every 1 minute \(unchanged\)$/m);
    const again = await status(a.env);
    expect([again.temporal.pid, again.postgres.pid, again.workers.map((w) => w.pid)]).toEqual([
      first.temporal.pid,
      first.postgres.pid,
      first.workers.map((w) => w.pid),
    ]);
  });

  it('runs a second stack side by side when the data dir differs', async () => {
    const second = await status(b.env);
    expect(second.temporal.running && second.postgres.running).toBe(true);
    const ports = (s: StackStatus) => [s.temporal.port, s.temporal.uiPort, s.postgres.port];
    expect(new Set([...ports(first), ...ports(second)]).size).toBe(6);
    expect((await fetch(second.uiUrl!)).status).toBe(200);
    expect((await status(a.env)).temporal.running).toBe(true);
  });

  it('restarts Temporal alone on the same SQLite file and ports, keeping its workflows', async () => {
    const before = await status(b.env);
    const workflowId = 'survives-a-restart';
    await withConnection(before.temporalAddress!, (connection) =>
      new WorkflowClient({ connection }).start('noSuchWorkflow', { taskQueue: 'nobody-polls', workflowId }),
    );

    expect(await stopTemporal(b.dir)).toBe(before.temporal.pid);
    const stopped = await status(b.env);
    expect([stopped.temporal.running, stopped.postgres.running]).toEqual([false, true]);

    const restarted = await startTemporal(b.dir);
    expect(restarted.alreadyRunning).toBe(false);
    const after = await status(b.env);
    expect([after.temporalAddress, after.uiUrl, after.temporal.dbFile]).toEqual([
      before.temporalAddress,
      before.uiUrl,
      before.temporal.dbFile,
    ]);
    const described = await withConnection(after.temporalAddress!, (connection) =>
      new WorkflowClient({ connection }).getHandle(workflowId).describe(),
    );
    expect(described.status.name).toBe('RUNNING');
  });

  it('prints passwords only from `dev env`; every role needs its password, even on the local socket', async () => {
    const stack = JSON.parse(readFileSync(join(a.dir, 'stack.json'), 'utf8')) as StackFile;
    const passwords = Object.values(stack.postgres.passwords!);
    expect(passwords).toHaveLength(5); // superuser, owner, worker, operator, read-only role (the admin page)
    const exported = await devEnv(a.env);
    expect(exported).toMatchObject({
      TEMPORAL_ADDRESS: first.temporalAddress,
      DATABASE_URL: expect.stringMatching(/^postgres:\/\/cronledger_worker:[\w-]{20,}@127\.0\.0\.1:\d+\/cronledger$/),
      DATABASE_OPERATOR_URL: expect.stringMatching(/^postgres:\/\/cronledger_operator:[\w-]{20,}@127\.0\.0\.1:\d+\/cronledger$/),
      DATABASE_OWNER_URL: expect.stringMatching(/^postgres:\/\/cronledger_owner:[\w-]{20,}@127\.0\.0\.1:\d+\/cronledger$/),
    });
    const outputs = [
      (await runCli(['dev', 'up', '--workers', '1'], a.env)).stdout,
      (await runCli(['dev', 'status'], a.env)).stdout,
      (await runCli(['dev', 'status', '--json'], a.env)).stdout,
    ];
    for (const out of outputs) for (const pw of passwords) expect(out).not.toContain(pw);

    // Password authentication only: a wrong password is refused over TCP and over the Unix socket (trust would admit it).
    const port = stack.postgres.port;
    for (const host of ['127.0.0.1', stack.postgres.clusterDir]) {
      for (const user of ['postgres', 'cronledger_owner', 'cronledger_worker', 'cronledger_operator', 'cronledger_readonly']) {
        const client = new pg.Client({
          host,
          port,
          user,
          password: 'not-the-password',
          database: 'cronledger',
          connectionTimeoutMillis: 5_000,
        });
        await expect(client.connect().finally(() => client.end().catch(() => undefined))).rejects.toMatchObject({ code: '28P01' });
      }
    }
    expect(readFileSync(join(stack.postgres.clusterDir, 'pg_hba.conf'), 'utf8')).not.toMatch(/^\s*(local|host)\S*\s.*\btrust\b/m);
    // The superuser cannot run programs for someone who only has the worker role's password.
    const app = new pg.Client({ connectionString: exported.DATABASE_URL });
    await app.connect();
    try {
      await expect(app.query(`copy (select 1) to program 'true'`)).rejects.toMatchObject({ code: '42501' });
    } finally {
      await app.end();
    }
  });

  it('gives workers and the admin page their environment by allow-list: no other role, password, token or key', () => {
    const stack = JSON.parse(readFileSync(join(a.dir, 'stack.json'), 'utf8')) as StackFile;
    const passwords = stack.postgres.passwords!;
    const environ = (pid: number) =>
      Object.fromEntries(
        readFileSync(`/proc/${pid}/environ`, 'utf8')
          .split('\0')
          .filter(Boolean)
          .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
      ) as Record<string, string>;
    /** The planted values and stack passwords found anywhere in the environment (names or values). */
    const secretsIn = (env: Record<string, string>) => {
      const text = Object.entries(env).join('\n');
      const secrets = { ...PLANTED, ...Object.fromEntries(Object.entries(passwords).map(([role, pw]) => [`${role} password`, pw!])) };
      return Object.entries(secrets)
        .filter(([, value]) => text.includes(value))
        .map(([name]) => name)
        .sort();
    };

    const worker = environ(first.workers[0].pid);
    expect(new URL(worker.DATABASE_URL).username).toBe('cronledger_worker');
    // its model keys and its own role only: no operator URL
    expect(secretsIn(worker)).toEqual(['ANTHROPIC_API_KEY', 'OPENAI_API_KEY', 'worker password']);

    const admin = environ(first.admin.pid!);
    expect(new URL(admin.CRONLEDGER_ADMIN_DATABASE_URL).username).toBe('cronledger_readonly');
    expect(secretsIn(admin)).toEqual(['CRONLEDGER_ADMIN_TOKEN', 'readonly password']); // its token and its own role only
    expect(admin).not.toHaveProperty('DATABASE_URL');
  });

  it('writes the stack file through a fresh, exclusively created file: a symlink planted at the temporary name is not followed', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cronledger-stack-file-'));
    dirs.push(dir);
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'untouched\n');
    const stack = JSON.parse(readFileSync(join(a.dir, 'stack.json'), 'utf8')) as StackFile;
    symlinkSync(victim, join(dir, 'stack.json.tmp')); // a predictable temporary name: the write must not go through it
    writeStackFile(dir, stack);
    writeStackFile(dir, stack);
    expect(readFileSync(victim, 'utf8')).toBe('untouched\n');
    expect(JSON.parse(readFileSync(join(dir, 'stack.json'), 'utf8'))).toEqual(stack);
    expect(statSync(join(dir, 'stack.json')).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir).sort()).toEqual(['stack.json', 'stack.json.tmp', 'victim']); // no temporary file left behind
  });

  it('keeps the data dir, logs, the Temporal SQLite file and the stack file to this user', async () => {
    // As root the data dir keeps o+x so that the postgres account can reach its cluster: traverse, never read.
    const traverseOnly = process.getuid?.() === 0 ? 0o001 : 0;
    const mode = (path: string) => statSync(path).mode & 0o777;
    expect(mode(a.dir) & ~traverseOnly).toBe(0o700);
    expect(mode(join(a.dir, 'logs')) & ~traverseOnly).toBe(0o700);
    expect(mode(join(a.dir, 'postgres'))).toBe(0o700);
    const files = ['stack.json', 'temporal.db', ...readdirSync(join(a.dir, 'logs')).map((f) => join('logs', f))];
    expect(files).toEqual(expect.arrayContaining(['temporal.db', 'logs/temporal.log', 'logs/postgres.log', 'logs/worker-1.log']));
    for (const f of files) expect({ f, mode: mode(join(a.dir, f)) }).toEqual({ f, mode: 0o600 });
  });

  it.each(['-1', 'abc', '1.5'])('refuses --workers %s, naming the value, and starts nothing', async (value) => {
    const c = stackDir();
    const r = await runCli(['dev', 'up', '--workers', value], c.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`--workers "${value}" is not a worker count; use a whole number from 0 to`);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(existsSync(join(c.dir, 'stack.json'))).toBe(false);
  });

  it('stops workers, Temporal and PostgreSQL on dev down, and status then shows nothing running', async () => {
    const r = await runCli(['dev', 'down'], a.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(
      `stopped worker-1 (pid ${first.workers[0].pid}), admin page (pid ${first.admin.pid}), Temporal (pid ${first.temporal.pid}), PostgreSQL (pid ${first.postgres.pid})\n`,
    );
    const after = await status(a.env);
    expect(after).toMatchObject({ temporal: { running: false, pid: null }, postgres: { running: false, pid: null }, workers: [] });
    expect(after.adminUrl).toBeNull();
    for (const pid of [first.temporal.pid!, first.postgres.pid!, first.workers[0].pid, first.admin.pid!])
      expect(processExists(pid)).toBe(false);
    for (const port of [first.temporal.port!, first.temporal.uiPort!, first.postgres.port!]) expect(await isPortFree(port)).toBe(true);

    const again = await runCli(['dev', 'down'], a.env);
    expect(again.stdout).toBe(`nothing was running in ${a.dir}\n`);
    expect((await status(b.env)).temporal.running).toBe(true); // the other stack is untouched
  });

  it("never stops a process that is not this stack's, even when its pid is recorded there", async () => {
    // Pid reuse, staged: the stack file names pids that now belong to other processes. One is unrelated; one even has
    // the worker's command line and this stack's marker, but started at another time than the one recorded.
    const unrelated = spawn('sleep', ['600'], { stdio: 'ignore', detached: true });
    const lookalike = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', 'bin/worker.js', `--cronledger-stack=${a.dir}`], {
      stdio: 'ignore',
      detached: true,
    });
    try {
      const stack = JSON.parse(readFileSync(join(a.dir, 'stack.json'), 'utf8')) as StackFile;
      stack.temporal.pid = unrelated.pid!;
      stack.temporal.startTime = processStartTime(unrelated.pid!);
      stack.workers = [
        { pid: unrelated.pid!, log: join(a.dir, 'logs', 'worker-1.log') },
        { pid: lookalike.pid!, startTime: `${processStartTime(lookalike.pid!)}0`, log: join(a.dir, 'logs', 'worker-2.log') },
      ];
      writeFileSync(join(a.dir, 'stack.json'), JSON.stringify(stack));
      const r = await runCli(['dev', 'down'], a.env);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(`nothing was running in ${a.dir}\n`);
      expect([processExists(unrelated.pid!), processExists(lookalike.pid!)]).toEqual([true, true]);
      expect((await status(a.env)).workers.map((w) => w.running)).toEqual([]);
    } finally {
      unrelated.kill('SIGKILL');
      lookalike.kill('SIGKILL');
    }
  });
});
