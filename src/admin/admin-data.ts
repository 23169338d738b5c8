import { budgetPauseFiguresByTask, type TaskPauseFigures } from '../budgets/budget-pauses';
import { latestForecasts, type RecordedForecast } from '../forecast/forecast-records';
import type pg from 'pg';
import { duplicatesPerDay, latestRunsWithCost, type RunWithCost } from '../db/runs';
import { duplicateRuns } from '../db/run-outcomes';
import { UserError } from '../errors';
import { entryJson, listEntries } from '../ledger/entries';
import { parseUserId } from '../ledger/user-id';
import { formatScaled, parseUsd, sumMoney, toAttoUsd, toExactString, zero, type Money } from '../money';
import { add } from 'dinero.js/bigint';
import { reportFromSums } from '../reports/build-report';
import { basisPoints, countPerDollar, moneyPer } from '../reports/economics';
import { anyBudget } from '../budgets/budgets-store';
import { budgetStatusOfAll, type BudgetStatus } from '../budgets/budget-status';
import { downgradeSavings } from '../budgets/downgrade-savings';
import { daysOf, parseMonth, shiftMonth, type Month } from '../reports/month';
import {
  costPerRunDaysHold,
  monthBounds,
  readActiveUsers,
  readDailySeries,
  readDailySpend,
  readDayTotalSums,
  readCostPerRunOver,
  readMonthSums,
  readRunCounts,
  trackedZones,
} from '../reports/rollups-read';
import { lastVerification, type LastVerification } from '../reports/rollups-verify';
import { priceVersionChoices, repriceMonthAtVersion } from '../reports/reprice';
import { rateLimitWaits } from '../ratelimits/rate-limits-store';
import type { UsageReport } from '../reports/types';
import { reconciliationSection } from '../reports/reconciliation-section';
import type { ReconciliationMonth } from '../reconcile/month-figures';
import { quoted } from '../text-table';
import { anomaliesOfFlaggedDays, findAnomalies, parseFactor, type Anomaly, type DailyPoint } from './anomalies';

/**
 * What the admin pages show, as data: money as exact decimal strings, counts as integers. Every figure comes from
 * the same rollup rows and the same report code as `cronledger report`, read without writing (the admin role may
 * only SELECT), so the page and the CLI agree to the last digit. Nothing here scans the month's ledger or runs:
 * money per day, user and task and runs per day, user and task all come from the rollups (read current).
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
    throw new UserError(`tz ${quoted(zone)} is not a zone the rollups track; use one of: ${zones.join(', ')}`);
  }
  if (q.month !== undefined && q.month.length > 7) {
    throw new UserError(`month ${quoted(q.month)} is not a month: write it as YYYY-MM, e.g. 2026-06`);
  }
  const month = q.month === undefined ? monthIn(now, zone) : parseMonth(q.month, 'month');
  return { month, zone };
}

function monthIn(instant: Date, zone: string): Month {
  const parts = new Intl.DateTimeFormat('en-CA', { timeZone: zone, year: 'numeric', month: '2-digit' }).formatToParts(instant);
  return `${parts.find((p) => p.type === 'year')?.value}-${parts.find((p) => p.type === 'month')?.value}`;
}

async function monthReport(db: pg.Pool, q: MonthQuery): Promise<{ report: UsageReport; source: string }> {
  const sums = await readMonthSums(db, q.zone, q.month, 'current');
  return { report: await reportFromSums(db, { month: q.month, timeZone: q.zone, sums }), source: sums.source };
}

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
  /** The last `cronledger rollups verify`: when it ran and what it found; null when it never ran. */
  rollupsVerified: LastVerification | null;
  /** The month against the providers' reports, per provider; absent while nothing was imported (`cronledger reconcile`). */
  reconciliation?: ReconciliationMonth[];
  /** Users whose newest recorded forecast of the month ends over their limit at the high (p95) cost per run. */
  forecastOverLimit: RecordedForecast[];
}

