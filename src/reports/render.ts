import { formatTable, printable } from '../text-table';
import { add } from 'dinero.js/bigint';
import { displayUsd, parseUsd, sumMoney, toExactString, zero, type Money } from '../money';
import { reconciliationCsvRows, reconciliationText } from './reconciliation-section';
import { budgetNote, budgetRunRows, budgetTable, capitalized, cutTable, economicsRows, linesOf, totalsRows } from './report-rows';
import type { Figures, LineType, ReportCut, UsageReport } from './types';

/**
 * Text renderings of a report. Each is a pure function of the report, so the same report gives the same bytes.
 * Tables and Markdown show money as `$0.000996` (half-even, 6 decimals); JSON and CSV carry the exact decimal strings.
 * CSV comes two ways: one cut as a tidy table (renderCsvTable) and every section in one file (renderCsvAll).
 */

/** The report with only one cut's lines, as `report --by X --format json` prints it. */
export function reportForCut(report: UsageReport, cut: ReportCut) {
  const { byUser: _u, byDay: _d, byModel: _m, totals, unitEconomics, failedCalls, duplicateSkippedRuns, budget, ...header } = report;
  return { ...header, by: cut, lines: linesOf(report, cut), totals, unitEconomics, failedCalls, duplicateSkippedRuns, budget };
}

