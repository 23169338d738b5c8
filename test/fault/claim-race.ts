import { WorkflowFailedError } from '@temporalio/client';
import pg from 'pg';
import { runInputOf, taskFingerprint } from '../../src/schedules/task-schedule';
import { nominalId } from '../../src/schedules/start-run';
import type { ScheduledRunResult } from '../../src/workflows/scheduled-run';
import { reconcile, type ChaosFigures } from '../support/chaos-figures';
import { WorkerProcess } from '../support/worker-processes';
import { createTaskSchedule, scenarioId, sleep, workerOptions, type ChaosEnv } from './chaos-env';

/**
 * R4: several executions of ONE slot under different workflow IDs (the schedule's own `cron-<taskId>-<time>` and others
 * carrying the same nominal suffix), each run by a different worker process, made to claim at the same instant.
 *
 * The barrier: this process holds `lock table runs in exclusive mode` in an open transaction, which blocks every
 * claim's write. Once pg_stat_activity shows every racer's backend waiting on that lock (each worker connects with
 * its own application_name, so the waiters are seen to come from distinct processes), the lock is released and the
 * claims hit the unique key together. Exactly one may win.
 */
export interface ClaimRaceOptions {
  racers: number;
}

export interface ClaimRaceResult {
  figures: ChaosFigures;
  /** application_name of every backend seen waiting at the barrier at the same moment. */
  metAtBarrier: string[];
  outcomes: { workflowId: string; status: string }[];
  claimOwners: number;
}

export async function runClaimRace(env: ChaosEnv, opts: ClaimRaceOptions): Promise<ClaimRaceResult> {
  const taskId = scenarioId('race');
  const task = await createTaskSchedule(env, { id: taskId, cron: '* * * * *', paused: true }, `${taskId}-q0`);
  const slot = nominalId(new Date(Date.UTC(2026, 1, 1, 0, 0)));
  const startedAt = Date.now();
  const billedBefore = env.fake.billed.length;

  // One worker process per racer, each on its own task queue, so each execution's claim comes from another process.
  const racers = Array.from({ length: opts.racers }, (_, i) => {
    const appName = `${taskId}-racer-${i + 1}`;
    const options = workerOptions(env, `${taskId}-q${i}`);
    const url = new URL(env.databaseUrl);
    url.searchParams.set('application_name', appName);
    return {
      appName,
      taskQueue: `${taskId}-q${i}`,
      worker: new WorkerProcess(`racer-${i + 1}`, { ...options, target: { ...options.target, databaseUrl: url.toString() } }),
    };
  });
  await Promise.all(racers.map((r) => r.worker.start()));

  const barrier = new pg.Client({ connectionString: env.ownerDatabaseUrl }); // LOCK TABLE: the owner only
  await barrier.connect();
  let metAtBarrier: string[];
  const outcomes: { workflowId: string; status: string }[] = [];
  try {
    await barrier.query('begin');
    await barrier.query('lock table runs in exclusive mode');
    const prefixes = ['cron', 'rerun', 'copy', 'again', 'twin', 'more'];
    const handles = await Promise.all(
      racers.map((r, i) =>
        env.client.workflow.start('scheduledRun', {
          // The first is the schedule's own ID; the others differ but end in the same nominal time: the same slot.
          workflowId: `${prefixes[i % prefixes.length]}${i >= prefixes.length ? i : ''}-${taskId}-${slot}`,
          taskQueue: r.taskQueue,
          args: [runInputOf(task, taskFingerprint(task, `${taskId}-q0`))],
        }),
      ),
    );

    const deadline = Date.now() + 120_000;
    for (;;) {
      const { rows } = await env.pool.query<{ application_name: string }>(
        `select application_name from pg_stat_activity
          where wait_event_type = 'Lock' and application_name like $1 and datname = current_database()`,
        [`${taskId}-racer-%`],
      );
      metAtBarrier = [...new Set(rows.map((r) => r.application_name))].sort();
      if (metAtBarrier.length === opts.racers) break;
      if (Date.now() > deadline)
        throw new Error(`only ${metAtBarrier.length} of ${opts.racers} racers reached the barrier: ${metAtBarrier.join(', ')}`);
      await sleep(100);
    }
    await barrier.query('rollback'); // everyone at the line: go

    for (const h of handles) {
      try {
        const result = (await h.result()) as ScheduledRunResult;
        outcomes.push({ workflowId: h.workflowId, status: result.status });
      } catch (err) {
        if (!(err instanceof WorkflowFailedError)) throw err;
        outcomes.push({ workflowId: h.workflowId, status: `failed: ${err.cause?.message ?? err.message}` });
      }
    }
  } finally {
    await barrier.end();
    await Promise.all(racers.map((r) => r.worker.stop()));
  }

  const owners = await env.pool.query('select 1 from runs where task_id = $1', [taskId]);
  const { figures } = await reconcile(env.pool, {
    scenario: `R4 claim race: ${opts.racers} executions of one slot under different workflow IDs, in ${opts.racers} worker processes, released together`,
    taskIds: [taskId],
    slots: 1,
    billed: env.fake.billed.slice(billedBefore),
    startedAt,
    extra: {
      'racers waiting at the barrier together': metAtBarrier.length,
      'claimers (completed executions)': outcomes.filter((o) => o.status === 'completed').length,
      'stopped as duplicate': outcomes.filter((o) => o.status === 'duplicate').length,
    },
  });
  return { figures, metAtBarrier, outcomes, claimOwners: owners.rowCount ?? 0 };
}
