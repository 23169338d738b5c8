import { startTestAdmin } from './support/admin-server';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BudgetRow } from '../src/admin/admin-data';
import type { RunningAdmin } from '../src/admin/server';
import { budgetStatusOfAll } from '../src/budgets/budget-status';
import { monthForecast, type TaskSchedules } from '../src/forecast/month-forecast';
import { recordForecast } from '../src/forecast/forecast-records';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { runCli } from './support/cli';
import { launchChromium } from './support/chromium';
import { createTestContext, type TestContext } from './support/context';
import { atto, seedMonth } from './support/report-fixtures';

/**
 * How the admin pages read, in Debian's Chromium at 1,280 and at 390 pixels wide: no number, amount or time breaks
 * across lines and no header breaks inside a word, the page never scrolls sideways (wide tables scroll in their own
 * box), and axe-core finds no serious or critical accessibility violation. Also the budgets page's figures and bars.
 * Screenshots land in $CRONLEDGER_TEST_ARTIFACTS (default: a temp dir); docs/admin-*.png are copied from there.
 */

const MONTH = '2026-06';
const WIDTHS = [1280, 390] as const;
const TASK_ID = 'layout-task';
/** The user page's user, and the moment its forecast is recorded: the month is seeded through the day before. */
const USER = 'user-04';
const AS_OF = new Date(`${MONTH}-18T06:00:00Z`);
/** How much of USER's limit is spent by AS_OF. */
const LIMIT_USED_PERCENT = 42n;
const artifacts = process.env.CRONLEDGER_TEST_ARTIFACTS ?? mkdtempSync(join(tmpdir(), 'cronledger-admin-artifacts-'));
mkdirSync(artifacts, { recursive: true });
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

let ctx: TestContext;
let readonly: pg.Pool;
let admin: RunningAdmin;
const browsers = new Map<number, BrowserContext>();
const profiles: string[] = [];

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  // The month as it stands early on the 18th: no call after the 17th.
  await seedMonth(ctx.ownerPool, { month: MONTH, users: 6, callsPerUser: 8, lastDay: AS_OF.getUTCDate() - 1, workflowIds: true });
  // Limits around what the seeded users spent: one in the cheap band, one over, one at 42 % of it (the user page's, whose
  // forecast goes past 80 % before the month ends), the rest by default.
  const spent = await ctx.pool.query<{ user_id: string; spent: string }>(
    `select user_id, sum(cost_usd)::text as spent from usage_ledger where user_id in ('user-01', 'user-02', '${USER}') group by 1`,
  );
  const spentBy = new Map(spent.rows.map((r) => [r.user_id, atto(r.spent)]));
  const usd = (attoUsd: bigint) => `0.${attoUsd.toString().padStart(18, '0')}`.replace(/0+$/, '');
  const budgetsFile = join(artifacts, 'layout-budgets.json');
  const effectiveFrom = '2026-05-01T00:00:00Z'; // in force through the seeded month
  writeFileSync(
    budgetsFile,
    JSON.stringify({
      budgets: {
        default: { monthly: '250.00', effectiveFrom },
        users: {
          'user-01': { monthly: usd((spentBy.get('user-01')! * 100n) / 85n), effectiveFrom }, // 85 % used: cheap
          'user-02': { monthly: usd((spentBy.get('user-02')! * 100n) / 130n), effectiveFrom }, // 130 % used: blocked
          [USER]: { monthly: usd((spentBy.get(USER)! * 100n) / LIMIT_USED_PERCENT), effectiveFrom },
        },
      },
    }),
  );
  const budgetsApplied = await runCli(['budgets', 'apply', budgetsFile], ctx.env);
  expect(budgetsApplied.code, budgetsApplied.stderr).toBe(0);
  // One schedule for the Tasks page, firing once a year so it never runs here.
  const tasksFile = join(artifacts, 'layout-tasks.json');
  writeFileSync(tasksFile, JSON.stringify({ tasks: [{ id: TASK_ID, cron: '0 9 1 1 *', userId: 'user-01', input: 'yearly digest' }] }));
  const tasksApplied = await runCli(['tasks', 'apply', tasksFile], ctx.env);
  expect(tasksApplied.code, tasksApplied.stderr).toBe(0);
  await runCli(['report', '--month', MONTH, '--tz', 'UTC', '--format', 'json'], ctx.env); // builds the month's rollups
  // user-04's forecast as the budget sweep records it early on the 18th, through the forecast's own code (monthForecast,
  // recordForecast): its weekday task (task-4, 09:00 UTC Monday to Friday: the slots below, as its schedule would list
  // them) at the cost of its completed runs, so the user page draws the band as steps, flat over the weekends, and
  // capped at the limit where slots would be blocked.
  const weekdaySlots: TaskSchedules = {
    tasks: [{ taskId: 'task-4', userId: USER, paused: false, fingerprint: undefined }],
    async slots(ranges) {
      return new Map(
        ranges.map((r) => {
          const out: Date[] = [];
          for (let d = new Date(`${r.from.toISOString().slice(0, 10)}T09:00:00Z`); d <= r.to; d = new Date(d.getTime() + 86_400_000)) {
            if (d >= r.from && d.getUTCDay() !== 0 && d.getUTCDay() !== 6) out.push(d);
          }
          return [r.taskId, out];
        }),
      );
    },
  };
  const forecast = await monthForecast(ctx.pool, weekdaySlots, { at: AS_OF, userId: USER });
  for (const u of forecast.users) await recordForecast(ctx.pool, u, AS_OF);
  // the story the screenshots tell: under the limit on the 18th, past 80 % (the cheap band) before the month ends
  expect(forecast.users.map((u) => [u.userId, u.crossings.find((c) => c.percent === 80)?.medianDay ?? null])).toEqual([
    [USER, expect.stringMatching(new RegExp(`^${MONTH}-(1[89]|2\\d|30)$`))],
  ]);

  readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 4);
  admin = await startTestAdmin(ctx, readonly);
  for (const width of WIDTHS) {
    const profile = mkdtempSync(join(tmpdir(), 'cronledger-admin-chromium-'));
    profiles.push(profile);
    browsers.set(width, await launchChromium(profile, { width, height: 900 }));
  }
});

