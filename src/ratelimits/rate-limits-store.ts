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
    const removed = await client.query<{ model: string }>(`delete from rate_limits where model <> all($1::text[]) returning model`, [
      models,
    ]);
    await client.query(
      `insert into rate_limits (model, requests_per_minute, tokens_per_minute)
       select * from unnest($1::text[], $2::integer[], $3::bigint[])
       on conflict (model) do update set requests_per_minute = excluded.requests_per_minute,
         tokens_per_minute = excluded.tokens_per_minute, applied_at = now(), applied_by = session_user`,
      [models, limits.map((l) => l.requestsPerMinute), limits.map((l) => l.tokensPerMinute)],
    );
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
