import type { Client } from '@temporalio/client';
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { recordTaskVersions } from '../../src/db/task-versions';
import { scheduleOptionsFor, taskFingerprint } from '../../src/schedules/task-schedule';
import { parseTasksFile, type Task } from '../../src/tasks/tasks-file';
import type { FakeOpenAI } from '../support/fake-openai';
import { startWorkerProcesses, type WorkerProcess, type WorkerTarget } from '../support/worker-processes';

/**
 * Where a fault-injection scenario runs: a Temporal namespace, a migrated ledger database with the standard prices,
 * the fake OpenAI, a prebuilt workflow bundle and a folder for logs. The CI tests build it from their test context;
 * bench/chaos.ts from a private stack.
 */
export interface ChaosEnv {
  client: Client;
  pool: pg.Pool;
  /** The operator role's pool: applied task versions and prices, as `tasks apply` and `prices apply` write them. */
  operatorPool: pg.Pool;
  temporalAddress: string;
  namespace: string;
  databaseUrl: string;
  /** The owner role's URL: the R4 barrier locks the runs table, which only the owner may. */
  ownerDatabaseUrl: string;
  fake: FakeOpenAI;
  bundlePath: string;
  logDir: string;
  /** Progress lines (the bench prints them; the tests keep quiet). */
  log: (line: string) => void;
}

/** A fresh task queue and task id per scenario, so nothing of an earlier scenario can pick up its work. */
export const scenarioId = (prefix: string): string => `${prefix}-${randomUUID().slice(0, 6)}`;

/**
 * Creates the task's schedule (paused unless told otherwise) without touching any other schedule: `tasks apply` would
 * delete the schedules of scenarios that ran before in the same namespace.
 */
export async function createTaskSchedule(env: ChaosEnv, fields: Record<string, unknown>, taskQueue: string): Promise<Task> {
  const [task] = parseTasksFile({
    tasks: [{ userId: 'u-chaos', input: 'Summarise the incident.', ...fields }],
    monthlyReport: false,
    budgetSweep: false,
  }).tasks;
  await recordTaskVersions(env.operatorPool, [{ taskId: task.id, fingerprint: taskFingerprint(task, taskQueue), definition: task }]);
  await env.client.schedule.create(scheduleOptionsFor(task, taskQueue));
  return task;
}

/** Worker processes on taskQueue that call the fake OpenAI, each incarnation through its own base URL. */
export function startOpenAIWorkers(
  env: ChaosEnv,
  count: number,
  taskQueue: string,
  extraEnv: NodeJS.ProcessEnv = {},
): Promise<WorkerProcess[]> {
  return startWorkerProcesses(count, workerOptions(env, taskQueue, extraEnv));
}

export function workerOptions(env: ChaosEnv, taskQueue: string, extraEnv: NodeJS.ProcessEnv = {}) {
  const target: WorkerTarget = { temporalAddress: env.temporalAddress, namespace: env.namespace, taskQueue, databaseUrl: env.databaseUrl };
  return {
    target,
    bundlePath: env.bundlePath,
    logDir: env.logDir,
    env: (incarnation: string) => ({
      MODEL_PROVIDER: 'openai',
      OPENAI_API_KEY: 'sk-fake-chaos',
      OPENAI_BASE_URL: env.fake.baseURLFor(incarnation),
      ...extraEnv,
    }),
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
