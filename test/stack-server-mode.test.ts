import { Client, Connection, type ConnectionOptions, type TLSConfig } from '@temporalio/client';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { SEARCH_ATTRIBUTES } from '../src/constants';
import { processExists } from '../src/dev/processes';
import type { StackStatus } from '../src/dev/stack';
import { runCli } from './support/cli';
import { waitFor } from './support/wait';
import { describeSchedule } from '../src/schedules/describe-schedule';

/**
 * `dev up --temporal server` as a user drives it, through the real CLI, in its own temp CRONLEDGER_DATA_DIR: the
 * Temporal server's four services and the Web UI server as separate processes on the stack's own PostgreSQL.
 */

const dir = mkdtempSync(join(tmpdir(), 'cronledger-server-mode-'));
const env: NodeJS.ProcessEnv = { ...process.env, CRONLEDGER_DATA_DIR: dir };
for (const key of [
  'DATABASE_URL',
  'DATABASE_OWNER_URL',
  'TEMPORAL_ADDRESS',
  'TEMPORAL_NAMESPACE',
  'TEMPORAL_UI_URL',
  'CRONLEDGER_TASK_QUEUE',
])
  delete env[key];
const PARTS = ['history', 'matching', 'frontend', 'worker', 'ui'];
let first: StackStatus;
let triggeredRun: string;

afterAll(async () => {
  await runCli(['dev', 'down'], env); // whatever a failed test left running
  rmSync(dir, { recursive: true, force: true });
});

async function status(): Promise<StackStatus> {
  const r = await runCli(['dev', 'status', '--json'], env);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as StackStatus;
}

