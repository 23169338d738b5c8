import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { worstCaseOf } from '../src/budgets/worst-case';
import { applyPrices, loadPricesFile, priceInForce } from '../src/ledger/prices';
import { formatScaled, LEDGER_SCALE } from '../src/money';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { appliedInput, type TestRun } from './support/applied';
import { bookCompletion, bookExactSpend } from './support/budget-spend';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { oracleCost } from './support/cost-oracle';
import { startWorkers } from './support/workers';

/**
 * The report's budget section, seeded by real runs (real Temporal, real PostgreSQL, the mock model): one run
 * downgraded at exactly 80 %, one blocked, one at the default tier. Every rendering shows the section; JSON and CSV
 * carry exact decimal strings; the per-user figures equal `budgets status`; the savings equal an oracle that prices
 * the downgraded call's tokens itself.
 */

let ctx: TestContext;
const tag = randomUUID().slice(0, 6);
const users = { cheap: `rb-cheap-${tag}`, blocked: `rb-blocked-${tag}`, plain: `rb-plain-${tag}` };
const PROMPT = 'Summarise the day.';
const SIMULATE = { promptTokens: 50, completionTokens: 1000, embeddingTokens: 1000 };
let month: string;

const usd = (a: bigint): string => formatScaled(a, LEDGER_SCALE);

async function worstCase(model: string): Promise<bigint> {
  const now = new Date();
  const w = worstCaseOf({ prompt: PROMPT, maxOutputTokens: 1000, simulate: SIMULATE });
  const chat = oracleCost('chat', w.chat, await priceInForce(ctx.pool, model, now));
  const embed = oracleCost('embedding', w.embedding, await priceInForce(ctx.pool, 'openai/text-embedding-3-small', now));
  return chat + embed;
}

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await applyBudgets(ctx.operatorPool, { budgets: [], downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' } }, 'test');
  const { rows } = await ctx.pool.query<{ start: Date; month: string }>(
    `select date_trunc('month', now() at time zone 'UTC') at time zone 'UTC' as start, to_char(now() at time zone 'UTC', 'YYYY-MM') as month`,
  );
  month = rows[0].month;
  const w = await worstCase('openai/gpt-4o-mini');
  const cheap = await worstCase('openai/gpt-4.1-nano');
  const limits: [string, bigint, bigint][] = [
    [users.cheap, w * 100n, w * 80n], // exactly 80 %: downgraded
    [users.blocked, cheap * 10n, cheap * 10n], // all spent: blocked
    [users.plain, w * 100n, 0n],
  ];
  for (const [userId, limit, spent] of limits) {
    await applyBudgets(
      ctx.operatorPool,
      { budgets: [{ userId, monthlyLimitUsd: usd(limit), timeZone: 'UTC', effectiveFrom: rows[0].start }] },
      'test',
    );
    if (spent > 0n) await bookExactSpend(ctx.ownerPool, `seed-${userId}`, userId, usd(spent));
  }
  const fleet = await startWorkers(ctx, 1);
  const results = await fleet.runWhile(async () => {
    const out = [];
    for (const [i, userId] of [users.cheap, users.blocked, users.plain].entries()) {
      const input: TestRun = {
        taskId: `rb-${userId}`,
        userId,
        input: PROMPT,
        model: 'openai/gpt-4o-mini',
        embeddingModel: 'openai/text-embedding-3-small',
        maxOutputTokens: 1000,
        simulate: SIMULATE,
      };
      const minute = new Date(Date.UTC(2026, 0, 1, 0, i)).toISOString().slice(0, 19) + 'Z';
      const handle = await ctx.client.workflow.start(scheduledRun, {
        workflowId: `cron-rb-${userId}-${minute}`,
        taskQueue: ctx.taskQueue,
        args: [await appliedInput(ctx.operatorPool, input)],
      });
      out.push(await handle.result());
    }
    return out;
  });
  expect(results.map((r) => r.tier)).toEqual(['cheap', 'blocked', 'default']);
});

afterAll(async () => {
  await ctx?.close();
});

/** What the downgraded chat call would have cost on gpt-4o-mini minus what it cost on gpt-4.1-nano, per token class, in atto-USD. */
async function savingsOracle(): Promise<bigint> {
  const { rows } = await ctx.pool.query<{ prompt: string; cached: string; completion: string; model: string }>(
    `select prompt_tokens as prompt, cached_prompt_tokens as cached, completion_tokens as completion, model from usage_ledger
      where user_id = $1 and entry_type = 'usage' and kind = 'chat' and idempotency_key not like 'seed-%'`,
    [users.cheap],
  );
  expect(rows.map((r) => r.model)).toEqual(['openai/gpt-4.1-nano']);
  const r = rows[0];
  // USD per million tokens → atto-USD per token: mini 0.15 / 0.075 / 0.60, nano 0.10 / 0.025 / 0.40.
  const uncached = BigInt(r.prompt) - BigInt(r.cached);
  return (
    uncached * (150_000_000_000n - 100_000_000_000n) +
    BigInt(r.cached) * (75_000_000_000n - 25_000_000_000n) +
    BigInt(r.completion) * (600_000_000_000n - 400_000_000_000n)
  );
}

