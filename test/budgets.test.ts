import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetStatus } from '../src/budgets/budget-status';
import { applyBudgets } from '../src/budgets/budgets-store';
import { AwaitingReservationsError, reserveBudget } from '../src/budgets/reserve';
import { adjustEntry, creditUser } from '../src/ledger/entries';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { bookCompletion, bookExactSpend } from './support/budget-spend';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { fullUsage } from '../src/models/provider';

/** Budgets as versioned data, the month-to-date summary the ledger keeps, and the thresholds, on a real PostgreSQL. */

let ctx: TestContext;
const dir = mkdtempSync(join(tmpdir(), 'cronledger-budgets-'));

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => {
  await ctx?.close();
});

let keys = 0;
/** Books a chat call whose cost is exactly `completionTokens` gpt-4o-mini tokens ($0.60 per million). */
const book = (userId: string, completionTokens: number, at: Date) =>
  bookCompletion(ctx.ownerPool, `budgets-test-${++keys}`, userId, completionTokens, at);

const file = (name: string, json: unknown): string => {
  const path = join(dir, name);
  writeFileSync(path, typeof json === 'string' ? json : JSON.stringify(json));
  return path;
};

/** The guard's decision (reserve_budget) for one gpt-4o-mini chat call whose worst case is these token counts. */
const decideOneChatCall = (
  userId: string,
  runId: string,
  tokens: { promptTokens: number; completionTokens: number },
  mayDowngrade: boolean,
  at: Date,
) =>
  reserveBudget(ctx.pool, {
    userId,
    runId,
    workflowId: runId,
    mayDowngrade,
    expirySeconds: 60,
    at,
    calls: [
      {
        step: 'chat',
        attempt: 1,
        kind: 'chat',
        model: 'openai/gpt-4o-mini',
        worstCase: fullUsage(tokens),
      },
    ],
  });
const budgetRows = async () => (await ctx.pool.query('select count(*)::text as n from budgets')).rows[0].n;
const downgradeRows = async () => (await ctx.pool.query('select count(*)::text as n from model_downgrades')).rows[0].n;

