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
  /**
   * Present when the task's maxCostPerRun rules out its default models (the guard's rule, budget_cap_choice): `cheap`,
   * each run costs at most the cheap models' worst case; `blocked`, every run is blocked and costs nothing. The figures
   * above are capped so; these are what they were without the cap.
   */
  capped?: { maxCostPerRunUsd: string; choice: 'cheap' | 'blocked'; uncappedMedianUsd: string; uncappedP95Usd: string };
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

const dayFormats = new Map<string, Intl.DateTimeFormat>();

/** `YYYY-MM-DD` of an instant in an IANA zone (one formatter per zone: the walk asks for every slot's day). */
export function localDay(at: Date, timeZone: string): string {
  let format = dayFormats.get(timeZone);
  if (!format) {
    format = new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' });
    dayFormats.set(timeZone, format);
  }
  return format.format(at);
}

/** slots × cost per run, at the median and at the p95, exact: what every slot would cost, none blocked or skipped. */
export function taskForecast(slots: number, cost: RunCost): { medianUsd: string; highUsd: string } {
  return { medianUsd: usdOf(atto(cost.medianUsd) * BigInt(slots)), highUsd: usdOf(atto(cost.p95Usd) * BigInt(slots)) };
}

/** What a task does when its user's money runs out (the tasks file's onBudgetExhausted; unset: block). */
export type BudgetPolicy = 'block' | 'pause';

/** How a task's slots would end: run (at the default or the cheap models), blocked, or skipped by a budget pause. */
export interface SlotOutcomes {
  run: number;
  blocked: number;
  skipped: number;
}

/** One slot of the walk: when, what it costs, and its task (an index into the caller's list). */
interface Step {
  t: number;
  cost: bigint;
  task: number;
}

/** What the guard makes of one slot in the walk. */
type StepOutcome = 'run' | 'downgraded' | 'blocked' | 'skipped';

/**
 * The guard's tiers over slots in time order, each at its cost (bigint atto-USD), from `start` (spent + reserved): a
 * slot runs at the default model while the month is in the default band and its cost fits the limit, is downgraded
 * from the cheap band on (80 %) while its cost still fits, and is blocked from the limit on, or when it does not fit
 * (used + cost > limit, as budget_choice). A task blocked by its maxCostPerRun is blocked at every slot (no pause: the
 * guard pauses only for money). A task whose policy is `pause` pauses at its first slot blocked by the limit: its later
 * slots this month are skipped (the sweeper resumes it when the month turns over). Without a limit every slot runs. A
 * downgraded run is counted at the same cost (the cheap model's is not known before it runs), so the figure errs
 * towards blocking.
 */
function walkSlots(
  steps: Step[],
  tasks: { policy: BudgetPolicy; capBlocked: boolean }[],
  start: bigint,
  limit: bigint | null,
  bands: Band[],
): { outcomes: StepOutcome[]; used: bigint } {
  const from = (tier: string, fallback: number) => BigInt(bands.find((b) => b.tier === tier)?.fromPercent ?? fallback);
  const cheapFrom = from('cheap', 80);
  const blockedFrom = from('blocked', 100);
  const paused = new Set<number>();
  let used = start;
  const outcomes = steps.map((s): StepOutcome => {
    if (tasks[s.task].capBlocked) return 'blocked';
    if (paused.has(s.task)) return 'skipped';
    if (limit !== null && (used * 100n >= limit * blockedFrom || used + s.cost > limit)) {
      if (tasks[s.task].policy === 'pause') paused.add(s.task);
      return 'blocked';
    }
    const outcome = limit !== null && used * 100n >= limit * cheapFrom ? 'downgraded' : 'run';
    used += s.cost;
    return outcome;
  });
  return { outcomes, used };
}

/** Per task, what the walk made of its slots, and what the slots that run cost. */
function tallyByTask(steps: Step[], outcomes: StepOutcome[], taskCount: number): (SlotOutcomes & { spend: bigint })[] {
  const out = Array.from({ length: taskCount }, () => ({ run: 0, blocked: 0, skipped: 0, spend: 0n }));
  steps.forEach((s, i) => {
    const o = outcomes[i];
    const t = out[s.task];
    if (o === 'blocked') t.blocked++;
    else if (o === 'skipped') t.skipped++;
    else {
      t.run++;
      t.spend += s.cost;
    }
  });
  return out;
}

/** What can be spent by the end of a day (the budget zone's): spent + reserved + the slots that run up to then. */
export interface DaySpend {
  /** `YYYY-MM-DD` in the budget's zone. */
  day: string;
  medianUsd: string;
  highUsd: string;
}

/**
 * The running total of what can be spent at the end of each day on which a slot runs (at the median or the high
 * cost), from `base`; a day between two listed ones spends nothing (a weekend of a weekday task).
 */
function spendByDay(walks: { steps: Step[]; outcomes: StepOutcome[] }[], base: bigint, timeZone: string): DaySpend[] {
  const perDay = walks.map(({ steps, outcomes }) => {
    const days = new Map<string, bigint>();
    steps.forEach((s, i) => {
      if (outcomes[i] === 'run' || outcomes[i] === 'downgraded') {
        const day = localDay(new Date(s.t), timeZone);
        days.set(day, (days.get(day) ?? 0n) + s.cost);
      }
    });
    return days;
  });
  const days = [...new Set(perDay.flatMap((d) => [...d.keys()]))].sort();
  const running = perDay.map(() => base);
  return days.map((day) => {
    const [median, high] = perDay.map((d, k) => (running[k] += d.get(day) ?? 0n));
    return { day, medianUsd: usdOf(median), highUsd: usdOf(high) };
  });
}