/**
 * Runs per day and status of the month (from `fromDay` on), as a map key -> day -> status -> count, the key being
 * '' (all), the user or the task. A run downgraded to the cheap tier also counts under 'downgraded', beside its status;
 * executions stopped as duplicates count as 'duplicate'.
 */
async function runsByDay(db: pg.Pool, q: MonthQuery, by: 'all' | 'user' | 'task', fromDay?: string) {
  const map = new Map<string, Map<string, Record<string, number>>>();
  const count = (key: string, day: string, status: string, n: number) => {
    const perKey = map.get(key) ?? new Map<string, Record<string, number>>();
    map.set(key, perKey);
    const statuses = perKey.get(day) ?? {};
    perKey.set(day, statuses);
    statuses[status] = (statuses[status] ?? 0) + n;
  };
  for (const r of await readRunCounts(db, { zone: q.zone, month: q.month, freshness: 'current', by, fromDay })) {
    count(r.key, r.day, r.status, Number(r.runs));
    if (r.tier === 'cheap') count(r.key, r.day, 'downgraded', Number(r.runs));
  }
  const { from, to } = await monthBounds(db, q.zone, q.month);
  for (const d of await duplicatesPerDay(db, q.zone, from, to, by)) {
    if (fromDay === undefined || d.day >= fromDay) count(d.key, d.day, 'duplicate', Number(d.runs));
  }
  return map;
}

const ranRuns = (s: Record<string, number> | undefined) => (s?.completed ?? 0) + (s?.failed ?? 0);

/**
 * The page on-call opens first. Its money comes from the day totals read current (the queued entries from the queue's
 * own summary, not from the ledger), its runs from the run rollups, its active users from the month's rollup per user
 * plus the queue's per-user summary: what it reads grows with days, models and users, not with the ledger or the queue.
 * Its anomalies are the days the last refresh found over the factor (cost_per_run_days: a minute old at most).
 */
export async function overview(db: pg.Pool, q: MonthQuery, factor = '1.5'): Promise<Overview> {
  // The reads are independent: on the pool's connections at once, the database's work overlaps the parsing here.
  const [sums, runsPerDay, activeUsers, period, { found }, budgeted, rollupsVerified, reconciliation, forecasts] = await Promise.all([
    readDayTotalSums(db, q.zone, q.month, 'current'),
    runsByDay(db, q, 'all'),
    readActiveUsers(db, q.zone, q.month, 'current'),
    monthBounds(db, q.zone, q.month),
    anomalies(db, q, factor),
    anyBudget(db),
    lastVerification(db),
    reconciliationSection(db, q.month),
    latestForecasts(db, q.month),
  ]);
  const duplicates = await duplicateRuns(db, period.from, period.to);
  const perDay = runsPerDay.get('') ?? new Map<string, Record<string, number>>();
  const runs = { completed: 0, failed: 0, duplicate: 0, blocked: 0, downgraded: 0, running: 0, cancelled: 0 };
  for (const statuses of perDay.values()) {
    for (const [status, n] of Object.entries(statuses)) if (status in runs) runs[status as keyof typeof runs] += n;
  }
  const byLine = new Map<string, Money>();
  const dailySpend = new Map<string, Money>();
  for (const l of sums.lines) {
    if (l.cut === 'line') byLine.set(l.entry_type, parseUsd(l.cost_usd));
    else if (l.cut === 'day' && l.day !== null && l.entry_type !== 'credit') {
      dailySpend.set(l.day, add(dailySpend.get(l.day) ?? zero(), parseUsd(l.cost_usd)));
    }
  }
  const line = (type: string) => byLine.get(type) ?? zero();
  const spend = sumMoney([line('usage'), line('adjustment'), line('reconciliation')]);
  const completed = BigInt(runs.completed);
  return {
    month: q.month,
    zone: q.zone,
    period,
    source: sums.source,
    spendUsd: toExactString(spend),
    totalUsd: toExactString(add(spend, line('credit'))),
    creditsUsd: toExactString(line('credit')),
    runs: { ...runs, duplicate: Number(duplicates.runs) },
    activeUsers,
    costPerCompletedRunUsd: moneyPer(spend, completed),
    costPerActiveUserUsd: moneyPer(spend, BigInt(activeUsers)),
    completedRunsPerDollar: countPerDollar(completed, spend),
    daily: daysOf(q.month).map((day) => dayFigures(day, dailySpend.get(day) ?? zero(), perDay.get(day))),
    anomalyFactor: factor,
    anomalies: found,
    budgets: budgeted
      ? {
          downgradedRuns: runs.downgraded,
          blockedRuns: runs.blocked,
          downgradeSavings: await downgradeSavings(db, period.from, period.to),
        }
      : null,
    rollupsVerified,
    ...(reconciliation ? { reconciliation } : {}),
    forecastOverLimit: forecasts.filter((f) => f.highOverLimit),
  };
}

