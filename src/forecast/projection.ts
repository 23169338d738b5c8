import { atto, usdOf } from '../budgets/tier';

/**
 * The month-end forecast as arithmetic, no I/O: what the slots left this month will cost at a task's cost per run, and
 * on which day of the budget's zone a user's month reaches each band of the limit. Money is integer atto-USD
 * (10^-18 USD) inside and exact decimal strings outside.
 */

/** The cost of one run of a task: from its last completed runs, or the budget guard's worst case when it has too few. */
export interface RunCost {
  /**
   * `runs`: median and p95 of the task's last completed runs; `worst-case`: fewer than MIN_RUNS_FOR_COST of them, so
   * the guard's worst case; `unapplied`: no applied version matches the schedule, so its runs are rejected and cost 0.
   */
  basis: 'runs' | 'worst-case' | 'unapplied';
  /** How many completed runs were read (at most the sample size). */
  runs: number;
  medianUsd: string;
  p95Usd: string;
}

/** A band of the limit (budget_bands): the tier that starts at `fromPercent` % of it. */
export interface Band {
  tier: string;
  fromPercent: number;
}

/** The day (in the budget's zone) spent + reserved + the forecast reaches a band, at the median and at the high cost. */
export interface Crossing {
  tier: string;
  percent: number;
  /** `YYYY-MM-DD`, null when the month ends below the band. */
  medianDay: string | null;
  highDay: string | null;
}

/** Fewer completed runs than this and the cost of a run is the guard's worst case. */
export const MIN_RUNS_FOR_COST = 5;
/** How many of a task's last completed runs give its cost per run. */
export const DEFAULT_COST_SAMPLE = 30;

/** `YYYY-MM-DD` of an instant in an IANA zone. */
export function localDay(at: Date, timeZone: string): string {
  return new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' }).format(at);
}

/** slots × cost per run, at the median and at the p95, exact. */
export function taskForecast(slots: number, cost: RunCost): { medianUsd: string; highUsd: string } {
  return { medianUsd: usdOf(atto(cost.medianUsd) * BigInt(slots)), highUsd: usdOf(atto(cost.p95Usd) * BigInt(slots)) };
}

/**
 * A user's month: spent + reserved now, plus every task's slots left at its cost per run, as a median and a high
 * (p95) total, and for each band the day the running total first reaches it (`used * 100 >= limit * percent`, the
 * rule of budget_tier), walking all the user's slots in time order. Already there at `at`: the day of `at`.
 */
export function projectUser(input: {
  at: Date;
  timeZone: string;
  limitUsd: string | null;
  spentUsd: string;
  reservedUsd: string;
  bands: Band[];
  tasks: { slots: Date[]; cost: RunCost }[];
}): { medianUsd: string; highUsd: string; crossings: Crossing[] } {
  const base = atto(input.spentUsd) + atto(input.reservedUsd);
  const steps = input.tasks
    .flatMap(({ slots, cost }) => slots.map((t) => ({ t: t.getTime(), median: atto(cost.medianUsd), high: atto(cost.p95Usd) })))
    .sort((a, b) => a.t - b.t);
  const limit = input.limitUsd === null ? null : atto(input.limitUsd);
  const reachedOn = (percent: number, pick: 'median' | 'high'): string | null => {
    if (limit === null) return null;
    let used = base;
    if (used * 100n >= limit * BigInt(percent)) return localDay(input.at, input.timeZone);
    for (const s of steps) {
      used += s[pick];
      if (used * 100n >= limit * BigInt(percent)) return localDay(new Date(s.t), input.timeZone);
    }
    return null;
  };
  const sum = (pick: 'median' | 'high') => steps.reduce((acc, s) => acc + s[pick], base);
  return {
    medianUsd: usdOf(sum('median')),
    highUsd: usdOf(sum('high')),
    crossings:
      limit === null
        ? []
        : [...input.bands]
            .sort((a, b) => a.fromPercent - b.fromPercent)
            .map((b) => ({
              tier: b.tier,
              percent: b.fromPercent,
              medianDay: reachedOn(b.fromPercent, 'median'),
              highDay: reachedOn(b.fromPercent, 'high'),
            })),
  };
}

/** What a backfill would do, decided as the guard decides, one slot after another. */
export interface BackfillSimulation {
  run: number;
  downgraded: number;
  blocked: number;
  /** spent + reserved + the cost of every slot. */
  totalUsd: string;
  /** totalUsd is within the limit (or there is none). */
  fits: boolean;
}

/**
 * The guard's tiers over the slots in order, each at its task's cost per run: a slot runs at the default model while
 * spent + reserved + what the earlier slots spent is in the default band and its cost fits the limit, is downgraded
 * from the cheap band on (80 %) while its cost still fits, and is blocked from the limit on (or when it does not fit).
 * A downgraded run is counted at the same cost (the cheap model's is not known before it runs), so the figure errs
 * towards blocking.
 */
export function simulateBackfill(input: {
  runCostsUsd: string[];
  spentUsd: string;
  reservedUsd: string;
  limitUsd: string | null;
  bands: Band[];
}): BackfillSimulation {
  const costs = input.runCostsUsd.map(atto);
  const start = atto(input.spentUsd) + atto(input.reservedUsd);
  const total = costs.reduce((a, c) => a + c, start);
  const totalUsd = usdOf(total);
  if (input.limitUsd === null) return { run: costs.length, downgraded: 0, blocked: 0, totalUsd, fits: true };
  const limit = atto(input.limitUsd);
  const from = (tier: string, fallback: number) => BigInt(input.bands.find((b) => b.tier === tier)?.fromPercent ?? fallback);
  const cheapFrom = from('cheap', 80);
  const blockedFrom = from('blocked', 100);
  let used = start;
  const out = { run: 0, downgraded: 0, blocked: 0 };
  for (const cost of costs) {
    if (used * 100n >= limit * blockedFrom || used + cost > limit) {
      out.blocked++;
      continue;
    }
    if (used * 100n >= limit * cheapFrom) out.downgraded++;
    else out.run++;
    used += cost;
  }
  return { ...out, totalUsd, fits: total <= limit };
}
