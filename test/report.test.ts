import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { writeArtifacts } from '../src/reports/artifacts';
import { buildReport } from '../src/reports/build-report';
import { renderCsvAll, renderMarkdown, renderTable } from '../src/reports/render';
import type { UsageReport } from '../src/reports/types';
import { atto, ledgerSums, parseCsv, seedMonth, type SeedResult } from './support/report-fixtures';
import { createTestContext, type TestContext } from './support/context';
import { fullUsage } from '../src/models/provider';

let ctx: TestContext;
let seeded: SeedResult;
const MONTH = '2026-06';

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  seeded = await seedMonth(ctx.ownerPool, { month: MONTH, users: 6, callsPerUser: 15 });
  // Neighbouring months, so a month boundary that leaks shows up as a wrong total.
  await seedMonth(ctx.ownerPool, { month: '2026-05', users: 2, callsPerUser: 4, seed: 7 });
  await seedMonth(ctx.ownerPool, { month: '2026-07', users: 2, callsPerUser: 4, seed: 9 });
});

afterAll(async () => ctx?.close());

const sumAtto = (values: string[]) => values.reduce((s, v) => s + atto(v), 0n);

/** Report lines of a cut keyed the way ledgerSums keys its SQL groups. */
function reportSums(report: UsageReport, cut: 'user' | 'day' | 'model'): Map<string, string> {
  if (cut === 'user') return new Map(report.byUser.map((l) => [JSON.stringify([l.line, l.userId]), l.costUsd]));
  if (cut === 'day') return new Map(report.byDay.map((l) => [JSON.stringify([l.day, l.kind, l.line]), l.costUsd]));
  return new Map(report.byModel.map((l) => [JSON.stringify([l.model, l.kind, l.line]), l.costUsd]));
}

/** PostgreSQL's json_build_array text has spaces after commas; normalise both sides through JSON. */
const normalise = (m: Map<string, string>) => new Map([...m].map(([k, v]) => [JSON.stringify(JSON.parse(k)), atto(v)]));