function dayFigures(day: string, cost: Money, statuses: Record<string, number> | undefined): DayFigures {
  const completed = statuses?.completed ?? 0;
  return {
    day,
    costUsd: toExactString(cost),
    completedRuns: completed,
    runs: ranRuns(statuses),
    costPerCompletedRunUsd: moneyPer(cost, BigInt(completed)),
  };
}

/**
 * The month's cost-per-run anomalies of each user and task, as the last refresh left the rollups: from the days the
 * refresh found over their trailing median (cost_per_run_days), or, where that table does not hold the month (a month
 * or the 7 days before it never built), from the series themselves.
 */
async function anomalies(db: pg.Pool, q: MonthQuery, factor: string): Promise<{ found: Anomaly[] }> {
  if (!(await costPerRunDaysHold(db, q.zone, q.month))) return anomaliesFromSeries(db, q, factor);
  return { found: anomaliesOfFlaggedDays(await readCostPerRunOver(db, { ...q, factor: parseFactor(factor) })) };
}

/**
 * Cost per run of each user and each task per day, over the month and the 7 days before it, handed to
 * findAnomalies. Costs and runs both come from the rollups as the last refresh stored them (the last 7 days of last
 * month's, and this month's), summed per key and day in SQL, costs already in atto-USD; a month never built, from
 * the raw ledger and runs.
 */
export async function anomaliesFromSeries(db: pg.Pool, q: MonthQuery, factor: string): Promise<{ found: Anomaly[] }> {
  const days = daysOf(q.month);
  const prev: MonthQuery = { zone: q.zone, month: shiftMonth(q.month, -1) };
  const window = [...daysOf(prev.month).slice(-7), ...days];
  const rows = (
    await Promise.all([
      readDailySeries(db, { ...prev, freshness: 'stored', fromDay: window[0] }),
      readDailySeries(db, { ...q, freshness: 'stored' }),
    ])
  ).flat();
  // Per key, the window's days as arrays (index = position in the window): one BigInt parse per row and value.
  type Series = { costAtto: bigint[]; runs: bigint[] };
  const position = new Map(window.map((day, i) => [day, i]));
  const cuts = { user: new Map<string, Series>(), task: new Map<string, Series>() };
  const spent = { user: new Set<string>(), task: new Set<string>() }; // keys with a spend row: only those are checked
  const add = (by: 'user' | 'task', key: string, i: number, costAtto: bigint | null, runs: bigint) => {
    let series = cuts[by].get(key);
    if (!series) cuts[by].set(key, (series = { costAtto: window.map(() => 0n), runs: window.map(() => 0n) }));
    if (costAtto !== null) {
      series.costAtto[i] += costAtto;
      spent[by].add(key);
    }
    series.runs[i] += runs;
  };
  for (const r of rows) {
    const i = position.get(r.day);
    if (i === undefined) continue;
    const runs = BigInt(r.ran_runs);
    const costAtto = r.cost_atto === null ? null : BigInt(r.cost_atto);
    add('user', r.user_id, i, costAtto, runs);
    if (r.task_id !== null) add('task', r.task_id, i, costAtto, runs); // entries of no task have no task series
  }
  const found = (['user', 'task'] as const).flatMap((by) => {
    const points = (id: string): DailyPoint[] => {
      const s = cuts[by].get(id)!;
      return window.map((day, i) => ({ day, costAtto: s.costAtto[i], runs: s.runs[i] }));
    };
    return [...spent[by]].sort((a, b) => (a < b ? -1 : 1)).flatMap((id) => findAnomalies(by, id, points(id), factor, days[0]));
  });
  return { found };
}

