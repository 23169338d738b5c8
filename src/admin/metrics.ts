import { Counter, Gauge, Registry } from 'prom-client';
import type pg from 'pg';
import { budgetStatusOfAll } from '../budgets/budget-status';
import { histogramBuckets, ledgerTotals, runCounts } from '../db/metric-counters';
import { parseUsd, toAttoUsd } from '../money';
import { rateLimitStatus } from '../ratelimits/rate-limits-store';
import { bookedDrift } from '../reconcile/month-figures';
import { divideHalfEven } from '../reports/economics';
import type { TaskSlotCheck } from '../schedules/missed-slots';
import { sharedResult } from './shared-result';

/** 10 s: every Prometheus replica and a person reloading share one computation, and a figure is never older than that. */
export const DEFAULT_METRICS_CACHE_MS = 10_000;

/**
 * GET /metrics through prom-client. The figures are read from PostgreSQL, so every admin replica and every restart
 * reports the same values: charges and credits as two counters (a credit would make a net counter fall) in integer
 * micro-dollars, half-even from the exact sums; runs by status; run durations and ledger booking lag as histograms.
 * Every figure comes from counter rows the database keeps in the transaction of what they count (src/db/metric-counters.ts),
 * so a scrape costs the same however many runs and ledger rows there are. One text serves every scrape for `cacheMs`.
 * Per-user labels only when the operator asks (one series per user).
 */