describe.each(['UTC', 'Europe/Berlin'])('report for %s', (zone) => {
  let report: UsageReport;
  beforeAll(async () => {
    report = await buildReport(ctx.pool, { month: MONTH, timeZone: zone });
  });

  it('has totals equal to the ledger sum of the month, to the last digit', async () => {
    const ledger = await ledgerSums(ctx.pool, zone, MONTH, 'total');
    expect(report.totals.costUsd).toBe(ledger.get('total'));
    const { rows } = await ctx.pool.query<{ n: string }>(
      `select count(*) as n from usage_ledger
        where created_at >= (date '2026-06-01'::timestamp at time zone $1) and created_at < (date '2026-07-01'::timestamp at time zone $1)`,
      [zone],
    );
    expect(String(report.ledger.entries)).toBe(rows[0].n);
  });

  it.each(['user', 'day', 'model'] as const)('by %s: every line equals its ledger group and the lines add up to the total', async (cut) => {
    const expected = normalise(await ledgerSums(ctx.pool, zone, MONTH, cut));
    const actual = normalise(reportSums(report, cut));
    expect(actual).toEqual(expected);
    const lines = cut === 'user' ? report.byUser : cut === 'day' ? report.byDay : report.byModel;
    expect(sumAtto(lines.map((l) => l.costUsd))).toBe(atto(report.totals.costUsd));
  });

  it('shows adjustments, reconciliation deltas and credits as their own lines, inside the totals', () => {
    const lineTypes = new Set(report.byUser.map((l) => l.line));
    expect(lineTypes).toEqual(new Set(['usage', 'adjustment', 'reconciliation', 'credit']));
    const credit = report.byUser.find((l) => l.line === 'credit');
    expect(credit).toMatchObject({ userId: 'user-02', costUsd: '-0.001000000000000001', calls: 0, entries: 1 });
    expect(report.totals.creditsUsd).toBe('-0.001000000000000001');
    expect(report.totals.adjustmentsUsd).toBe('0.000000123456789012');
    expect(report.totals.reconciliationUsd).toBe('-0.000000000000000007');
    const parts = [report.totals.usageUsd, report.totals.adjustmentsUsd, report.totals.reconciliationUsd, report.totals.creditsUsd];
    expect(sumAtto(parts)).toBe(atto(report.totals.costUsd));
    // Usage lines come first, sorted by cost, most expensive first.
    const usage = report.byUser.filter((l) => l.line === 'usage').map((l) => atto(l.costUsd));
    expect(usage).toEqual([...usage].sort((a, b) => (a > b ? -1 : a < b ? 1 : 0)));
    expect(report.byUser.findIndex((l) => l.line !== 'usage')).toBe(usage.length);
  });

  it('gives unit economics and the failed and duplicate slices exactly', async () => {
    const e = report.unitEconomics;
    const { rows } = await ctx.pool.query<{ completed: string; failed_calls: string; failed_cost: string }>(
      `select (select count(*) from runs where status = 'completed'
                and claimed_at >= (date '2026-06-01'::timestamp at time zone $1) and claimed_at < (date '2026-07-01'::timestamp at time zone $1)) as completed,
              count(*) as failed_calls, coalesce(sum(cost_usd), 0)::numeric(38, 18)::text as failed_cost
         from usage_ledger where entry_type = 'usage' and status = 'failed'
          and created_at >= (date '2026-06-01'::timestamp at time zone $1) and created_at < (date '2026-07-01'::timestamp at time zone $1)`,
      [zone],
    );
    expect(String(e.completedRuns)).toBe(rows[0].completed);
    expect(String(report.failedCalls.calls)).toBe(rows[0].failed_calls);
    expect(report.failedCalls.costUsd).toBe(rows[0].failed_cost);
    expect(report.failedCalls.calls).toBeGreaterThan(0);
    expect(report.duplicateSkippedRuns).toEqual({ runs: seeded.duplicates, costUsd: '0.000000000000000000' });

    // spend = everything but credits; ratios are BigInt divisions rounded half-even
    const spend = atto(report.totals.costUsd) - atto(report.totals.creditsUsd);
    expect(atto(e.spendUsd)).toBe(spend);
    const halfEven = (n: bigint, d: bigint) => {
      const q = n / d;
      const r = n % d;
      return 2n * r > d || (2n * r === d && q % 2n === 1n) ? q + 1n : q;
    };
    const runs = BigInt(e.completedRuns);
    expect(atto(e.costPerCompletedRunUsd)).toBe(halfEven(spend, runs));
    expect(atto(e.costPerActiveUserUsd)).toBe(halfEven(spend, 6n));
    expect(e.activeUsers).toBe(6);
    const perDollar = halfEven(runs * 10n ** 24n, spend); // runs / (spend / 10^18), at 6 decimals
    expect(e.completedRunsPerDollar).toBe(`${perDollar / 10n ** 6n}.${String(perDollar % 10n ** 6n).padStart(6, '0')}`);
  });

  it('writes a CSV that parses back to the same numbers', () => {
    const rows = parseCsv(renderCsvAll(report));
    for (const cut of ['user', 'day', 'model'] as const) {
      const lines = rows.filter((r) => r.section === `by_${cut}`);
      const fromCsv = new Map(
        lines.map((r) => [
          JSON.stringify(
            cut === 'user'
              ? [r.line, r.user_id]
              : cut === 'day'
                ? [r.day, r.kind || null, r.line]
                : [r.model || null, r.kind || null, r.line],
          ),
          r.cost_usd,
        ]),
      );
      expect(fromCsv).toEqual(reportSums(report, cut));
      expect(sumAtto(lines.map((r) => r.cost_usd))).toBe(atto(report.totals.costUsd));
      expect(lines.reduce((n, r) => n + BigInt(r.calls), 0n)).toBe(BigInt(report.totals.calls));
      expect(lines.reduce((n, r) => n + BigInt(r.prompt_tokens), 0n)).toBe(BigInt(report.totals.promptTokens));
    }
    const total = rows.find((r) => r.section === 'total');
    expect(total?.cost_usd).toBe(report.totals.costUsd);
    const metric = (m: string) => rows.find((r) => r.section === 'unit_economics' && r.metric === m)?.value;
    expect(metric('cost_per_completed_run_usd')).toBe(report.unitEconomics.costPerCompletedRunUsd);
    expect(metric('completed_runs_per_dollar')).toBe(report.unitEconomics.completedRunsPerDollar);
    expect(rows.find((r) => r.section === 'failed_calls')?.cost_usd).toBe(report.failedCalls.costUsd);
  });
});

