import { displayUsd, formatScaled, parseUsd, toAttoUsd } from '../money';
import { countPerDollar } from '../reports/economics';
import { microUsd } from '../reports/render-html';
import type { RateLimitWaits } from '../ratelimits/rate-limits-store';
import type { TaskListing } from '../schedules/manage-task';
import type { TaskPauseFigures } from '../budgets/budget-pauses';
import type { TaskSlotCheck } from '../schedules/missed-slots';
import type { PriceVersionChoice, repriceMonthAtVersion } from '../reports/reprice';
import type { BudgetRow, DayFigures, entryView, Overview, runView, UserFigures, UserPage } from './admin-data';
import { forecastChart } from './forecast-chart';
import { html, jsonForScript, type Raw } from './html';

/**
 * The admin pages as HTML. Every value goes through html`` (escaped); figures are formatted by cronledger
 * (money only through usd(): displayUsd, half-even at 6 decimals, the exact amount in its title), and sortable cells
 * carry their exact value (money as an integer of 10^-18 USD) for the page script to sort by. Layout rules that keep
 * figures readable (admin.css): numbers, money and times never wrap (td.num, .usd, time), headers break only between
 * words, and every table scrolls sideways inside its own box (scrollBox) rather than widening the page.
 */

export interface PageContext {
  month?: string;
  zone?: string;
  zones?: string[];
  /** Link to a workflow in the Temporal Web UI, or undefined when the UI is unknown. */
  workflowUrl: (workflowId: string, runId: string) => string | undefined;
}

/** The missed-slot check as the pages show it: the grace and window in force, each task, or why it did not run. */
export interface MissedSlotsView {
  graceSeconds: number;
  windowSeconds: number;
  /** How long one check serves every request (--missed-slot-cache). */
  cacheSeconds: number;
  /** When the check these figures come from started, and how many whole seconds ago that was; null when none ran. */
  checkedAt: string | null;
  ageSeconds: number | null;
  error: string | null;
  tasks: TaskSlotCheck[];
}

type RunView = ReturnType<typeof runView>;
type RepricedAtVersion = NonNullable<Awaited<ReturnType<typeof repriceMonthAtVersion>>>;
type EntryView = ReturnType<typeof entryView>;

const NAV: [string, string][] = [
  ['/', 'Overview'],
  ['/users', 'Users'],
  ['/models', 'Models'],
  ['/runs', 'Runs'],
  ['/tasks', 'Tasks'],
  ['/budgets', 'Budgets'],
];

