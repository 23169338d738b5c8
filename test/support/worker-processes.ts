import { bundleWorkflowCode } from '@temporalio/worker';
import { appendFileSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../src/config';
import { workflowsPath } from '../../src/worker-setup';
import { KillableProcess } from './killable-process';

/**
 * Real worker processes (`node bin/worker.js`), as `dev up` runs them, for the fault-injection tests:
 * each can be SIGKILLed and started again. They load one prebuilt workflow bundle (CRONLEDGER_WORKFLOW_BUNDLE), so a
 * restart takes about a second instead of a webpack run.
 */

const quietLogger = { trace() {}, debug() {}, info() {}, warn() {}, error: (m: string) => process.stderr.write(`${m}\n`) } as never;

/** Bundles the workflow code once and writes it to dir/workflow-bundle.js; returns that path. */
export async function writeWorkflowBundle(dir: string): Promise<string> {
  const { code } = await bundleWorkflowCode({ workflowsPath, logger: quietLogger });
  const path = join(dir, 'workflow-bundle.js');
  writeFileSync(path, code);
  return path;
}

export interface WorkerTarget {
  temporalAddress: string;
  namespace: string;
  taskQueue: string;
  databaseUrl: string;
}

export interface WorkerProcessOptions {
  target: WorkerTarget;
  bundlePath: string;
  /** Folder for the workers' logs (<name>.log, all incarnations appended). */
  logDir: string;
  /** Environment for the worker beyond the connection settings (MODEL_PROVIDER, OPENAI_BASE_URL, ...). */
  env?: (incarnation: string) => NodeJS.ProcessEnv;
  /**
   * A compiled worker script (bench/fan-out.ts's bare worker, compiled by bin/compiled.js's compileScript so that it
   * runs as bin/worker.js runs: plain node, source maps on); default bin/worker.js.
   */
  script?: string;
  /** Node flags before the script (bench/fan-out.ts --profile-workers passes --cpu-prof, which NODE_OPTIONS refuses). */
  nodeArgs?: string[];
}

export interface KillEvent {
  worker: string;
  /** `<name>.<n>`: the process that died, as named in its CRONLEDGER_WORKER_ID and its provider base URL. */
  incarnation: string;
  pid: number;
  at: number;
}

const READY_TIMEOUT_MS = 120_000;

/**
 * One named worker slot (worker-1, ...) whose process can die and come back. Each start is a new incarnation
 * (`worker-1.1`, `worker-1.2`, ...), which is its Temporal identity and its worker_id on claims and ledger rows.
 */
export class WorkerProcess extends KillableProcess {
  private starts = 0;
  incarnation = '';

  constructor(
    readonly name: string,
    private readonly opts: WorkerProcessOptions,
  ) {
    super();
  }

  /** Starts a new incarnation and waits until its pollers run. */
  async start(): Promise<void> {
    if (this.running) throw new Error(`${this.name} is already running (pid ${this.pid})`);
    this.starts += 1;
    this.incarnation = `${this.name}.${this.starts}`;
    const { target, bundlePath, logDir } = this.opts;
    mkdirSync(logDir, { recursive: true });
    const logFile = join(logDir, `${this.name}.log`);
    appendFileSync(logFile, `--- ${new Date().toISOString()} ${this.incarnation}\n`);
    const fromByte = statSync(logFile).size;
    const script = this.opts.script ? ['--enable-source-maps', this.opts.script] : ['bin/worker.js'];
    this.spawnLogged(process.execPath, [...(this.opts.nodeArgs ?? []), ...script], {
      cwd: repoRoot(),
      logFile,
      env: {
        ...withoutConnectionSettings(process.env),
        ...this.opts.env?.(this.incarnation),
        TEMPORAL_ADDRESS: target.temporalAddress,
        TEMPORAL_NAMESPACE: target.namespace,
        CRONLEDGER_TASK_QUEUE: target.taskQueue,
        DATABASE_URL: target.databaseUrl,
        CRONLEDGER_WORKER_ID: this.incarnation,
        CRONLEDGER_WORKFLOW_BUNDLE: bundlePath,
      },
    });
    await this.waitUntilRunning(logFile, fromByte);
  }

  /** SIGKILL: no shutdown, no goodbye to Temporal, in-flight activities and HTTP requests die with it. */
  async kill(): Promise<KillEvent> {
    const { name: worker, incarnation, pid } = this;
    const at = await this.sigkill();
    return { worker, incarnation, pid: pid as number, at };
  }

  /** SIGTERM and wait: the worker finishes what it is doing (tests end with this). */
  stop(): Promise<void> {
    return this.terminate(30_000);
  }

  /**
   * The worker logs `state: 'RUNNING'` once its pollers start. Temporal's describeTaskQueue can't tell: it reports the
   * pollers of the root partition only, and a worker polling a child partition with a backlog is never seen there.
   */
  private async waitUntilRunning(logFile: string, fromByte: number): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (!this.running) throw new Error(`${this.incarnation} exited while starting; see ${logFile}`);
      const text = readFileSync(logFile).subarray(fromByte).toString('utf8');
      if (text.includes("state: 'RUNNING'")) return;
      if (Date.now() > deadline)
        throw new Error(`${this.incarnation} did not start polling within ${READY_TIMEOUT_MS / 1000}s; see ${logFile}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** N worker processes on one task queue (worker-1..N), started together. */
export async function startWorkerProcesses(count: number, opts: WorkerProcessOptions): Promise<WorkerProcess[]> {
  const workers = Array.from({ length: count }, (_, i) => new WorkerProcess(`worker-${i + 1}`, opts));
  await Promise.all(workers.map((w) => w.start()));
  return workers;
}

export async function stopWorkerProcesses(workers: WorkerProcess[]): Promise<void> {
  await Promise.all(workers.map((w) => w.stop()));
}

/** The worker's connection settings come from its options only, never from the shell that runs the tests. */
function withoutConnectionSettings(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(env).filter(
      ([k]) =>
        !k.startsWith('TEMPORAL_') &&
        !k.startsWith('OPENAI_') &&
        !['DATABASE_URL', 'MODEL_PROVIDER'].includes(k) &&
        !k.startsWith('CRONLEDGER_'),
    ),
  );
}