afterAll(async () => {
  for (const b of browsers.values()) await b.close();
  for (const dir of profiles) rmSync(dir, { recursive: true, force: true });
  await ctx?.client.schedule
    .getHandle(`cron-${TASK_ID}`)
    .delete()
    .catch(() => undefined);
  await admin?.close();
  await readonly?.end();
  await ctx?.close();
});

async function open(path: string, width: number): Promise<Page> {
  const page = await browsers.get(width)!.newPage();
  const res = await page.goto(`${admin.url}${path}`);
  expect(res?.status(), path).toBe(200);
  await page.waitForFunction(() => document.body.dataset.ready === 'yes');
  return page;
}

/**
 * Tokens that break across lines: every word of a table header, and every number, amount, percent or time (a run of
 * digits with . , : % $ + - T Z) in a table cell or a figure. A token wraps when its text spans more than one line box.
 */
const wrappedTokens = (page: Page) =>
  page.evaluate(() => {
    const numeric = (t: string) => /\d/.test(t) && /^[-+$]*[\d.,:%$+TZ-]+$/.test(t);
    const found: string[] = [];
    for (const cell of Array.from(document.querySelectorAll('th, td, dd'))) {
      const header = cell.tagName === 'TH';
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const m of node.textContent!.matchAll(/\S+/g)) {
          if (!header && !numeric(m[0])) continue;
          const range = document.createRange();
          range.setStart(node, m.index);
          range.setEnd(node, m.index + m[0].length);
          const lines = new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top)));
          if (lines.size > 1) found.push(`${cell.tagName.toLowerCase()}: ${m[0]} on ${lines.size} lines`);
        }
      }
    }
    return found;
  });

/** How far the page itself scrolls sideways, in pixels (0: it fits the window). */
const sidewaysScroll = (page: Page) => page.evaluate(() => document.scrollingElement!.scrollWidth - document.scrollingElement!.clientWidth);

type AxeViolation = { id: string; impact: string | null; help: string; nodes: { target: unknown[] }[] };

/** axe-core run in the page (evaluated through the DevTools protocol, so the page's CSP does not apply to it). */
async function axeViolations(page: Page): Promise<AxeViolation[]> {
  await page.evaluate(axeSource);
  const result = await page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run: (o: object) => Promise<{ violations: AxeViolation[] }> } }).axe;
    return axe.run({ resultTypes: ['violations'] });
  });
  return result.violations;
}

/** num / den rounded half-even, on BigInts: the test's own oracle for the page's ratios. */
function halfEven(num: bigint, den: bigint): bigint {
  const q = num / den;
  const r = num % den;
  return 2n * r > den || (2n * r === den && q % 2n === 1n) ? q + 1n : q;
}

const PAGES = [
  ['overview', `/?month=${MONTH}`],
  ['users', `/users?month=${MONTH}`],
  ['user', `/users/${USER}?month=${MONTH}`],
  ['budgets', `/budgets?month=${MONTH}`],
  ['models', `/models?month=${MONTH}`],
  ['runs', '/runs'],
  ['run', `/runs/${encodeURIComponent(`seed-${MONTH}-user-02-3`)}`],
  ['tasks', '/tasks'],
  ['login', '/login'],
] as const;
/** The pages whose screenshots docs/admin.md shows. */
const DOCUMENTED = new Set(['overview', 'user', 'budgets']);

