import type pg from 'pg';

/**
 * A synthetic month of traffic for the report benches: runs of two entries each (a chat call and an embedding), 500
 * users with one task each, spread evenly over the whole month (not packed into its first days), a failed call in 97,
 * a failed run in 50. Late entries land all over the month too, as back-dated bookings and late commits would.
 * Costs are computed exactly by PostgreSQL (numeric).
 */
export const SYNTHETIC_MONTH = '2026-06';
const MONTH_START = `timestamptz '2026-06-01 00:00:00+00'`;
const MONTH_SECONDS = 30 * 86_400;
const USERS = 500;

/** The instant of run r of `runs` runs spread evenly over the month. */
const runInstant = (r: string, runs: number) =>
  `${MONTH_START} + ((${r})::bigint * ${MONTH_SECONDS - 2} / ${Math.max(1, runs)}) * interval '1 second'`;

/**
 * Ledger entries from..to of a month of `total` entries. Late ones (`late`) take the run (and so the user, task and
 * instant) of a pseudo-random earlier entry: they land anywhere in the month.
 */
export function insertLedgerSql(from: number, to: number, total: number, late = false): string {
  const runs = Math.floor(total / 2);
  const r = late ? `((g::bigint * 7919) % ${total}) / 2` : `g / 2`;
  return `
  insert into usage_ledger (idempotency_key, entry_type, user_id, run_id, workflow_id, task_id, model, kind, status, attempt,
                            prompt_tokens, completion_tokens, cost_usd, price_version, created_at)
  select 'bench:' || g, 'usage', 'user-' || (${r} % ${USERS}), 'run-' || ${r}, 'wf-' || ${r}, 'task-' || (${r} % ${USERS}),
         case when g % 2 = 0 then 'openai/gpt-4o-mini' else 'openai/text-embedding-3-small' end,
         case when g % 2 = 0 then 'chat' else 'embedding' end,
         case when g % 97 = 0 then 'failed' else 'ok' end, 1,
         100 + g % 3000, case when g % 2 = 0 then 20 + g % 700 else 0 end,
         case when g % 2 = 0 then (100 + g % 3000) * 0.15 / 1000000 + (20 + g % 700) * 0.60 / 1000000
              else (100 + g % 3000) * 0.02 / 1000000 end,
         'v1', ${runInstant(r, runs)} + (g % 2) * interval '1 second'
    from generate_series(${from}, ${to}) g`;
}

/** The claimed runs of a month of `total` entries: one per two entries, claimed when their entries were booked. */
export function insertRunsSql(from: number, to: number, total: number): string {
  const runs = Math.floor(total / 2);
  return `
  insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by,
                    claimed_at, finished_at, duration_ms)
  select 'bench:' || r, 'task-' || (r % ${USERS}), 'user-' || (r % ${USERS}), 'wf-' || r, 'run-' || r, ${runInstant('r', runs)},
         case when r % 50 = 0 then 'failed' else 'completed' end, 'bench', ${runInstant('r', runs)},
         ${runInstant('r', runs)} + interval '2 seconds', 2000
    from generate_series(${from}, ${to}) r`;
}

/**
 * Loads a month of `total` entries and their runs as a bulk load does: as the owner, in batches, with the tables'
 * triggers off (no queue rows, no per-row month summary or metric counters), then rebuilds what the triggers would
 * have kept: the month-to-date summary (budget_months) and the counters /metrics reads (metric_rebuild()). The rollups are rebuilt by the caller (rebuildMonth), and timed there.
 */
export async function bulkLoadMonth(owner: pg.Client, total: number, onBatch?: (done: number) => void): Promise<void> {
  const batch = 500_000;
  await owner.query('alter table usage_ledger disable trigger user');
  await owner.query('alter table runs disable trigger user');
  try {
    for (let from = 1; from <= total; from += batch) {
      await owner.query(insertLedgerSql(from, Math.min(total, from + batch - 1), total));
      onBatch?.(Math.min(total, from + batch - 1));
    }
    const runs = Math.floor(total / 2);
    for (let from = 0; from <= runs; from += batch) await owner.query(insertRunsSql(from, Math.min(runs, from + batch - 1), total));
  } finally {
    await owner.query('alter table usage_ledger enable trigger user');
    await owner.query('alter table runs enable trigger user');
  }
  await owner.query(
    `insert into budget_months (user_id, time_zone, month, spent_usd)
     select l.user_id, z.time_zone, budget_month_of(l.created_at, z.time_zone), sum(l.cost_usd)
       from usage_ledger l cross join budget_zones z group by 1, 2, 3
     on conflict (user_id, time_zone, month) do update set spent_usd = excluded.spent_usd`,
  );
  await owner.query('select metric_rebuild()');
  await owner.query('analyze');
}