/** One task's part of a user's projection: its slots' outcomes and what the slots that run cost, at the median and high. */
export interface TaskProjection {
  median: SlotOutcomes;
  high: SlotOutcomes;
  medianUsd: string;
  highUsd: string;
}

/**
 * A user's month: spent + reserved now, plus what the slots left would spend as the guard and each task's policy let
 * them (walkSlots: slots blocked by the limit or by maxCostPerRun, and those a budget pause skips, add nothing), as a
 * median and a high (p95) total, with each task's share and slot outcomes. `allSlots*` is every slot at its cost, none
 * blocked or skipped: what the schedules ask for. For each band, the day that asked-for total first reaches it
 * (`used * 100 >= limit * percent`, the rule of budget_tier), walking all the user's slots in time order; already there
 * at `at`: the day of `at`. Reaching 100 % is the day slots start to be blocked or skipped. `spendByDay` is what can be
 * spent by the end of each day with a slot that runs: the schedule's own steps, which the admin page's band draws.
 */
export function projectUser(input: {
  at: Date;
  timeZone: string;
  limitUsd: string | null;
  spentUsd: string;
  reservedUsd: string;
  bands: Band[];
  tasks: { slots: Date[]; cost: RunCost; policy?: BudgetPolicy }[];
}): {
  medianUsd: string;
  highUsd: string;
  allSlotsMedianUsd: string;
  allSlotsHighUsd: string;
  crossings: Crossing[];
  tasks: TaskProjection[];
  spendByDay: DaySpend[];
} {
  const base = atto(input.spentUsd) + atto(input.reservedUsd);
  const limit = input.limitUsd === null ? null : atto(input.limitUsd);
  const policies = input.tasks.map((t): { policy: BudgetPolicy; capBlocked: boolean } => ({
    policy: t.policy ?? 'block',
    capBlocked: t.cost.capped?.choice === 'blocked',
  }));
  const stepsAt = (pick: 'medianUsd' | 'p95Usd'): Step[] =>
    input.tasks
      .flatMap(({ slots, cost }, task) => slots.map((t) => ({ t: t.getTime(), cost: atto(cost[pick]), task })))
      .sort((a, b) => a.t - b.t || a.task - b.task);
  const median = stepsAt('medianUsd');
  const high = stepsAt('p95Usd');
  const walkMedian = walkSlots(median, policies, base, limit, input.bands);
  const walkHigh = walkSlots(high, policies, base, limit, input.bands);
  const byTaskMedian = tallyByTask(median, walkMedian.outcomes, input.tasks.length);
  const byTaskHigh = tallyByTask(high, walkHigh.outcomes, input.tasks.length);
  const reachedOn = (percent: number, steps: Step[]): string | null => {
    if (limit === null) return null;
    let used = base;
    if (used * 100n >= limit * BigInt(percent)) return localDay(input.at, input.timeZone);
    for (const s of steps) {
      used += s.cost;
      if (used * 100n >= limit * BigInt(percent)) return localDay(new Date(s.t), input.timeZone);
    }
    return null;
  };
  const sum = (steps: Step[]) => steps.reduce((acc, s) => acc + s.cost, base);
  const outcomes = ({ run, blocked, skipped }: SlotOutcomes): SlotOutcomes => ({ run, blocked, skipped });
  return {
    medianUsd: usdOf(walkMedian.used),
    highUsd: usdOf(walkHigh.used),
    allSlotsMedianUsd: usdOf(sum(median)),
    allSlotsHighUsd: usdOf(sum(high)),
    crossings:
      limit === null
        ? []
        : [...input.bands]
            .sort((a, b) => a.fromPercent - b.fromPercent)
            .map((b) => ({
              tier: b.tier,
              percent: b.fromPercent,
              medianDay: reachedOn(b.fromPercent, median),
              highDay: reachedOn(b.fromPercent, high),
            })),
    spendByDay: spendByDay(
      [
        { steps: median, outcomes: walkMedian.outcomes },
        { steps: high, outcomes: walkHigh.outcomes },
      ],
      base,
      input.timeZone,
    ),
    tasks: input.tasks.map((_, i) => ({
      median: outcomes(byTaskMedian[i]),
      high: outcomes(byTaskHigh[i]),
      medianUsd: usdOf(byTaskMedian[i].spend),
      highUsd: usdOf(byTaskHigh[i].spend),
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
 * A backfill's slots in order, each at its task's cost per run, through the forecast's walk (walkSlots): run,
 * downgraded or blocked (`capBlocked[i]`: the slot's task is blocked by its maxCostPerRun). Every backfilled run
 * starts at once, so none is skipped by a pause.
 */
export function simulateBackfill(input: {
  runCostsUsd: string[];
  capBlocked?: boolean[];
  spentUsd: string;
  reservedUsd: string;
  limitUsd: string | null;
  bands: Band[];
}): BackfillSimulation {
  const steps = input.runCostsUsd.map((c, i) => ({ t: i, cost: atto(c), task: i }));
  const start = atto(input.spentUsd) + atto(input.reservedUsd);
  const total = steps.reduce((a, s) => a + s.cost, start);
  const limit = input.limitUsd === null ? null : atto(input.limitUsd);
  const tasks = steps.map((_, i) => ({ policy: 'block' as const, capBlocked: input.capBlocked?.[i] ?? false }));
  const { outcomes } = walkSlots(steps, tasks, start, limit, input.bands);
  const count = (o: StepOutcome) => outcomes.filter((x) => x === o).length;
  return {
    run: count('run'),
    downgraded: count('downgraded'),
    blocked: count('blocked'),
    totalUsd: usdOf(total),
    fits: limit === null || total <= limit,
  };
}
