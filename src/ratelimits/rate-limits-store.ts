import type pg from 'pg';
import { UserError } from '../errors';
import type { RateLimit } from './rate-limits-file';

export interface ApplyRateLimitsResult {
  applied: RateLimit[];
  /** Models that had a limit and have none now. */
  removed: string[];
}

/**
 * Makes `limits` the whole set of rate limits, in one transaction: every worker's next call sees the new set. A model
 * with no price version is refused (a typo would limit nothing), with nothing written.
 */
export async function applyRateLimits(pool: pg.Pool, limits: RateLimit[]): Promise<ApplyRateLimitsResult> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const models = limits.map((l) => l.model);
    const unknown = await client.query<{ model: string }>(
      `select m as model from unnest($1::text[]) m where not exists (select 1 from model_prices p where p.model = m) order by 1`,
      [models],
    );
    if (unknown.rows.length > 0) {
      throw new UserError(
        `no price was ever applied for ${unknown.rows.map((r) => r.model).join(', ')}: check the model names, or apply its prices first (\`cronledger prices apply FILE\`)`,
      );
    }
    // the operator role replaces them through apply_rate_limits (migrations/032_roles_by_job.sql), which returns the models removed
    const removed = await client.query<{ model: string }>('select model from apply_rate_limits($1, $2, $3) as model', [
      models,
      limits.map((l) => l.requestsPerMinute),
      limits.map((l) => l.tokensPerMinute),
    ]);
    await client.query('commit');
    return { applied: limits, removed: removed.rows.map((r) => r.model).sort() };
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/** A model's limits with what waiting for them cost so far (all worker processes together). */
export interface RateLimitStatus extends RateLimit {
  admitted: string;
  /** Calls that waited for capacity, and the time they waited in all (whole milliseconds). */
  waited: string;
  waitedMs: string;
  /** 429 answers the provider gave anyway (each held every worker's calls of the model for its Retry-After). */
  throttled: string;
}

/** Every limited model and its counters, by model; counts are decimal strings (bigint). */
export async function rateLimitStatus(pool: pg.Pool): Promise<RateLimitStatus[]> {
  const { rows } = await pool.query<RateLimitStatus & { tokensPerMinute: string | null }>(
    `select l.model, l.requests_per_minute as "requestsPerMinute", l.tokens_per_minute::text as "tokensPerMinute",
            coalesce(s.admitted, 0)::text as admitted, coalesce(s.waited, 0)::text as waited,
            (coalesce(s.waited_us, 0) / 1000)::text as "waitedMs", coalesce(s.throttled, 0)::text as throttled
       from rate_limits l left join rate_limit_state s using (model)
      order by l.model`,
  );
  // a whole number of at most 10^12 (the table's check), exact as a JS number
  return rows.map((r) => ({ ...r, tokensPerMinute: r.tokensPerMinute === null ? null : Number(r.tokensPerMinute) }));
}

/**
 * What waiting for the rate limits cost, per model: in the current UTC hour, in the last 24 hours (that hour and the 23
 * before it) and in all. Counts are decimal strings (bigint), times whole milliseconds.
 */
export interface RateLimitWaits {
  model: string;
  /** The model's limits now; both null when it has none (a 429 of an unlimited model is counted too). */
  requestsPerMinute: number | null;
  tokensPerMinute: string | null;
  waitsThisHour: string;
  throttledThisHour: string;
  waitsLast24h: string;
  waitedMsLast24h: string;
  throttledLast24h: string;
  waited: string;
  waitedMs: string;
  throttled: string;
}

/** Every model with a limit or a counted wait or 429, by model (rate_limit_hours, rate_limit_state). */
export async function rateLimitWaits(pool: pg.Pool): Promise<RateLimitWaits[]> {
  const { rows } = await pool.query<RateLimitWaits>(
    `with hours as (
       select model, sum(waited) filter (where hour >= date_trunc('hour', now(), 'UTC'))::bigint as waits_this_hour,
              sum(throttled) filter (where hour >= date_trunc('hour', now(), 'UTC'))::bigint as throttled_this_hour,
              sum(waited)::bigint as waits, sum(waited_us)::bigint as waited_us, sum(throttled)::bigint as throttled
         from rate_limit_hours where hour >= date_trunc('hour', now(), 'UTC') - interval '23 hours' group by model
     )
     select m.model, l.requests_per_minute as "requestsPerMinute", l.tokens_per_minute::text as "tokensPerMinute",
            coalesce(h.waits_this_hour, 0)::text as "waitsThisHour", coalesce(h.throttled_this_hour, 0)::text as "throttledThisHour",
            coalesce(h.waits, 0)::text as "waitsLast24h", (coalesce(h.waited_us, 0) / 1000)::text as "waitedMsLast24h",
            coalesce(h.throttled, 0)::text as "throttledLast24h", coalesce(s.waited, 0)::text as waited,
            (coalesce(s.waited_us, 0) / 1000)::text as "waitedMs", coalesce(s.throttled, 0)::text as throttled
       from (select model from rate_limits union select model from rate_limit_state) m
       left join rate_limits l using (model) left join rate_limit_state s using (model) left join hours h using (model)
      order by m.model`,
  );
  return rows;
}
