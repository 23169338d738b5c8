import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { buildReport } from '../src/reports/build-report';
import { renderHtml } from '../src/reports/render-html';
import { seedMonth } from './support/report-fixtures';
import { launchChromium } from './support/chromium';
import { createTestContext, type TestContext } from './support/context';

let ctx: TestContext;
let browser: BrowserContext;
let dir: string;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.ownerPool, { month: '2026-06', users: 12, callsPerUser: 6 });
  dir = await mkdtemp(join(tmpdir(), 'cronledger-html-'));
  // Debian's chromium: the HTML must draw its charts offline and fetch nothing.
  browser = await launchChromium(join(dir, 'profile'));
});

afterAll(async () => {
  await browser?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  await ctx?.close();
});

interface CanvasInk {
  id: string;
  width: number;
  height: number;
  inked: number;
  /** Pixels in the colour of the first dataset (#2563eb) below the legend: bars, not only axes, labels and legend. */
  barPixels: number;
}

async function open(month: string, name: string) {
  const report = await buildReport(ctx.pool, { month, timeZone: 'UTC' });
  const html = renderHtml(report);
  expect(html).not.toMatch(/<(script|link|img|iframe|source|video|audio)\b[^>]*\s(src|href)\s*=/i);
  const file = join(dir, name);
  await writeFile(file, html);
  const url = pathToFileURL(file).href;

  const page = await browser.newPage();
  const requests: string[] = [];
  const problems: string[] = [];
  page.on('request', (r) => requests.push(r.url()));
  page.on('console', (m) => m.type() === 'error' && problems.push(m.text()));
  page.on('pageerror', (e) => problems.push(e.message));
  // Anything but the file itself would be a request leaving the page: record it and stop it.
  await page.route('**/*', (route) => (route.request().url() === url ? route.continue() : route.abort()));
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.charts === 'drawn', undefined, { timeout: 15_000 });

  const canvases = await page.evaluate(() =>
    Array.from(document.querySelectorAll('canvas')).map((c) => {
      const { data } = c.getContext('2d')!.getImageData(0, 0, c.width, c.height);
      let inked = 0;
      let barPixels = 0;
      const legendBottom = Math.floor(c.height * 0.2) * c.width * 4;
      for (let i = 0; i < data.length; i += 4) {
        if (data[i + 3] > 0) inked++;
        if (
          i >= legendBottom &&
          data[i + 3] > 200 &&
          Math.abs(data[i] - 37) < 8 &&
          Math.abs(data[i + 1] - 99) < 8 &&
          Math.abs(data[i + 2] - 235) < 8
        )
          barPixels++;
      }
      return { id: c.id, width: c.width, height: c.height, inked, barPixels };
    }),
  );
  await page.close();
  return { canvases: canvases as CanvasInk[], requests, problems, url };
}

describe('usage.html in headless Chromium', () => {
  it('draws the three charts from inlined Chart.js, and no request leaves the page', async () => {
    const { canvases, requests, problems, url } = await open('2026-06', 'usage.html');
    expect(problems).toEqual([]);
    expect(requests).toEqual([url]);
    expect(canvases.map((c) => c.id)).toEqual(['chart-daily', 'chart-users', 'chart-models']);
    for (const c of canvases) {
      expect(c.width, c.id).toBeGreaterThan(100);
      expect(c.height, c.id).toBeGreaterThan(100);
      expect(c.inked, c.id).toBeGreaterThan(1000);
    }
    // Daily chart and top users draw blue bars.
    expect(canvases[0].barPixels).toBeGreaterThan(100);
    expect(canvases[1].barPixels).toBeGreaterThan(100);
  });

  it('opens for an empty month too: axes are drawn, nothing fails, nothing is fetched', async () => {
    const { canvases, requests, problems, url } = await open('2025-02', 'empty.html');
    expect(problems).toEqual([]);
    expect(requests).toEqual([url]);
    expect(canvases).toHaveLength(3);
    expect(canvases[0].inked).toBeGreaterThan(0);
    expect(canvases[0].barPixels).toBe(0);
  });
});