export interface UserFigures {
  userId: string;
  spendUsd: string;
  creditsUsd: string;
  completedRuns: number;
  failedRuns: number;
  costPerCompletedRunUsd: string;
  /** Slots of the user's tasks skipped for budget this month, and how many of them are paused for budget (the report's rule). */
  skippedForBudget: number;
  tasksPausedForBudget: number;
  /** null without a budget: the page says "no budget", never a made-up figure. */
  budgetLimitUsd: string | null;
  /** (spent + reserved) / limit in percent, half-even at 2 decimals, at the end of the month (or now, while it runs). */
  budgetUsedPercent: string | null;
  tier: string | null;
}

export async function users(db: pg.Pool, q: MonthQuery): Promise<{ month: Month; zone: string; users: UserFigures[] }> {
  const { report } = await monthReport(db, q);
  const perUser = await runsByDay(db, q, 'user');
  const ids = [...new Set(report.byUser.map((l) => l.userId))].sort();
  const budgetAt = new Date(Math.min(Date.now(), new Date(report.period.to).getTime() - 1));
  const budgets = new Map((await budgetStatusOfAll(db, { at: budgetAt })).map((b) => [b.userId, b]));
  const pauses = [...(await taskBudgetPauses(db, q)).values()];
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
        skippedForBudget: pauses.filter((p) => p.userId === userId).reduce((n, p) => n + p.skippedSlots, 0),
        tasksPausedForBudget: pauses.filter((p) => p.userId === userId && p.paused).length,
        ...budgetFigures(budgets.get(userId)),
      };
    }),
  };
}

const isSpendLine = (l: { line: string }) => l.line !== 'credit';

/** Per task, its slots skipped for budget in the month and whether it is paused for budget (the report's rule). */
export async function taskBudgetPauses(db: pg.Pool, q: MonthQuery): Promise<Map<string, TaskPauseFigures>> {
  const { from, to } = await monthBounds(db, q.zone, q.month);
  return new Map((await budgetPauseFiguresByTask(db, new Date(from), new Date(to))).map((p) => [p.taskId, p]));
}

/** (spent + reserved) / limit in basis points (half-even), the integer the bar is drawn from; null without a limit. */
function usedBasisPoints(b: BudgetStatus): bigint | null {
  if (b.limitUsd === null) return null;
  return basisPoints(toAttoUsd(parseUsd(b.spentUsd)) + toAttoUsd(parseUsd(b.reservedUsd)), toAttoUsd(parseUsd(b.limitUsd)));
}

function budgetFigures(b: BudgetStatus | undefined): Pick<UserFigures, 'budgetLimitUsd' | 'budgetUsedPercent' | 'tier'> {
  const used = b ? usedBasisPoints(b) : null;
  if (!b || used === null) return { budgetLimitUsd: null, budgetUsedPercent: null, tier: null };
  return { budgetLimitUsd: b.limitUsd, budgetUsedPercent: formatScaled(used, 2n), tier: b.tier };
}

/** The budgets page's row: the user's budget in force and the month's figures in its zone. */
export interface BudgetRow {
  userId: string;
  timeZone: string;
  /** Whose budget applies: the user's own, the default one, or none (then no limit and no share). */
  source: BudgetStatus['source'];
  limitUsd: string | null;
  spentUsd: string;
  reservedUsd: string;
  remainingUsd: string | null;
  tier: string;
  /** (spent + reserved) / limit in basis points (1/100 %), an integer string, half-even; null without a limit. */
  usedBasisPoints: string | null;
  /** The month-end forecast the budget sweep recorded last (median and high); null when none is recorded. */
  forecastMedianUsd: string | null;
  forecastHighUsd: string | null;
}