describe('month boundaries follow the zone', () => {
  it('puts 00:30 UTC on the 1st into the previous month in Europe/Berlin and 23:30 UTC on the last day into the next', async () => {
    const utc = await buildReport(ctx.pool, { month: MONTH, timeZone: 'UTC' });
    const berlin = await buildReport(ctx.pool, { month: MONTH, timeZone: 'Europe/Berlin' });
    expect(utc.period).toMatchObject({ from: '2026-06-01T00:00:00.000Z', to: '2026-07-01T00:00:00.000Z' });
    expect(berlin.period).toMatchObject({ from: '2026-05-31T22:00:00.000Z', to: '2026-06-30T22:00:00.000Z' });
    expect(utc.totals.costUsd).not.toBe(berlin.totals.costUsd);
    expect(berlin.byDay.length).toBeGreaterThan(0);
    expect(berlin.byDay.every((l) => l.day.startsWith('2026-06-'))).toBe(true);
  });
});

describe('the duplicate slice', () => {
  it('measures what the duplicates booked under their own workflow IDs', async () => {
    const at = new Date('2026-04-10T12:00:00Z');
    // The slot's owner ran under one workflow ID; two executions under other IDs (a second deployment, say) found
    // the slot claimed, after each had booked a call.
    const slotKey = 'cron:dup-cost:2026-04-10T12:00Z';
    await ctx.ownerPool.query(
      `insert into runs (idempotency_key, task_id, user_id, workflow_id, temporal_run_id, scheduled_minute, status, claimed_by, claimed_at, finished_at)
       values ($1, 'dup-cost', 'dup-user', 'cron-dup-cost-2026-04-10T12:00:00Z', 'owner-run', $2, 'completed', 'test', $2, $2)`,
      [slotKey, at],
    );
    const dupOf = (n: number) => `other-deployment-${n}-dup-cost-2026-04-10T12:00:00Z`;
    for (const n of [1, 2]) {
      await ctx.ownerPool.query(
        `insert into run_duplicates (temporal_run_id, workflow_id, idempotency_key, task_id, user_id, detected_by, detected_at)
         values ($1, $2, $3, 'dup-cost', 'dup-user', 'test', $4)`,
        [`dup-run-${n}`, dupOf(n), slotKey, at],
      );
    }
    const booking = {
      step: 'chat',
      attempt: 1,
      userId: 'dup-user',
      taskId: 'dup-cost',
      model: 'openai/gpt-4o-mini',
      kind: 'chat' as const,
    };
    const usage = fullUsage({ promptTokens: 1234, cachedPromptTokens: 0, completionTokens: 56, reasoningTokens: 0 });
    const common = {
      ...booking,
      status: 'ok' as const,
      usage,
      providerModel: null,
      providerRequestId: null,
      workerId: null,
      occurredAt: at,
    };
    // run_id is the execution's Temporal run ID; the workflow ID has its own column.
    const first = await recordUsage(ctx.ownerPool, { ...common, runId: 'dup-run-1', workflowId: dupOf(1) });
    const second = await recordUsage(ctx.ownerPool, { ...common, runId: 'dup-run-2', workflowId: dupOf(2) });
    const report = await buildReport(ctx.pool, { month: '2026-04', timeZone: 'UTC' });
    expect(report.duplicateSkippedRuns.runs).toBe(2);
    expect(atto(report.duplicateSkippedRuns.costUsd)).toBe(atto(first.cost_usd) + atto(second.cost_usd));
    expect(atto(first.cost_usd)).toBeGreaterThan(0n);
  });
});

