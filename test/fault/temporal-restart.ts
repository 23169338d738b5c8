import type { Client } from '@temporalio/client';
import { nominalId } from '../../src/schedules/start-run';
import { reconcile, type ChaosFigures } from '../support/chaos-figures';
import type { TemporalProcess } from '../support/temporal-process';
import { waitFor } from '../support/wait';
import { createTaskSchedule, scenarioId, sleep, startOpenAIWorkers, type ChaosEnv } from './chaos-env';

/**
 * R2: every-minute schedules fire on a private Temporal dev server, which is SIGKILLed and, after at least one slot
 * has passed while it was down, started again on the same SQLite file. The missed slots must be caught up after the
 * restart (within catchupWindow, 10 minutes by default) and no slot may run twice.
 *
 * `env.client` and `env.temporalAddress` must point at `server`.
 */
export interface TemporalRestartResult {
  figures: ChaosFigures;
  /** Per task, the slots that passed while the server was down, and when their runs started. */
  missed: { workflowId: string; startedAfterRestartMs: number; status: string }[];
  /** Per task, minutes from its first run to its last with no run. Must be empty. */
  gaps: string[];
  killedAt: number;
  restartedAt: number;
}

export async function runTemporalRestart(
  env: ChaosEnv,
  server: TemporalProcess,
  opts: { tasks: number; downSlots?: number; slotsAfter?: number },
): Promise<TemporalRestartResult> {
  const { downSlots = 1, slotsAfter = 1 } = opts;
  const prefix = scenarioId('restart');
  const taskQueue = `${prefix}-q`;
  const taskIds = Array.from({ length: opts.tasks }, (_, i) => `${prefix}-${i + 1}`);
  const startedAt = Date.now();
  const billedBefore = env.fake.billed.length;
  const workers = await startOpenAIWorkers(env, 2, taskQueue);
  try {
    for (const id of taskIds) await createTaskSchedule(env, { id, cron: '* * * * *' }, taskQueue);
    const ran = (taskId: string) => completedRuns(env, taskId);

    // Let each schedule fire once with the server up.
    await waitFor(async () => (await Promise.all(taskIds.map(ran))).every((n) => n >= 1), 150_000, 'every task ran one slot');
    const killedAt = await server.kill();
    const firstMissed = nextMinute(killedAt);
    env.log(`  Temporal server SIGKILLed; slots from ${nominalId(firstMissed)} pass while it is down`);
    // Down across downSlots minute boundaries, plus a margin so the last of them has surely passed.
    await sleep(firstMissed.getTime() + (downSlots - 1) * 60_000 + 5_000 - Date.now());
    // Taken as the restart begins: the server was dead until now, and it starts caught-up workflows while it comes up,
    // before start() returns, so a start time after this moment proves the slot was missed while it was down.
    const restartedAt = Date.now();
    await server.start();
    env.log(`  Temporal server restarted on the same SQLite file after ${((restartedAt - killedAt) / 1000).toFixed(1)} s`);

    const missedIds = taskIds.flatMap((id) =>
      Array.from({ length: downSlots }, (_, k) => `cron-${id}-${nominalId(new Date(firstMissed.getTime() + k * 60_000))}`),
    );
    await waitFor(
      async () => (await statuses(env.client, missedIds)).every((s) => s === 'COMPLETED'),
      240_000,
      'every missed slot completed',
    );
    // And the schedules go on firing normally afterwards.
    const lastMissed = firstMissed.getTime() + (downSlots - 1) * 60_000;
    const after = taskIds.map((id) => `cron-${id}-${nominalId(new Date(lastMissed + slotsAfter * 60_000))}`);
    await waitFor(
      async () => (await statuses(env.client, after)).every((s) => s === 'COMPLETED'),
      180_000,
      'the slots after the restart completed',
    );
    for (const id of taskIds) await env.client.schedule.getHandle(`cron-${id}`).pause('chaos scenario done');
    // A run the schedule started just before the pause must finish before it is counted.
    await waitFor(
      async () => (await env.client.workflow.count(`TaskQueue = '${taskQueue}' AND ExecutionStatus = 'Running'`)).count === 0,
      120_000,
      'no run still open',
    );

    const missed = [];
    for (const workflowId of missedIds) {
      const d = await env.client.workflow.getHandle(workflowId).describe();
      missed.push({ workflowId, startedAfterRestartMs: d.startTime.getTime() - restartedAt, status: d.status.name });
    }
    const gaps: string[] = [];
    let slots = 0;
    for (const id of taskIds) {
      const { rows } = await env.pool.query<{ m: Date }>('select scheduled_minute as m from runs where task_id = $1 order by 1', [id]);
      slots += rows.length;
      for (let i = 1; i < rows.length; i++) {
        const step = (rows[i].m.getTime() - rows[i - 1].m.getTime()) / 60_000;
        if (step !== 1) gaps.push(`${id}: no run between ${rows[i - 1].m.toISOString()} and ${rows[i].m.toISOString()}`);
      }
    }
    const { figures } = await reconcile(env.pool, {
      scenario: `R2 Temporal restart: the dev server SIGKILLed for ${downSlots} minute slot(s) of ${opts.tasks} every-minute schedules, restarted on the same SQLite file`,
      taskIds,
      slots,
      billed: env.fake.billed.slice(billedBefore),
      startedAt,
      extra: {
        'server down s': ((restartedAt - killedAt) / 1000).toFixed(1),
        'missed slots caught up': missed.filter((m) => m.status === 'COMPLETED' && m.startedAfterRestartMs >= 0).length,
        'missed slots': missed.length,
        'catch-up: last missed slot started after the restart, s': (Math.max(...missed.map((m) => m.startedAfterRestartMs)) / 1000).toFixed(
          1,
        ),
      },
    });
    return { figures, missed, gaps, killedAt, restartedAt };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
}

async function completedRuns(env: ChaosEnv, taskId: string): Promise<number> {
  const { rows } = await env.pool.query<{ n: string }>(`select count(*) as n from runs where task_id = $1 and status = 'completed'`, [
    taskId,
  ]);
  return Number(rows[0].n);
}

async function statuses(client: Client, workflowIds: string[]): Promise<string[]> {
  return Promise.all(
    workflowIds.map(async (id) => {
      try {
        return (await client.workflow.getHandle(id).describe()).status.name;
      } catch {
        return 'NOT_STARTED';
      }
    }),
  );
}

const nextMinute = (t: number): Date => new Date(Math.floor(t / 60_000) * 60_000 + 60_000);