/**
 * Every user with a budget of their own, spend or an open reservation in the month (the users `budgets status`
 * lists), each in their budget's zone, at the month's end or now while it runs: the same figures as the users page.
 */
export async function budgets(db: pg.Pool, q: MonthQuery): Promise<{ month: Month; zone: string; budgets: BudgetRow[] }> {
  const { to } = await monthBounds(db, q.zone, q.month);
  const at = new Date(Math.min(Date.now(), new Date(to).getTime() - 1));
  const forecasts = new Map((await latestForecasts(db, q.month)).map((f) => [f.userId, f]));
  const rows = (await budgetStatusOfAll(db, { at, month: q.month })).map((b) => {
    const used = usedBasisPoints(b);
    const forecast = forecasts.get(b.userId);
    return {
      userId: b.userId,
      timeZone: b.timeZone,
      source: b.source,
      limitUsd: b.limitUsd,
      spentUsd: b.spentUsd,
      reservedUsd: b.reservedUsd,
      remainingUsd: b.remainingUsd,
      tier: b.tier,
      usedBasisPoints: used === null ? null : used.toString(),
      forecastMedianUsd: forecast?.medianUsd ?? null,
      forecastHighUsd: forecast?.highUsd ?? null,
    };
  });
  return { month: q.month, zone: q.zone, budgets: rows };
}

export interface UserPage {
  month: Month;
  zone: string;
  user: UserFigures | null;
  daily: DayFigures[];
  runs: ReturnType<typeof runView>[];
  entries: ReturnType<typeof entryView>[];
  /** The newest forecast of the month the budget sweep recorded for the user; null when none is. */
  forecast: RecordedForecast | null;
}

export async function userPage(db: pg.Pool, q: MonthQuery, userId: string): Promise<UserPage> {
  parseUserId(userId, 'user');
  const all = await users(db, q);
  const perDay = (await runsByDay(db, q, 'user')).get(userId);
  const cost = new Map(
    (await readDailySpend(db, { ...q, by: 'user', freshness: 'current', userId })).map((r) => [r.day, parseUsd(r.cost_usd)]),
  );
  return {
    month: q.month,
    zone: q.zone,
    user: all.users.find((u) => u.userId === userId) ?? null,
    daily: daysOf(q.month).map((day) => dayFigures(day, cost.get(day) ?? zero(), perDay?.get(day))),
    runs: (await latestRunsWithCost(db, { userId, limit: 50 })).map(runView),
    entries: (await listEntries(db, { userId, limit: 200 })).map(entryView),
    forecast: (await latestForecasts(db, q.month)).find((f) => f.userId === userId) ?? null,
  };
}

/** `reprice`: the id of a price version in the table (?reprice=), to show the month's entries of its model at it. */
export async function models(db: pg.Pool, q: MonthQuery, reprice?: string) {
  const { report } = await monthReport(db, q);
  return {
    month: q.month,
    zone: q.zone,
    models: report.byModel.map((l) => ({ model: l.model, kind: l.kind, line: l.line, calls: l.calls, costUsd: l.costUsd })),
    /** What downgrades saved this month; null while no budget is configured. */
    downgradeSavings: (await anyBudget(db)) ? await downgradeSavings(db, report.period.from, report.period.to) : null,
    priceVersions: await priceVersionChoices(db),
    /** The month's entries of the chosen version's model at that version; null when none was chosen. */
    repriced: reprice === undefined ? null : await repricedAtVersion(db, q, reprice),
    /** Rate-limit waits and 429s by model, now (this hour, the last 24 hours, in all), whatever the month. */
    rateLimits: await rateLimitWaits(db),
  };
}

async function repricedAtVersion(db: pg.Pool, q: MonthQuery, priceId: string) {
  const repriced = await repriceMonthAtVersion(db, { month: q.month, timeZone: q.zone, priceId });
  if (!repriced) throw new UserError(`reprice ${quoted(priceId)} is no price version: choose one of the list on the models page`);
  return repriced;
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
