import type pg from 'pg';
import { latestRunsWithCost, runsPerDay, type RunWithCost } from '../db/runs';
import { UserError } from '../errors';
import { costPerDayByTask, entryJson, listEntries } from '../ledger/entries';
import { formatScaled, parseUsd, toAttoUsd, toExactString, zero, type Money } from '../money';
import { add } from 'dinero.js/bigint';
import { reportFromRows } from '../reports/build-report';
import { divideHalfEven, moneyPer } from '../reports/economics';
import { anyBudget } from '../budgets/budgets-store';
import { budgetStatus, type BudgetStatus } from '../budgets/budget-status';
import { downgradeSavings } from '../budgets/downgrade-savings';
import { daysOf, parseMonth, shiftMonth, type Month } from '../reports/month';
import { monthBounds, readMonthRollupsCurrent, trackedZones, type RollupRow } from '../reports/rollups-read';
import type { UsageReport } from '../reports/types';
import { findAnomalies, type Anomaly, type DailyPoint } from './anomalies';

/**
 * What the admin pages show, as data: money as exact decimal strings, counts as integers. Every figure comes from
 * the same rollup rows and the same report code as `cronledger report`, read without writing (the admin role may
 * only SELECT), so the page and the CLI agree to the last digit.
 */

export interface MonthQuery {
  month: Month;
  zone: string;
}

/** `?month=` and `?tz=` checked: the month as YYYY-MM, the zone one the rollups track (default UTC). */
export async function parseMonthQuery(db: pg.Pool, q: { month?: string; tz?: string }, now = new Date()): Promise<MonthQuery> {
  const zones = await trackedZones(db);
  const zone = q.tz ?? 'UTC';
  if (!zones.includes(zone)) {
    throw new UserError(`tz ${JSON.stringify(zone)} is not a zone the rollups track; use one of: ${zones.join(', ')}`);
  }
  const month = q.month === undefined ? monthIn(now, zone) : parseMonth(q.month, 'month');
  return { month, zone };
}

function monthIn(instant: Date, zone: string): Month {
  const parts = new Intl.DateTimeFormat('en-CA', { timeZone: zone, year: 'numeric', month: '2-digit' }).formatToParts(instant);
  return `${parts.find((p) => p.type === 'year')?.value}-${parts.find((p) => p.type === 'month')?.value}`;
}

async function monthReport(db: pg.Pool, q: MonthQuery): Promise<{ report: UsageReport; rows: RollupRow[]; source: string }> {
  const { rows, span, source } = await readMonthRollupsCurrent(db, q.zone, q.month);
  const report = await reportFromRows(db, { month: q.month, timeZone: q.zone, rows, span });
  return { report, rows, source };
}

const isSpend = (r: { entry_type: string }) => r.entry_type !== 'credit';
const sum = (values: string[]): Money => values.reduce((m: Money, v) => add(m, parseUsd(v)), zero());

export interface DayFigures {
  day: string;
  costUsd: string;
  completedRuns: number;
  runs: number;
  costPerCompletedRunUsd: string;
}

export interface Overview {
  month: Month;
  zone: string;
  period: UsageReport['period'];
  source: string;
  spendUsd: string;
  totalUsd: string;
  creditsUsd: string;
  runs: { completed: number; failed: number; duplicate: number; blocked: number; downgraded: number; running: number; cancelled: number };
  activeUsers: number;
  costPerCompletedRunUsd: string;
  costPerActiveUserUsd: string;
  completedRunsPerDollar: string;
  daily: DayFigures[];
  anomalyFactor: string;
  anomalies: Anomaly[];
  /** null while no budget is configured: the page says "no budget" rather than show zeros that mean nothing. */
  budgets: { downgradedRuns: number; blockedRuns: number; downgradeSavings: Awaited<ReturnType<typeof downgradeSavings>> } | null;
}

/** Runs per day and status, for [from, to) in the zone, as a map day -> status -> count. */
async function runsByDay(db: pg.Pool, zone: string, from: string, to: string, by: 'all' | 'user' | 'task') {
  const map = new Map<string, Map<string, Record<string, number>>>();
  for (const r of await runsPerDay(db, zone, from, to, by)) {
    const perKey = map.get(r.key) ?? new Map<string, Record<string, number>>();
    map.set(r.key, perKey);
    const statuses = perKey.get(r.day) ?? {};
    perKey.set(r.day, statuses);
    statuses[r.status] = (statuses[r.status] ?? 0) + Number(r.runs);
  }
  return map;
}

const ranRuns = (s: Record<string, number> | undefined) => (s?.completed ?? 0) + (s?.failed ?? 0);