export const renderJson = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`;

// ---------------------------------------------------------------------------------------------------------------- table

function title(report: UsageReport, cut?: ReportCut): string {
  const so = report.period.complete ? '' : ' (month so far)';
  return `Usage report ${report.month}, ${report.timeZone}${so}${cut ? `, by ${cut}` : ''}`;
}

const upperCaseHeaders = <T extends { headers: string[] }>(t: T): T => ({ ...t, headers: t.headers.map((h) => h.toUpperCase()) });

const plural = (n: number, word: string, many = `${word}s`) => `${n} ${n === 1 ? word : many}`;

const indentedPairs = (rows: [string, string][]) =>
  formatTable(['', ''], rows, [1])
    .split('\n')
    .slice(2)
    .map((l) => `  ${l}`)
    .join('\n');

/** The budget section as text: a note, the per-user table, then the guard's run counts and savings. */
function budgetText(report: UsageReport): string[] {
  if (!report.budget) return [];
  const t = upperCaseHeaders(budgetTable(report));
  return [
    'Budgets',
    `  ${budgetNote(report)}`,
    ...(t.rows.length ? [formatTable(t.headers, t.rows, t.right)] : []),
    indentedPairs(budgetRunRows(report)),
    ...(report.budget.forecasts ?? []).map(
      (f) =>
        `  forecast of ${f.forecastDay} for ${printable(f.userId)}: ${displayUsd(f.medianUsd)} (high ${displayUsd(f.highUsd)}), spent ` +
        `${displayUsd(f.spentUsd)}${f.medianErrorPercent === null ? '' : `, median off by ${f.medianErrorPercent} %`}`,
    ),
    '',
  ];
}

export function renderTable(report: UsageReport, cut: ReportCut): string {
  const t = upperCaseHeaders(cutTable(report, cut));
  const pairs = indentedPairs;
  return [
    title(report, cut),
    '',
    formatTable(t.headers, t.rows, t.right),
    '',
    'Totals',
    pairs(totalsRows(report)),
    '',
    'Unit economics',
    pairs(economicsRows(report)),
    '',
    `Failed calls: ${plural(report.failedCalls.calls, 'call')}, ${displayUsd(report.failedCalls.costUsd)}`,
    `Duplicate-skipped runs: ${plural(report.duplicateSkippedRuns.runs, 'run')}, ${displayUsd(report.duplicateSkippedRuns.costUsd)}`,
    '',
    ...budgetText(report),
    ...reconciliationText(report),
  ].join('\n');
}

// ------------------------------------------------------------------------------------------------------------------ csv

/** A line's counts, in both CSVs. */
const COUNT_COLUMNS = ['calls', 'entries', 'prompt_tokens', 'cached_prompt_tokens', 'completion_tokens', 'reasoning_tokens'] as const;

export const CSV_COLUMNS = ['section', 'line', 'user_id', 'day', 'model', 'kind', ...COUNT_COLUMNS, 'cost_usd', 'metric', 'value'] as const;
type CsvRow = Partial<Record<(typeof CSV_COLUMNS)[number], string | number | null>>;

/**
 * RFC 4180 quoting (fields with a comma, quote or line break are quoted, quotes doubled), after OWASP's defence against
 * CSV injection: a text cell that a spreadsheet would read as a formula (it starts with =, +, -, @, tab or carriage
 * return) gets a leading single quote, so a user ID like `=HYPERLINK(...)` stays text. Numbers (a credit of
 * -5.000000000000000000) stay numbers.
 */
const csvField = (v: string | number | null | undefined): string => {
  let s = v === null || v === undefined ? '' : String(v);
  if (/^[=+\-@\t\r]/.test(s) && !/^-?\d+(\.\d+)?$/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
};

const figureFields = (f: Figures): CsvRow => ({
  calls: f.calls,
  entries: f.entries,
  prompt_tokens: f.promptTokens,
  cached_prompt_tokens: f.cachedPromptTokens,
  completion_tokens: f.completionTokens,
  reasoning_tokens: f.reasoningTokens,
  cost_usd: f.costUsd,
});

export const csvText = (columns: readonly string[], rows: Record<string, string | number | null | undefined>[]): string => {
  const lines = [columns.join(','), ...rows.map((r) => columns.map((c) => csvField(r[c])).join(','))];
  return `${lines.join('\r\n')}\r\n`;
};

const TIDY_KEYS: Record<ReportCut, readonly ('user_id' | 'day' | 'model' | 'kind')[]> = {
  user: ['user_id'],
  day: ['day', 'kind'],
  model: ['model', 'kind'],
};

/** What each line type adds to in a tidy row: the cost of each kind of entry gets a column of its own. */
const LINE_COLUMNS: Record<LineType, string> = {
  usage: 'usage_usd',
  adjustment: 'adjustments_usd',
  reconciliation: 'reconciliation_usd',
  credit: 'credits_usd',
};

/** The header of `report --by <cut> --format csv`. */
export const tidyCsvColumns = (cut: ReportCut): string[] => [
  ...TIDY_KEYS[cut],
  ...COUNT_COLUMNS,
  ...Object.values(LINE_COLUMNS),
  'cost_usd',
];

/**
 * One cut as one tidy table (`report --by <cut> --format csv`): a header row, then one row per user (per day and kind,
 * per model and kind), sorted by that key, with the cost of each line type in a column of its own and their sum in
 * cost_usd. No sections and no total row. Money is the exact decimal string at the ledger scale, never rounded.
 */
export function renderCsvTable(report: UsageReport, cut: ReportCut): string {
  const rows = new Map<string, { key: CsvRow; counts: number[]; cost: Record<string, Money> }>();
  for (const l of linesOf(report, cut)) {
    const key: CsvRow = {
      user_id: 'userId' in l ? l.userId : null,
      day: 'day' in l ? l.day : null,
      model: 'model' in l ? l.model : null,
      kind: 'kind' in l ? l.kind : null,
    };
    const id = JSON.stringify(TIDY_KEYS[cut].map((k) => key[k]));
    const row = rows.get(id) ?? { key, counts: [0, 0, 0, 0, 0, 0], cost: {} };
    rows.set(id, row);
    [l.calls, l.entries, l.promptTokens, l.cachedPromptTokens, l.completionTokens, l.reasoningTokens].forEach(
      (n, i) => (row.counts[i] += n),
    );
    const column = LINE_COLUMNS[l.line];
    row.cost[column] = add(row.cost[column] ?? zero(), parseUsd(l.costUsd));
  }
  const sorted = [...rows.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, row]) => row);
  const out = sorted.map(({ key, counts, cost }) => {
    const row: Record<string, string | number | null | undefined> = { ...key };
    COUNT_COLUMNS.forEach((c, i) => (row[c] = counts[i]));
    for (const c of Object.values(LINE_COLUMNS)) row[c] = toExactString(cost[c] ?? zero());
    row.cost_usd = toExactString(sumMoney(Object.values(cost)));
    return row;
  });
  return csvText(tidyCsvColumns(cut), out);
}

/**
 * Every cut in one long file (`--format csv-all`, and usage.csv among the monthly artifacts): a `section` column says
 * what a row is (report, by_user, by_day, by_model, total, total_by_line, unit_economics, failed_calls,
 * duplicate_skipped_runs, budget); columns a section does not use are empty. Money is exact, never rounded.
 */
export function renderCsvAll(report: UsageReport, cuts: ReportCut[] = ['user', 'day', 'model']): string {
  const rows: CsvRow[] = [
    { section: 'report', metric: 'month', value: report.month },
    { section: 'report', metric: 'time_zone', value: report.timeZone },
    { section: 'report', metric: 'period_from', value: report.period.from },
    { section: 'report', metric: 'period_to', value: report.period.to },
    { section: 'report', metric: 'complete', value: String(report.period.complete) },
  ];
  for (const cut of cuts) {
    for (const l of linesOf(report, cut)) {
      rows.push({
        section: `by_${cut}`,
        line: l.line,
        user_id: 'userId' in l ? l.userId : null,
        day: 'day' in l ? l.day : null,
        model: 'model' in l ? l.model : null,
        kind: 'kind' in l ? l.kind : null,
        ...figureFields(l),
      });
    }
  }
  rows.push({ section: 'total', ...figureFields(report.totals) });
  const lineTotals: [LineType, string][] = [
    ['usage', report.totals.usageUsd],
    ['adjustment', report.totals.adjustmentsUsd],
    ['reconciliation', report.totals.reconciliationUsd],
    ['credit', report.totals.creditsUsd],
  ];
  for (const [line, cost] of lineTotals) rows.push({ section: 'total_by_line', line, cost_usd: cost });
  const e = report.unitEconomics;
  const metrics: [string, string | number][] = [
    ['spend_usd', e.spendUsd],
    ['completed_runs', e.completedRuns],
    ['failed_runs', e.failedRuns],
    ['active_users', e.activeUsers],
    ['cost_per_completed_run_usd', e.costPerCompletedRunUsd],
    ['cost_per_active_user_usd', e.costPerActiveUserUsd],
    ['completed_runs_per_dollar', e.completedRunsPerDollar],
  ];
  for (const [metric, value] of metrics) rows.push({ section: 'unit_economics', metric, value });
  rows.push({ section: 'failed_calls', calls: report.failedCalls.calls, cost_usd: report.failedCalls.costUsd });
  rows.push({
    section: 'duplicate_skipped_runs',
    metric: 'runs',
    value: report.duplicateSkippedRuns.runs,
    cost_usd: report.duplicateSkippedRuns.costUsd,
  });
  rows.push(...budgetCsvRows(report), ...reconciliationCsvRows(report));
  return csvText(CSV_COLUMNS, rows);
}

/**
 * The budget section in CSV: section `budget`, one metric per row, exact decimal strings; per-user rows name the user
 * (an empty value where no limit applies), the guard's totals leave user_id empty.
 */
function budgetCsvRows(report: UsageReport): CsvRow[] {
  const b = report.budget;
  if (!b) return [];
  const rows: CsvRow[] = [];
  for (const u of b.users) {
    const perUser: [string, string | null][] = [
      ['month', u.month],
      ['time_zone', u.timeZone],
      ['limit_usd', u.limitUsd],
      ['spent_usd', u.spentUsd],
      ['reserved_usd', u.reservedUsd],
      ['remaining_usd', u.remainingUsd],
      ['tier', u.tier],
      ['source', u.source],
    ];
    for (const [metric, value] of perUser) rows.push({ section: 'budget', user_id: u.userId, metric, value });
  }
  const s = b.downgradeSavings;
  const totals: [string, string | number][] = [
    ['configured', String(b.configured)],
    ['blocked_runs', b.blockedRuns],
    ['downgraded_runs', b.downgradedRuns],
    ['skipped_for_budget_slots', b.skippedForBudget.slots],
    ['paused_for_budget_tasks', b.skippedForBudget.pausedTasks],
    ['downgrade_saved_usd', s.savedUsd],
    ['downgrade_paid_usd', s.paidUsd],
    ['downgrade_at_default_price_usd', s.atDefaultPriceUsd],
    ['downgrade_entries', s.entries],
    ['downgrade_unpriced_entries', s.unpricedEntries],
  ];
  for (const [metric, value] of totals) rows.push({ section: 'budget', metric, value });
  return rows;
}

// ------------------------------------------------------------------------------------------------------------- markdown

/**
 * A table cell from data (a user ID, a model name) as Markdown shows it literally: the characters that would start
 * emphasis, code, links, images, raw HTML or strike-through are backslash-escaped, `|` cannot split the cell, line
 * breaks become spaces, and control characters become visible escapes.
 */
const mdCell = (s: string): string => printable(s.replace(/[\r\n]+/g, ' ')).replace(/[\\`*_[\]<>|~!#&]/g, (c) => `\\${c}`);

