import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import parsePrometheus from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { selectProvider } from '../src/models/select-provider';
import { bookReconciliation, type ReconciledKey } from '../src/reconcile/book';
import { readProviderReports } from '../src/reconcile/read-reports';
import type { ReconciliationMonth } from '../src/reconcile/month-figures';
import { divideHalfEven } from '../src/reports/economics';
import { startTestAdmin } from './support/admin-server';
import { adminReportsEnv } from './support/admin-reports-env';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { DEFAULT_ANTHROPIC_RATES, startFakeAnthropic, type FakeAnthropic } from './support/fake-anthropic';
import { costAtto, decimalText } from './support/fake-billing';
import {
  bookAndBillChat,
  DEFAULT_BILLING_RATES,
  FAKE_ADMIN_KEY,
  FAKE_PROJECT_ID,
  startFakeOpenAI,
  type FakeOpenAI,
} from './support/fake-openai';
import { atto, runScheduled, STANDARD_PRICES } from './support/ledger';

/**
 * Reconciliation against the providers' own reports (issue 25 §3). Real scheduled runs call the fake OpenAI and
 * Anthropic servers, which bill each answer in their own logs and serve the admin usage and cost reports from them, one
 * day per page. Drift is planted in the fakes: an answer billed that the ledger never booked, a billing rate other than
 * cronledger's price, a day reported late, and spend of another project. `cronledger reconcile` must find each drift
 * and book it exactly once; a clean day books nothing, importing the same pages again books nothing, and a day reported
 * late books only what changed.
 */

let ctx: TestContext;
let openai: FakeOpenAI;
let anthropic: FakeAnthropic;
let env: NodeJS.ProcessEnv;

const DAY_MS = 86_400_000;
const today = new Date().toISOString().slice(0, 10);
const yesterday = new Date(Date.now() - DAY_MS).toISOString().slice(0, 10);
const CHAT_MODEL = 'gpt-4o-mini-2024-07-18';

interface ImportJson {
  importId: string;
  pagesSha256: string;
  pages: number;
  booked: number;
  bookedUsd: string;
  bookedTokens: string;
  unmatchedProviderKeys: number;
  unmatchedLedgerKeys: number;
  outOfScopeRows: number;
  keys: ReconciledKey[];
}

async function reconcile(provider: 'openai' | 'anthropic', extra: string[] = []): Promise<ImportJson> {
  const r = await runCli(['reconcile', provider, '--from', yesterday, '--to', today, '--json', ...extra], env);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as ImportJson;
}

const bookedOf = (i: ImportJson) =>
  i.keys
    .filter((k) => k.entryId !== null)
    .map((k) => ({ day: k.day, model: k.model, tokenClass: k.tokenClass, tokens: k.bookedTokens, usd: atto(k.bookedUsd) }));

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile(STANDARD_PRICES), 'test');
  openai = await startFakeOpenAI();
  anthropic = await startFakeAnthropic();
  env = {
    ...ctx.env,
    ...adminReportsEnv(openai, anthropic),
  };
  const provider = selectProvider({
    MODEL_PROVIDER: 'openai,anthropic',
    OPENAI_BASE_URL: openai.baseURL,
    OPENAI_API_KEY: 'sk-cronledger-test',
    ANTHROPIC_BASE_URL: anthropic.baseURL,
    ANTHROPIC_API_KEY: 'sk-ant-cronledger-test',
  });
  // Today: real runs through both fakes (chat, then an OpenAI embedding each).
  for (const [i, model] of [
    'openai/gpt-4o-mini',
    'openai/gpt-4o-mini',
    'anthropic/claude-haiku-4-5',
    'anthropic/claude-haiku-4-5',
  ].entries()) {
    const run = await runScheduled(ctx, `reconcile-${i}`, { provider, model });
    expect(run.error).toBeUndefined();
  }
  // Yesterday: a chat call the ledger booked (dated yesterday: only the owner may) and the provider billed alike.
  await bookAndBillChat(ctx.ownerPool, openai, 'yesterday-1', yesterday, CHAT_MODEL);
}, 300_000);

afterAll(async () => {
  await openai?.close();
  await anthropic?.close();
  await ctx?.close();
});