function layout(title: string, ctx: PageContext, body: Raw, data?: unknown): string {
  const query = ctx.month ? `?month=${encodeURIComponent(ctx.month)}&tz=${encodeURIComponent(ctx.zone ?? 'UTC')}` : '';
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title} · cronledger admin</title>
        <link rel="stylesheet" href="/assets/admin.css" />
      </head>
      <body>
        <header>
          <strong>cronledger</strong>
          <nav>${NAV.map(([href, name]) => html`<a href="${href}${query}">${name}</a>`)}</nav>
          ${
            ctx.month
              ? html`<form method="get" class="period">
                  <label>month <input name="month" value="${ctx.month}" pattern="\\d{4}-\\d{2}" size="7" /></label>
                  <label
                    >zone
                    <select name="tz">
                      ${(ctx.zones ?? [ctx.zone ?? 'UTC']).map(
                        (z) => html`<option value="${z}" ${z === ctx.zone ? html` selected` : ''}>${z}</option>`,
                      )}
                    </select></label
                  >
                  <button>show</button>
                </form>`
              : ''
          }
          ${ctx.month ? html`<form method="post" action="/logout" class="logout"><button>sign out</button></form>` : ''}
        </header>
        <main>
          <h1>${title}</h1>
          ${body}
        </main>
        ${
          data === undefined
            ? ''
            : html`<script type="application/json" id="page-data">
                ${jsonForScript(data)}
              </script>`
        }
        <script src="/assets/chart.umd.min.js"></script>
        <script src="/assets/admin.js"></script>
      </body>
    </html> `.html;
}

const atto = (exact: string): string => toAttoUsd(parseUsd(exact)).toString();
const usd = (exact: string): Raw => html`<span class="usd" title="${exact} USD">${displayUsd(exact)}</span>`;
/** A date or instant as printed (ISO 8601); one token that never wraps. */
const time = (iso: string): Raw => html`<time datetime="${iso}">${iso}</time>`;
const timeCell = (iso: string | null): Raw => html`<td>${iso === null ? '-' : time(iso)}</td>`;
/**
 * A table in a box of its own that scrolls sideways when the table is wider than the screen. The box is a labelled
 * region that takes focus, so keyboard users can scroll it too.
 */
const scrollBox = (label: string, table: Raw): Raw =>
  html`<div class="table-scroll" role="region" aria-label="${label}" tabindex="0">${table}</div>`;
const usdCell = (exact: string): Raw => html`<td class="num" data-sort="${atto(exact)}">${usd(exact)}</td>`;
const numCell = (n: number | string | null): Raw =>
  n === null ? html`<td class="num" data-sort="-1">-</td>` : html`<td class="num" data-sort="${String(n)}">${String(n)}</td>`;
/** Percent with 2 decimals, sorted as an integer of hundredths; no budget sorts below 0. */
const pctCell = (pct: string | null): Raw =>
  pct === null
    ? html`<td class="num" data-sort="-1">no budget</td>`
    : html`<td class="num" data-sort="${pct.replace('.', '')}">${pct}%</td>`;
const th = (label: string, type: 'int' | 'pct' | 'text' = 'text') => html`<th data-type="${type}" tabindex="0">${label}</th>`;
const userHref = (userId: string, ctx: PageContext) =>
  `/users/${encodeURIComponent(userId)}?month=${encodeURIComponent(ctx.month ?? '')}&tz=${encodeURIComponent(ctx.zone ?? 'UTC')}`;

/** Chart series: micro-dollars as integer strings (exact, half-even) to draw, and the same amounts formatted for tooltips. */
function dailySeries(daily: DayFigures[]) {
  const cost = daily.map((d) => microUsd(d.costUsd));
  const perRun = daily.map((d) => microUsd(d.costPerCompletedRunUsd));
  return {
    days: daily.map((d) => d.day),
    costMicro: cost,
    costShown: daily.map((d) => displayUsd(d.costUsd)),
    runs: daily.map((d) => d.runs),
    perRunMicro: perRun,
    perRunShown: daily.map((d) => displayUsd(d.costPerCompletedRunUsd)),
  };
}

/** 90 -> "1m30s", 86400 -> "24h": the grace and window as the --missed-slot-* options spell them. */
function duration(seconds: number): string {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  return `${h ? `${h}h` : ''}${m ? `${m}m` : ''}${s || (!h && !m) ? `${s}s` : ''}`;
}

const missedTotal = (v: MissedSlotsView) => v.tasks.reduce((n, t) => n + t.missedCount, 0);

/** "checked 12 s ago": one check serves every page and scrape for --missed-slot-cache, so the figures have an age. */
function checkedAge(v: Pick<MissedSlotsView, 'checkedAt' | 'ageSeconds' | 'cacheSeconds'>): Raw {
  if (v.checkedAt === null || v.ageSeconds === null) return html``;
  return html`<p class="muted missed-slots-age" data-checked-at="${v.checkedAt}">
    Checked ${String(v.ageSeconds)} s ago (${time(v.checkedAt)}); one check serves every page and scrape for ${duration(v.cacheSeconds)}.
  </p>`;
}

function missedSlotsSection(v: MissedSlotsView): Raw {
  const flagged = v.tasks.filter((t) => t.missedCount > 0);
  const heading = html`<h2>
    Missed slots: due slots with no claim ${duration(v.graceSeconds)} after they should have fired, over the last
    ${duration(v.windowSeconds)}
  </h2>`;
  if (v.error)
    return html`<section id="missed-slots">
      ${heading}
      <p class="error">Not checked: ${v.error}</p>
    </section>`;
  if (flagged.length === 0) {
    const active = v.tasks.filter((t) => t.state === 'active').length;
    return html`<section id="missed-slots">
      ${heading} ${checkedAge(v)}
      <p>${v.tasks.length === 0 ? 'None: no task has a schedule.' : `None: every due slot of the ${active} active tasks was claimed.`}</p>
    </section>`;
  }
  return html`<section id="missed-slots">
    ${heading} ${checkedAge(v)}
    ${scrollBox(
      'Missed slots per task',
      html`<table class="sortable">
        <thead>
          <tr>
            ${th('Task')}${th('Missed', 'int')}${th('Due', 'int')}${th('Newest missed slot')}${th('Checked since')}
          </tr>
        </thead>
        <tbody>
          ${flagged.map(
            (t) =>
              html`<tr class="missed" data-task="${t.taskId}">
                <td>${t.taskId}</td>
                ${numCell(t.missedCount)}${numCell(t.dueSlots)} ${timeCell(t.missed[0] ?? null)} ${timeCell(t.checkedFrom)}
              </tr>`,
          )}
        </tbody>
      </table>`,
    )}
  </section>`;
}

/** The last `cronledger rollups verify`: when, by whom, and each difference it kept. */
function rollupsVerifiedSection(v: Overview['rollupsVerified']): Raw {
  const heading = html`<h2>Rollups against the ledger</h2>`;
  if (v === null)
    return html`<section id="rollups-verified">
      ${heading}
      <p>Never verified: run <code>cronledger rollups verify</code>.</p>
    </section>`;
  const what = `${v.months} month(s), ${v.rowsChecked} rollup row(s) compared`;
  const when = `Last verified ${v.verifiedAt.toISOString()} by ${v.createdBy}`;
  if (v.differences === '0')
    return html`<section id="rollups-verified" data-differences="0">
      ${heading}
      <p>${when}: no difference (${what}).</p>
    </section>`;
  return html`<section id="rollups-verified" data-differences="${v.differences}">
    ${heading}
    <p class="error">
      ${when}: ${v.differences} difference(s) (${what}). Rebuild with <code>cronledger rollups rebuild</code> once the cause is known.
    </p>
    ${scrollBox(
      'Differences between the rollups and the ledger',
      html`<table>
        <thead>
          <tr>
            ${th('Table')}${th('Zone')}${th('Month')}${th('Side')}${th('Row')}
          </tr>
        </thead>
        <tbody>
          ${v.sample.map(
            (d) =>
              html`<tr>
                <td>${d.table}</td>
                <td>${d.zone}</td>
                <td>${d.month}</td>
                <td>${d.side === 'ledger' ? 'the ledger gives' : 'the rollup holds'}</td>
                <td class="text"><code>${JSON.stringify(d.row)}</code></td>
              </tr>`,
          )}
        </tbody>
      </table>`,
    )}
  </section>`;
}

/** The month against the providers' own reports (`cronledger reconcile`), per provider; nothing until something was imported. */
function reconciliationPanel(months: Overview['reconciliation']): Raw {
  if (!months) return html``;
  return html`<section id="reconciliation">
    <h2>Reconciliation with the providers (UTC days)</h2>
    ${scrollBox(
      "Ledger against the providers' reports",
      html`<table>
        <thead>
          <tr>
            ${th('Provider')}${th('Days imported', 'int')}${th('Ledger', 'int')}${th('Provider bill', 'int')}${th('Booked differences', 'int')}${th(
              'Entries',
              'int',
            )}${th('Provider-only keys', 'int')}${th('Ledger-only keys', 'int')}
          </tr>
        </thead>
        <tbody>
          ${months.map(
            (m) =>
              html`<tr data-provider="${m.provider}">
                <td>${m.provider}</td>
                <td class="num">${m.daysImported}</td>
                ${usdCell(m.ledgerUsd)}${usdCell(m.providerUsd)}${usdCell(m.bookedUsd)}
                <td class="num">${m.bookedEntries}</td>
                <td class="num">${m.unmatchedProviderKeys}</td>
                <td class="num">${m.unmatchedLedgerKeys}</td>
              </tr>`,
          )}
        </tbody>
      </table>`,
    )}
  </section>`;
}

/**
 * Users whose slots left ask for more than their limit: the high every-slot figure of their newest recorded forecast is
 * over it, so slots may be blocked or skipped; the figures are what every slot would cost.
 */
function forecastOverLimitSection(rows: Overview['forecastOverLimit'], ctx: PageContext): Raw {
  return html`<section id="forecast-over-limit">
    <h2>Forecast over the limit</h2>
    ${
      rows.length === 0
        ? html`<p>No user's recorded forecast ends over their limit.</p>`
        : scrollBox(
            'Forecast over the limit',
            html`<table class="sortable">
              <thead>
                <tr>
                  ${th('User')}${th('Forecast of')}${th('Limit', 'int')}${th('Spent', 'int')}${th('Every slot, median', 'int')}${th('Every slot, high', 'int')}
                </tr>
              </thead>
              <tbody>
                ${rows.map(
                  (f) =>
                    html`<tr>
                      <td><a href="${userHref(f.userId, ctx)}">${f.userId}</a></td>
                      ${timeCell(f.day)}${usdCell(f.limitUsd ?? '0')}${usdCell(f.spentUsd)}${usdCell(f.allSlotsMedianUsd)}${usdCell(f.allSlotsHighUsd)}
                    </tr>`,
                )}
              </tbody>
            </table>`,
          )
    }
  </section>`;
}

export function overviewPage(o: Overview & { missedSlots: MissedSlotsView }, ctx: PageContext): string {
  const missed = o.missedSlots;
  const figures: [string, Raw | string][] = [
    ['Spend, month to date', usd(o.spendUsd)],
    ['Credits', usd(o.creditsUsd)],
    ['Total (spend + credits)', usd(o.totalUsd)],
    ['Completed runs', String(o.runs.completed)],
    ['Failed runs', String(o.runs.failed)],
    ['Duplicate runs (stopped)', String(o.runs.duplicate)],
    ['Blocked runs', o.budgets === null ? 'no budget' : String(o.budgets.blockedRuns)],
    ['Downgraded runs', o.budgets === null ? 'no budget' : String(o.budgets.downgradedRuns)],
    ['What downgrades saved', o.budgets === null ? 'no budget' : usd(o.budgets.downgradeSavings.savedUsd)],
    ['Cost per completed run', usd(o.costPerCompletedRunUsd)],
    ['Cost per active user', usd(o.costPerActiveUserUsd)],
    ['Active users', String(o.activeUsers)],
    // Rounded once from the exact quotient to what a person reads; the JSON keeps the report's 6 decimals.
    ['Completed runs per dollar', countPerDollar(BigInt(o.runs.completed), parseUsd(o.spendUsd), 1n)],
    [`Missed slots (last ${duration(missed.windowSeconds)})`, missed.error ? 'not checked' : String(missedTotal(missed))],
  ];
  const body = html` <p class="muted">
      ${o.month} in ${o.zone}, ${o.period.from} to ${o.period.to}${o.period.complete ? '' : ' (month under way)'}; read from the
      ${o.source === 'rollups' ? 'daily rollups' : 'ledger (no rollups built for this month yet)'}.
    </p>
    <dl class="figures" id="figures">
      ${figures.map(
        ([k, v]) =>
          html`<div>
            <dt>${k}</dt>
            <dd>${v}</dd>
          </div>`,
      )}
    </dl>
    ${missedSlotsSection(missed)} ${rollupsVerifiedSection(o.rollupsVerified)} ${reconciliationPanel(o.reconciliation)}
    ${forecastOverLimitSection(o.forecastOverLimit, ctx)}
    <section>
      <h2>Capacity: daily cost, daily runs and cost per completed run</h2>
      <div class="chart"><canvas id="chart-capacity" data-chart="capacity"></canvas></div>
    </section>
    <section id="anomalies">
      <h2>Anomalies: cost per run above ${o.anomalyFactor}× its trailing 7-day median</h2>
      ${
        o.anomalies.length === 0
          ? html`<p>None this month.</p>`
          : scrollBox(
              'Anomalies',
              html`<table class="sortable">
                <thead>
                  <tr>
                    ${th('Kind')}${th('ID')}${th('Started on')}${th('Last day')}${th('Days', 'int')}${th('Cost per run that day', 'int')}${th('Trailing median', 'int')}
                  </tr>
                </thead>
                <tbody>
                  ${o.anomalies.map(
                    (a) =>
                      html`<tr class="anomaly">
                        <td>${a.kind}</td>
                        <td>${a.kind === 'user' ? html`<a href="${userHref(a.id, ctx)}">${a.id}</a>` : a.id}</td>
                        ${timeCell(a.startedOn)} ${timeCell(a.lastOn)}
                        ${numCell(a.days)}${usdCell(a.costPerRunUsd)}${usdCell(a.trailingMedianUsd)}
                      </tr>`,
                  )}
                </tbody>
              </table>`,
            )
      }
    </section>`;
  return layout('Overview', ctx, body, { charts: { capacity: dailySeries(o.daily) } });
}

export function usersPage(list: UserFigures[], ctx: PageContext): string {
  const body = scrollBox(
    'Users',
    html`<table class="sortable" id="users">
      <thead>
        <tr>
          ${th('User')}${th('Spend', 'int')}${th('Budget used %', 'pct')}${th('Tier')}${th('Completed runs', 'int')}${th('Failed runs', 'int')}${th('Skipped for budget', 'int')}${th('Cost per completed run', 'int')}${th('Credits', 'int')}
        </tr>
      </thead>
      <tbody>
        ${list.map(
          (u) =>
            html`<tr>
              <td><a href="${userHref(u.userId, ctx)}">${u.userId}</a></td>
              ${usdCell(u.spendUsd)} ${pctCell(u.budgetUsedPercent)}
              <td>${u.tier ?? 'no budget'}</td>
              ${numCell(u.completedRuns)}${numCell(u.failedRuns)}${skippedForBudgetCell(u.skippedForBudget, u.tasksPausedForBudget)}
              ${usdCell(u.costPerCompletedRunUsd)}${usdCell(u.creditsUsd)}
            </tr>`,
        )}
      </tbody>
    </table>`,
  );
  return layout('Users', ctx, body);
}

export function userPageHtml(p: UserPage, userId: string, ctx: PageContext): string {
  const u = p.user;
  const body = html` <p class="user-id">User <code>${userId}</code></p>
    ${
      u
        ? html`<dl class="figures">
            <div>
              <dt>Spend</dt>
              <dd>${usd(u.spendUsd)}</dd>
            </div>
            <div>
              <dt>Credits</dt>
              <dd>${usd(u.creditsUsd)}</dd>
            </div>
            <div>
              <dt>Completed runs</dt>
              <dd>${u.completedRuns}</dd>
            </div>
            <div>
              <dt>Cost per completed run</dt>
              <dd>${usd(u.costPerCompletedRunUsd)}</dd>
            </div>
            <div>
              <dt>Budget used</dt>
              <dd>${u.budgetUsedPercent === null ? 'no budget' : `${u.budgetUsedPercent}% of ${displayUsd(u.budgetLimitUsd!)}`}</dd>
            </div>
            <div>
              <dt>Tier</dt>
              <dd>${u.tier ?? 'no budget'}</dd>
            </div>
          </dl>`
        : html`<p>No ledger entries for this user in ${p.month}.</p>`
    }
    <section id="forecast">
      <h2>Month to date and forecast</h2>
      ${forecastChart(p.daily, p.forecast)}
    </section>
    <section>
      <h2>Daily</h2>
      <div class="chart"><canvas id="chart-user-daily" data-chart="capacity"></canvas></div>
    </section>
    <section>
      <h2>Runs</h2>
      ${runsTable(p.runs, ctx)}
    </section>
    <section>
      <h2>Ledger entries</h2>
      ${entriesTable(p.entries)}
    </section>`;
  return layout(`User ${userId}`, ctx, body, { charts: { capacity: dailySeries(p.daily) } });
}

/** A money cell that may be absent (no budget: no limit, nothing remaining), sorted below every amount. */
const optionalUsdCell = (exact: string | null): Raw =>
  exact === null ? html`<td class="num" data-sort="-1">no budget</td>` : usdCell(exact);

/**
 * Spent + reserved as a share of the limit: the percent (basis points, 2 decimals) and a bar drawn by <meter> from the
 * same integer (no inline style: the CSP allows none), coloured by the tier the database gave (its bands, not a copy
 * here). The bar stops at the limit; the figure goes past it.
 */
function shareCell(basisPoints: string | null, tier: string): Raw {
  if (basisPoints === null) return html`<td class="num" data-sort="-1">no budget</td>`;
  const pct = `${formatScaled(BigInt(basisPoints), 2n)}%`;
  return html`<td class="num share" data-sort="${basisPoints}">
    <meter class="tier-${tier}" min="0" max="10000" value="${basisPoints}" aria-label="${pct} of the limit"></meter>
    <span>${pct}</span>
  </td>`;
}

/** A recorded forecast figure, or "-" (sorted below every amount) when the budget sweep has recorded none. */
const forecastCell = (exact: string | null): Raw => (exact === null ? html`<td class="num" data-sort="-1">-</td>` : usdCell(exact));

/**
 * Each user's month against their budget: limit, spent, reserved, what remains, tier, and the share of the limit used
 * (spent + reserved). Sorted by any column in the page (exact values in data-sort); each user links to their page.
 */
export function budgetsPage(rows: BudgetRow[], ctx: PageContext): string {
  const body = html`<p class="muted">
      Month to date in each budget's zone (the month's end once it is over); the share is spent + reserved over the limit.
    </p>
    ${scrollBox(
      'Budgets',
      html`<table class="sortable" id="budgets">
        <thead>
          <tr>
            ${th('User')}${th('Limit', 'int')}${th('Spent', 'int')}${th('Reserved', 'int')}${th('Remaining', 'int')}${th('Tier')}${th('Used of limit', 'int')}${th('Forecast median', 'int')}${th('Forecast high', 'int')}${th('Zone')}
          </tr>
        </thead>
        <tbody>
          ${rows.map(
            (b) =>
              html`<tr data-user="${b.userId}">
                <td><a href="${userHref(b.userId, ctx)}">${b.userId}</a></td>
                ${optionalUsdCell(b.limitUsd)}${usdCell(b.spentUsd)}${usdCell(b.reservedUsd)}${optionalUsdCell(b.remainingUsd)}
                <td>${b.limitUsd === null ? 'no budget' : b.tier}</td>
                ${shareCell(b.usedBasisPoints, b.tier)}${forecastCell(b.forecastMedianUsd)}${forecastCell(b.forecastHighUsd)}
                <td>${b.timeZone}</td>
              </tr>`,
          )}
        </tbody>
      </table>`,
    )}`;
  return layout('Budgets', ctx, body);
}

export function modelsPage(
  m: {
    models: { model: string | null; kind: string | null; line: string; calls: number; costUsd: string }[];
    downgradeSavings: { savedUsd: string; paidUsd: string; atDefaultPriceUsd: string; entries: number; unpriced: number } | null;
    priceVersions: PriceVersionChoice[];
    repriced: RepricedAtVersion | null;
    rateLimits: RateLimitWaits[];
  },
  ctx: PageContext,
): string {
  const d = m.downgradeSavings;
  const body = html`<p id="downgrade-savings">
      What downgrades saved:
      ${
        d === null
          ? 'no budget (downgrades need budgets)'
          : html`${usd(d.savedUsd)} (${d.entries} calls at the cheap model: paid ${usd(d.paidUsd)}, ${usd(d.atDefaultPriceUsd)} at the
            default model's price${d.unpriced ? html`; ${d.unpriced} calls whose default model has no price are left out` : ''})`
      }
    </p>
    ${scrollBox(
      'Spend by model',
      html`<table class="sortable" id="models">
        <thead>
          <tr>
            ${th('Model')}${th('Kind')}${th('Line')}${th('Calls', 'int')}${th('Cost', 'int')}
          </tr>
        </thead>
        <tbody>
          ${m.models.map(
            (l) =>
              html`<tr>
                <td>${l.model ?? '-'}</td>
                <td>${l.kind ?? '-'}</td>
                <td>${l.line}</td>
                ${numCell(l.calls)}${usdCell(l.costUsd)}
              </tr>`,
          )}
        </tbody>
      </table>`,
    )}
    ${repriceSection(m.priceVersions, m.repriced, ctx)} ${rateLimitSection(m.rateLimits)}`;
  return layout('Models', ctx, body);
}

/** Whole milliseconds as seconds with 3 decimals ("2.200 s"), sorted by the milliseconds. */
const secondsCell = (ms: string): Raw =>
  html`<td class="num" data-sort="${ms}">${(BigInt(ms) / 1000n).toString()}.${(BigInt(ms) % 1000n).toString().padStart(3, '0')} s</td>`;

/** Calls that waited for the shared rate limits, and the provider's 429s, per model (`cronledger limits`). */
function rateLimitSection(rows: RateLimitWaits[]): Raw {
  const heading = html`<h2>Rate limits: calls that waited for capacity, and 429s</h2>`;
  if (rows.length === 0)
    return html`<section id="rate-limits">
      ${heading}
      <p>No rate limit applied and no 429 seen: <code>cronledger limits apply FILE</code> sets them.</p>
    </section>`;
  return html`<section id="rate-limits">
    ${heading}
    <p class="muted">All workers together. This hour and the last 24 hours are UTC hours (the current one and the 23 before).</p>
    ${scrollBox(
      'Rate-limit waits by model',
      html`<table class="sortable">
        <thead>
          <tr>
            ${th('Model')}${th('Requests/min', 'int')}${th('Tokens/min', 'int')}${th('Waits this hour', 'int')}${th('429s this hour', 'int')}${th('Waits, 24 h', 'int')}${th('Time waited, 24 h', 'int')}${th('429s, 24 h', 'int')}${th('Waits in all', 'int')}${th('Time waited in all', 'int')}${th('429s in all', 'int')}
          </tr>
        </thead>
        <tbody>
          ${rows.map(
            (r) =>
              html`<tr data-model="${r.model}">
                <td>${r.model}</td>
                ${numCell(r.requestsPerMinute)}${numCell(r.tokensPerMinute)}${numCell(r.waitsThisHour)}${numCell(r.throttledThisHour)}
                ${numCell(r.waitsLast24h)}${secondsCell(r.waitedMsLast24h)}${numCell(r.throttledLast24h)}
                ${numCell(r.waited)}${secondsCell(r.waitedMs)}${numCell(r.throttled)}
              </tr>`,
          )}
        </tbody>
      </table>`,
    )}
  </section>`;
}

/**
 * What if: a price version of the table chosen, the month's entries of its model at that version (as if it had been
 * in force all month), per user and task: the ledger's figure, the repriced one and the difference. Read only.
 */
function repriceSection(versions: PriceVersionChoice[], r: RepricedAtVersion | null, ctx: PageContext): Raw {
  const form = html`<form method="get" class="reprice">
    <input type="hidden" name="month" value="${ctx.month ?? ''}" />
    <input type="hidden" name="tz" value="${ctx.zone ?? 'UTC'}" />
    <label
      >price version
      <select name="reprice">
        ${versions.map(
          (v) =>
            html`<option value="${v.id}" ${r?.version.id === v.id ? html` selected` : ''}>
              ${v.model} ${v.version} (from ${v.effectiveFrom.slice(0, 10)})
            </option>`,
        )}
      </select></label
    >
    <button>reprice the month</button>
  </form>`;
  if (!r)
    return html`<h2>What if</h2>
      ${form}`;
  const t = r.totals;
  return html`<h2>What if</h2>
    ${form}
    <p id="reprice-summary">
      ${r.version.model}'s entries this month at ${r.version.version} all month: ${usd(t.repricedUsd)} instead of ${usd(t.ledgerUsd)}
      (${usd(t.differenceUsd)}, ${String(t.calls)}
      calls)${r.leftOut ? html`; ${String(r.leftOut)} calls of a service tier or context that version has no rates for are left out` : ''}.
      Nothing is written; usage entries only.
    </p>
    ${scrollBox(
      'Repriced',
      html`<table class="sortable" id="repriced">
        <thead>
          <tr>
            ${th('User')}${th('Task')}${th('Calls', 'int')}${th('Ledger', 'int')}${th('Repriced', 'int')}${th('Difference', 'int')}
          </tr>
        </thead>
        <tbody>
          ${r.lines.map(
            (l) =>
              html`<tr>
                <td><a href="${userHref(l.userId, ctx)}">${l.userId}</a></td>
                <td>${l.taskId ?? '-'}</td>
                ${numCell(l.calls)}${usdCell(l.ledgerUsd)}${usdCell(l.repricedUsd)}${usdCell(l.differenceUsd)}
              </tr>`,
          )}
        </tbody>
      </table>`,
    )}`;
}

function runsTable(runs: RunView[], ctx: PageContext): Raw {
  return scrollBox(
    'Runs',
    html`<table class="sortable runs">
      <thead>
        <tr>
          ${th('Scheduled minute')}${th('Workflow ID')}${th('Task')}${th('User')}${th('Status')}${th('Tier')}${th('Cost', 'int')}${th('Duration ms', 'int')}${th('Ledger')}${th('Temporal')}
        </tr>
      </thead>
      <tbody>
        ${runs.map((r) => {
          const ui = ctx.workflowUrl(r.workflowId, r.runId);
          return html`<tr>
            ${timeCell(r.scheduledMinute)}
            <td><code>${r.workflowId}</code></td>
            <td>${r.taskId}</td>
            <td>${r.userId}</td>
            <td>${r.status}</td>
            <td>${r.tier ?? 'no budget'}</td>
            ${usdCell(r.costUsd)}${numCell(r.durationMs)}
            <td><a class="ledger-link" href="/runs/${encodeURIComponent(r.workflowId)}">${r.entries} rows</a></td>
            <td>${ui ? html`<a class="temporal-link" href="${ui}">workflow</a>` : '-'}</td>
          </tr>`;
        })}
      </tbody>
    </table>`,
  );
}

export const runsPage = (runs: RunView[], ctx: PageContext): string => layout('Runs', ctx, runsTable(runs, ctx));

function entriesTable(entries: EntryView[]): Raw {
  return scrollBox(
    'Ledger entries',
    html`<table class="sortable entries">
      <thead>
        <tr>
          ${th('ID', 'int')}${th('Type')}${th('Model')}${th('Kind')}${th('Status')}${th('Prompt', 'int')}${th('Cached', 'int')}${th('Completion', 'int')}${th('Reasoning', 'int')}${th('Cost', 'int')}${th('Price version')}${th('Provider request ID')}${th('Reason')}${th('At')}
        </tr>
      </thead>
      <tbody>
        ${entries.map(
          (e) =>
            html`<tr>
              ${numCell(e.id)}
              <td>${e.entryType}</td>
              <td>${e.model ?? '-'}</td>
              <td>${e.kind ?? '-'}</td>
              <td>${e.status}</td>
              ${numCell(e.promptTokens)}${numCell(e.cachedPromptTokens)}${numCell(e.completionTokens)}${numCell(e.reasoningTokens)}${usdCell(e.costUsd)}
              <td>${e.priceVersion ?? '-'}</td>
              <td class="text">${e.providerRequestId ?? '-'}</td>
              <td class="text">${e.reason ?? ''}</td>
              ${timeCell(e.createdAt)}
            </tr>`,
        )}
      </tbody>
    </table>`,
  );
}

export function runPageHtml(p: { run: RunView | null; entries: EntryView[] }, workflowId: string, ctx: PageContext): string {
  const body = html`<p>Workflow <code>${workflowId}</code></p>
    ${p.run ? runsTable([p.run], ctx) : html`<p>No claimed run has this workflow ID.</p>`}
    <h2>Ledger rows</h2>
    ${entriesTable(p.entries)}`;
  return layout('Run', ctx, body);
}

export function tasksPage(
  listing:
    | {
        tasks: (TaskListing & { recentRuns: RunView[]; missedSlots: TaskSlotCheck | null; budgetPauses: TaskPauseFigures | null })[];
        missedSlotsChecked: Omit<MissedSlotsView, 'tasks'>;
      }
    | { error: string },
  ctx: PageContext,
): string {
  if ('error' in listing) return layout('Tasks', ctx, html`<p class="error">Schedules unavailable: ${listing.error}</p>`);
  const { tasks, missedSlotsChecked } = listing;
  const body = html`${missedSlotsChecked.error ? html`<p class="error">Missed slots not checked: ${missedSlotsChecked.error}</p>` : checkedAge(missedSlotsChecked)}
  ${scrollBox(
    'Tasks',
    html`<table class="sortable" id="tasks">
      <thead>
        <tr>
          ${th('Task')}${th('Cron')}${th('Zone')}${th('User')}${th('State')}${th('Missed slots', 'int')}${th('Skipped for budget', 'int')}${th('Next fire times')}${th('Recent runs')}
        </tr>
      </thead>
      <tbody>
        ${tasks.map(
          (t) =>
            html`<tr data-task="${t.id}" ${t.missedSlots?.missedCount ? html`class="missed"` : ''}>
              <td>${t.id}</td>
              <td><code>${t.cron}</code></td>
              <td>${t.timezone}</td>
              <td>${t.userId}</td>
              <td>${t.paused ? 'paused' : 'active'}</td>
              ${missedCell(t.missedSlots)}${skippedForBudgetCell(t.budgetPauses?.skippedSlots ?? 0, t.budgetPauses?.paused ? 1 : 0)}
              <td>${t.nextFireTimes.length ? t.nextFireTimes.map((f) => html`<div>${time(f)}</div>`) : '-'}</td>
              <td>${t.recentRuns.map((r) => html`<div>${time(r.scheduledMinute)} ${r.status} ${usd(r.costUsd)}</div>`)}</td>
            </tr>`,
        )}
      </tbody>
    </table>`,
  )}`;
  return layout('Tasks', ctx, body);
}

/** A task's missed slots: the count (newest missed slot beneath), "-" when it was not checked (paused, no Temporal). */
function missedCell(m: TaskSlotCheck | null): Raw {
  if (!m || m.checkedFrom === null) return html`<td class="num" data-sort="-1">-</td>`;
  return html`<td class="num" data-sort="${String(m.missedCount)}">
    ${String(m.missedCount)}${m.missed[0] ? html`<div class="muted">newest ${time(m.missed[0])}</div>` : ''}
  </td>`;
}

/**
 * Slots skipped for budget in the month (a pause's are counted when the budget sweeper resumes it: the report's rule,
 * budgetPauseFiguresByTask), with the tasks paused for budget now beneath.
 */
function skippedForBudgetCell(skipped: number, pausedTasks: number): Raw {
  return html`<td class="num" data-sort="${String(skipped)}">
    ${String(skipped)}${pausedTasks > 0 ? html`<div class="muted">${pausedTasks === 1 ? 'paused' : `${pausedTasks} paused`}</div>` : ''}
  </td>`;
}

export function loginPage(message?: string): string {
  return layout(
    'Sign in',
    { workflowUrl: () => undefined },
    html`${message ? html`<p class="error">${message}</p>` : ''}
      <form method="post" action="/login">
        <label>Admin token <input type="password" name="token" autocomplete="current-password" /></label> <button>sign in</button>
      </form>`,
  );
}

export const errorPage = (status: number, message: string): string =>
  layout(status === 404 ? 'Not found' : 'Cannot show this', { workflowUrl: () => undefined }, html`<p class="error">${message}</p>`);
