import type { Interceptor } from '@grpc/grpc-js';
import { Client, Connection, defaultGrpcRetryOptions, makeGrpcRetryInterceptor } from '@temporalio/client';
import type pg from 'pg';
import { inject } from 'vitest';
import { startAdminServer, type AdminOptions, type RunningAdmin } from '../../src/admin/server';
import { recordAppliedTasks } from '../../src/db/applied-tasks';
import { recordTaskVersions } from '../../src/db/task-versions';
import { scheduleOptionsFor, taskFingerprint } from '../../src/schedules/task-schedule';
import type { Task } from '../../src/tasks/tasks-file';
import type { TestContext } from './context';

/**
 * The admin page on a loopback port, reading as `pool` (the read-only role), with the metrics cache off, and pages that
 * wait for Temporal as long as a test may (the shorter wait has its own test). `opts` replaces any of these.
 */
export const startTestAdmin = (ctx: TestContext, pool: pg.Pool, opts: Partial<AdminOptions> = {}): Promise<RunningAdmin> =>
  startAdminServer({
    pool,
    client: ctx.client,
    namespace: ctx.namespace,
    uiUrl: inject('stack').uiUrl,
    host: '127.0.0.1',
    port: 0,
    metricsCacheMs: 0, // tests change the ledger and scrape at once; the cache has its own test
    temporalWaitMs: 120_000,
    ...opts,
  });

/** A client for the admin whose connection runs `interceptor` inside Temporal's default retry interceptor. */
export async function clientThrough(ctx: TestContext, interceptor: Interceptor): Promise<Client> {
  const connection = await Connection.connect({
    address: ctx.temporalAddress,
    interceptors: [makeGrpcRetryInterceptor(defaultGrpcRetryOptions()), interceptor],
  });
  return new Client({ connection, namespace: ctx.namespace });
}

/** Each task's schedule on the task queue `queueOf` names, recorded as applied (task_versions, applied_tasks) as apply does. */
export async function createTaskSchedules(ctx: TestContext, tasks: Task[], queueOf: (task: Task) => string): Promise<void> {
  const versions = tasks.map((task) => ({ taskId: task.id, fingerprint: taskFingerprint(task, queueOf(task)), definition: task }));
  await recordTaskVersions(ctx.operatorPool, versions);
  for (const task of tasks) await ctx.client.schedule.create(scheduleOptionsFor(task, queueOf(task)));
  await recordAppliedTasks(
    ctx.operatorPool,
    tasks.map((t) => t.id),
  );
}