async function devEnv(): Promise<Record<string, string>> {
  const r = await runCli(['dev', 'env'], env);
  return Object.fromEntries([...r.stdout.matchAll(/^export (\w+)='([^']*)'$/gm)].map((m) => [m[1], m[2]]));
}

/** Connection options with the stack's client certificate, from the TEMPORAL_TLS_* lines `dev env` prints. */
async function withStackCertificate(): Promise<ConnectionOptions> {
  const vars = await devEnv();
  return {
    address: vars.TEMPORAL_ADDRESS,
    tls: {
      serverNameOverride: vars.TEMPORAL_TLS_SERVER_NAME,
      serverRootCACertificate: readFileSync(vars.TEMPORAL_TLS_SERVER_CA_CERT_PATH),
      clientCertPair: { crt: readFileSync(vars.TEMPORAL_TLS_CLIENT_CERT_PATH), key: readFileSync(vars.TEMPORAL_TLS_CLIENT_KEY_PATH) },
    },
  };
}

/** Connects and asks the frontend something; rejects when the handshake or the call fails. */
async function systemInfo(options: ConnectionOptions): Promise<void> {
  const connection = await Connection.connect({ ...options, connectTimeout: '5s' });
  try {
    await connection.withDeadline(Date.now() + 5_000, () => connection.workflowService.getSystemInfo({}));
  } finally {
    await connection.close();
  }
}

describe('dev up --temporal server', () => {
  it('runs frontend, history, matching, worker and the Web UI as five processes, each shown by dev status', async () => {
    const up = await runCli(['dev', 'up', '--temporal', 'server', '--workers', '1'], env);
    expect(up.code, up.stderr).toBe(0);
    expect(up.stdout).toMatch(
      /^Temporal\s+127\.0\.0\.1:\d+\s+\(server on PostgreSQL, started: history \d+, matching \d+, frontend \d+, worker \d+, ui \d+\)$/m,
    );

    first = await status();
    expect(first.temporal.mode).toBe('server');
    expect(first.temporal.services.map((p) => [p.name, p.running])).toEqual(PARTS.map((name) => [name, true]));
    const pids = first.temporal.services.map((p) => p.pid!);
    expect(new Set(pids).size).toBe(5);
    for (const pid of pids) expect(processExists(pid)).toBe(true);
    expect(first.temporal.pid).toBe(first.temporal.services.find((p) => p.name === 'frontend')!.pid);
    expect((await fetch(first.uiUrl!)).ok).toBe(true);
    // each service serves its own Prometheus metrics, on the port dev status shows
    for (const p of first.temporal.services.filter((s) => s.name !== 'ui')) {
      const metrics = await fetch(p.metricsUrl!).then((r) => r.text());
      expect(metrics, p.name).toContain(`service_name="${p.name}"`);
    }

    const connection = await Connection.connect(await withStackCertificate());
    try {
      const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace: 'default' });
      expect(Object.keys(customAttributes ?? {})).toEqual(expect.arrayContaining(Object.values(SEARCH_ATTRIBUTES)));
    } finally {
      await connection.close();
    }
  });

  it("requires a client certificate at the frontend: without one a client is refused, with the stack's it connects", async () => {
    const withCert = await withStackCertificate();
    expect(withCert.address).toBe(first.temporalAddress);
    await expect(systemInfo(withCert)).resolves.toBeUndefined();
    // No TLS at all, and TLS that trusts the frontend but shows no certificate: both refused before any request.
    await expect(systemInfo({ address: withCert.address })).rejects.toThrow();
    const { clientCertPair: _dropped, ...serverOnly } = withCert.tls as TLSConfig;
    await expect(systemInfo({ address: withCert.address, tls: serverOnly })).rejects.toThrow();
    // The Web UI server reaches the frontend with its certificate too: its API lists the namespaces.
    const namespaces = await fetch(`${first.uiUrl}/api/v1/namespaces`);
    expect(namespaces.status).toBe(200);
    expect(await namespaces.text()).toContain('"default"');
  });

  it("keeps Temporal's state in the stack's PostgreSQL, in two databases of a role of its own", async () => {
    const client = new pg.Client({ connectionString: (await devEnv()).DATABASE_OWNER_URL });
    await client.connect();
    try {
      const { rows } = await client.query<{ datname: string; owner: string }>(
        `select datname, pg_get_userbyid(datdba) as owner from pg_database where datname like 'temporal%' order by datname`,
      );
      expect(rows).toEqual([
        { datname: 'temporal', owner: 'temporal' },
        { datname: 'temporal_visibility', owner: 'temporal' },
      ]);
    } finally {
      await client.end();
    }
  });

  it('runs a task through the server: a triggered run completes on the stack worker', async () => {
    const prices = await runCli(['prices', 'apply', 'prices/standard.json'], env);
    expect(prices.code, prices.stderr).toBe(0);
    const applied = await runCli(['tasks', 'apply', 'examples/tasks.json'], env);
    expect(applied.code, applied.stderr).toBe(0);
    const triggered = await runCli(['tasks', 'trigger', 'digest-u1', '--json'], env);
    expect(triggered.code, triggered.stderr).toBe(0);
    const { workflowId } = JSON.parse(triggered.stdout) as { workflowId: string };
    triggeredRun = workflowId;
    await waitFor(
      async () => {
        const runs = await runCli(['runs', '--task', 'digest-u1', '--json'], env);
        const list = JSON.parse(runs.stdout) as { runs: { workflowId: string; status: string }[] };
        return list.runs.some((r) => r.workflowId === workflowId && r.status === 'completed');
      },
      60_000,
      `${workflowId} completed`,
    );
  });

  it('leaves running processes alone on a second dev up, and refuses to switch to the dev server while they run', async () => {
    const again = await runCli(['dev', 'up', '--workers', '1'], env); // no flag: the recorded mode
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toMatch(/\(server on PostgreSQL, already running: /);
    expect((await status()).temporal.services.map((p) => p.pid)).toEqual(first.temporal.services.map((p) => p.pid));

    const switched = await runCli(['dev', 'up', '--temporal', 'dev'], env);
    expect(switched.code).not.toBe(0);
    expect(switched.stderr).toContain('Stop it first with `cronledger dev down`');
  });

  it('stops all five on dev down, and status then shows each stopped', async () => {
    const down = await runCli(['dev', 'down'], env);
    expect(down.code, down.stderr).toBe(0);
    expect(down.stdout).toMatch(/Temporal server \(pids \d+, \d+, \d+, \d+, \d+\)/);
    for (const p of first.temporal.services) expect([p.name, processExists(p.pid!)]).toEqual([p.name, false]);
    const after = await status();
    expect(after.temporal.services.map((p) => [p.name, p.running, p.pid])).toEqual(PARTS.map((name) => [name, false, null]));
    expect(after.temporal.running).toBe(false);
  });

  it('starts again right after dev down, with its schedules and runs kept', async () => {
    // within seconds of the stop, while the stopped services' membership records are fresh: a start must not wait for them
    const up = await runCli(['dev', 'up', '--workers', '0'], env);
    expect(up.code, up.stderr).toBe(0);
    const client = new Client({ connection: await Connection.connect(await withStackCertificate()) });
    try {
      expect((await client.workflow.getHandle(triggeredRun).describe()).status.name).toBe('COMPLETED');
      expect((await describeSchedule(client, 'cron-digest-u1')).scheduleId).toBe('cron-digest-u1');
    } finally {
      await client.connection.close();
    }
  });
});
