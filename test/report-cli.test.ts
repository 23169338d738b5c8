import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { atto, ledgerSums, parseCsv, seedMonth } from './support/report-fixtures';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { describeSchedule } from '../src/schedules/describe-schedule';

let ctx: TestContext;
const MONTH = '2026-06';

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await seedMonth(ctx.ownerPool, { month: MONTH, users: 5, callsPerUser: 10 });
});

afterAll(async () => ctx?.close());

const cli = async (...args: string[]) => runCli(args, ctx.env);
const ok = async (...args: string[]) => {
  const r = await cli(...args);
  expect(r.code, r.stderr).toBe(0);
  return r.stdout;
};

describe('cronledger report', () => {
  it('prints the by-user table with a TOTAL row, money as $0.000000, and the unit economics', async () => {
    const out = await ok('report', '--month', MONTH);
    expect(out).toMatch(/^Usage report 2026-06, UTC, by user/);
    expect(out).toMatch(/^USER\s+LINE\s+CALLS\s+PROMPT\s+CACHED\s+COMPLETION\s+COST$/m);
    expect(out).toMatch(/^TOTAL\s+\d+\s+\d+\s+\d+\s+\d+\s+\$\d+\.\d{6}$/m);
    expect(out).toMatch(/^user-02\s+credit\s+0\s+0\s+0\s+0\s+-\$0\.001000$/m);
    expect(out).toContain('cost per completed run');
    expect(out).toContain('completed runs per dollar');
    expect(out).toMatch(/Failed calls: \d+ calls?, \$\d+\.\d{6}/);
    expect(out).toContain('Duplicate-skipped runs: 1 run, $0.000000');
  });

  it('--format csv-all is every section in one file, each cut parsing back to the ledger sums', async () => {
    const rows = parseCsv(await ok('report', '--month', MONTH, '--format', 'csv-all', '--tz', 'Europe/Berlin'));
    const total = (await ledgerSums(ctx.pool, 'Europe/Berlin', MONTH, 'total')).get('total')!;
    expect(rows.find((r) => r.section === 'total')?.cost_usd).toBe(total);
    expect(rows.find((r) => r.metric === 'time_zone')?.value).toBe('Europe/Berlin');
    for (const cut of ['user', 'day', 'model'] as const) {
      const lines = rows.filter((r) => r.section === `by_${cut}`);
      expect(lines.reduce((s, r) => s + atto(r.cost_usd), 0n)).toBe(atto(total));
      expect(lines).toHaveLength((await ledgerSums(ctx.pool, 'Europe/Berlin', MONTH, cut)).size);
    }
  });

  it('--by user --format csv is one tidy table: a header, one row per user, exact decimals, no sections', async () => {
    const text = await ok('report', '--month', MONTH, '--by', 'user', '--format', 'csv', '--tz', 'Europe/Berlin');
    const header = text.split('\r\n')[0];
    expect(header).toBe(
      'user_id,calls,entries,prompt_tokens,cached_prompt_tokens,completion_tokens,reasoning_tokens,' +
        'usage_usd,adjustments_usd,reconciliation_usd,credits_usd,cost_usd',
    );
    const rows = parseCsv(text);
    // the oracle: the ledger summed in SQL per (entry type, user)
    const sums = new Map(
      [...(await ledgerSums(ctx.pool, 'Europe/Berlin', MONTH, 'user'))].map(([k, v]) => [JSON.stringify(JSON.parse(k)), v]),
    );
    const users = [...new Set([...sums.keys()].map((k) => (JSON.parse(k) as string[])[1]))].sort();
    expect(rows.map((r) => r.user_id)).toEqual(users);
    const column = { usage: 'usage_usd', adjustment: 'adjustments_usd', reconciliation: 'reconciliation_usd', credit: 'credits_usd' };
    for (const r of rows) {
      let cost = 0n;
      for (const [type, name] of Object.entries(column)) {
        const sum = sums.get(JSON.stringify([type, r.user_id])) ?? '0.000000000000000000';
        expect(r[name], `${r.user_id} ${name}`).toBe(sum);
        cost += atto(sum);
      }
      expect(r.cost_usd).toMatch(/^-?\d+\.\d{18}$/);
      expect(atto(r.cost_usd)).toBe(cost);
    }
    expect(rows.some((r) => r.credits_usd !== '0.000000000000000000')).toBe(true); // the seed has credits: the pivot is exercised
    const { rows: calls } = await ctx.pool.query<{ user_id: string; calls: string; prompt: string }>(
      `select user_id, count(*) filter (where entry_type = 'usage')::text as calls, coalesce(sum(prompt_tokens), 0)::text as prompt
         from usage_ledger
        where created_at >= '2026-06-01T00:00:00+02:00' and created_at < '2026-07-01T00:00:00+02:00'
        group by user_id order by user_id`,
    );
    expect(rows.map((r) => [r.user_id, r.calls, r.prompt_tokens])).toEqual(calls.map((c) => [c.user_id, c.calls, c.prompt]));
  });

  it.each([
    ['day', 'day,kind,calls'],
    ['model', 'model,kind,calls'],
  ] as const)('--by %s --format csv has the header %s..., one row per key, summing to the total', async (cut, start) => {
    const text = await ok('report', '--month', MONTH, '--by', cut, '--format', 'csv');
    expect(text.split('\r\n')[0].startsWith(start)).toBe(true);
    const rows = parseCsv(text);
    const keys = rows.map((r) => JSON.stringify([r[cut], r.kind]));
    expect(new Set(keys).size).toBe(rows.length);
    const total = (await ledgerSums(ctx.pool, 'UTC', MONTH, 'total')).get('total')!;
    expect(rows.reduce((s, r) => s + atto(r.cost_usd), 0n)).toBe(atto(total));
  });

  it('--format json carries exact decimal strings and the chosen cut', async () => {
    const json = JSON.parse(await ok('report', '--month', MONTH, '--by', 'model', '--format', 'json')) as {
      by: string;
      lines: { model: string | null; kind: string | null; line: string; costUsd: string }[];
      totals: { costUsd: string };
      unitEconomics: Record<string, unknown>;
    };
    expect(json.by).toBe('model');
    expect(json.totals.costUsd).toBe((await ledgerSums(ctx.pool, 'UTC', MONTH, 'total')).get('total'));
    expect(json.totals.costUsd).toMatch(/^-?\d+\.\d{18}$/);
    expect(json.lines.length).toBeGreaterThan(0);
    expect(json.lines.every((l) => typeof l.costUsd === 'string' && /^-?\d+\.\d{18}$/.test(l.costUsd))).toBe(true);
    expect(Object.keys(json.unitEconomics)).toEqual(
      expect.arrayContaining(['costPerCompletedRunUsd', 'costPerActiveUserUsd', 'completedRunsPerDollar']),
    );
  });

  it('reports an empty month as zeros', async () => {
    const out = await ok('report', '--month', '2024-02', '--format', 'json');
    const json = JSON.parse(out) as {
      lines: unknown[];
      totals: { costUsd: string; calls: number };
      unitEconomics: Record<string, unknown>;
    };
    expect(json.lines).toEqual([]);
    expect(json.totals).toMatchObject({ costUsd: '0.000000000000000000', calls: 0 });
    expect(json.unitEconomics).toMatchObject({ costPerCompletedRunUsd: '0.000000000000000000', completedRunsPerDollar: '0.000000' });
    expect(await ok('report', '--month', '2024-02')).toMatch(/^TOTAL\s+0\s+0\s+0\s+0\s+\$0\.000000$/m);
  });

  it('prints self-contained HTML and Markdown on request', async () => {
    expect(await ok('report', '--month', MONTH, '--format', 'html')).toMatch(/^<!DOCTYPE html>/);
    expect(await ok('report', '--month', MONTH, '--format', 'md')).toContain('## By user');
  });
});

