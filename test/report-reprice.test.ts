import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAdminServer } from '../src/admin/server';
import { createPool } from '../src/db/pool';
import { creditUser } from '../src/ledger/entries';
import { applyPrices, loadPricesFile, type ModelPrices, type PricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import type { RepriceLine } from '../src/reports/reprice';
import { fullUsage, type CallKind, type UsageInHistory } from '../src/models/provider';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { oracleCostAt } from './support/cost-oracle';
import { atto, STANDARD_PRICES } from './support/ledger';
import { parseCsv } from './support/report-fixtures';

/**
 * `report --reprice FILE [--downgrade FILE]` and the admin's what-if: known usage booked at the standard prices, then
 * repriced under a file with other known rates (two versions of one model in the month, a long-context call, a batch
 * call, cache reads and writes, an embedding). Every figure is checked against the tests' own BigInt oracle
 * (cost-oracle.ts) on the price files' strings, and every table of the database has as many rows after as before.
 */

let ctx: TestContext;
let readonly: pg.Pool;
const MONTH = '2026-06';
const dir = mkdtempSync(join(tmpdir(), 'reprice-'));

/** The what-if prices: every model of the ledger, and a second version of gpt-4o-mini from the 15th. */
const WHAT_IF: PricesFile = {
  currency: 'USD',
  unit: 'per_million_tokens',
  versions: [
    {
      version: 'wi1',
      effectiveFrom: '2026-01-01T00:00:00Z',
      models: {
        'openai/gpt-4o-mini': { input: '0.2', cachedInput: '0.05', output: '0.8' },
        'openai/text-embedding-3-small': { embeddingInput: '0.013' },
        'openai/gpt-4.1-nano': { input: '0.11', cachedInput: '0.0275', output: '0.44' },
        'anthropic/claude-sonnet-4-5': {
          input: '2.5',
          cachedInput: '0.25',
          cacheWrite5m: '3.125',
          cacheWrite1h: '5',
          output: '12.5',
          longContext: {
            aboveInputTokens: 200000,
            input: '5',
            cachedInput: '0.5',
            cacheWrite5m: '6.25',
            cacheWrite1h: '10',
            output: '18.75',
          },
          tiers: { batch: { input: '1.25', cachedInput: '0.125', cacheWrite5m: '1.5625', output: '6.25' } },
        },
        'anthropic/claude-haiku-4-5': { input: '0.8', cachedInput: '0.08', cacheWrite5m: '1', cacheWrite1h: '1.6', output: '4' },
      },
    },
    {
      version: 'wi2',
      effectiveFrom: '2026-06-15T00:00:00Z',
      models: { 'openai/gpt-4o-mini': { input: '0.123456789012', output: '0.654321' } },
    },
  ],
};

interface Booked {
  userId: string;
  taskId: string | null;
  model: string;
  kind: CallKind;
  usage: UsageInHistory;
  at: string;
}

const BOOKED: Booked[] = [
  {
    userId: 'u1',
    taskId: 'task-a',
    model: 'openai/gpt-4o-mini',
    kind: 'chat',
    usage: { promptTokens: 1200, cachedPromptTokens: 300, completionTokens: 240 },
    at: '2026-06-03T10:00:00Z',
  },
  {
    userId: 'u1',
    taskId: 'task-a',
    model: 'openai/gpt-4o-mini',
    kind: 'chat',
    usage: { promptTokens: 5000, cachedPromptTokens: 1000, completionTokens: 1000 },
    at: '2026-06-20T10:00:00Z',
  },
  {
    userId: 'u1',
    taskId: 'task-a',
    model: 'openai/text-embedding-3-small',
    kind: 'embedding',
    usage: { promptTokens: 400, completionTokens: 0 },
    at: '2026-06-03T10:00:01Z',
  },
  {
    userId: 'u2',
    taskId: 'task-b',
    model: 'anthropic/claude-sonnet-4-5',
    kind: 'chat',
    usage: { promptTokens: 250000, cachedPromptTokens: 1000, cacheWrite5mTokens: 2000, cacheWrite1hTokens: 3000, completionTokens: 500 },
    at: '2026-06-05T00:00:00Z',
  },
  {
    userId: 'u2',
    taskId: 'task-b',
    model: 'anthropic/claude-sonnet-4-5',
    kind: 'chat',
    usage: { promptTokens: 10000, cachedPromptTokens: 500, cacheWrite5mTokens: 100, completionTokens: 800, serviceTier: 'batch' },
    at: '2026-06-06T00:00:00Z',
  },
  {
    userId: 'u2',
    taskId: null,
    model: 'openai/gpt-4.1-nano',
    kind: 'chat',
    usage: { promptTokens: 700, completionTokens: 70 },
    at: '2026-06-07T00:00:00Z',
  },
  {
    userId: 'u3',
    taskId: 'task-c',
    model: 'anthropic/claude-haiku-4-5',
    kind: 'chat',
    usage: { promptTokens: 3000, cacheWrite1hTokens: 100, completionTokens: 300 },
    at: '2026-06-10T00:00:00Z',
  },
];

/** Outside the month in UTC: never repriced. */
const OUTSIDE: Booked = { ...BOOKED[0], at: '2026-05-31T23:00:00Z' };

/** A model's prices in force at `at` in a file, by the file's own dates (the newest version that started). */
function pricesAt(file: PricesFile, model: string, at: string): ModelPrices {
  const found = file.versions
    .filter((v) => v.models[model] && Date.parse(v.effectiveFrom) <= Date.parse(at))
    .sort((a, b) => Date.parse(b.effectiveFrom) - Date.parse(a.effectiveFrom))[0];
  if (!found) throw new Error(`the test's file has no price of ${model} at ${at}`);
  return found.models[model];
}

const oracle = (b: Booked, file: PricesFile, model = b.model) =>
  oracleCostAt(b.kind, fullUsage(b.usage), pricesAt(file, model, b.at), `${model} at ${b.at}`);

/** The oracle's lines: per (user, task, model), the calls, the ledger's cost (standard prices) and the repriced cost. */
function expectedLines(file: PricesFile, downgrade: Record<string, string> = {}, models?: string[]) {
  const standard = loadPricesFile(STANDARD_PRICES);
  const lines = new Map<string, { calls: number; ledger: bigint; repriced: bigint }>();
  for (const b of BOOKED.filter((e) => !models || models.includes(e.model))) {
    const key = JSON.stringify([b.userId, b.taskId, b.model, downgrade[b.model] ?? b.model]);
    const l = lines.get(key) ?? { calls: 0, ledger: 0n, repriced: 0n };
    lines.set(key, {
      calls: l.calls + 1,
      ledger: l.ledger + oracle(b, standard),
      repriced: l.repriced + oracle(b, file, downgrade[b.model]),
    });
  }
  return lines;
}

/** Rows in every table of the database, as the owner counts them. */
async function rowsEverywhere(): Promise<Record<string, number>> {
  const { rows: tables } = await ctx.ownerPool.query<{ name: string }>(
    `select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'public' and c.relkind in ('r', 'p') order by 1`,
  );
  const counts: Record<string, number> = {};
  for (const t of tables) counts[t.name] = Number((await ctx.ownerPool.query(`select count(*) from "${t.name}"`)).rows[0].count);
  return counts;
}

const writeJson = (name: string, value: unknown): string => {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(value));
  return path;
};

