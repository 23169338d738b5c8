import type pg from 'pg';
import { budgetStatus, budgetStatusOfAll, type BudgetStatus } from '../budgets/budget-status';
import { atto, usdOf } from '../budgets/tier';
import { appliedVersion, type AppliedTask } from '../db/task-versions';
import {
  projectUser,
  taskForecast,
  DEFAULT_COST_SAMPLE,
  type BudgetPolicy,
  type Crossing,
  type DaySpend,
  type RunCost,
  type SlotOutcomes,
} from './projection';
import { budgetBands, monthEndIn, runCosts } from './run-costs';

/**
 * A task as its schedule stands, read by the caller (src/schedules/scheduled-tasks.ts): the forecast asks it for its
 * nominal slot times in a range, which the Temporal server computes from the schedule's own spec.
 */
export interface ScheduledTask {
  taskId: string;
  userId: string;
  /** Paused (or out of actions): no slot is left to it. */
  paused: boolean;
  /** The applied version its schedule names; undefined for a schedule without one. */
  fingerprint: string | undefined;
}

/** The tasks' schedules and, for a range per task, their nominal slot times in it (both ends inclusive). */
export interface TaskSchedules {
  tasks: ScheduledTask[];
  slots(ranges: { taskId: string; from: Date; to: Date }[]): Promise<Map<string, Date[]>>;
}

export interface TaskForecast {
  taskId: string;
  userId: string;
  state: 'active' | 'paused';
  /** Slots from `at` to the end of the month in the user's budget zone. */
  slotsLeft: number;
  /** The cost of one run; `cost.capped` when the task's maxCostPerRun changed it. */
  cost: RunCost;
  /** The applied version's policies: what it does when its user's money runs out, and its cap per run (null: none). */
  onBudgetExhausted: BudgetPolicy;
  maxCostPerRunUsd: string | null;
  /**
   * What the slots that would run spend at the median (p95) cost per run: slots blocked by the limit or by
   * maxCostPerRun, and those a budget pause would skip, spend nothing.
   */
  medianUsd: string;
  highUsd: string;
  /** slotsLeft × the median (p95) cost per run: every slot run, none blocked or skipped. */
  allSlotsMedianUsd: string;
  allSlotsHighUsd: string;
  /** How the slots left would end at the median (high) cost per run: run, blocked (limit or cap), skipped (paused). */
  slotOutcomes: { median: SlotOutcomes; high: SlotOutcomes };
}

/** A user's month as budgets status shows it, and the forecast to its end. */
export interface UserForecast extends Pick<BudgetStatus, 'userId' | 'month' | 'timeZone' | 'limitUsd' | 'spentUsd' | 'reservedUsd'> {
  /**
   * spent + reserved + what the slots left would spend at the median (p95) cost per run: at most the limit (or spent +
   * reserved, when those are over it already), since the guard blocks what does not fit and a budget pause skips.
   */
  medianUsd: string;
  highUsd: string;
  /** spent + reserved + every slot left at the median (p95) cost per run: what the schedules ask for. */
  allSlotsMedianUsd: string;
  allSlotsHighUsd: string;
  /** Whether the median (high) every-slot total is over the limit, so that slots would be blocked or skipped; false without one. */
  medianOverLimit: boolean;
  highOverLimit: boolean;
  /** The days the every-slot total reaches each band; 100 % is when slots start to be blocked or skipped. */
  crossings: Crossing[];
  /** The user's slots left, summed over their tasks: run, blocked, skipped, at the median (high) cost per run. */
  slotOutcomes: { median: SlotOutcomes; high: SlotOutcomes };
  /** What can be spent by the end of each day on which a slot runs, at the median and the high cost (running totals). */
  spendByDay: DaySpend[];
}

export interface MonthForecast {
  at: string;
  users: UserForecast[];
  tasks: TaskForecast[];
}

/**
 * The month-end forecast at `at` (default now): per task the slots left this month in its user's budget zone and the
 * cost of one run (within its maxCostPerRun, as the guard rules); per user spent + reserved + what those slots would
 * spend as the guard and each task's onBudgetExhausted let them (projectUser), and the day each band of the limit is
 * reached. With
 * `userId` or `taskId` only that user (that task's user, and that task in `tasks`); else every user with a task, a
 * budget of their own, spend or a reservation this month.
 */
