import type pg from 'pg';
import { onePerPool } from '../db/pool';

/** How long a worker trusts its list of limited models: a `limits apply` reaches every worker within this. */
export const LIMITED_MODELS_TTL_MS = 10_000;
/** The longest single sleep while waiting, so a cancel or a heartbeat is never far off. */
const MAX_SLEEP_MS = 1_000;

/**
 * The limiter asks for a longer wait than the caller may spend here. The model call's activity then ends its attempt
 * before any request, and Temporal starts the next one after `waitMs` with a whole timeout of its own: a wait never
 * eats into the time the request itself may take.
 */
export class AwaitingCapacityError extends Error {
  constructor(
    readonly model: string,
    readonly waitMs: number,
  ) {
    super(`${model}: the provider's rate limit has no room for this call for ${waitMs} ms (cronledger limits list); asking again then`);
    this.name = 'AwaitingCapacityError';
  }
}

export interface CapacityWait {
  /** Aborted when the caller is cancelled: the wait ends with the signal's reason. */
  signal: AbortSignal;
  /** Wait here at most this long in all; a longer wait throws AwaitingCapacityError at once. */
  maxWaitMs: number;
  /** Called while waiting (the activity's heartbeat). */
  onWait?: () => void;
}

/**
 * Waits until the shared limiter (rate_limit_acquire, migrations/030_rate_limits.sql) admits one call of `tokens`
 * tokens to `model`, then returns how long it waited (ms); `waitedBefore` counts earlier attempts' waits. Models without a limit return at once, with no round trip
 * once the worker's list of limited models is fresh.
 */
export function createCapacity(pool: pg.Pool, now: () => number = Date.now) {
  let limited: { models: Set<string>; readAt: number } | undefined;
  const isLimited = async (model: string): Promise<boolean> => {
    if (!limited || now() - limited.readAt > LIMITED_MODELS_TTL_MS) {
      const { rows } = await pool.query<{ model: string }>('select model from rate_limits');
      limited = { models: new Set(rows.map((r) => r.model)), readAt: now() };
    }
    return limited.models.has(model);
  };

  return {
    isLimited,
    async acquire(model: string, tokens: () => number, wait: CapacityWait & { waitedBefore?: number }): Promise<number> {
      if (!(await isLimited(model))) return 0;
      const count = tokens();
      const started = now() - (wait.waitedBefore ?? 0);
      const deadline = now() + wait.maxWaitMs;
      for (;;) {
        const waited = now() - started;
        const { rows } = await pool.query<{ wait_us: string }>('select rate_limit_acquire($1, $2, $3) as wait_us', [
          model,
          count,
          waited * 1000,
        ]);
        const waitMs = Math.ceil(Number(rows[0].wait_us) / 1000);
        if (waitMs <= 0) return waited;
        if (now() + waitMs > deadline) throw new AwaitingCapacityError(model, waitMs);
        wait.signal.throwIfAborted();
        wait.onWait?.();
        await sleep(Math.min(waitMs, MAX_SLEEP_MS), wait.signal);
      }
    },
    /** The provider answered "retry after" for `model`: every worker's next call of it waits that long. */
    async hold(model: string, afterMs: number, throttled: boolean): Promise<void> {
      await pool.query('select rate_limit_hold($1, $2, $3)', [model, Math.max(0, Math.ceil(afterMs)), throttled]);
    },
  };
}

export type Capacity = ReturnType<typeof createCapacity>;

/** One limiter client per pool (so per worker process): its list of limited models is read once per TTL. */
export const capacityOf = onePerPool((pool) => createCapacity(pool));

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