const cli = (...args: string[]) => runCli(args, ctx.env);

let before: Record<string, number>;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  readonly = createPool(ctx.readonlyDatabaseUrl, 2);
  await applyPrices(ctx.operatorPool, loadPricesFile(STANDARD_PRICES), 'test');
  // a later version of gpt-4o-mini in the table, for the admin's what-if (it starts after the month: the what-if applies it anyway)
  await applyPrices(
    ctx.operatorPool,
    {
      currency: 'USD',
      unit: 'per_million_tokens',
      versions: [
        {
          version: 'v9',
          effectiveFrom: '2027-01-01T00:00:00Z',
          models: { 'openai/gpt-4o-mini': { input: '0.3', cachedInput: '0.1', output: '1.2' } },
        },
      ],
    },
    'test',
  );
  for (const [i, b] of [...BOOKED, OUTSIDE].entries()) {
    await recordUsage(ctx.ownerPool, {
      runId: `reprice-${i}`,
      step: b.kind,
      attempt: 1,
      userId: b.userId,
      taskId: b.taskId,
      model: b.model,
      kind: b.kind,
      status: 'ok',
      usage: fullUsage(b.usage),
      providerModel: null,
      providerRequestId: null,
      workerId: 'test',
      occurredAt: new Date(b.at),
    });
  }
  await creditUser(ctx.ownerPool, { userId: 'u1', amount: '0.5', reason: 'goodwill' });
  before = await rowsEverywhere();
});