describe('budgets commands', () => {
  it('list says there is no limit before any budget exists', async () => {
    const r = await runCli(['budgets', 'list'], ctx.env);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('no budget configured: no limit');
  });

  it('apply adds versions once, set adds a new version, list and status show them', async () => {
    const path = file('budgets.json', {
      budgets: { default: { monthly: '10.00' }, users: { 'cli-u1': { monthly: '25.00', timezone: 'Europe/Berlin' } } },
      downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
    });
    const first = await runCli(['budgets', 'apply', path, '--json'], ctx.env);
    expect(first.stderr).toBe('');
    expect(JSON.parse(first.stdout).budgets.map((b: { action: string }) => b.action)).toEqual(['added', 'added']);
    expect(JSON.parse(first.stdout).downgrades).toEqual([
      { model: 'openai/gpt-4o-mini', cheapModel: 'openai/gpt-4.1-nano', action: 'added' },
    ]);
    const again = await runCli(['budgets', 'apply', path, '--json'], ctx.env);
    expect(JSON.parse(again.stdout).budgets.map((b: { action: string }) => b.action)).toEqual(['unchanged', 'unchanged']);

    const set = await runCli(['budgets', 'set', 'cli-u1', '--monthly', '30'], ctx.env);
    expect(set.code).toBe(0);
    expect(set.stdout).toContain('added      budget cli-u1 $30.000000/month (Europe/Berlin)'); // keeps the user's zone

    const list = JSON.parse((await runCli(['budgets', 'list', '--json'], ctx.env)).stdout);
    expect(list.budgets.map((b: { user: string; monthlyLimitUsd: string }) => [b.user, b.monthlyLimitUsd])).toEqual([
      ['default', '10.000000000000000000'],
      ['cli-u1', '25.000000000000000000'],
      ['cli-u1', '30.000000000000000000'],
    ]);
    const status = JSON.parse((await runCli(['budgets', 'status', '--user', 'cli-u1', '--json'], ctx.env)).stdout);
    expect(status.users).toEqual([
      expect.objectContaining({
        userId: 'cli-u1',
        limitUsd: '30.000000000000000000',
        timeZone: 'Europe/Berlin',
        tier: 'default',
        source: 'user',
      }),
    ]);
    const other = JSON.parse((await runCli(['budgets', 'status', '--user', 'cli-nobody', '--json'], ctx.env)).stdout);
    expect(other.users[0]).toMatchObject({ limitUsd: '10.000000000000000000', source: 'default', spentUsd: '0.000000000000000000' });
  });

  it.each([
    ['a negative limit', ['budgets', 'set', 'u-bad', '--monthly', '-5'], /--monthly -5 is negative/],
    ['a non-number', ['budgets', 'set', 'u-bad', '--monthly', 'ten'], /--monthly "ten" is not a decimal number/],
    ['a malformed user ID', ['budgets', 'set', 'bad\u200buser', '--monthly', '5'], /user "bad\\u200buser" contains U\+200B/],
    [
      'an unknown zone',
      ['budgets', 'set', 'u-bad', '--monthly', '5', '--tz', 'Mars/Olympus'],
      /"Mars\/Olympus" is not a known IANA time zone/,
    ],
  ])('set refuses %s, with a clear message, and changes nothing', async (_what, args, message) => {
    const before = await budgetRows();
    const r = await runCli(args, ctx.env);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    expect(await budgetRows()).toBe(before);
  });

  it.each([
    [
      'a negative limit',
      { budgets: { users: { 'u-ok': { monthly: '1' }, 'u-neg': { monthly: '-1' } } } },
      /budgets.users."u-neg".monthly -1 is negative/,
    ],
    [
      'a JSON number',
      { budgets: { users: { 'u-ok': { monthly: '1' }, 'u-num': { monthly: 5 } } } },
      /budgets.users."u-num".monthly 5: write the limit as a decimal string/,
    ],
    [
      'a malformed user ID',
      { budgets: { users: { 'u-ok': { monthly: '1' }, ' ': { monthly: '1' } } } },
      /user ID " " has leading or trailing spaces/,
    ],
    [
      'an unknown model in downgrade',
      { budgets: { users: { 'u-ok': { monthly: '1' } } }, downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-9-nano' } },
      /cheap model "openai\/gpt-9-nano" has no price in force/,
    ],
    [
      'an unknown default model in downgrade',
      { downgrade: { 'acme/unknown': 'openai/gpt-4.1-nano' } },
      /the model "acme\/unknown" has no price in force/,
    ],
  ])('apply refuses %s and changes nothing', async (_what, json, message) => {
    const before = [await budgetRows(), await downgradeRows()];
    const r = await runCli(['budgets', 'apply', file('bad.json', json)], ctx.env);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect([await budgetRows(), await downgradeRows()]).toEqual(before);
  });

  it('tasks apply refuses a bad budgets section before touching any schedule', async () => {
    const path = file('tasks.json', {
      tasks: [{ id: 'budget-bad', cron: '0 9 * * *', userId: 'u1', input: 'hello' }],
      budgets: { users: { u1: { monthly: '-3' } } },
    });
    const r = await runCli(['tasks', 'apply', path], ctx.env);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/budgets.users."u1".monthly -3 is negative/);
  });
});

