import { Connection, isGrpcServiceError } from '@temporalio/client';
import { join } from 'node:path';
import type { StackFile } from '../config';
import { SEARCH_ATTRIBUTES } from '../constants';
import { UserError } from '../errors';
import { childEnvironment } from './child-env';
import { isPortFree } from './ports';
import { isOurProcess, logTail, processStartTime, sleep, spawnDetached, stopProcess } from './processes';
import { requireStackFile, updateStackFile } from './stack-file';

/**
 * The Temporal dev server (`temporal server start-dev`): Temporal plus its Web UI in one process, state in a SQLite
 * file in the data dir. Stopping it and starting it again on the same file and ports keeps every schedule and run.
 */

export const temporalLogOf = (dataDir: string): string => join(dataDir, 'logs', 'temporal.log');
const READY_TIMEOUT_MS = 60_000;
const GRPC_NOT_FOUND = 5;

export function temporalRunning(stack: StackFile): boolean {
  return isOurProcess(stack.temporal.pid, ['start-dev', stack.temporal.dbFile], stack.temporal.startTime);
}

/**
 * SQLite in write-ahead-log mode with `synchronous=normal`: each commit appends to the WAL instead of rewriting the
 * rollback journal and syncing twice; issue 12 measured cronledger and a bare workflow 1.6 to 2.3 times faster on
 * the dev server with it (BENCHMARKS.md, fan-out, runs with it). A commit is still atomic and the file never corrupts; what `normal` gives up is only the
 * last commits before a power loss (not a process crash: the WAL is in the OS page cache), and a dev server's history
 * is not a production store. The missed-slot and restart tests (test/missed-slots, test/fault/temporal-restart) kill
 * and restart the server on its file with these settings.
 */
export const DEV_SERVER_SQLITE_PRAGMAS = ['journal_mode=wal', 'synchronous=normal'];

/**
 * The dev server starts at most 30 scheduled workflows per second per namespace by default; 1,000 tasks firing in the
 * same minute would then take 33 s just to start. The schedules' own limit is raised so that the workers, not this
 * throttle, set the pace (BENCHMARKS.md, fan-out). deploy/temporal/dynamicconfig.yaml gives the real server the same
 * values (test/unit/docker-compose.test.ts holds them equal).
 */
export const DEV_SERVER_DYNAMIC_CONFIG: Record<string, unknown> = {
  'worker.schedulerNamespaceStartWorkflowRPS': 1000,
  // Every schedule is a workflow of its own (the scheduler), run by the server's internal per-namespace worker: 2
  // workflow task pollers and a 5 s sticky schedule-to-start timeout by default. When 1,000 schedulers wake in the same
  // second, their tasks queue on that worker's sticky queue; the SDK then sends every poll to the sticky queue while it
  // has a backlog, so the tasks that time out of it (after 5 s) wait on the starved normal queue, and their runs started
  // 60 to 90 s after the slot (a scheduler's history in the P1 mock phase: sticky task at 07:57:00, timed out 07:57:05,
  // not started at 07:57:22). With 16 pollers and a longer sticky timeout the tasks stay on the sticky queue until served:
  // P1 mock started its 1,000 runs within 30 s of the slot instead of 87 s (bench/fan-out.ts; docs/decisions/scheduler-settings.md).
  // The longer sticky timeout must not hold up queries. A schedule's describe and its matching times are queries to its
  // scheduler, which history sends to the sticky queue first, for up to this timeout, and only then to the normal
  // queue, all within its client's 30 s deadline (client/history DefaultTimeout, service/history/api/queryworkflow):
  // at 60 s a sticky queue that does not answer fails describes with DEADLINE_EXCEEDED. A shorter
  // timeout brings the stall back (20 s: P1 mock runs started up to 125 s after the slot, bare 68 s; 10 s and 5 s: 272
  // and 679 of 1,000 schedulers timed out even with no worker load, docs/decisions/scheduler-settings.md). So queries skip the sticky
  // queue (system.enableStickyQuery false): the internal worker answers them from the normal queue, replaying the
  // scheduler's history, which continue-as-new keeps short.
  'worker.perNamespaceWorkerOptions': { MaxConcurrentWorkflowTaskPollers: 16, StickyScheduleToStartTimeout: '60s' },
  'system.enableStickyQuery': false,
  // One partition per task queue instead of 4. With 4, a workflow task added to a partition that has no poller waiting
  // is forwarded to the root partition at most 10 a second, one at a time (matching.forwarderMaxRatePerSecond), and a
  // burst of 1,000 runs' and schedulers' tasks waited 50 to 100 s there (P1 bare: last run closed 89 to 100 s after the
  // slot with 4 partitions, 38 s with 1, now limited by CPU). Partitions spread one queue over several matching hosts;
  // the dev server and cronledger's server mode run one matching process.
  'matching.numTaskqueueReadPartitions': 1,
  'matching.numTaskqueueWritePartitions': 1,
  // Eager activity dispatch: when a workflow task schedules an activity on its own task queue and the worker that
  // completed it has a free activity slot, the server hands the activity back in its answer to that completion,
  // instead of adding it to matching for a poll to pick up. A run's model calls are such activities: it saves the dev
  // server a matching round trip per call: 8 to 9 % of its CPU per run (40.0 against 44.2 ms for the bare run,
  // two servers side by side, docs/decisions/eager-activity-dispatch.md), and P1's mock drain fell from 76.9 s to 65.8 and 71.0 s
  // (bench/fan-out.ts, two pairs). Off by default in the server. Nothing else changes for the call: it is recorded as
  // started to that worker, with the same timeouts and heartbeats, and retried on any worker if that one dies.
  'system.enableActivityEagerExecution': true,
};