export async function monthForecast(
  db: pg.Pool,
  schedules: TaskSchedules,
  opts: { at?: Date; userId?: string; taskId?: string; sample?: number } = {},
): Promise<MonthForecast> {
  const at = opts.at ?? (await db.query<{ now: Date }>('select now() as now')).rows[0].now;
  const only = opts.taskId === undefined ? undefined : schedules.tasks.find((t) => t.taskId === opts.taskId);
  const userFilter = opts.userId ?? only?.userId;
  const tasks = schedules.tasks.filter((t) => (userFilter === undefined ? true : t.userId === userFilter));
  if (opts.taskId !== undefined && !only) return { at: at.toISOString(), users: [], tasks: [] };

  const statuses: BudgetStatus[] =
    userFilter !== undefined ? await budgetStatus(db, { userId: userFilter, at }) : await budgetStatusOfAll(db, { at });
  const byUser = new Map(statuses.map((s) => [s.userId, s]));
  for (const userId of new Set(tasks.map((t) => t.userId))) {
    if (!byUser.has(userId)) byUser.set(userId, (await budgetStatus(db, { userId, at }))[0]);
  }

  const ends = new Map<string, Date>();
  for (const zone of new Set([...byUser.values()].map((s) => s.timeZone))) ends.set(zone, (await monthEndIn(db, at, zone)).end);
  const active = tasks.filter((t) => !t.paused);
  const slots = await schedules.slots(
    active.map((t) => ({ taskId: t.taskId, from: at, to: new Date(ends.get(byUser.get(t.userId)!.timeZone)!.getTime() - 1) })),
  );
  for (const t of tasks) if (!slots.has(t.taskId)) slots.set(t.taskId, []);

  const definitions: { taskId: string; definition: AppliedTask | undefined }[] = [];
  for (const t of tasks) {
    definitions.push({ taskId: t.taskId, definition: t.fingerprint ? await appliedVersion(db, t.taskId, t.fingerprint) : undefined });
  }
  const costs = await runCosts(db, definitions, at, opts.sample ?? DEFAULT_COST_SAMPLE);
  const bands = await budgetBands(db);

  const definitionOf = new Map(definitions.map((d) => [d.taskId, d.definition]));
  const policyOf = (taskId: string): BudgetPolicy => definitionOf.get(taskId)?.onBudgetExhausted ?? 'block';
  const taskRows: TaskForecast[] = [];
  const users = [...byUser.values()]
    .sort((a, b) => a.userId.localeCompare(b.userId))
    .map((s): UserForecast => {
      const own = tasks.filter((t) => t.userId === s.userId);
      const p = projectUser({
        at,
        timeZone: s.timeZone,
        limitUsd: s.limitUsd,
        spentUsd: s.spentUsd,
        reservedUsd: s.reservedUsd,
        bands,
        tasks: own.map((t) => ({ slots: slots.get(t.taskId)!, cost: costs.get(t.taskId)!, policy: policyOf(t.taskId) })),
      });
      own.forEach((t, i) => {
        const cost = costs.get(t.taskId)!;
        const n = slots.get(t.taskId)!.length;
        const all = taskForecast(n, cost);
        const cap = definitionOf.get(t.taskId)?.maxCostPerRun;
        taskRows.push({
          taskId: t.taskId,
          userId: t.userId,
          state: t.paused ? 'paused' : 'active',
          slotsLeft: n,
          cost,
          onBudgetExhausted: policyOf(t.taskId),
          maxCostPerRunUsd: cap === undefined ? null : usdOf(atto(cap)),
          medianUsd: p.tasks[i].medianUsd,
          highUsd: p.tasks[i].highUsd,
          allSlotsMedianUsd: all.medianUsd,
          allSlotsHighUsd: all.highUsd,
          slotOutcomes: { median: p.tasks[i].median, high: p.tasks[i].high },
        });
      });
      const total = (pick: 'median' | 'high'): SlotOutcomes =>
        p.tasks.reduce(
          (a, t) => ({ run: a.run + t[pick].run, blocked: a.blocked + t[pick].blocked, skipped: a.skipped + t[pick].skipped }),
          {
            run: 0,
            blocked: 0,
            skipped: 0,
          },
        );
      const over = (usd: string) => s.limitUsd !== null && atto(usd) > atto(s.limitUsd);
      const { userId, month, timeZone, limitUsd, spentUsd, reservedUsd } = s;
      return {
        userId,
        month,
        timeZone,
        limitUsd,
        spentUsd,
        reservedUsd,
        medianUsd: p.medianUsd,
        highUsd: p.highUsd,
        allSlotsMedianUsd: p.allSlotsMedianUsd,
        allSlotsHighUsd: p.allSlotsHighUsd,
        medianOverLimit: over(p.allSlotsMedianUsd),
        highOverLimit: over(p.allSlotsHighUsd),
        crossings: p.crossings,
        slotOutcomes: { median: total('median'), high: total('high') },
        spendByDay: p.spendByDay,
      };
    });
  return {
    at: at.toISOString(),
    users,
    tasks: taskRows.filter((t) => opts.taskId === undefined || t.taskId === opts.taskId).sort((a, b) => a.taskId.localeCompare(b.taskId)),
  };
}