describe('bad input gets a clear error and a non-zero exit', () => {
  it.for<[string[], string]>([
    [['report', '--month', '2026-13'], '--month "2026-13" is not a month: write it as YYYY-MM, e.g. 2026-06'],
    [['report', '--month', 'June'], '--month "June" is not a month'],
    [['report', '--month', '2026-6'], '--month "2026-6" is not a month'],
    [['report'], '--month is required'],
    [['report', '--month', MONTH, '--tz', 'Mars/Olympus_Mons'], '--tz "Mars/Olympus_Mons" is not a known IANA time zone'],
    [['report', 'deliver', '--month', '2026/06'], '--month "2026/06" is not a month'],
    [['report', 'deliver', '--month', MONTH, '--tz', 'Nowhere'], '--tz "Nowhere" is not a known IANA time zone'],
    [['report', 'deliver', '--month', '2099-01', '--tz', 'UTC'], '--month 2099-01 has not started yet in UTC'],
    [['report', 'schedule', '--tz', 'Atlantis/Capital'], '--tz "Atlantis/Capital" is not a known IANA time zone'],
    [['rollups', 'rebuild', '--tz', 'Bad/Zone'], '--tz "Bad/Zone" is not a known IANA time zone'],
    [['report', '--month', MONTH, '--by', 'team'], "argument 'team' is invalid. Allowed choices are user, day, model"],
    [
      ['report', '--month', MONTH, '--format', 'xlsx'],
      "argument 'xlsx' is invalid. Allowed choices are table, json, csv, csv-all, md, html",
    ],
  ])('%j', async ([args, message], { expect }) => {
    const r = await cli(...args);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(message);
    expect(r.stderr).not.toMatch(/^\s+at /m); // no stack trace
    expect(r.stdout).toBe('');
  });
});

describe('cronledger report schedule', () => {
  it('creates report-monthly in the zone, then leaves it unchanged', async () => {
    const first = JSON.parse(await ok('report', 'schedule', '--tz', 'Europe/Berlin', '--json')) as {
      outcome: string;
      nextActionTimes: string[];
    };
    expect(first.outcome).toBe('created');
    // midnight on the 1st in Berlin is 22:00 or 23:00 UTC the day before
    expect(first.nextActionTimes[0]).toMatch(/T2[23]:00:00\.000Z$/);
    const second = JSON.parse(await ok('report', 'schedule', '--tz', 'Europe/Berlin', '--json')) as { outcome: string };
    expect(second.outcome).toBe('unchanged');
    const described = await describeSchedule(ctx.client, 'report-monthly');
    expect(described.memo).toEqual({ managedBy: 'cronledger', kind: 'report' });
    await ctx.client.schedule.getHandle('report-monthly').delete();
  });
});
