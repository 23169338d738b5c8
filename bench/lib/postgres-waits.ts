import type pg from 'pg';

/**
 * Samples what a database's active client backends are doing, every 20 ms until stop() is called: their wait event
 * ("CPU" when running, not waiting), prefixed by `label(query)` when given (say which statement waits). Needs a role
 * that may see other roles' sessions (the superuser).
 */
export function sampleWaits(superuser: pg.Client, database: string, label?: (query: string) => string) {
  const waits = new Map<string, number>();
  let running = true;
  const loop = (async () => {
    while (running) {
      const { rows } = await superuser.query<{ w: string; query: string }>(
        `select coalesce(wait_event_type || ':' || wait_event, 'CPU') as w, query from pg_stat_activity
          where datname = $1 and state = 'active' and backend_type = 'client backend' and pid <> pg_backend_pid()`,
        [database],
      );
      for (const r of rows) {
        const key = label ? `${label(r.query)} ${r.w}` : r.w;
        waits.set(key, (waits.get(key) ?? 0) + 1);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  return async (): Promise<Map<string, number>> => {
    running = false;
    await loop;
    return waits;
  };
}

/** The `n` most frequent samples as percentages of all, e.g. "IO:WALSync 87%, CPU 13%". */
export function topWaits(waits: Map<string, number>, n: number): string {
  const samples = [...waits.values()].reduce((a, b) => a + b, 0) || 1;
  return [...waits.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([w, k]) => `${w} ${Math.round((100 * k) / samples)}%`)
    .join(', ');
}