/** The start-dev flags both the stack's server and the tests' private servers run with. */
export const devServerTuningArgs = (): string[] => [
  ...DEV_SERVER_SQLITE_PRAGMAS.flatMap((p) => ['--sqlite-pragma', p]),
  ...Object.entries(DEV_SERVER_DYNAMIC_CONFIG).flatMap(([key, value]) => ['--dynamic-config-value', `${key}=${JSON.stringify(value)}`]),
];

export function temporalArgs(t: StackFile['temporal'], namespaces: string[]): string[] {
  return [
    'server',
    'start-dev',
    '--db-filename',
    t.dbFile,
    ...devServerTuningArgs(),
    '--ip',
    '127.0.0.1',
    '--port',
    String(t.port),
    '--ui-port',
    String(t.uiPort),
    ...Object.values(SEARCH_ATTRIBUTES).flatMap((name) => ['--search-attribute', `${name}=Keyword`]),
    // Creating a namespace that the SQLite file already has is a no-op, so a restart may pass the same list.
    ...namespaces.filter((n) => n !== 'default').flatMap((n) => ['--namespace', n]),
    '--log-level',
    'warn',
  ];
}

/**
 * Starts the server recorded in <dataDir>/stack.json (same SQLite file, same ports) unless it already runs, and
 * waits until it serves every namespace and the Web UI. Tests use it to bring a stopped server back.
 */
export async function startTemporal(
  dataDir: string,
  opts: { namespaces?: string[] } = {},
): Promise<{ pid: number; alreadyRunning: boolean }> {
  const stack = requireStackFile(dataDir);
  const t = stack.temporal;
  const namespaces = [...new Set([stack.namespace, ...(opts.namespaces ?? [])])];
  const logFile = temporalLogOf(dataDir);
  if (temporalRunning(stack)) {
    await waitUntilServing(t, namespaces, { pid: t.pid, logFile, alreadyRunning: true });
    return { pid: t.pid, alreadyRunning: true };
  }
  for (const [what, port] of [
    ['gRPC', t.port],
    ['Web UI', t.uiPort],
  ] as const) {
    if (!(await isPortFree(port))) {
      throw new UserError(
        `port ${port} (Temporal ${what}, recorded in ${join(dataDir, 'stack.json')}) is taken by another process.\n` +
          `Stop that process, or delete ${join(dataDir, 'stack.json')} so that \`dev up\` picks new ports.`,
      );
    }
  }
  const pid = await spawnDetached(t.cli, temporalArgs(t, namespaces), {
    cwd: dataDir,
    env: childEnvironment([]),
    logFile,
    banner: `temporal server start-dev on 127.0.0.1:${t.port}, UI ${t.uiPort}, db ${t.dbFile}`,
  });
  const startTime = processStartTime(pid);
  updateStackFile(dataDir, (s) => {
    s.temporal.pid = pid;
    s.temporal.startTime = startTime;
  });
  try {
    await waitUntilServing(t, namespaces, { pid, logFile, alreadyRunning: false });
  } catch (err) {
    await stopProcess(pid, 5_000); // a server that never became ready is of no use to anyone
    throw err;
  }
  return { pid, alreadyRunning: false };
}

/** Stops the server (SQLite file and ports stay recorded for the next start). Returns the pid it stopped. */
export async function stopTemporal(dataDir: string): Promise<number | undefined> {
  const stack = requireStackFile(dataDir);
  const pid = stack.temporal.pid;
  const running = temporalRunning(stack);
  // The server needs a few seconds to close SQLite; returning earlier lets a restart hit SQLITE_BUSY.
  if (running) await stopProcess(pid, 20_000);
  updateStackFile(dataDir, (s) => {
    s.temporal.pid = 0;
    delete s.temporal.startTime;
  });
  return running ? pid : undefined;
}

/**
 * Polls until the frontend describes every namespace and the Web UI answers. Fails early, with the end of the log,
 * if the process exits.
 */
async function waitUntilServing(
  t: StackFile['temporal'],
  namespaces: string[],
  proc: { pid: number; logFile: string; alreadyRunning: boolean },
): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let lastError: string;
  let connection: Connection | undefined;
  try {
    for (;;) {
      if (!isOurProcess(proc.pid, ['start-dev', t.dbFile])) {
        throw new UserError(`the Temporal server (pid ${proc.pid}) exited while starting. From ${proc.logFile}:\n${logTail(proc.logFile)}`);
      }
      try {
        connection ??= await Connection.connect({ address: t.address, connectTimeout: '2s' });
        for (const namespace of namespaces) {
          await connection.withDeadline(Date.now() + 2_000, () => connection!.workflowService.describeNamespace({ namespace }));
        }
        const ui = await fetch(t.uiUrl, { signal: AbortSignal.timeout(2_000) });
        if (ui.ok) return;
        lastError = `Web UI ${t.uiUrl} answered HTTP ${ui.status}`;
      } catch (err) {
        if (proc.alreadyRunning && isGrpcServiceError(err) && err.code === GRPC_NOT_FOUND) {
          throw new UserError(
            `the running Temporal server at ${t.address} lacks a namespace (${err.details}); it was started without it.\n` +
              'Restart it: `npx cronledger dev down` then `dev up`.',
          );
        }
        lastError = err instanceof Error ? err.message : String(err);
      }
      if (Date.now() > deadline) {
        throw new UserError(
          `the Temporal server at ${t.address} did not become ready within ${READY_TIMEOUT_MS / 1000}s (${lastError}). ` +
            `From ${proc.logFile}:\n${logTail(proc.logFile)}`,
        );
      }
      await sleep(200);
    }
  } finally {
    await connection?.close();
  }
}