describe('reconcile openai', () => {
  // The drift planted today: an answer billed and lost (never booked), a project that is not cronledger's, and an
  // embedding rate a quarter above cronledger's price.
  const LOST = { prompt_tokens: 500, cached_tokens: 100, completion_tokens: 70 };
  let first: ImportJson;

  it('books each drift once: the lost answer per token class, the rate difference; the clean day and the other project book nothing', async () => {
    openai.plantBilled({ endpoint: 'chat', model: CHAT_MODEL, usage: LOST });
    openai.plantBilled({
      endpoint: 'chat',
      model: CHAT_MODEL,
      usage: { prompt_tokens: 9999, completion_tokens: 999 },
      projectId: 'proj_other',
    });
    openai.setBillingRates('text-embedding-3-small', { input: '0.025' });
    const embeddingTokens = openai.billed.filter((b) => b.endpoint === 'embeddings').reduce((n, b) => n + b.usage.prompt_tokens, 0);
    expect(embeddingTokens).toBeGreaterThan(0);

    first = await reconcile('openai');
    const rates = DEFAULT_BILLING_RATES[CHAT_MODEL];
    expect(bookedOf(first)).toEqual([
      { day: today, model: CHAT_MODEL, tokenClass: 'cached_input', tokens: '100', usd: costAtto(100, rates.cachedInput!) },
      { day: today, model: CHAT_MODEL, tokenClass: 'input', tokens: '400', usd: costAtto(400, rates.input) },
      { day: today, model: CHAT_MODEL, tokenClass: 'output', tokens: '70', usd: costAtto(70, rates.output!) },
      // tokens agree; the provider's rate is 0.025 per million where cronledger's price is 0.02
      { day: today, model: 'text-embedding-3-small', tokenClass: 'embedding', tokens: '0', usd: costAtto(embeddingTokens, '0.005') },
    ]);
    // The days were read one page each (has_more/next_page followed), for usage, embeddings and costs.
    expect(first.pages).toBe(6);
    expect(first.outOfScopeRows).toBeGreaterThan(0);
    // Yesterday matched key by key, tokens and USD: nothing booked.
    const clean = first.keys.filter((k) => k.day === yesterday);
    expect(clean.map((k) => [k.tokenClass, k.side, k.providerTokens, k.ledgerTokens, k.entryId])).toEqual([
      ['input', 'both', '800', '800', null],
      ['output', 'both', '40', '40', null],
    ]);
    for (const k of clean) expect(atto(k.providerUsd!)).toBe(atto(k.ledgerUsd));
    // The cached tokens of the lost answer are a key the ledger never had: listed as the provider's alone.
    expect(first.keys.filter((k) => k.side === 'provider').map((k) => k.tokenClass)).toEqual(['cached_input']);
  });

  it("leaves the ledger equal to the provider's bill to the last digit, and an import of the same pages books nothing", async () => {
    const billed = openai.billed.filter((b) => b.projectId === FAKE_PROJECT_ID);
    let bill = 0n;
    for (const b of billed) {
      const rates = b.endpoint === 'embeddings' ? { input: '0.025' } : DEFAULT_BILLING_RATES[b.model];
      const cached = b.usage.cached_tokens ?? 0;
      bill += costAtto(b.usage.prompt_tokens - cached, rates.input) + costAtto(cached, rates.cachedInput ?? rates.input);
      bill += costAtto(b.usage.completion_tokens ?? 0, rates.output ?? '0');
    }
    const { rows } = await ctx.pool.query<{ total: string }>(
      `select sum(cost_usd)::text as total from usage_ledger where model not like 'anthropic/%'
          and (entry_type = 'usage' or reason like 'openai %')`,
    );
    expect(atto(rows[0].total)).toBe(bill);
    process.stdout.write(`openai: ledger after reconciliation = provider bill = ${decimalText(bill)} USD\n`);

    const again = await reconcile('openai');
    expect(again.pagesSha256).toBe(first.pagesSha256);
    expect(again.booked).toBe(0);
    expect(again.keys.every((k) => k.entryId === null)).toBe(true);
  });

  it('reads saved pages with --file as it reads the API: the same pages book nothing more', async () => {
    const pages = [];
    for (const path of ['usage/completions', 'usage/embeddings', 'costs']) {
      for (let page: string | null = null, n = 0; n === 0 || page !== null; n++) {
        const url = new URL(`${openai.baseURL}/organization/${path}`);
        url.searchParams.set('start_time', String(Date.parse(`${yesterday}T00:00:00Z`) / 1000));
        url.searchParams.set('end_time', String(Date.parse(`${today}T00:00:00Z`) / 1000 + 86_400));
        if (page) url.searchParams.set('page', page);
        const response = await fetch(url, { headers: { authorization: `Bearer ${FAKE_ADMIN_KEY}` } });
        const text = await response.text();
        pages.push(text);
        page = (JSON.parse(text) as { next_page: string | null }).next_page;
      }
    }
    const file = join(tmpdir(), `reconcile-pages-${process.pid}.json`);
    writeFileSync(file, `[${pages.join(',')}]`);
    const r = await runCli(['reconcile', 'openai', '--from', yesterday, '--to', today, '--file', file, '--json'], {
      ...env,
      OPENAI_ADMIN_KEY: '',
    });
    expect(r.stderr).toBe('');
    const fromFile = JSON.parse(r.stdout) as ImportJson & { source: string };
    expect(fromFile.source).toBe('file');
    expect(fromFile.booked).toBe(0);
    expect(fromFile.keys.length).toBe(first.keys.length);
  });

  it('two imports at once book a new difference once: they take turns', async () => {
    openai.plantBilled({ endpoint: 'chat', model: CHAT_MODEL, usage: { prompt_tokens: 0, completion_tokens: 33 } });
    const input = await readProviderReports({ provider: 'openai', from: yesterday, to: today, files: [], wholeOrganization: false, env });
    const pools = [createPool(ctx.operatorDatabaseUrl, 1), createPool(ctx.operatorDatabaseUrl, 1)];
    try {
      const results = await Promise.all(pools.map((pool) => bookReconciliation(pool, input)));
      const booked = results.flatMap((r) => r.keys.filter((k) => k.entryId !== null));
      const rates = DEFAULT_BILLING_RATES[CHAT_MODEL];
      expect(booked.map((k) => [k.tokenClass, k.bookedTokens, atto(k.bookedUsd)])).toEqual([['output', '33', costAtto(33, rates.output!)]]);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
  });
});

describe('reconcile anthropic', () => {
  it('a day reported late: first its ledger keys are listed and nothing is booked; once reported, only the change is booked, once', async () => {
    const lateIds = anthropic.billed.map((b) => b.id);
    expect(lateIds.length).toBeGreaterThan(0);
    for (const id of lateIds) anthropic.reportLate(id);
    // billed at the same time and reported late with the others: an answer the ledger never booked
    const lost = anthropic.plantBilled({
      model: 'claude-haiku-4-5',
      usage: { input_tokens: 300, cache_read_input_tokens: 50, output_tokens: 20 },
    });
    anthropic.reportLate(lost.id);

    const before = await reconcile('anthropic');
    expect(before.booked).toBe(0);
    expect(before.unmatchedLedgerKeys).toBeGreaterThan(0);
    expect(before.keys.every((k) => k.side === 'ledger')).toBe(true);

    anthropic.releaseLate();
    const reported = await reconcile('anthropic');
    const rates = DEFAULT_ANTHROPIC_RATES['claude-haiku-4-5'];
    expect(bookedOf(reported)).toEqual([
      { day: today, model: 'claude-haiku-4-5', tokenClass: 'cached_input', tokens: '50', usd: costAtto(50, rates.cacheRead) },
      { day: today, model: 'claude-haiku-4-5', tokenClass: 'input', tokens: '300', usd: costAtto(300, rates.input) },
      { day: today, model: 'claude-haiku-4-5', tokenClass: 'output', tokens: '20', usd: costAtto(20, rates.output) },
    ]);

    const again = await reconcile('anthropic');
    expect(again.booked).toBe(0);
  });
});

describe("the report's reconciliation section and the /metrics drift gauge", () => {
  it('per provider: the provider bill is the ledger plus what was booked, and the gauge is the booked drift in micro-dollars', async () => {
    const r = await runCli(['report', '--month', today.slice(0, 7), '--format', 'json'], env);
    expect(r.stderr).toBe('');
    const months = (JSON.parse(r.stdout) as { reconciliation: ReconciliationMonth[] }).reconciliation;
    expect(months.map((m) => m.provider)).toEqual(['openai', 'anthropic']);
    for (const m of months) {
      expect(atto(m.providerUsd)).toBe(atto(m.ledgerUsd) + atto(m.bookedUsd));
      expect(m.unmatchedLedgerKeys).toBe(0);
    }
    const [o, a] = months;
    expect([o.bookedEntries, o.unmatchedProviderKeys, a.bookedEntries, a.unmatchedProviderKeys]).toEqual([5, 1, 3, 1]);
    const text = await runCli(['report', '--month', today.slice(0, 7)], env);
    expect(text.stdout).toMatch(/Reconciliation with the providers \(UTC days\)\n\s*PROVIDER/);

    // The admin page, as its read-only role: the same figures on the overview, and the drift gauge on /metrics.
    const readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 4);
    const admin = await startTestAdmin(ctx, readonly);
    try {
      const overview = (await (await fetch(`${admin.url}/api/overview?month=${today.slice(0, 7)}`)).json()) as {
        reconciliation: ReconciliationMonth[];
      };
      expect(overview.reconciliation).toEqual(months);
      expect(await (await fetch(`${admin.url}/?month=${today.slice(0, 7)}`)).text()).toMatch(
        /<section id="reconciliation">[^]*data-provider="anthropic"/,
      );
      const metrics = parsePrometheus(await (await fetch(`${admin.url}/metrics`)).text());
      const gauge = metrics.find((f) => f.name === 'cronledger_reconciliation_booked_micro_usd')!;
      const value = (provider: string) => gauge.metrics.find((x) => x.labels?.provider === provider)?.value;
      expect(value('openai')).toBe(String(divideHalfEven(atto(o.bookedUsd), 10n ** 12n)));
      expect(value('anthropic')).toBe(String(divideHalfEven(atto(a.bookedUsd), 10n ** 12n)));
    } finally {
      await admin.close();
      await readonly.end();
    }
  });
});

