import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { sha256 } from '../hash';
import { displayUsd, formatUsd, parseUsd, toAttoUsd } from '../money';
import { divideHalfEven } from './economics';
import { daysOf } from './month';
import { budgetNote, budgetRunRows, budgetTable, capitalized, cutTable, economicsRows, totalsRows } from './report-rows';
import type { DayLine, ReportCut, UsageReport } from './types';

/**
 * usage.html: one self-contained file that opens offline. Chart.js (its UMD build) is inlined; the report's chart
 * series are embedded as JSON; a Content-Security-Policy allows only these inline scripts (by hash) and no network
 * fetch of any kind, so opening the file never reaches out. No timestamps: the same report gives the same bytes.
 */

let chartJsSource: string | undefined;

/** Chart.js's UMD bundle from node_modules, without its source-map comment (a browser would try to fetch the map). */
export function chartJs(): string {
  if (chartJsSource === undefined) {
    const entry = createRequire(import.meta.url).resolve('chart.js'); // .../chart.js/dist/chart.cjs
    const umd = readFileSync(join(dirname(entry), 'chart.umd.min.js'), 'utf8');
    chartJsSource = umd.replace(/\n?\/\/# sourceMappingURL=\S*\s*$/, '\n').replace(/<\/script/gi, '<\\/script');
  }
  return chartJsSource;
}

const TOP_USERS = 10;

/**
 * Chart values in micro-dollars as integer strings: the exact amount rounded half-even to 6 decimals (what the tables
 * show), still free of floats here. The page turns them into numbers for Chart.js: the presentation edge, and the only
 * place a money value ever becomes a JS number.
 */
export const microUsd = (exact: string): string => divideHalfEven(toAttoUsd(parseUsd(exact)), 10n ** 12n).toString();

/** Chart series: `micro` to draw, `shown` (the same amounts as `$0.000123`, formatted exactly here) for tooltips. */
export interface ChartData {
  days: string[];
  daily: { label: string; micro: string[]; shown: string[] }[];
  topUsers: { labels: string[]; micro: string[]; shown: string[] };
  models: { labels: string[]; micro: string[]; shown: string[] };
}

const shownOf = (micro: string[]): string[] => micro.map((m) => formatUsd(BigInt(m), 6n));

export function chartData(report: UsageReport): ChartData {
  const days = daysOf(report.month);
  const series = (pick: (l: DayLine) => boolean) => {
    const atto = new Map<string, bigint>(days.map((d) => [d, 0n]));
    for (const l of report.byDay.filter(pick)) atto.set(l.day, (atto.get(l.day) ?? 0n) + toAttoUsd(parseUsd(l.costUsd)));
    return days.map((d) => divideHalfEven(atto.get(d) ?? 0n, 10n ** 12n).toString());
  };
  const usageUsers = report.byUser.filter((l) => l.line === 'usage').slice(0, TOP_USERS);
  const usageModels = report.byModel.filter((l) => l.line === 'usage');
  const withShown = <T extends { micro: string[] }>(series: T) => ({ ...series, shown: shownOf(series.micro) });
  return {
    days,
    daily: [
      withShown({ label: 'chat', micro: series((l) => l.line === 'usage' && l.kind === 'chat') }),
      withShown({ label: 'embedding', micro: series((l) => l.line === 'usage' && l.kind === 'embedding') }),
      withShown({ label: 'adjustments and credits', micro: series((l) => l.line !== 'usage') }),
    ],
    topUsers: withShown({ labels: usageUsers.map((l) => l.userId), micro: usageUsers.map((l) => microUsd(l.costUsd)) }),
    models: withShown({
      labels: usageModels.map((l) => `${l.model ?? '-'} (${l.kind ?? '-'})`),
      micro: usageModels.map((l) => microUsd(l.costUsd)),
    }),
  };
}

const esc = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');

/** JSON safe inside a <script> element. */
const scriptJson = (v: unknown): string =>
  JSON.stringify(v)
    .replace(/</g, '\\u003c')
    .replace(/>/g, '\\u003e')
    .replace(/&/g, '\\u0026')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');

function table(headers: string[], rows: string[][], numeric: number[], totalRow = false): string {
  const th = headers.map((h, i) => `<th${numeric.includes(i) ? ' class="n"' : ''}>${esc(h)}</th>`).join('');
  const tr = rows
    .map((r, ri) => {
      const cls = totalRow && ri === rows.length - 1 ? ' class="total"' : '';
      return `<tr${cls}>${r.map((c, i) => `<td${numeric.includes(i) ? ' class="n"' : ''}>${esc(c)}</td>`).join('')}</tr>`;
    })
    .join('\n');
  return `<table>\n<thead><tr>${th}</tr></thead>\n<tbody>\n${tr}\n</tbody>\n</table>`;
}

/** A cut's table from the shared row model, its TOTAL row styled as one. */
const cutHtml = (report: UsageReport, cut: ReportCut): string => {
  const t = cutTable(report, cut);
  return table(t.headers, t.rows, t.right, true);
};

/** The budget section: the per-user table (the `budgets status` columns), then the guard's run counts and savings. */
function budgetHtml(report: UsageReport): string {
  if (!report.budget) return '';
  const t = budgetTable(report);
  const runs = budgetRunRows(report).map(([k, v]) => [capitalized(k), v]);
  return [
    '<h2>Budgets</h2>',
    `<p class="muted">${esc(budgetNote(report))}</p>`,
    ...(t.rows.length ? [table(t.headers, t.rows, t.right)] : []),
    table(['Metric', 'Value'], runs, [1]),
  ].join('\n');
}

/** The page's script and stylesheet, kept as files beside this one and inlined: the page stays self-contained. */
const asset = (name: string): string => readFileSync(new URL(`./assets/${name}`, import.meta.url), 'utf8');
let pageAssets: { script: string; css: string } | undefined;
const assets = () => (pageAssets ??= { script: asset('report.js'), css: asset('report.css') });

export function renderHtml(report: UsageReport): string {
  const dataJson = scriptJson(chartData(report));
  const chartLib = chartJs();
  const { script: pageScript, css } = assets();
  const hash = (s: string) => `'sha256-${sha256(s, 'base64')}'`;
  const csp = [
    "default-src 'none'",
    `script-src ${hash(chartLib)} ${hash(pageScript)}`,
    "style-src 'unsafe-inline'",
    'img-src data:',
    "connect-src 'none'",
    "form-action 'none'",
    "base-uri 'none'",
  ].join('; ');

  const e = report.unitEconomics;
  const t = report.totals;
  const so = report.period.complete ? '' : ' (month so far)';
  const cards: [string, string][] = [
    ['Total', displayUsd(t.costUsd)],
    ['Model calls', String(t.calls)],
    ['Cost per completed run', displayUsd(e.costPerCompletedRunUsd)],
    ['Cost per active user', displayUsd(e.costPerActiveUserUsd)],
    ['Completed runs per dollar', e.completedRunsPerDollar],
    ['Failed calls', `${report.failedCalls.calls} · ${displayUsd(report.failedCalls.costUsd)}`],
    ['Duplicate-skipped runs', `${report.duplicateSkippedRuns.runs} · ${displayUsd(report.duplicateSkippedRuns.costUsd)}`],
  ];

  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${esc(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(`Usage report ${report.month} (${report.timeZone})`)}</title>
<style>${css}</style>
</head>
<body>
<h1>${esc(`Usage report ${report.month}${so}`)}</h1>
<div class="muted">${esc(`${report.timeZone} month: ${report.period.from} to ${report.period.to}. Money rounded half-even to 6 decimals; usage.json and usage.csv carry exact amounts.`)}</div>
<div class="cards">
${cards.map(([k, v]) => `<div class="card"><span class="muted">${esc(k)}</span><b>${esc(v)}</b></div>`).join('\n')}
</div>
<h2>Daily cost by kind</h2>
<div class="chart"><canvas id="chart-daily" role="img" aria-label="Daily cost by kind"></canvas></div>
<h2>Top users by cost</h2>
<div class="chart"><canvas id="chart-users" role="img" aria-label="Top users by cost"></canvas></div>
<h2>Cost by model</h2>
<div class="chart"><canvas id="chart-models" role="img" aria-label="Cost by model"></canvas></div>
<h2>Unit economics</h2>
${table(
  ['Metric', 'Value'],
  economicsRows(report).map(([k, v]) => [capitalized(k), v]),
  [1],
)}
<p class="muted">${esc(`Rounding: ${e.rounding}.`)}</p>
<h2>Totals</h2>
${table(['Line', 'Cost'], totalsRows(report), [1], true)}
<h2>By user</h2>
${cutHtml(report, 'user')}
<h2>By day</h2>
${cutHtml(report, 'day')}
<h2>By model</h2>
${cutHtml(report, 'model')}
${budgetHtml(report)}
<script type="application/json" id="chart-data">${dataJson}</script>
<script>${chartLib}</script>
<script>${pageScript}</script>
</body>
</html>
`;
}
