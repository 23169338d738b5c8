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