export async function overview(db: pg.Pool, q: MonthQuery, factor = '1.5'): Promise<Overview> {
  const { report, rows, source } = await monthReport(db, q);
  const p = report.period;
  const perDay = (await runsByDay(db, q.zone, p.from, p.to, 'all')).get('') ?? new Map<string, Record<string, number>>();
  const runs = { completed: 0, failed: 0, duplicate: 0, blocked: 0, downgraded: 0, running: 0, cancelled: 0 };
  for (const statuses of perDay.values()) {
    for (const [status, n] of Object.entries(statuses)) if (status in runs) runs[status as keyof typeof runs] += n;
  }
  const daily = daysOf(q.month).map((day): DayFigures => {
    const cost = sum(rows.filter((r) => r.day === day && isSpend(r)).map((r) => r.cost_usd));
    const completed = perDay.get(day)?.completed ?? 0;
    return {
      day,
      costUsd: toExactString(cost),
      completedRuns: completed,
      runs: ranRuns(perDay.get(day)),
      costPerCompletedRunUsd: moneyPer(cost, BigInt(completed)),
    };
  });
  const e = report.unitEconomics;
  return {
    month: q.month,
    zone: q.zone,
    period: p,
    source,
    spendUsd: e.spendUsd,
    totalUsd: report.totals.costUsd,
    creditsUsd: report.totals.creditsUsd,
    runs: { ...runs, completed: e.completedRuns, failed: e.failedRuns, duplicate: report.duplicateSkippedRuns.runs },
    activeUsers: e.activeUsers,
    costPerCompletedRunUsd: e.costPerCompletedRunUsd,
    costPerActiveUserUsd: e.costPerActiveUserUsd,
    completedRunsPerDollar: e.completedRunsPerDollar,
    daily,
    anomalyFactor: factor,
    anomalies: await anomalies(db, q, rows, factor),
    budgets: (await anyBudget(db))
      ? { downgradedRuns: runs.downgraded, blockedRuns: runs.blocked, downgradeSavings: await downgradeSavings(db, p.from, p.to) }
      : null,
  };
}

/**
 * Cost per run of each user and each task per day, over the month and the 7 days before it, handed to
 * findAnomalies. Users' costs come from the rollups (this month's and last month's rows); tasks' from the ledger.
 */
async function anomalies(db: pg.Pool, q: MonthQuery, monthRows: RollupRow[], factor: string): Promise<Anomaly[]> {
  const days = daysOf(q.month);
  const prev = await readMonthRollupsCurrent(db, q.zone, shiftMonth(q.month, -1));
  const prevBounds = await monthBounds(db, q.zone, shiftMonth(q.month, -1));
  const { to } = await monthBounds(db, q.zone, q.month);
  const window = [...daysOf(shiftMonth(q.month, -1)).slice(-7), ...days];

  const userCost = new Map<string, Map<string, Money>>();
  for (const r of [...prev.rows, ...monthRows]) {
    if (!isSpend(r)) continue;
    const perDay = userCost.get(r.user_id) ?? new Map<string, Money>();
    userCost.set(r.user_id, perDay);
    perDay.set(r.day, add(perDay.get(r.day) ?? zero(), parseUsd(r.cost_usd)));
  }
  const taskCost = new Map<string, Map<string, Money>>();
  for (const r of await costPerDayByTask(db, q.zone, prevBounds.from, to)) {
    const perDay = taskCost.get(r.task_id) ?? new Map<string, Money>();
    taskCost.set(r.task_id, perDay);
    perDay.set(r.day, parseUsd(r.cost_usd));
  }
  const userRuns = await runsByDay(db, q.zone, prevBounds.from, to, 'user');
  const taskRuns = await runsByDay(db, q.zone, prevBounds.from, to, 'task');

  const series = (cost: Map<string, Money>, runs: Map<string, Record<string, number>> | undefined): DailyPoint[] =>
    window.map((day) => ({ day, costAtto: toAttoUsd(cost.get(day) ?? zero()), runs: BigInt(ranRuns(runs?.get(day))) }));
  const found: Anomaly[] = [];
  for (const [id, cost] of [...userCost].sort(([a], [b]) => (a < b ? -1 : 1))) {
    found.push(...findAnomalies('user', id, series(cost, userRuns.get(id)), factor, days[0]));
  }
  for (const [id, cost] of [...taskCost].sort(([a], [b]) => (a < b ? -1 : 1))) {
    found.push(...findAnomalies('task', id, series(cost, taskRuns.get(id)), factor, days[0]));
  }
  return found;
}

export interface UserFigures {
  userId: string;
  spendUsd: string;
  creditsUsd: string;
  completedRuns: number;
  failedRuns: number;
  costPerCompletedRunUsd: string;
  /** null without a budget: the page says "no budget", never a made-up figure. */
  budgetLimitUsd: string | null;
  /** (spent + reserved) / limit in percent, half-even at 2 decimals, at the end of the month (or now, while it runs). */
  budgetUsedPercent: string | null;
  tier: string | null;
}

