import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { creditUser } from '../src/ledger/entries';
import { recordUsage } from '../src/ledger/record-usage';
import { buildReport } from '../src/reports/build-report';
import { renderCsvAll, renderCsvTable, renderMarkdown, renderTable } from '../src/reports/render';
import type { UsageReport } from '../src/reports/types';
import { runCli } from './support/cli';
import { chatBooking } from './support/bookings';
import { createTestContext, type TestContext } from './support/context';

/**
 * User IDs are data from tasks files and API callers. Whatever one holds, a report shows it as text: never a
 * spreadsheet formula, never Markdown markup, never a terminal control sequence.
 */

let ctx: TestContext;
let report: UsageReport;
const MONTH = '2026-07';

const FORMULAS = ['=HYPERLINK("http://evil.example","click")', '+1+1', '-2+3', '@SUM(A1:A9)', '\tcmd', '\r=1'];
const MARKDOWN = '**bold** _it_ `code` [link](http://evil.example) ![img](x) <script>alert(1)</script> a|b ~~s~~';
const TERMINAL = 'evil\u001b]0;owned\u0007\u001b[2J\u202eoverride';

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  for (const [i, userId] of [...FORMULAS, MARKDOWN, TERMINAL].entries()) {
    await recordUsage(ctx.ownerPool, chatBooking(`escaping-${i}`, userId, new Date(`${MONTH}-10T12:00:00Z`)));
  }
  await creditUser(ctx.operatorPool, { userId: 'plain-user', amount: '5.00', reason: 'goodwill' });
  report = await buildReport(ctx.pool, { month: new Date().toISOString().slice(0, 7), timeZone: 'UTC' });
  const july = await buildReport(ctx.pool, { month: MONTH, timeZone: 'UTC' });
  report = { ...july, byUser: [...july.byUser, ...report.byUser] };
});

afterAll(async () => ctx?.close());

/** RFC 4180 fields of one CSV line (quoted fields may hold commas and doubled quotes). */
function csvFields(line: string): string[] {
  return [...line.matchAll(/("(?:[^"]|"")*"|[^,]*)(,|$)/g)].slice(0, -1).map((m) => m[1].replace(/^"|"$/g, '').replace(/""/g, '"'));
}

describe('CSV', () => {
  it('turns every cell a spreadsheet would run as a formula into text, and keeps negative amounts numbers', () => {
    const csv = renderCsvAll(report, ['user']);
    const lines = csv.split('\r\n').filter(Boolean);
    const header = csvFields(lines[0]);
    const rows = lines.slice(1).map(csvFields);
    const userIds = rows.filter((r) => r[header.indexOf('section')] === 'by_user').map((r) => r[header.indexOf('user_id')]);
    for (const formula of FORMULAS) expect(userIds).toContain(`'${formula}`);
    for (const id of userIds) expect(id).not.toMatch(/^[=+\-@\t\r]/);
    const credit = rows.find((r) => r[header.indexOf('user_id')] === 'plain-user' && r[header.indexOf('line')] === 'credit');
    expect(credit?.[header.indexOf('cost_usd')]).toBe('-5.000000000000000000');
  });

  it('escapes the tidy table (`--format csv`) the same way', () => {
    const lines = renderCsvTable(report, 'user').split('\r\n').filter(Boolean);
    const header = csvFields(lines[0]);
    const userIds = lines.slice(1).map((l) => csvFields(l)[header.indexOf('user_id')]);
    for (const formula of FORMULAS) expect(userIds).toContain(`'${formula}`);
    for (const id of userIds) expect(id).not.toMatch(/^[=+\-@\t\r]/);
  });
});

describe('Markdown', () => {
  it('shows a user ID literally: its markup escaped, its pipe unable to split the cell, no raw HTML', () => {
    const md = renderMarkdown(report);
    const row = md.split('\n').find((l) => l.includes('bold'))!;
    expect(row).toContain(
      '\\*\\*bold\\*\\* \\_it\\_ \\`code\\` \\[link\\](http://evil.example) \\!\\[img\\](x) \\<script\\>alert(1)\\</script\\> a\\|b \\~\\~s\\~\\~',
    );
    expect(md).not.toContain('<script>');
    expect(md).toContain('| **TOTAL** |'); // the renderer's own emphasis stays
  });
});

describe('terminal output', () => {
  // Matching the control characters themselves is the point of these expressions.
  /* eslint-disable no-control-regex */
  it('shows control characters and bidi overrides as escapes, in the report table and in CLI listings', async () => {
    const table = renderTable(report, 'user');
    expect(table).toContain('evil\\x1b]0;owned\\x07\\x1b[2J\\u202eoverride');
    expect(table).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/);
    const r = await runCli(['ledger', '--user', TERMINAL.slice(0, 4)], ctx.env);
    expect(r.stdout).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/);
    const all = await runCli(['ledger'], ctx.env);
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout).toContain('\\x1b]0;owned');
    expect(all.stdout).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202e]/);
  });
});
/* eslint-enable no-control-regex */
