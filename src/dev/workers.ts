import { Connection } from '@temporalio/client';
import { basename, join } from 'node:path';
import { repoRoot, temporalTlsEnv, type StackFile } from '../config';
import { UserError } from '../errors';
import { freePorts, LOCALHOST } from './ports';
import { isOurProcess, logTail, processStartTime, sleep, spawnDetached, stopProcess } from './processes';
import { requireStackFile, updateStackFile } from './stack-file';
import { childEnvironment, WORKER_INHERITS } from './child-env';
import { stackConnectionOptions } from './temporal-tls';

/**
 * The dev stack's worker processes: `node bin/worker.js` (src/worker.ts, compiled), named worker-1..N. Their names are their
 * Temporal identities, so the Web UI and the ledger's worker_id show which replica did what.
 */

type WorkerEntry = StackFile['workers'][number];

const WORKER_SCRIPT = 'bin/worker.js';
const READY_TIMEOUT_MS = 120_000; // each worker bundles the workflow code with webpack first; N at once on 2 cores
const workerLogOf = (dataDir: string, id: string): string => join(dataDir, 'logs', `${id}.log`);

/** worker-<i>, from its log file name, which is where stack.json keeps it. */
export const workerId = (w: WorkerEntry): string => basename(w.log, '.log');
/** On each worker's command line (node ignores arguments after the script): ties the process to its data dir. */
const stackMarker = (dataDir: string): string => `--cronledger-stack=${dataDir}`;
export const workerRunning = (w: WorkerEntry, dataDir: string): boolean =>
  isOurProcess(w.pid, [WORKER_SCRIPT, stackMarker(dataDir)], w.startTime);

export interface WorkerState {
  id: string;
  pid: number;
  log: string;
  alreadyRunning: boolean;
}

/**
 * Makes sure worker-1..count run and poll taskQueue. Running ones are left alone, including any beyond count
 * (`dev up` never stops anything; `dev down` does).
 */
export async function startWorkers(dataDir: string, count: number, taskQueue: string): Promise<WorkerState[]> {
  const stack = requireStackFile(dataDir);
  const running = new Map(stack.workers.filter((w) => workerRunning(w, dataDir)).map((w) => [workerId(w), w]));
  const started: WorkerState[] = [];
  const startedAt = Date.now();
  for (let i = 1; i <= count; i++) {
    const id = `worker-${i}`;
    if (running.has(id)) continue;
    const log = workerLogOf(dataDir, id);
    const [metricsPort] = await freePorts(1);
    const pid = await spawnDetached(process.execPath, [WORKER_SCRIPT, stackMarker(dataDir)], {
      cwd: repoRoot(),
      // By allow-list: never the owner's, the operator's or the superuser's URL, another role's password or the admin token.
      env: childEnvironment(WORKER_INHERITS, {
        CRONLEDGER_DATA_DIR: dataDir,
        TEMPORAL_ADDRESS: stack.temporal.address,
        TEMPORAL_NAMESPACE: stack.namespace,
        ...temporalTlsEnv(stack.temporal.tls),
        DATABASE_URL: stack.postgres.databaseUrl,
        CRONLEDGER_TASK_QUEUE: taskQueue,
        CRONLEDGER_WORKER_ID: id,
        CRONLEDGER_WORKER_METRICS_ADDRESS: `${LOCALHOST}:${metricsPort}`,
      }),
      logFile: log,
      banner: `${id} on task queue ${taskQueue}`,
    });
    running.set(id, { pid, startTime: processStartTime(pid), log, metricsPort });
    started.push({ id, pid, log, alreadyRunning: false });
    updateStackFile(dataDir, (s) => {
      s.workers = sortById([...running.values()]);
    });
  }
  await waitUntilPolling(stack, started, taskQueue, startedAt, dataDir);
  const fresh = new Set(started.map((w) => w.id));
  return sortById([...running.values()]).map((w) => ({ id: workerId(w), pid: w.pid, log: w.log, alreadyRunning: !fresh.has(workerId(w)) }));
}

/** Stops every recorded worker (SIGTERM lets in-flight tasks finish) and returns the ones that were running. */
export async function stopWorkers(dataDir: string): Promise<{ id: string; pid: number }[]> {
  const stack = requireStackFile(dataDir);
  const running = stack.workers.filter((w) => workerRunning(w, dataDir));
  await Promise.all(running.map((w) => stopProcess(w.pid, 15_000)));
  updateStackFile(dataDir, (s) => {
    s.workers = [];
  });
  return running.map((w) => ({ id: workerId(w), pid: w.pid }));
}

/** A worker counts as up once Temporal has seen it poll the workflow task queue (not merely once its process exists). */
async function waitUntilPolling(
  stack: StackFile,
  workers: WorkerState[],
  taskQueue: string,
  since: number,
  dataDir: string,
): Promise<void> {
  if (workers.length === 0) return;
  const deadline = Date.now() + READY_TIMEOUT_MS;
  const connection = await Connection.connect({ ...stackConnectionOptions(stack), connectTimeout: '5s' });
  try {
    for (;;) {
      for (const w of workers) {
        if (!workerRunning(w, dataDir)) {
          throw new UserError(`${w.id} (pid ${w.pid}) exited while starting. From ${w.log}:\n${logTail(w.log)}`);
        }
      }
      // The type left unset means the workflow task queue, which every worker polls.
      const { pollers } = await connection.workflowService.describeTaskQueue({
        namespace: stack.namespace,
        taskQueue: { name: taskQueue },
      });
      // Pollers are remembered for minutes, so a worker-1 from before a restart must not count.
      const polling = new Set(
        pollers.filter((p) => Number(p.lastAccessTime?.seconds?.toString() ?? 0) * 1000 >= since - 1000).map((p) => p.identity),
      );
      const waiting = workers.filter((w) => !polling.has(w.id));
      if (waiting.length === 0) return;
      if (Date.now() > deadline) {
        throw new UserError(
          `${waiting.map((w) => w.id).join(', ')} did not start polling task queue ${taskQueue} within ${READY_TIMEOUT_MS / 1000}s. ` +
            `See ${waiting.map((w) => w.log).join(', ')}`,
        );
      }
      await sleep(500);
    }
  } finally {
    await connection.close();
  }
}

const sortById = (ws: WorkerEntry[]): WorkerEntry[] =>
  ws.sort((a, b) => Number(workerId(a).replace(/\D/g, '')) - Number(workerId(b).replace(/\D/g, '')));