describe('the report budget section', () => {
  it('JSON: per-user figures equal budgets status, blocked and downgraded runs counted, savings exact', async () => {
    const r = await runCli(['report', '--month', month, '--format', 'json'], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    const budget = JSON.parse(r.stdout).budget;
    expect(budget.configured).toBe(true);
    expect(budget.blockedRuns).toBe(1);
    expect(budget.downgradedRuns).toBe(1);
    const saved = await savingsOracle();
    expect(saved).toBeGreaterThan(0n);
    expect(budget.downgradeSavings).toMatchObject({ savedUsd: usd(saved), entries: 1, unpricedEntries: 0 });

    const status = JSON.parse((await runCli(['budgets', 'status', '--json'], ctx.env)).stdout).users as Record<string, unknown>[];
    for (const userId of Object.values(users)) {
      const line = budget.users.find((u: { userId: string }) => u.userId === userId);
      const expected = status.find((s) => s.userId === userId);
      expect(line).toEqual(expected);
    }
    expect(budget.users.find((u: { userId: string }) => u.userId === users.blocked)).toMatchObject({
      tier: 'blocked',
      remainingUsd: usd(0n),
    });
    expect(budget.users.find((u: { userId: string }) => u.userId === users.cheap)).toMatchObject({ tier: 'cheap', reservedUsd: usd(0n) });
  });

  it('the sectioned CSV (csv-all) carries the same exact figures; table, Markdown and HTML show the section', async () => {
    const csv = await runCli(['report', '--month', month, '--format', 'csv-all'], ctx.env);
    expect(csv.code, csv.stderr).toBe(0);
    const [header, ...rows] = csv.stdout
      .trim()
      .split('\r\n')
      .map((l) => l.split(','));
    const at = (name: string) => header.indexOf(name);
    const budgetRows = rows.filter((row) => row[at('section')] === 'budget');
    const metric = (name: string, userId = '') =>
      budgetRows.find((row) => row[at('metric')] === name && row[at('user_id')] === userId)?.[at('value')];
    expect(metric('blocked_runs')).toBe('1');
    expect(metric('downgraded_runs')).toBe('1');
    expect(metric('downgrade_saved_usd')).toBe(usd(await savingsOracle()));
    expect(metric('tier', users.cheap)).toBe('cheap');
    expect(metric('tier', users.blocked)).toBe('blocked');
    expect(metric('remaining_usd', users.blocked)).toBe(usd(0n));

    for (const format of ['table', 'md', 'html']) {
      const r = await runCli(['report', '--month', month, '--format', format], ctx.env);
      expect(r.code, r.stderr).toBe(0);
      const text = r.stdout.replace(/<[^>]*>/g, ' '); // HTML cells as text; the others are text already
      expect(/^#* *Budgets/m.test(text) || /<h2>Budgets<\/h2>/.test(r.stdout), format).toBe(true);
      expect(/blocked runs\W+1\b/i.test(text), format).toBe(true);
      expect(/downgraded runs\W+1\b/i.test(text), format).toBe(true);
      expect(/downgrades saved[^$]*\$0\.000202\b/i.test(text), format).toBe(true);
      for (const userId of Object.values(users)) expect(text.includes(userId), `${format} ${userId}`).toBe(true);
    }
  });

  it('a past month in another zone than the budget: the budget month the report names, not the one its last instant falls in', async () => {
    const user = `rb-berlin-${tag}`;
    await applyBudgets(
      ctx.operatorPool,
      { budgets: [{ userId: user, monthlyLimitUsd: '1', timeZone: 'Europe/Berlin', effectiveFrom: new Date('2026-01-01T00:00:00Z') }] },
      'test',
    );
    await bookCompletion(ctx.ownerPool, `rb-berlin-march-${tag}`, user, 1_000_000, new Date('2026-03-31T21:30:00Z')); // March in Berlin
    await bookCompletion(ctx.ownerPool, `rb-berlin-april-${tag}`, user, 500_000, new Date('2026-03-31T22:30:00Z')); // April in Berlin
    const r = await runCli(['report', '--month', '2026-03', '--format', 'json'], ctx.env); // UTC: ends 2026-04-01T00:00Z
    expect(r.code, r.stderr).toBe(0);
    const line = JSON.parse(r.stdout).budget.users.find((u: { userId: string }) => u.userId === user);
    expect(line).toMatchObject({ month: '2026-03', timeZone: 'Europe/Berlin', spentUsd: '0.600000000000000000', tier: 'default' });
  });
});

describe('cronledger runs', () => {
  it('shows the tier each run ran at, in the table and in --json', async () => {
    const taskOf = (userId: string) => `rb-${userId}`;
    const expected: [string, string][] = [
      [users.cheap, 'cheap'],
      [users.blocked, 'blocked'],
      [users.plain, 'default'],
    ];
    for (const [userId, tier] of expected) {
      const json = await runCli(['runs', '--task', taskOf(userId), '--json'], ctx.env);
      expect(json.code, json.stderr).toBe(0);
      expect((JSON.parse(json.stdout).runs as { tier: string; status: string }[]).map((r) => r.tier)).toEqual([tier]);
      const table = await runCli(['runs', '--task', taskOf(userId)], ctx.env);
      expect(table.code, table.stderr).toBe(0);
      const [header, , row] = table.stdout.split('\n'); // header, rule, the run
      expect(header).toMatch(/\bSTATUS\s+TIER\s+GEN\b/);
      const at = header.indexOf('TIER');
      expect(row.slice(at).split(/\s+/)[0]).toBe(tier);
    }
  });
});
