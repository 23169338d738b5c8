import { budgetStatusTable } from '../budgets/status-table';
import { displayUsd } from '../money';
import type { DayLine, Figures, ModelLine, ReportCut, UsageReport, UserLine } from './types';

/**
 * The rows every human-facing rendering shows (text table, Markdown, HTML), built once: cells are display text
 * (money as `$0.000996`, half-even, 6 decimals), headers are in title case and each renderer styles them its way.
 */

export type CutLine = UserLine | DayLine | ModelLine;

export const linesOf = (report: UsageReport, cut: ReportCut): CutLine[] =>
  cut === 'user' ? report.byUser : cut === 'day' ? report.byDay : report.byModel;

const keyColumns: Record<ReportCut, { headers: string[]; cells: (l: CutLine) => string[] }> = {
  user: { headers: ['User'], cells: (l) => [(l as UserLine).userId] },
  day: { headers: ['Day', 'Kind'], cells: (l) => [(l as DayLine).day, (l as DayLine).kind ?? '-'] },
  model: { headers: ['Model', 'Kind'], cells: (l) => [(l as ModelLine).model ?? '-', (l as ModelLine).kind ?? '-'] },
};

const FIGURE_HEADERS = ['Calls', 'Prompt', 'Cached', 'Completion', 'Cost'];

const figureCells = (f: Figures): string[] => [
  String(f.calls),
  String(f.promptTokens),
  String(f.cachedPromptTokens),
  String(f.completionTokens),
  displayUsd(f.costUsd),
];

/** One cut's table: a row per line, then the TOTAL row; `right` lists the numeric columns. */
export function cutTable(report: UsageReport, cut: ReportCut): { headers: string[]; rows: string[][]; right: number[] } {
  const keys = keyColumns[cut];
  const headers = [...keys.headers, 'Line', ...FIGURE_HEADERS];
  const rows = linesOf(report, cut).map((l) => [...keys.cells(l), l.line, ...figureCells(l)]);
  rows.push(['TOTAL', ...keys.headers.slice(1).map(() => ''), '', ...figureCells(report.totals)]);
  const first = keys.headers.length + 1;
  return { headers, rows, right: FIGURE_HEADERS.map((_, i) => first + i) };
}

/** Unit economics as (label, value) pairs; labels are lower case, as in the text table. */
export function economicsRows(report: UsageReport): [string, string][] {
  const e = report.unitEconomics;
  return [
    ['spend (usage, adjustments, reconciliation; excludes credits)', displayUsd(e.spendUsd)],
    ['completed runs', String(e.completedRuns)],
    ['failed runs', String(e.failedRuns)],
    ['active users', String(e.activeUsers)],
    ['cost per completed run', displayUsd(e.costPerCompletedRunUsd)],
    ['cost per active user', displayUsd(e.costPerActiveUserUsd)],
    ['completed runs per dollar', e.completedRunsPerDollar],
  ];
}

/** The total split by line type, then the total. */
export function totalsRows(report: UsageReport): [string, string][] {
  const t = report.totals;
  return [
    ['usage', displayUsd(t.usageUsd)],
    ['adjustments', displayUsd(t.adjustmentsUsd)],
    ['reconciliation', displayUsd(t.reconciliationUsd)],
    ['credits', displayUsd(t.creditsUsd)],
    ['total', displayUsd(t.costUsd)],
  ];
}

export const capitalized = (s: string): string => `${s.slice(0, 1).toUpperCase()}${s.slice(1)}`;

/** The budget section's per-user table (the `budgets status` columns); empty without a section. */
export function budgetTable(report: UsageReport): { headers: string[]; rows: string[][]; right: number[] } {
  return budgetStatusTable(report.budget?.users ?? []);
}

/** The budget section's run counts and downgrade savings as (label, value) pairs; labels are lower case. */
export function budgetRunRows(report: UsageReport): [string, string][] {
  const b = report.budget;
  if (!b) return [];
  const s = b.downgradeSavings;
  return [
    ['blocked runs', String(b.blockedRuns)],
    ['downgraded runs', String(b.downgradedRuns)],
    [
      'slots skipped for budget (task paused)',
      `${b.skippedForBudget.slots}${b.skippedForBudget.pausedTasks > 0 ? ` (${b.skippedForBudget.pausedTasks} task(s) still paused)` : ''}`,
    ],
    ['downgrades saved (default model price minus paid)', displayUsd(s.savedUsd)],
    ['paid for downgraded calls', displayUsd(s.paidUsd)],
    ['the same tokens at the default model price', displayUsd(s.atDefaultPriceUsd)],
    ...(s.unpricedEntries > 0
      ? [['downgraded calls whose default model has no price', String(s.unpricedEntries)] as [string, string]]
      : []),
  ];
}

/** One line that says whether any limit applied: budgets exist, or none was ever configured. */
export const budgetNote = (report: UsageReport): string =>
  report.budget?.configured === false ? 'No budget configured: no limit applied.' : 'Budgets for the month, per user, in each budget zone.';