describe('month-to-date summary', () => {
  it('counts usage, adjustments and credits in the same transaction as each entry, per local month', async () => {
    const user = 'sum-u1';
    const entry = await book(user, 1_000_000, new Date('2026-03-10T12:00:00Z')); // $0.60
    await adjustEntry(ctx.operatorPool, { entryId: entry.id, amount: '0.15', reason: 'test' });
    await creditUser(ctx.operatorPool, { userId: user, amount: '0.05', reason: 'test' });
    const { rows } = await ctx.pool.query(
      // the summary rows: what every reader of spent reads
      `select to_char(month, 'YYYY-MM') as month, spent_usd from budget_months where user_id = $1 and time_zone = 'UTC' order by 1`,
      [user],
    );
    // the adjustment and credit are booked at now(), the usage in March
    const march = rows.find((r) => r.month === '2026-03');
    expect(march.spent_usd).toBe('0.600000000000000000');
    const ledgerTotal = (await ctx.pool.query('select sum(cost_usd) as s from usage_ledger where user_id = $1', [user])).rows[0].s;
    const summaryTotal = (
      await ctx.pool.query(`select sum(spent_usd) as s from budget_months where user_id = $1 and time_zone = 'UTC'`, [user])
    ).rows[0].s;
    expect(summaryTotal).toBe(ledgerTotal);
    expect(ledgerTotal).toBe('0.700000000000000000');
  });

  it('rolls the month over at local midnight in Europe/Berlin, not at UTC midnight', async () => {
    const user = 'berlin-u1';
    await applyBudgets(
      ctx.operatorPool,
      { budgets: [{ userId: user, monthlyLimitUsd: '1', timeZone: 'Europe/Berlin', effectiveFrom: new Date('2026-01-01T00:00:00Z') }] },
      'test',
    );
    // 2026-03-31T21:59:59Z is 23:59:59 in Berlin (CEST, UTC+2): still March. 22:00:00Z is April 1st 00:00 in Berlin.
    await book(user, 1_000_000, new Date('2026-03-31T21:59:59Z'));
    await book(user, 500_000, new Date('2026-03-31T22:00:00Z'));
    const march = await budgetStatus(ctx.pool, { userId: user, at: new Date('2026-03-31T21:59:59Z') });
    const april = await budgetStatus(ctx.pool, { userId: user, at: new Date('2026-03-31T22:00:00Z') });
    expect(march[0]).toMatchObject({ month: '2026-03', spentUsd: '0.600000000000000000', timeZone: 'Europe/Berlin' });
    expect(april[0]).toMatchObject({ month: '2026-04', spentUsd: '0.300000000000000000' });
    // In UTC both instants are March.
    const utc = await ctx.pool.query(`select spent_usd from budget_months where user_id = $1 and time_zone = 'UTC'`, [user]);
    expect(utc.rows.map((r) => r.spent_usd)).toEqual(['0.900000000000000000']);
  });

  it('a budget in a zone never used before finds the months already summed from the ledger', async () => {
    const user = 'tokyo-u1';
    await book(user, 1_000_000, new Date('2026-05-31T16:00:00Z')); // June 1st 01:00 in Tokyo
    await applyBudgets(
      ctx.operatorPool,
      { budgets: [{ userId: user, monthlyLimitUsd: '1', timeZone: 'Asia/Tokyo', effectiveFrom: new Date('2026-01-01T00:00:00Z') }] },
      'test',
    );
    const june = await budgetStatus(ctx.pool, { userId: user, at: new Date('2026-06-15T00:00:00Z') });
    expect(june[0]).toMatchObject({ month: '2026-06', timeZone: 'Asia/Tokyo', spentUsd: '0.600000000000000000' });
  });
});

describe('thresholds compare exact decimals', () => {
  it.each([
    ['79.999999 %', '0.79999999', 'default', 'default'],
    ['exactly 80 %', '0.8', 'cheap', 'cheap'],
    ['99.9999999 %', '0.999999999', 'cheap', 'blocked'],
    ['exactly 100 %', '1', 'blocked', 'blocked'],
  ])('%s of a one-dollar limit (spent %s) is %s, and the guard decides %s for a one-token call', async (_what, spent, tier, decided) => {
    const user = `threshold-${++keys}`;
    const at = new Date('2026-07-15T00:00:00Z');
    await applyBudgets(
      ctx.operatorPool,
      { budgets: [{ userId: user, monthlyLimitUsd: '1', timeZone: 'UTC', effectiveFrom: new Date('2026-07-01T00:00:00Z') }] },
      'test',
    );
    await bookExactSpend(ctx.ownerPool, `threshold-${keys}`, user, spent, at);
    const s = await budgetStatus(ctx.pool, { userId: user, at });
    expect(s[0].spentUsd).toBe((await ctx.pool.query('select $1::numeric(38,18)::text as v', [spent])).rows[0].v);
    expect(s[0].tier).toBe(tier);
    // The decision itself (reserve_budget, in SQL) draws the same lines: a one-token call ($0.00000015) fits below 100 %.
    const decision = await decideOneChatCall(user, `threshold-run-${keys}`, { promptTokens: 1, completionTokens: 0 }, true, at);
    expect(decision.tier).toBe(decided);
  });
});

/**
 * A one-dollar limit with gpt-4.1-nano as gpt-4o-mini's cheap model, and 0.50 of it spent; returns the instant it was
 * spent at, when the downgrade is in force (it takes effect as it is applied).
 */
