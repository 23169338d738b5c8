import { backfill } from '../../src/schedules/backfill';
import { reconcile, type ChaosFigures, type UnbookedRequest } from '../support/chaos-figures';
import type { BilledRequest } from '../support/fake-openai';
import type { KillEvent, WorkerProcess } from '../support/worker-processes';
import { createTaskSchedule, scenarioId, sleep, startOpenAIWorkers, type ChaosEnv } from './chaos-env';

/**
 * R1: three worker processes share a backfill while one of them, chosen at random, is SIGKILLed every few seconds and
 * started again. Every slot must end with exactly one completed run, and every billed request must have its ledger
 * row, except requests whose worker died while they were in flight: that window can't be closed (docs/ledger.md, "The one
 * window"), and each such request must coincide with a kill.
 */
export interface WorkerKillsOptions {
  slots: number;
  workers?: number;
  /** A kill comes this long (random in [min, max] ms) after the previous victim polls again. */
  killEveryMs?: [number, number];
  /** How long the fake model thinks per call: the longer, the more kills land on a request in flight. */
  latencyMs?: number;
  /**
   * Kills stop after this many (default: one per 5 slots, at least 6), so that the burst can end: every kill of a
   * worker with a call in flight sends that call back to be retried, and an endless killer would keep hitting retries.
   */
  maxKills?: number;
}

export interface WorkerKillsResult {
  figures: ChaosFigures;
  unbooked: UnbookedRequest[];
  kills: KillEvent[];
  killsWithCallsInFlight: number;
  /** Slot outcomes as the backfill saw them. */
  executed: number;
  /** When the scenario started, and the requests the fake billed during it. */
  startedAt: number;
  billed: BilledRequest[];
  failedSlots: string[];
}

/** A lost answer must have been generated at most this long before its process died to count as that kill's. */
export const KILL_WINDOW_MS = 5_000;

export async function runWorkerKills(env: ChaosEnv, opts: WorkerKillsOptions): Promise<WorkerKillsResult> {
  const { slots, workers: workerCount = 3, killEveryMs = [1_000, 3_000], latencyMs = 2_500 } = opts;
  const maxKills = opts.maxKills ?? Math.max(6, Math.floor(slots / 5));
  const taskId = scenarioId('kills');
  const taskQueue = `${taskId}-q`;
  await createTaskSchedule(env, { id: taskId, cron: '* * * * *', paused: true }, taskQueue);
  const workers = await startOpenAIWorkers(env, workerCount, taskQueue);
  env.log(`  ${workerCount} workers polling ${taskQueue}; backfilling ${slots} slots`);
  env.fake.setLatency(latencyMs);
  const billedBefore = env.fake.billed.length;
  const startedAt = Date.now();
  const kills: KillEvent[] = [];
  const restarts: number[] = [];
  let done = false;
  let killsWithCallsInFlight = 0;

  const killer = (async () => {
    while (!done && kills.length < maxKills) {
      await sleep(killEveryMs[0] + Math.random() * (killEveryMs[1] - killEveryMs[0]));
      if (done) break;
      // A random worker among those with a model call in flight, so that kills exercise the window that can't be
      // closed; if none has one within a few seconds (all waiting on timeouts), any worker.
      const busy = () => workers.filter((w) => w.running && (env.fake.inFlight().get(w.incarnation) ?? 0) > 0);
      for (let waited = 0; busy().length === 0 && waited < 5_000 && !done; waited += 100) await sleep(100);
      if (done) break;
      const candidates = busy().length > 0 ? busy() : workers;
      const victim = candidates[Math.floor(Math.random() * candidates.length)];
      const callsInFlight = env.fake.inFlight().get(victim.incarnation) ?? 0;
      if (callsInFlight > 0) killsWithCallsInFlight += 1;
      kills.push(await victim.kill());
      env.log(`  kill ${kills.length}: ${kills.at(-1)?.incarnation} (${env.fake.billed.length - billedBefore} billed so far)`);
      const restartStart = Date.now();
      await victim.start(); // the next kill waits for this one to poll again
      restarts.push(Date.now() - restartStart);
      env.log(`  ${victim.incarnation} polling after ${restarts.at(-1)} ms`);
    }
  })();

  const from = new Date(Date.UTC(2026, 0, 1, 0, 0));
  const to = new Date(from.getTime() + (slots - 1) * 60_000);
  let outcome: Awaited<ReturnType<typeof backfill>>;
  try {
    outcome = await backfill(env.client, env.pool, {
      taskIds: [taskId],
      from,
      to,
      onSlotDone: (_r, n, total) => {
        if (n % 50 === 0 || n === total) env.log(`  ${n}/${total} slots done, ${kills.length} kills`);
      },
    });
  } finally {
    done = true;
    await killer;
    await Promise.all(workers.map((w: WorkerProcess) => w.stop()));
    env.fake.setLatency(0);
  }

  const billed = env.fake.billed.slice(billedBefore);
  const { figures, unbooked } = await reconcile(env.pool, {
    scenario: `R1 worker kills: ${workerCount} worker processes, one SIGKILLed every ${killEveryMs[0] / 1000}-${killEveryMs[1] / 1000} s and restarted`,
    taskIds: [taskId],
    slots,
    billed,
    kills,
    killWindowMs: KILL_WINDOW_MS,
    startedAt,
    extra: {
      kills: kills.length,
      'kills with model calls in flight': killsWithCallsInFlight,
      'restart ms (median)': median(restarts),
      'model latency ms': latencyMs,
    },
  });
  return {
    figures,
    unbooked,
    kills,
    killsWithCallsInFlight,
    executed: outcome.summary.completed,
    startedAt,
    billed,
    failedSlots: outcome.results.filter((r) => r.outcome !== 'completed').map((r) => `${r.workflowId}: ${r.outcome} ${r.detail ?? ''}`),
  };
}

const median = (xs: number[]): number => (xs.length === 0 ? 0 : [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]);
