/**
 * Calls fn on every item with at most `limit` calls in flight, and returns the results in the items' order. The
 * per-task Temporal calls go through this: one at a time makes a thousand tasks wait on a thousand round trips, all
 * at once sends the frontend a thousand requests in the same instant.
 */
export async function mapWithConcurrency<I, O>(items: readonly I[], limit: number, fn: (item: I) => Promise<O>): Promise<O[]> {
  if (!Number.isInteger(limit) || limit < 1) throw new Error(`concurrency limit ${limit} is not a positive integer`);
  const results = new Array<O>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return results;
}

/** How many per-task Temporal calls cronledger keeps in flight when it walks every task (describe, matching times). */
export const TEMPORAL_CALL_CONCURRENCY = 16;