/** Cells are escaped here, so the renderer's own emphasis goes in through `strong`. */
function mdTable(headers: string[], rows: string[][], right: number[], strong: (row: number) => boolean = () => false): string {
  const align = headers.map((_, i) => (right.includes(i) ? '---:' : '---'));
  const cells = (r: string[], i: number) => r.map((c) => (strong(i) && c ? `**${mdCell(c)}**` : mdCell(c)));
  return [
    `| ${headers.map(mdCell).join(' | ')} |`,
    `| ${align.join(' | ')} |`,
    ...rows.map((r, i) => `| ${cells(r, i).join(' | ')} |`),
  ].join('\n');
}

/** usage.md: the summary, the by-user table, the unit economics and the failed and duplicate slices. */
export function renderMarkdown(report: UsageReport): string {
  const t = upperCaseHeaders(cutTable(report, 'user'));
  const totalRow = (i: number) => i === t.rows.length - 1;
  const e = report.unitEconomics;
  return [
    `# ${title(report)}`,
    '',
    `Period: ${report.period.from} to ${report.period.to} (${report.timeZone} month boundaries).`,
    '',
    '## Summary',
    '',
    `- Total: **${displayUsd(report.totals.costUsd)}** (exact: ${report.totals.costUsd} USD) over ${plural(report.totals.calls, 'model call')}` +
      ` and ${plural(report.ledger.entries, 'ledger entry', 'ledger entries')}`,
    ...totalsRows(report)
      .slice(0, 4)
      .map(([k, v]) => `- ${capitalized(k)}: ${v}`),
    `- Failed calls: ${plural(report.failedCalls.calls, 'call')}, ${displayUsd(report.failedCalls.costUsd)}`,
    `- Duplicate-skipped runs: ${plural(report.duplicateSkippedRuns.runs, 'run')}, ${displayUsd(report.duplicateSkippedRuns.costUsd)}`,
    '',
    '## By user',
    '',
    mdTable(t.headers, t.rows, t.right, totalRow),
    '',
    '## Unit economics',
    '',
    mdTable(['Metric', 'Value'], economicsRows(report), [1]),
    '',
    `Exact: cost per completed run ${e.costPerCompletedRunUsd} USD, cost per active user ${e.costPerActiveUserUsd} USD. ` +
      `Rounding: ${e.rounding}. Money in tables is rounded half-even to 6 decimals; usage.json and usage.csv are exact.`,
    '',
    ...budgetMarkdown(report),
  ].join('\n');
}

function budgetMarkdown(report: UsageReport): string[] {
  if (!report.budget) return [];
  const t = budgetTable(report);
  return [
    '## Budgets',
    '',
    mdCell(budgetNote(report)),
    '',
    ...(t.rows.length ? [mdTable(t.headers, t.rows, t.right), ''] : []),
    mdTable(
      ['Metric', 'Value'],
      budgetRunRows(report).map(([k, v]) => [capitalized(k), v]),
      [1],
    ),
    '',
  ];
}