afterAll(async () => {
  await readonly?.end();
  await ctx?.close();
});

type JsonLine = RepriceLine;

function expectLinesExact(lines: JsonLine[], expected: ReturnType<typeof expectedLines>) {
  expect(lines.map((l) => JSON.stringify([l.userId, l.taskId, l.model, l.pricedAs])).sort()).toEqual([...expected.keys()].sort());
  for (const l of lines) {
    const e = expected.get(JSON.stringify([l.userId, l.taskId, l.model, l.pricedAs]))!;
    const what = `${l.userId} ${l.taskId} ${l.model} as ${l.pricedAs}`;
    expect(l.calls, what).toBe(e.calls);
    expect(atto(l.ledgerUsd), `${what}: ledger`).toBe(e.ledger);
    expect(atto(l.repricedUsd), `${what}: repriced`).toBe(e.repriced);
    expect(atto(l.differenceUsd), `${what}: difference`).toBe(e.repriced - e.ledger);
  }
}

describe('cronledger report --reprice', () => {
  it('gives per user, task and model the ledger, the repriced figure and the difference, exactly, and writes nothing', async () => {
    const file = writeJson('what-if.json', WHAT_IF);
    const r = await cli('report', '--month', MONTH, '--reprice', file, '--format', 'json');
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { lines: JsonLine[]; totals: Record<string, string | number> };
    const expected = expectedLines(WHAT_IF);
    expectLinesExact(out.lines, expected);
    const sum = (f: (e: { ledger: bigint; repriced: bigint }) => bigint) => [...expected.values()].reduce((n, e) => n + f(e), 0n);
    expect(out.totals.calls).toBe(BOOKED.length);
    expect(atto(out.totals.ledgerUsd as string)).toBe(sum((e) => e.ledger));
    expect(atto(out.totals.repricedUsd as string)).toBe(sum((e) => e.repriced));
    expect(atto(out.totals.differenceUsd as string)).toBe(sum((e) => e.repriced - e.ledger));
    expect(out.totals.repricedUsd).toMatch(/^\d+\.\d{18}$/);

    // the same figures as CSV (one tidy table) and as the text table
    const csv = parseCsv((await cli('report', '--month', MONTH, '--reprice', file, '--format', 'csv')).stdout);
    expect(
      csv.map((c) => [c.user_id, c.task_id || null, c.model, c.priced_as, c.calls, c.ledger_usd, c.repriced_usd, c.difference_usd]),
    ).toEqual(
      out.lines.map((l) => [l.userId, l.taskId, l.model, l.pricedAs, String(l.calls), l.ledgerUsd, l.repricedUsd, l.differenceUsd]),
    );
    const table = await cli('report', '--month', MONTH, '--reprice', file);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^USER\s+TASK\s+MODEL\s+PRICED AS\s+CALLS\s+LEDGER\s+REPRICED\s+DIFFERENCE$/m);
    expect(table.stdout).toMatch(/^TOTAL\s+7\s+\$\d+\.\d{6}\s+\$\d+\.\d{6}\s+-?\$\d+\.\d{6}$/m);
    expect(table.stdout).toContain('Nothing was written; usage entries only');
    expect(await rowsEverywhere()).toEqual(before);
  });

  it('--downgrade prices each mapped model as its cheap model, under the file', async () => {
    const file = writeJson('what-if.json', WHAT_IF);
    const map = { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' };
    const downgrade = writeJson('downgrade.json', { downgrade: map });
    const r = await cli('report', '--month', MONTH, '--reprice', file, '--downgrade', downgrade, '--format', 'json');
    expect(r.code, r.stderr).toBe(0);
    expectLinesExact((JSON.parse(r.stdout) as { lines: JsonLine[] }).lines, expectedLines(WHAT_IF, map));
    expect(await rowsEverywhere()).toEqual(before);
  });

  it('refuses what it cannot price, listing each model with the fix, and bad input, each with a non-zero exit', async () => {
    const partial = writeJson('partial.json', { ...WHAT_IF, versions: [WHAT_IF.versions[1]] });
    const r = await cli('report', '--month', MONTH, '--reprice', partial);
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe('');
    for (const model of [
      'anthropic/claude-haiku-4-5',
      'anthropic/claude-sonnet-4-5',
      'openai/gpt-4.1-nano',
      'openai/text-embedding-3-small',
    ]) {
      expect(r.stderr).toContain(`"${model}"`);
    }
    // gpt-4o-mini's version starts on the 15th: its entry of the 3rd has no price, named with its moment
    expect(r.stderr).toContain('"openai/gpt-4o-mini": 1 entry, the first at 2026-06-03T10:00:00.000Z');
    expect(r.stderr).toContain('Add each model to the file');
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace

    const noTiers = writeJson('no-batch.json', {
      ...WHAT_IF,
      versions: [
        { ...WHAT_IF.versions[0], models: { ...WHAT_IF.versions[0].models, 'anthropic/claude-sonnet-4-5': { input: '1', output: '2' } } },
      ],
    });
    const tier = await cli('report', '--month', MONTH, '--reprice', noTiers);
    expect(tier.code).not.toBe(0);
    // no long-context threshold: the long prompt takes the standard rates; no batch rates: the batch call has no price
    expect(tier.stderr).toContain('"anthropic/claude-sonnet-4-5": 1 entry, the first at 2026-06-06T00:00:00.000Z');

    const missing = await cli('report', '--month', MONTH, '--reprice', join(dir, 'nope.json'));
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain(join(dir, 'nope.json'));
    const alone = await cli('report', '--month', MONTH, '--downgrade', partial);
    expect(alone.code).not.toBe(0);
    expect(alone.stderr).toContain('--downgrade needs --reprice FILE');
    const format = await cli('report', '--month', MONTH, '--reprice', partial, '--format', 'md');
    expect(format.code).not.toBe(0);
    expect(format.stderr).toContain('--format md is not available with --reprice: use table, json, csv');
    expect(await rowsEverywhere()).toEqual(before);
  });
});