describe.each(WIDTHS)('at %i pixels wide', (width) => {
  it.each(PAGES)('%s: no number or header word wraps, no sideways scroll, no serious axe violation', async (name, path) => {
    const page = await open(path, width);
    try {
      if (DOCUMENTED.has(name)) {
        await page.screenshot({ path: join(artifacts, `admin-${name}${width === 1280 ? '' : `-${width}`}.png`), fullPage: true });
      }
      const serious = (await axeViolations(page)).filter((v) => v.impact === 'serious' || v.impact === 'critical');
      expect({
        wrapped: await wrappedTokens(page),
        sidewaysScrollPx: await sidewaysScroll(page),
        axe: serious.map((v) => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.map((n) => JSON.stringify(n.target)).join(', ')}`),
      }).toEqual({ wrapped: [], sidewaysScrollPx: 0, axe: [] });
    } finally {
      await page.close();
    }
  });
});

describe('the budgets page', () => {
  it('lists each user with a budget or spend: limit, spent, reserved, tier and the share of the limit as a bar, exactly', async () => {
    const { budgets } = await (await fetch(`${admin.url}/api/budgets?month=${MONTH}`)).json();
    const status = await budgetStatusOfAll(readonly, { at: new Date(`${MONTH}-30T23:59:59Z`), month: MONTH });
    expect((budgets as BudgetRow[]).map((b) => [b.userId, b.limitUsd, b.spentUsd, b.reservedUsd, b.tier])).toEqual(
      status.map((s) => [s.userId, s.limitUsd, s.spentUsd, s.reservedUsd, s.tier]),
    );
    const byUser = new Map((budgets as BudgetRow[]).map((b) => [b.userId, b]));
    expect(byUser.get('user-01')).toMatchObject({ tier: 'cheap' });
    expect(byUser.get('user-02')).toMatchObject({ tier: 'blocked' });
    expect(byUser.get('user-03')).toMatchObject({ tier: 'default', limitUsd: '250.000000000000000000' });
    // basis points of (spent + reserved) / limit, half-even, computed here on BigInts
    for (const b of budgets as BudgetRow[]) {
      const used = (atto(b.spentUsd) + atto(b.reservedUsd)) * 10_000n;
      const limit = atto(b.limitUsd!);
      expect(b.usedBasisPoints, b.userId).toBe(halfEven(used, limit).toString());
    }
    expect(byUser.get('user-01')!.usedBasisPoints).toBe('8500');
    expect(byUser.get('user-02')!.usedBasisPoints).toBe('13000');

    const page = await open(`/budgets?month=${MONTH}`, 1280);
    try {
      const rows = () =>
        page.$$eval('#budgets tbody tr', (trs) =>
          trs.map((tr) => ({
            user: tr.getAttribute('data-user')!,
            href: tr.querySelector('a')!.getAttribute('href')!,
            meter: tr.querySelector('meter')?.getAttribute('value') ?? null,
            meterClass: tr.querySelector('meter')?.className ?? null,
            share: tr.querySelector('td.share span')?.textContent ?? null,
          })),
        );
      const shown = await rows();
      expect(shown.map((r) => r.user)).toEqual(budgets.map((b: BudgetRow) => b.userId));
      expect(shown.find((r) => r.user === 'user-02')).toEqual({
        user: 'user-02',
        href: `/users/user-02?month=${MONTH}&tz=UTC`,
        meter: '13000',
        meterClass: 'tier-blocked',
        share: '130.00%',
      });
      expect(shown.find((r) => r.user === 'user-01')).toMatchObject({ meter: '8500', meterClass: 'tier-cheap', share: '85.00%' });
      // sortable by the share: descending on the first click, by the exact basis points
      await page.click('#budgets th:nth-child(7)');
      const sorted = (await rows()).map((r) => BigInt(r.meter ?? '-1'));
      expect(sorted).toEqual([...sorted].sort((a, b) => (a < b ? 1 : a > b ? -1 : 0)));
      expect(sorted[0]).toBe(13000n);
      // linked from every page's nav, and each user to their page
      await page.click('nav a:text("Users")');
      await page.waitForURL(/\/users\?/);
      await page.click('nav a:text("Budgets")');
      await page.waitForURL(/\/budgets\?/);
      await page.click('#budgets a:text-is("user-02")');
      await page.waitForURL(/\/users\/user-02\?/);
      expect(await page.locator('.user-id code').textContent()).toBe('user-02');
    } finally {
      await page.close();
    }
  });

  it('shows completed runs per dollar to one decimal, rounded once from the exact quotient', async () => {
    const overview = await (await fetch(`${admin.url}/api/overview?month=${MONTH}`)).json();
    const page = await open(`/?month=${MONTH}`, 1280);
    try {
      const shown = await page.locator('#figures div', { hasText: 'Completed runs per dollar' }).locator('dd').textContent();
      // completed × 10^18 × 10 / spend in atto-USD, half-even, at 1 decimal
      const tenths = halfEven(BigInt(overview.runs.completed) * 10n ** 19n, atto(overview.spendUsd));
      expect(shown!.trim()).toBe(`${tenths / 10n}.${tenths % 10n}`);
      expect(overview.completedRunsPerDollar).toMatch(/^\d+\.\d{6}$/); // the JSON keeps the report's 6 decimals
    } finally {
      await page.close();
    }
  });
});