describe('an empty month', () => {
  it('reports zeros everywhere, with no division by zero', async () => {
    const report = await buildReport(ctx.pool, { month: '2025-02', timeZone: 'UTC' });
    const zero = '0.000000000000000000';
    expect(report.byUser).toEqual([]);
    expect(report.byDay).toEqual([]);
    expect(report.byModel).toEqual([]);
    expect(report.totals).toMatchObject({ calls: 0, entries: 0, costUsd: zero, creditsUsd: zero });
    expect(report.unitEconomics).toMatchObject({
      spendUsd: zero,
      completedRuns: 0,
      activeUsers: 0,
      costPerCompletedRunUsd: zero,
      costPerActiveUserUsd: zero,
      completedRunsPerDollar: '0.000000',
    });
    expect(report.failedCalls).toEqual({ calls: 0, costUsd: zero });
    expect(report.duplicateSkippedRuns).toEqual({ runs: 0, costUsd: zero });
    expect(renderTable(report, 'user')).toContain('TOTAL');
    expect(renderMarkdown(report)).toContain('$0.000000');
    const csv = parseCsv(renderCsvAll(report));
    expect(csv.find((r) => r.section === 'total')?.cost_usd).toBe(zero);
  });
});

describe('artifacts', () => {
  it('are byte-identical when regenerated, and change when the month gains an entry', async () => {
    const root = await mkdtemp(join(tmpdir(), 'cronledger-artifacts-'));
    const first = await writeArtifacts(await buildReport(ctx.pool, { month: MONTH, timeZone: 'UTC' }), root);
    const bytes = await Promise.all(first.files.map((f) => readFile(f.path)));
    expect(first.files.map((f) => f.name)).toEqual(['usage.json', 'usage.csv', 'usage.md', 'usage.html']);

    const again = await writeArtifacts(await buildReport(ctx.pool, { month: MONTH, timeZone: 'UTC' }), root);
    expect(again.files).toEqual(first.files);
    const bytesAgain = await Promise.all(again.files.map((f) => readFile(f.path)));
    bytesAgain.forEach((b, i) => expect(b.equals(bytes[i])).toBe(true));

    // An entry in another month changes nothing here...
    await recordUsage(ctx.ownerPool, lateCall('other-month', new Date('2026-08-03T10:00:00Z')));
    const unaffected = await writeArtifacts(await buildReport(ctx.pool, { month: MONTH, timeZone: 'UTC' }), root);
    expect(unaffected.reportSha256).toBe(first.reportSha256);
    // ...a late entry back-dated into the month changes the report.
    await recordUsage(ctx.ownerPool, lateCall('late-into-june', new Date('2026-06-10T10:00:00Z')));
    const changed = await writeArtifacts(await buildReport(ctx.pool, { month: MONTH, timeZone: 'UTC' }), root);
    expect(changed.reportSha256).not.toBe(first.reportSha256);
    const md = await readFile(join(root, MONTH, 'usage.md'), 'utf8');
    expect(md).toContain('## Unit economics');
    expect(md).toMatch(/\| user-\d\d \| usage \|/);
  });
});

const lateCall = (key: string, occurredAt: Date) => ({
  runId: null,
  idempotencyKey: key,
  step: 'chat',
  attempt: 1,
  userId: 'user-01',
  taskId: null,
  model: 'openai/gpt-4o-mini',
  kind: 'chat' as const,
  status: 'ok' as const,
  usage: fullUsage({ promptTokens: 321, cachedPromptTokens: 0, completionTokens: 123, reasoningTokens: 0 }),
  providerModel: null,
  providerRequestId: null,
  workerId: 'test',
  occurredAt,
});