async function halfOfOneDollarSpent(userId: string, key: string): Promise<Date> {
  await applyBudgets(
    ctx.operatorPool,
    {
      budgets: [{ userId, monthlyLimitUsd: '1', timeZone: 'UTC', effectiveFrom: new Date('2026-01-01T00:00:00Z') }],
      downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' },
    },
    'test',
  );
  const at = new Date();
  await bookExactSpend(ctx.ownerPool, key, userId, '0.5', at);
  return at;
}

// Under 80 % the default models are chosen only if their worst case fits; otherwise the cheap models' (priced only
// then), and blocked when neither fits or the run may not downgrade.
describe('under 80 %, a default worst case that does not fit', () => {
  it.each([
    ['the cheap worst case fits: cheap', 1_000_000, true, 'cheap', '0.4'],
    ['neither fits: blocked', 1_500_000, true, 'blocked', '0.6'],
    ['the run may not downgrade: blocked', 1_000_000, false, 'blocked', '0.6'],
  ])('%s', async (_what, completionTokens, mayDowngrade, tier, worstCaseUsd) => {
    const user = `no-room-${++keys}`;
    const at = await halfOfOneDollarSpent(user, `no-room-${keys}`);
    // Half the limit spent: the default band. 1,000,000 output tokens cost 0.60 on gpt-4o-mini (does not fit in the
    // 0.50 left) and 0.40 on gpt-4.1-nano (fits); 1,500,000 cost 0.90 and 0.60 (neither fits).
    const decision = await decideOneChatCall(user, `no-room-run-${keys}`, { promptTokens: 0, completionTokens }, mayDowngrade, at);
    expect(decision.tier).toBe(tier);
    expect((await ctx.pool.query('select $1::numeric = $2::numeric as same', [decision.worstCaseUsd, worstCaseUsd])).rows[0].same).toBe(
      true,
    );
    if (decision.tier === 'cheap') expect(decision.models).toEqual({ chat: 'openai/gpt-4.1-nano' });
    const reserved = await ctx.pool.query('select model, amount_usd::text as amount from budget_reservations where user_id = $1', [user]);
    expect(reserved.rows).toEqual(tier === 'cheap' ? [{ model: 'openai/gpt-4.1-nano', amount: '0.400000000000000000' }] : []);
  });
});

// A run's first decision that other runs' open reservations alone make worse waits for them (reserves nothing); a call
// made again (mayDowngrade false) never waits. Once they have settled the decision is the one the run would get alone.
describe("a first decision that only other runs' open reservations make worse", () => {
  it('waits for them to settle, reserving nothing, and then gets the tier spent alone gives', async () => {
    const user = `waits-${++keys}`;
    const at = await halfOfOneDollarSpent(user, `waits-${keys}`);
    // Another run's open reservation: 500,000 output tokens on gpt-4o-mini, 0.30.
    const other = await decideOneChatCall(user, `waits-other-${keys}`, { promptTokens: 0, completionTokens: 500_000 }, false, at);
    expect(other).toMatchObject({ tier: 'default' });
    // 400,000 tokens: 0.24 on gpt-4o-mini, 0.16 on gpt-4.1-nano. Alone (0.5 used) the default fits; with the other
    // reservation (0.8 used: the cheap band) only the cheap one would.
    const tokens = { promptTokens: 0, completionTokens: 400_000 };
    await expect(decideOneChatCall(user, `waits-run-${keys}`, tokens, true, at)).rejects.toThrow(AwaitingReservationsError);
    expect(
      (await ctx.pool.query('select count(*)::int as n from budget_reservations where run_id = $1', [`waits-run-${keys}`])).rows[0].n,
    ).toBe(0);
    // A call made again decides at once, counting the reservation: 0.8 + 0.24 does not fit.
    expect(await decideOneChatCall(user, `waits-again-${keys}`, tokens, false, at)).toMatchObject({ tier: 'blocked' });
    // The other run books 0.10 and so settles its reservation: now the default fits (0.6 + 0.24).
    await bookCompletion(ctx.ownerPool, `waits-other-${keys}:chat:1`, user, 166_666, at);
    expect(await decideOneChatCall(user, `waits-run-${keys}`, tokens, true, at)).toMatchObject({
      tier: 'default',
      models: { chat: 'openai/gpt-4o-mini' },
    });
  });
});