export function adminMetrics(db: pg.Pool, opts: { perUser: boolean; missedSlots?: () => Promise<TaskSlotCheck[]>; cacheMs?: number }) {
  const registry = new Registry();
  const labelNames = opts.perUser ? ['model', 'kind', 'user'] : ['model', 'kind'];
  const micro = (exact: string): number => {
    const value = divideHalfEven(toAttoUsd(parseUsd(exact)), 10n ** 12n);
    // prom-client takes JS numbers; refuse rather than lose a digit past 2^53 micro-dollars ($9 billion)
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || -value > BigInt(Number.MAX_SAFE_INTEGER))
      throw new Error(`counter value ${value} is too large to export exactly`);
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

  const missed = new Gauge({
    name: 'cronledger_missed_slots',
    help: "Slots of each task's schedule that should have fired and have no claim after the grace period, over the check window (0: none; paused tasks are not checked)",
    labelNames: ['task'],
    registers: [registry],
  });

  const drift = new Gauge({
    name: 'cronledger_reconciliation_booked_micro_usd',
    help: "What reconciliation booked against each provider's own reports (`cronledger reconcile`), signed (positive: the provider billed more than the ledger held), all days, in integer micro-dollars, half-even",
    labelNames: ['provider'],
    registers: [registry],
  });

  const rateLimitCounters = {
    admitted: new Counter({
      name: 'cronledger_rate_limit_admitted_total',
      help: 'Model calls the shared rate limiter admitted, per rate-limited model (`cronledger limits`), all workers together',
      labelNames: ['model'],
      registers: [registry],
    }),
    waited: new Counter({
      name: 'cronledger_rate_limit_waited_total',
      help: 'Of those, the calls that waited for capacity first',
      labelNames: ['model'],
      registers: [registry],
    }),
    waitSeconds: new Counter({
      name: 'cronledger_rate_limit_wait_seconds_total',
      help: 'The time those calls waited for capacity, in all',
      labelNames: ['model'],
      registers: [registry],
    }),
    throttled: new Counter({
      name: 'cronledger_rate_limit_throttled_total',
      help: "429 answers the provider gave anyway (each held every worker's calls of the model for its Retry-After)",
      labelNames: ['model'],
      registers: [registry],
    }),
  };

  async function collect(): Promise<void> {
    charges.reset();
    credits.reset();
    for (const r of await ledgerTotals(db, opts.perUser)) {
      const labels: Record<string, string> = { model: r.model ?? 'none', kind: r.kind ?? 'none' };
      if (opts.perUser) labels.user = r.user_id ?? '';
      charges.inc(labels, micro(r.charges_usd));
      credits.inc(labels, micro(r.credits_usd));
    }
    runs.reset();
    for (const r of await runCounts(db)) runs.inc({ status: r.status, tier: r.tier ?? 'none' }, Number(r.runs));
    utilisation.reset();
    for (const b of await budgetStatusOfAll(db)) {
      if (b.limitUsd === null) continue;
      // (spent + reserved) / limit in millionths, half-even: a ratio, not money, exported as a gauge
      const used = toAttoUsd(parseUsd(b.spentUsd)) + toAttoUsd(parseUsd(b.reservedUsd));
      const ppm = divideHalfEven(used * 1_000_000n, toAttoUsd(parseUsd(b.limitUsd)));
      utilisation.set({ user: b.userId, tier: b.tier }, Number(ppm) / 1_000_000);
    }
    for (const c of Object.values(rateLimitCounters)) c.reset();
    for (const r of await rateLimitStatus(db)) {
      rateLimitCounters.admitted.inc({ model: r.model }, Number(r.admitted));
      rateLimitCounters.waited.inc({ model: r.model }, Number(r.waited));
      rateLimitCounters.waitSeconds.inc({ model: r.model }, Number(r.waitedMs) / 1000);
      rateLimitCounters.throttled.inc({ model: r.model }, Number(r.throttled));
    }
    drift.reset();
    for (const d of await bookedDrift(db)) drift.set({ provider: d.provider }, micro(d.bookedUsd));
    missed.reset();
    // Without Temporal (or when it fails) the gauge has no series: absent is not zero
    const checks = await opts.missedSlots?.().catch((err: Error) => {
      process.stderr.write(`cronledger admin: /metrics: missed slots not checked: ${err.message}\n`);
      return [];
    });
    for (const t of checks ?? []) missed.set({ task: t.taskId }, t.missedCount);
  }

  async function render(): Promise<string> {
    const [durations, lags] = await Promise.all([histogramBuckets(db, 'run_duration'), histogramBuckets(db, 'booking_lag')]);
    await collect();
    return (
      (await registry.metrics()) +
      histogramText('cronledger_run_duration_seconds', 'How long finished runs took, from claim to completion', durations) +
      histogramText(
        'cronledger_ledger_booking_lag_seconds',
        'From the moment usage came back from the provider to the commit of its ledger row',
        lags,
      )
    );
  }

  // Single flight as well: collect() resets and refills the series, and two interleaved would mix.
  const shared = sharedResult(render, { maxAgeMs: opts.cacheMs ?? DEFAULT_METRICS_CACHE_MS });
  return {
    contentType: registry.contentType,
    render: async (): Promise<string> => (await shared.get()).value,
  };
}

/** Milliseconds as seconds, exactly (no float arithmetic): 1500 -> 1.5. */
const seconds = (ms: bigint): string => {
  const s = `${ms / 1000n}.${String(ms % 1000n).padStart(3, '0')}`.replace(/\.?0+$/, '');
  return s === '' ? '0' : s;
};

/**
 * A Prometheus histogram from bucket counts: `buckets` holds, in order, each bucket's upper bound in milliseconds
 * (null: +Inf, the last), how many observations fell there and their sum in milliseconds; the text carries the
 * cumulative `le` counts.
 */
export function histogramText(name: string, help: string, buckets: { le_ms: string | null; count: string; sum_ms: string }[]): string {
  const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`];
  let cumulative = 0n;
  let sumMs = 0n;
  for (const b of buckets) {
    cumulative += BigInt(b.count);
    sumMs += BigInt(b.sum_ms);
    lines.push(`${name}_bucket{le="${b.le_ms === null ? '+Inf' : seconds(BigInt(b.le_ms))}"} ${cumulative}`);
  }
  lines.push(`${name}_sum ${seconds(sumMs)}`, `${name}_count ${cumulative}`);
  return `\n${lines.join('\n')}\n`;
}
