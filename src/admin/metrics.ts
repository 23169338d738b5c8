import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type pg from 'pg';
import { budgetStatusOfAll } from '../budgets/budget-status';
import { runCountsByStatus, runDurations } from '../db/runs';
import { bookingLags, chargesAndCredits } from '../ledger/entries';
import { parseUsd, toAttoUsd } from '../money';
import { divideHalfEven } from '../reports/economics';
import type { TaskSlotCheck } from '../schedules/missed-slots';

/**
 * GET /metrics through prom-client. The figures are read from PostgreSQL at each scrape, so every admin replica and
 * every restart reports the same values: charges and credits as two counters (a credit would make a net counter
 * fall) in integer micro-dollars, half-even from the exact sums; runs by status; run durations and ledger booking
 * lag as histograms. Per-user labels only when the operator asks (one series per user).
 */
export function adminMetrics(db: pg.Pool, opts: { perUser: boolean; missedSlots?: () => Promise<TaskSlotCheck[]> }) {
  const registry = new Registry();
  const labelNames = opts.perUser ? ['model', 'kind', 'user'] : ['model', 'kind'];
  const micro = (exact: string): number => {
    const value = divideHalfEven(toAttoUsd(parseUsd(exact)), 10n ** 12n);
    // prom-client takes JS numbers; refuse rather than lose a digit past 2^53 micro-dollars ($9 billion)
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`counter value ${value} is too large to export exactly`);
    return Number(value);
  };
  const charges = new Counter({
    name: 'cronledger_charges_micro_usd_total',
    help: 'What the ledger charged (positive entries: usage, upward corrections), in integer micro-dollars, half-even',
    labelNames,
    registers: [registry],
  });
  const credits = new Counter({
    name: 'cronledger_credits_micro_usd_total',
    help: 'What the ledger credited back (negative entries: credits, downward corrections), in integer micro-dollars, half-even',
    labelNames,
    registers: [registry],
  });
  const runs = new Counter({
    name: 'cronledger_runs_total',
    help: 'Claimed runs by status and budget tier (duplicate: executions that found their slot taken; tier "none": no budget decision recorded)',
    labelNames: ['status', 'tier'],
    registers: [registry],
  });
  const utilisation = new Gauge({
    name: 'cronledger_budget_utilisation_ratio',
    help: "Each user's (spent + reserved) / monthly limit in the budget's current month (1 = the limit); users with a budget only",
    labelNames: ['user', 'tier'],
    registers: [registry],
  });
  const durations = new Histogram({
    name: 'cronledger_run_duration_seconds',
    help: 'How long finished runs took, from claim to completion',
    buckets: [0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800],
    registers: [registry],
  });
  const lag = new Histogram({
    name: 'cronledger_ledger_booking_lag_seconds',
    help: 'From the moment usage came back from the provider to the commit of its ledger row',
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 30, 300, 3600],
    registers: [registry],
  });

  const missed = new Gauge({
    name: 'cronledger_missed_slots',
    help: "Slots of each task's schedule that should have fired and have no claim after the grace period, over the check window (0: none; paused tasks are not checked)",
    labelNames: ['task'],
    registers: [registry],
  });

  async function collect(): Promise<void> {
    charges.reset();
    credits.reset();
    for (const r of await chargesAndCredits(db, opts.perUser)) {
      const labels: Record<string, string> = { model: r.model ?? 'none', kind: r.kind ?? 'none' };
      if (opts.perUser) labels.user = r.user_id ?? '';
      charges.inc(labels, micro(r.charges_usd));
      credits.inc(labels, micro(r.credits_usd));
    }
    runs.reset();
    for (const r of await runCountsByStatus(db)) runs.inc({ status: r.status, tier: r.tier ?? 'none' }, Number(r.runs));
    utilisation.reset();
    for (const b of await budgetStatusOfAll(db)) {
      if (b.limitUsd === null) continue;
      // (spent + reserved) / limit in millionths, half-even: a ratio, not money, exported as a gauge
      const used = toAttoUsd(parseUsd(b.spentUsd)) + toAttoUsd(parseUsd(b.reservedUsd));
      const ppm = divideHalfEven(used * 1_000_000n, toAttoUsd(parseUsd(b.limitUsd)));
      utilisation.set({ user: b.userId, tier: b.tier }, Number(ppm) / 1_000_000);
    }
    missed.reset();
    // Without Temporal (or when it fails) the gauge has no series: absent is not zero
    const checks = await opts.missedSlots?.().catch((err: Error) => {
      process.stderr.write(`cronledger admin: /metrics: missed slots not checked: ${err.message}\n`);
      return [];
    });
    for (const t of checks ?? []) missed.set({ task: t.taskId }, t.missedCount);
    durations.reset();
    for (const r of await runDurations(db)) for (let i = 0; i < Number(r.runs); i++) durations.observe(Number(r.duration_ms) / 1000);
    lag.reset();
    for (const r of await bookingLags(db)) for (let i = 0; i < Number(r.entries); i++) lag.observe(Number(r.lag_ms) / 1000);
  }

  // One scrape at a time: collect() resets and refills the series, and two interleaved would mix.
  let last: Promise<unknown> = Promise.resolve();
  return {
    contentType: registry.contentType,
    render(): Promise<string> {
      const next = last
        .catch(() => undefined)
        .then(async () => {
          await collect();
          return registry.metrics();
        });
      last = next;
      return next;
    },
  };
}