describe('the ledger listing', () => {
  it("shows each reconciliation entry under the provider's user, pointing at its import, with the reason", async () => {
    const r = await runCli(['ledger', '--user', 'reconciliation:anthropic', '--json'], env);
    expect(r.stderr).toBe('');
    const entries = (
      JSON.parse(r.stdout) as { entries: { entryType: string; reconciliationImportId: string; reason: string; model: string }[] }
    ).entries;
    expect(entries.map((e) => [e.entryType, e.model])).toEqual([
      ['reconciliation', 'anthropic/claude-haiku-4-5'],
      ['reconciliation', 'anthropic/claude-haiku-4-5'],
      ['reconciliation', 'anthropic/claude-haiku-4-5'],
    ]);
    expect(new Set(entries.map((e) => e.reconciliationImportId)).size).toBe(1);
    expect(entries[0].reason).toMatch(
      /^anthropic reports 50 tokens \/ 0\.000005\d* USD for \d{4}-\d{2}-\d{2} claude-haiku-4-5 cached_input/,
    );
    const table = await runCli(['ledger', '--user', 'reconciliation:anthropic'], env);
    expect(table.stdout).toContain(`reconciliation→import ${entries[0].reconciliationImportId}`);
  });
});

describe('bad input: a clear error, a non-zero exit, nothing written', () => {
  const imports = async (): Promise<string> =>
    (await ctx.pool.query<{ n: string }>('select count(*)::text as n from reconciliation_imports')).rows[0].n;

  it.each([
    { args: ['--from', '2026-02-30', '--to', today], message: /--from "2026-02-30" is not a day; write it as YYYY-MM-DD/ },
    { args: ['--from', today, '--to', yesterday], message: new RegExp(`--to ${yesterday} is before --from ${today}`) },
    { args: ['--from', today, '--to', today], env: { OPENAI_ADMIN_KEY: '' }, message: /OPENAI_ADMIN_KEY is not set/ },
    { args: ['--from', today, '--to', today], env: { CRONLEDGER_OPENAI_PROJECT_IDS: '' }, message: /CRONLEDGER_OPENAI_PROJECT_IDS/ },
    { args: ['--from', today, '--to', today, '--file', 'package.json'], message: /is not a page of a usage or cost report/ },
    {
      args: ['--from', today, '--to', today],
      env: { OPENAI_ADMIN_KEY: 'sk-not-admin' },
      message: /401: OPENAI_ADMIN_KEY is not an admin key/,
    },
  ])('$message', async ({ args, env: extra, message }) => {
    const n = await imports();
    const r = await runCli(['reconcile', 'openai', ...args], { ...env, ...extra });
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.code).toBe(2);
    expect(await imports()).toBe(n);
  });
});
