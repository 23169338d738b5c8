import { execFileSync } from 'node:child_process';

/**
 * The Temporal server's own Prometheus metrics, for what a run costs it inside: its persistence requests by operation,
 * and how its matching service handed tasks to pollers (sync: to a poller already waiting; async: written to the task
 * queue's backlog in persistence and read back later). Found among the ports the server's processes listen on: the dev
 * server picks its own, `dev up --temporal server` gives each service one.
 */

/** The /metrics URLs the given processes serve: each port they listen on that answers with Prometheus text. */
export async function prometheusEndpoints(pids: number[]): Promise<string[]> {
  let listening: string;
  try {
    listening = execFileSync('ss', ['-ltnpH'], { encoding: 'utf8' });
  } catch {
    return []; // no ss: the figures are left out
  }
  const ports = [...listening.matchAll(/127\.0\.0\.1:(\d+)\s.*pid=(\d+),/g)].filter((m) => pids.includes(Number(m[2]))).map((m) => m[1]);
  const found = await Promise.all(
    ports.map(async (port) => {
      const url = `http://127.0.0.1:${port}/metrics`;
      const text = await fetch(url, { signal: AbortSignal.timeout(2_000) })
        .then((r) => r.text())
        .catch(() => '');
      return text.startsWith('# HELP') ? url : undefined;
    }),
  );
  return found.filter((u): u is string => u !== undefined);
}

/**
 * The counters that say what the server did, summed over the endpoints: `persistence <operation>` for each persistence
 * request, and matching's task hand-offs (`sync matches`, `async matches`, `polls answered`, `polls answered sync`).
 */
export async function serverCounters(urls: string[]): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  const add = (key: string, n: number) => (counts[key] = (counts[key] ?? 0) + n);
  for (const url of urls) {
    const text = await fetch(url, { signal: AbortSignal.timeout(10_000) }).then((r) => r.text());
    for (const m of text.matchAll(/^(\w+)\{([^}]*)\} ([\d.e+]+)$/gm)) {
      const [, name, labels, value] = m;
      const n = Number(value);
      if (name === 'persistence_requests') add(`persistence ${/operation="(\w+)"/.exec(labels)?.[1] ?? '?'}`, n);
      else if (name === 'syncmatch_latency_count') add('sync matches', n);
      else if (name === 'asyncmatch_latency_count') add('async matches', n);
      else if (name === 'poll_success') add('polls answered', n);
      else if (name === 'poll_success_sync') add('polls answered sync', n);
    }
  }
  return counts;
}
