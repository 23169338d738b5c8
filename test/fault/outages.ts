import { backfill } from '../../src/schedules/backfill';
import { reconcile, type ChaosFigures } from '../support/chaos-figures';
import type { PrivatePostgres } from '../support/private-postgres';
import { waitFor } from '../support/wait';
import { createTaskSchedule, scenarioId, sleep, startOpenAIWorkers, type ChaosEnv } from './chaos-env';

/**
 * Outages of what the workers depend on, in the middle of a burst (a backfill): PostgreSQL (R3) and the model
 * provider. Runs must wait and finish: every slot completed, every billed call booked once, and no provider call
 * repeated because of the outage (billed == ledger rows == 2 per slot when nothing else fails).
 */
export interface OutageResult {
  figures: ChaosFigures;
  failedSlots: string[];
  /** Billed requests beyond one chat and one embedding per slot. */
  repeatedCalls: number;
}

interface BurstOptions {
  scenario: string;
  slots: number;
  workers: number;
  latencyMs: number;
  /** Starts the outage (once the burst is under way) and resolves when it is over; returns figures to print. */
  outage: () => Promise<Record<string, string | number>>;
}

async function burstWithOutage(env: ChaosEnv, opts: BurstOptions): Promise<OutageResult> {
  const taskId = scenarioId('burst');
  const taskQueue = `${taskId}-q`;
  await createTaskSchedule(env, { id: taskId, cron: '* * * * *', paused: true }, taskQueue);
  const workers = await startOpenAIWorkers(env, opts.workers, taskQueue);
  env.fake.setLatency(opts.latencyMs);
  const billedBefore = env.fake.billed.length;
  const startedAt = Date.now();
  const from = new Date(Date.UTC(2026, 2, 1, 0, 0));
  const to = new Date(from.getTime() + (opts.slots - 1) * 60_000);
  let done = 0;
  let outageFigures: Record<string, string | number> = {};
  try {
    const burst = backfill(env.client, env.pool, { taskIds: [taskId], from, to, onSlotDone: (_r, n) => void (done = n) });
    const outage = (async () => {
      // In the middle of the burst: a quarter of the calls answered, most runs still to come, and calls in flight
      // (their answers come back during the outage).
      const inFlight = () => [...env.fake.inFlight().values()].reduce((a, b) => a + b, 0);
      await waitFor(
        async () => env.fake.billed.length - billedBefore >= opts.slots / 2 && inFlight() >= 2,
        600_000,
        'a quarter of the burst was billed, with calls in flight',
      );
      const billedNow = env.fake.billed.length - billedBefore;
      env.log(`  outage begins: ${done}/${opts.slots} slots done, ${billedNow} calls billed`);
      outageFigures = await opts.outage();
      env.log(`  outage over: ${done}/${opts.slots} slots done`);
    })();
    const [outcome] = await Promise.all([burst, outage]);
    const { figures } = await reconcile(env.pool, {
      scenario: opts.scenario,
      taskIds: [taskId],
      slots: opts.slots,
      billed: env.fake.billed.slice(billedBefore),
      startedAt,
      extra: outageFigures,
    });
    const repeatedCalls = figures.billed - 2 * opts.slots;
    figures.extra['provider calls repeated'] = repeatedCalls;
    return {
      figures,
      failedSlots: outcome.results.filter((r) => r.outcome !== 'completed').map((r) => `${r.workflowId}: ${r.outcome} ${r.detail ?? ''}`),
      repeatedCalls,
    };
  } finally {
    env.fake.setLatency(0);
    await Promise.all(workers.map((w) => w.stop()));
  }
}

/** R3: PostgreSQL stopped (pg_ctl stop -m fast) for outageMs while a burst runs, then started again on the same port. */
export function runPostgresOutage(
  env: ChaosEnv,
  postgres: PrivatePostgres,
  opts: { slots: number; outageMs: number },
): Promise<OutageResult> {
  return burstWithOutage(env, {
    scenario: `R3 PostgreSQL outage: the ledger database stopped for ${opts.outageMs / 1000} s during a burst of ${opts.slots} slots`,
    slots: opts.slots,
    workers: 2,
    latencyMs: 3_000, // calls in flight when the database stops come back while it is down: their booking must wait
    async outage() {
      const billedBefore = env.fake.billed.length;
      const stoppedAt = await postgres.stop();
      const stopped = Date.now();
      await sleep(Math.max(0, opts.outageMs - (stopped - stoppedAt)));
      await postgres.start();
      return {
        'outage s': ((Date.now() - stoppedAt) / 1000).toFixed(1),
        'calls billed while PostgreSQL was down': env.fake.billed.length - billedBefore,
      };
    },
  });
}

/**
 * The provider answers 503 for outageMs, the first half without Retry-After and the second half with one, while a
 * burst runs. Long enough that a handful of quick retries (1+2+4+8 s) would fail the runs: only the calls' 30-minute
 * retry budget carries them through.
 */
export function runProviderOutage(
  env: ChaosEnv,
  opts: { slots: number; outageMs: number; retryAfterSeconds?: number },
): Promise<OutageResult> {
  const retryAfter = String(opts.retryAfterSeconds ?? 5);
  return burstWithOutage(env, {
    scenario: `provider outage: every model call answered 503 for ${opts.outageMs / 1000} s during a burst of ${opts.slots} slots`,
    slots: opts.slots,
    workers: 2,
    latencyMs: 300,
    async outage() {
      const answersBefore = env.fake.outageAnswers();
      const began = Date.now();
      env.fake.outage(opts.outageMs / 2);
      await sleep(opts.outageMs / 2);
      env.fake.outage(opts.outageMs / 2, { retryAfter });
      await sleep(opts.outageMs / 2);
      return {
        'outage s': ((Date.now() - began) / 1000).toFixed(1),
        'requests answered 503': env.fake.outageAnswers() - answersBefore,
        'Retry-After in the second half, s': retryAfter,
      };
    },
  });
}