export async function users(db: pg.Pool, q: MonthQuery): Promise<{ month: Month; zone: string; users: UserFigures[] }> {
  const { report } = await monthReport(db, q);
  const perUser = await runsByDay(db, q.zone, report.period.from, report.period.to, 'user');
  const ids = [...new Set(report.byUser.map((l) => l.userId))].sort();
  const budgetAt = new Date(Math.min(Date.now(), new Date(report.period.to).getTime() - 1));
  const budgets = new Map((await budgetStatus(db, { at: budgetAt })).map((b) => [b.userId, b]));
  return {
    month: q.month,
    zone: q.zone,
    users: ids.map((userId) => {
      const lines = report.byUser.filter((l) => l.userId === userId);
      const spend = sum(lines.filter(isSpendLine).map((l) => l.costUsd));
      const statuses = [...(perUser.get(userId)?.values() ?? [])];
      const completed = statuses.reduce((n, s) => n + (s.completed ?? 0), 0);
      return {
        userId,
        spendUsd: toExactString(spend),
        creditsUsd: toExactString(sum(lines.filter((l) => !isSpendLine(l)).map((l) => l.costUsd))),
        completedRuns: completed,
        failedRuns: statuses.reduce((n, s) => n + (s.failed ?? 0), 0),
        costPerCompletedRunUsd: moneyPer(spend, BigInt(completed)),
        ...budgetFigures(budgets.get(userId)),
      };
    }),
  };
}

const isSpendLine = (l: { line: string }) => l.line !== 'credit';

function budgetFigures(b: BudgetStatus | undefined): Pick<UserFigures, 'budgetLimitUsd' | 'budgetUsedPercent' | 'tier'> {
  if (!b || b.limitUsd === null) return { budgetLimitUsd: null, budgetUsedPercent: null, tier: null };
  const used = toAttoUsd(parseUsd(b.spentUsd)) + toAttoUsd(parseUsd(b.reservedUsd));
  const limit = toAttoUsd(parseUsd(b.limitUsd));
  return { budgetLimitUsd: b.limitUsd, budgetUsedPercent: formatScaled(divideHalfEven(used * 10_000n, limit), 2n), tier: b.tier };
}

export interface UserPage {
  month: Month;
  zone: string;
  user: UserFigures | null;
  daily: DayFigures[];
  runs: ReturnType<typeof runView>[];
  entries: ReturnType<typeof entryView>[];
}

export async function userPage(db: pg.Pool, q: MonthQuery, userId: string): Promise<UserPage> {
  const { rows, report } = await monthReport(db, q);
  const all = await users(db, q);
  const perDay = (await runsByDay(db, q.zone, report.period.from, report.period.to, 'user')).get(userId);
  const daily = daysOf(q.month).map((day): DayFigures => {
    const cost = sum(rows.filter((r) => r.day === day && r.user_id === userId && isSpend(r)).map((r) => r.cost_usd));
    const completed = perDay?.get(day)?.completed ?? 0;
    return {
      day,
      costUsd: toExactString(cost),
      completedRuns: completed,
      runs: ranRuns(perDay?.get(day)),
      costPerCompletedRunUsd: moneyPer(cost, BigInt(completed)),
    };
  });
  return {
    month: q.month,
    zone: q.zone,
    user: all.users.find((u) => u.userId === userId) ?? null,
    daily,
    runs: (await latestRunsWithCost(db, { userId, limit: 50 })).map(runView),
    entries: (await listEntries(db, { userId, limit: 200 })).map(entryView),
  };
}

export async function models(db: pg.Pool, q: MonthQuery) {
  const { report } = await monthReport(db, q);
  return {
    month: q.month,
    zone: q.zone,
    models: report.byModel.map((l) => ({ model: l.model, kind: l.kind, line: l.line, calls: l.calls, costUsd: l.costUsd })),
    /** What downgrades saved this month; null while no budget is configured. */
    downgradeSavings: (await anyBudget(db)) ? await downgradeSavings(db, report.period.from, report.period.to) : null,
  };
}

export function runView(r: RunWithCost) {
  return {
    workflowId: r.workflow_id,
    runId: r.temporal_run_id,
    taskId: r.task_id,
    userId: r.user_id,
    status: r.status,
    tier: r.tier ?? null,
    scheduledMinute: `${r.scheduled_minute.toISOString().slice(0, 16)}Z`,
    durationMs: r.duration_ms,
    costUsd: r.cost_usd,
    entries: Number(r.entries),
  };
}

export const entryView = entryJson;

export async function latestRuns(db: pg.Pool) {
  return { runs: (await latestRunsWithCost(db, { limit: 100 })).map(runView) };
}

export async function runPage(db: pg.Pool, workflowId: string) {
  const [run] = await latestRunsWithCost(db, { workflowId, limit: 1 });
  return {
    run: run ? runView(run) : null,
    entries: (await listEntries(db, { runId: workflowId })).map(entryView),
  };
}
