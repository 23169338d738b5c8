import type { Client } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectClient } from '../../src/client';
import type { TemporalMode, TemporalTls } from '../../src/config';
import { stablePorts } from '../../src/dev/ports';
import { devServerTuningArgs } from '../../src/dev/temporal-server';
import { startStack, stopStack } from '../../src/dev/stack';
import { startTemporalCluster, stopTemporalCluster } from '../../src/dev/temporal-cluster';
import { TASK_ID_KEY, TIER_KEY, USER_ID_KEY } from '../../src/schedules/task-schedule';

/**
 * A Temporal of its own, of the kind the suite runs (the dev server, or the Temporal server on PostgreSQL with
 * CRONLEDGER_TEST_TEMPORAL=server), for a scenario that stops the server: the suite's shared one never goes down.
 * stop() shuts it down cleanly, start() brings it back on the same persistence and port.
 */
export interface PrivateTemporal {
  readonly address: string;
  /** The client certificate its frontend requires (server mode); undefined for the dev server. */
  readonly temporalTls?: TemporalTls;
  /** Valid while it runs; a new one after each start(). */
  readonly client: Client;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it and removes its data. */
  teardown(): Promise<void>;
}

export function startPrivateTemporal(mode: TemporalMode, temporalCli: string): Promise<PrivateTemporal> {
  return mode === 'server' ? privateServer() : privateDevServer(temporalCli);
}

/** The dev server on its own SQLite file, as `dev up` runs it. */
async function privateDevServer(temporalCli: string): Promise<PrivateTemporal> {
  const dir = mkdtempSync(join(tmpdir(), 'cronledger-restart-'));
  const [port] = await stablePorts(1); // restarted on the same port
  const server = {
    executable: { type: 'existing-path' as const, path: temporalCli },
    dbFilename: join(dir, 'temporal.db'),
    port,
    ip: '127.0.0.1',
    searchAttributes: [TASK_ID_KEY, USER_ID_KEY, TIER_KEY],
    log: { format: 'pretty', level: 'error' },
    // as `dev up` runs it (WAL, synchronous=normal): the catch-up must survive a restart on a WAL-mode file
    extraArgs: devServerTuningArgs(),
  };
  let env: TestWorkflowEnvironment | undefined = await TestWorkflowEnvironment.createLocal({ server });
  const stop = async () => {
    await env?.teardown();
    env = undefined;
  };
  return {
    address: `127.0.0.1:${port}`,
    get client() {
      if (!env) throw new Error('the private dev server is stopped');
      return env.client as Client;
    },
    stop,
    async start() {
      env = await TestWorkflowEnvironment.createLocal({ server });
    },
    async teardown() {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A whole `--temporal server` stack in its own data dir (its own PostgreSQL), without workers or admin page. */
async function privateServer(): Promise<PrivateTemporal> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cronledger-restart-'));
  const up = await startStack({ dataDir, workers: 0, admin: false, temporal: 'server', log: () => undefined });
  const address = up.stack.temporal.address;
  const temporalTls = up.stack.temporal.tls;
  let client: Client | undefined = await connectClient({ temporalAddress: address, namespace: 'default', temporalTls });
  const stop = async () => {
    await client?.connection.close();
    client = undefined;
    await stopTemporalCluster(dataDir);
  };
  return {
    address,
    temporalTls,
    get client() {
      if (!client) throw new Error('the private Temporal server is stopped');
      return client;
    },
    stop,
    async start() {
      await startTemporalCluster(dataDir);
      client = await connectClient({ temporalAddress: address, namespace: 'default', temporalTls });
    },
    async teardown() {
      await client?.connection.close();
      client = undefined;
      await stopStack(dataDir);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