describe("the admin's models page", () => {
  it('reprices the month at a version of the table, as the read-only role, and writes nothing', async () => {
    const { rows } = await ctx.pool.query<{ id: string }>(
      `select id::text from model_prices where model = 'openai/gpt-4o-mini' and version = 'v9'`,
    );
    const admin = await startAdminServer({ pool: readonly, namespace: ctx.namespace, host: '127.0.0.1', port: 0 });
    try {
      const res = await fetch(`${admin.url}/api/models?month=${MONTH}&reprice=${rows[0].id}`);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { priceVersions: { id: string }[]; repriced: { lines: JsonLine[]; leftOut: number } };
      expect(body.priceVersions.map((v) => v.id)).toContain(rows[0].id);
      const v9 = {
        ...WHAT_IF,
        versions: [
          {
            version: 'v9',
            effectiveFrom: '2000-01-01T00:00:00Z',
            models: { 'openai/gpt-4o-mini': { input: '0.3', cachedInput: '0.1', output: '1.2' } },
          },
        ],
      };
      const expected = expectedLines(v9, {}, ['openai/gpt-4o-mini']);
      expectLinesExact(body.repriced.lines, expected);
      expect(body.repriced.leftOut).toBe(0);
      const page = await fetch(`${admin.url}/models?month=${MONTH}&reprice=${rows[0].id}`);
      expect(page.status).toBe(200);
      const html = await page.text();
      expect(html).toContain('id="repriced"');
      expect(html).toMatch(new RegExp(`<option value="${rows[0].id}"\\s+selected>`));
      const bad = await fetch(`${admin.url}/api/models?month=${MONTH}&reprice=999999`);
      expect(bad.status).toBe(400);
    } finally {
      await admin.close();
    }
    expect(await rowsEverywhere()).toEqual(before);
  });
});
