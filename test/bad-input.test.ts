import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAdminServer, type RunningAdmin } from '../src/admin/server';
import { MAX_BUDGET_USERS } from '../src/budgets/budget-file';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { BUDGETS_FILE, PRICES_FILE, TASKS_FILE } from '../src/input-file';
import { describeOrUndefined } from '../src/schedules/describe-schedule';
import { applyPrices, loadPricesFile, MAX_PRICES } from '../src/ledger/prices';
import { MAX_TASKS } from '../src/tasks/tasks-file';
import { recordUsage } from '../src/ledger/record-usage';
import { chatBooking } from './support/bookings';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';

/**
 * Bad input, as a catalogue: every command, every kind of value a user gets wrong. Each must exit non-zero with one
 * message that names the value and says what to do instead, print no stack trace, and change nothing: schedules (as
 * described by Temporal), ledger, runs and prices are compared before and after.
 */

let ctx: TestContext;
const dir = mkdtempSync(join(tmpdir(), 'cronledger-bad-input-'));
let entryId: string;

const LONG_USER = 'u'.repeat(10_000);
const CONTROL_USER = 'user\u001b[2J\u0007';
const AMOUNT_21_DIGITS = '123456789012345678901';
/** Look-alikes of u1: each would be a second user beside u1 with a budget of its own. */
const ZERO_WIDTH_USER = 'u\u200b1';
const SPACED_USER = ' u1 ';
const DECOMPOSED_USER = 'Ame\u0301lie'; // "Amélie" with a combining acute accent: NFD, not NFC

/** A file in the scratch dir with this content; returns its path. */
function file(name: string, content: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof content === 'string' || Buffer.isBuffer(content) ? content : JSON.stringify(content));
  return path;
}

/** Valid JSON, padded with spaces to one byte over the cap: only the cap refuses it. */
const oversized = (name: string, content: unknown, maxBytes: number): string => {
  const json = JSON.stringify(content);
  return file(name, json + ' '.repeat(maxBytes + 1 - Buffer.byteLength(json)));
};
const budgetsOf = (users: Record<string, unknown>) => ({ budgets: { users } });

const task = (overrides: Record<string, unknown>) => ({
  tasks: [{ id: 'good-task', cron: '0 9 * * *', userId: 'u1', input: 'Plan my day.', ...overrides }],
});
const prices = (models: Record<string, unknown>, version = 'v9') => ({
  currency: 'USD',
  unit: 'per_million_tokens',
  versions: [{ version, effectiveFrom: '2030-01-01T00:00:00Z', models }],
});

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  entryId = (await recordUsage(ctx.ownerPool, chatBooking('bad-input-1', 'u1', new Date('2026-06-01T00:00:00Z')))).id;
  const applied = await runCli(['tasks', 'apply', 'test/fixtures/two-tasks.json'], ctx.env);
  expect(applied.code, applied.stderr).toBe(0);
});

afterAll(async () => {
  await ctx?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Everything a bad command must leave alone. Schedules by describe (not the eventually consistent list). */
async function state(): Promise<unknown> {
  const schedules: unknown[] = [];
  for (const id of ['cron-every-five', 'cron-nine-daily', 'cron-good-task']) {
    // absent is null; any other failure to describe (a busy server's DEADLINE_EXCEEDED after retries) fails loudly
    const d = (await describeOrUndefined(ctx.client, id)) ?? null;
    schedules.push(d && { id, spec: d.spec, action: d.action, policies: d.policies, state: d.state, memo: d.memo });
  }
  const table = async (sql: string) => (await ctx.pool.query(sql)).rows;
  // Compared with toEqual, which ignores key order (memos come back in any order).
  return {
    schedules,
    ledger: await table('select * from usage_ledger order by id'),
    runs: await table('select * from runs order by id'),
    prices: await table('select * from model_prices order by id'),
    priceRates: await table('select * from model_price_rates order by price_id, service_tier, long_context'),
    budgets: await table('select * from budgets order by id'),
  };
}

interface BadInput {
  what: string;
  args: () => string[];
  env?: NodeJS.ProcessEnv;
  /** Text the message must contain: the bad value (or, for a huge one, how it is named). */
  names: string | RegExp;
  /** The fix the message must give. */
  fix: RegExp;
}

const cases: BadInput[] = [
  // tasks files
  {
    what: 'cron with a minute of 61',
    args: () => ['tasks', 'apply', file('c1.json', task({ cron: '61 * * * *' }))],
    names: '61 * * * *',
    fix: /0-59|minute/,
  },
  {
    what: 'cron with four fields',
    args: () => ['tasks', 'apply', file('c2.json', task({ cron: '* * * *' }))],
    names: '* * * *',
    fix: /Use 5 fields/,
  },
  {
    what: 'cron that is a word',
    args: () => ['tasks', 'apply', file('c3.json', task({ cron: 'daily' }))],
    names: 'daily',
    fix: /Use 5 fields/,
  },
  {
    what: 'unknown time zone',
    args: () => ['tasks', 'apply', file('z1.json', task({ timezone: 'Mars/Olympus' }))],
    names: 'Mars/Olympus',
    fix: /Europe\/Berlin|IANA/,
  },
  {
    what: 'catchupWindow in words',
    args: () => ['tasks', 'apply', file('d1.json', task({ catchupWindow: '10 minutes' }))],
    names: 'catchupWindow',
    fix: /"30s", "10m" or "1h"/,
  },
  {
    what: 'negative jitter',
    args: () => ['tasks', 'apply', file('d2.json', task({ jitter: '-5m' }))],
    names: 'jitter',
    fix: /"30s", "10m" or "1h"/,
  },
  {
    what: 'duplicate task ids',
    args: () => ['tasks', 'apply', file('t1.json', { tasks: [task({}).tasks[0], task({}).tasks[0]] })],
    names: 'good-task',
    fix: /unique|once|duplicate/i,
  },
  {
    what: 'task id with capitals',
    args: () => ['tasks', 'apply', file('t2.json', task({ id: 'Bad_ID' }))],
    names: 'id',
    fix: /lowercase letters, digits and "-"/,
  },
  {
    what: 'unknown field',
    args: () => ['tasks', 'apply', file('t3.json', task({ cronn: '* * * * *' }))],
    names: 'cronn',
    fix: /examples\/tasks\.json/,
  },
  { what: 'malformed JSON', args: () => ['tasks', 'apply', file('t4.json', '{"tasks": [')], names: 't4.json', fix: /JSON/ },
  { what: 'a list, not an object', args: () => ['tasks', 'apply', file('t5.json', [])], names: 't5.json', fix: /examples\/tasks\.json/ },
  { what: 'a missing tasks file', args: () => ['tasks', 'apply', join(dir, 'nope.json')], names: 'nope.json', fix: /path|exist|file/i },
  {
    what: 'empty user ID',
    args: () => ['tasks', 'apply', file('u1.json', task({ userId: '' }))],
    names: 'userId',
    fix: /1 to 200 characters/,
  },
  {
    what: '10,000-character user ID',
    args: () => ['tasks', 'apply', file('u2.json', task({ userId: LONG_USER }))],
    names: 'userId',
    fix: /1 to 200 characters/,
  },
  {
    what: 'user ID with control characters',
    args: () => ['tasks', 'apply', file('u3.json', task({ userId: CONTROL_USER }))],
    names: 'userId',
    fix: /control or format characters/,
  },
  {
    what: 'user ID with a zero-width space',
    args: () => ['tasks', 'apply', file('u4.json', task({ userId: ZERO_WIDTH_USER }))],
    names: '"u\\u200b1" contains U+200B',
    fix: /without control or format characters/,
  },
  {
    what: 'user ID with surrounding spaces',
    args: () => ['tasks', 'apply', file('u5.json', task({ userId: SPACED_USER }))],
    names: '" u1 " has leading or trailing spaces',
    fix: /1 to 200 characters/,
  },
  {
    what: 'user ID not in NFC',
    args: () => ['tasks', 'apply', file('u6.json', task({ userId: DECOMPOSED_USER }))],
    names: '"Ame\\u0301lie" is not in Unicode NFC',
    fix: /write it composed: "Amélie"/,
  },
  {
    what: 'a tasks file over its byte cap',
    args: () => ['tasks', 'apply', oversized('big-tasks.json', task({}), TASKS_FILE.maxBytes)],
    names: `big-tasks.json is ${(TASKS_FILE.maxBytes + 1).toLocaleString('en-US')} bytes`,
    fix: /the cap is 16,777,216 bytes \(16 MiB\): keep task inputs short/,
  },
  {
    what: 'a tasks file with too many tasks',
    args: () => [
      'tasks',
      'apply',
      file('many-tasks.json', { tasks: Array.from({ length: MAX_TASKS + 1 }, (_, i) => task({ id: `t-${i}` }).tasks[0]) }),
    ],
    names: 'has 10,001 tasks',
    fix: /the cap is 10,000: run a second deployment/,
  },
  {
    what: 'a tasks file that is not UTF-8',
    args: () => ['tasks', 'apply', file('latin1.json', Buffer.from('{"tasks":[{"userId":"Am\xe9lie"}]}', 'latin1'))],
    names: 'latin1.json',
    fix: /save it as UTF-8/,
  },
  {
    what: 'empty input',
    args: () => ['tasks', 'apply', file('i1.json', task({ input: '' }))],
    names: 'input',
    fix: /say what the run should do/,
  },
  // tasks commands and backfill
  { what: 'pausing an unknown task', args: () => ['tasks', 'pause', 'no-such-task'], names: 'no-such-task', fix: /tasks apply|tasks list/ },
  {
    what: 'triggering an unknown task',
    args: () => ['tasks', 'trigger', 'no-such-task'],
    names: 'no-such-task',
    fix: /tasks apply|tasks list/,
  },
  {
    what: 'backfill range backwards',
    args: () => ['backfill', '--task', 'nine-daily', '--from', '2026-11-02T10:00:00Z', '--to', '2026-11-02T09:00:00Z'],
    names: '2026-11-02T10:00:00Z',
    fix: /before|after/,
  },
  {
    what: 'backfill range too long',
    args: () => ['backfill', '--task', 'nine-daily', '--from', '2026-01-01T00:00:00Z', '--to', '2026-03-01T00:00:00Z'],
    names: /2026-01-01|range|days/,
    fix: /smaller windows/,
  },
  {
    what: 'backfill from a word',
    args: () => ['backfill', '--task', 'nine-daily', '--from', 'yesterday', '--to', '2026-11-02T09:00:00Z'],
    names: 'yesterday',
    fix: /ISO|2026-/,
  },
  {
    what: 'backfill of an unknown task',
    args: () => ['backfill', '--task', 'no-such-task', '--from', '2026-11-02T09:00:00Z', '--to', '2026-11-02T10:00:00Z'],
    names: 'no-such-task',
    fix: /tasks apply|tasks list/,
  },
  {
    what: 'backfill of neither --task nor --all',
    args: () => ['backfill', '--from', '2026-11-02T09:00:00Z', '--to', '2026-11-02T10:00:00Z'],
    names: '--task',
    fix: /--all/,
  },
  // prices files
  {
    what: 'a missing prices file',
    args: () => ['prices', 'apply', join(dir, 'no-prices.json')],
    names: 'no-prices.json',
    fix: /path|exist|file/i,
  },
  {
    what: 'a price as a JSON number',
    args: () => ['prices', 'apply', file('p1.json', prices({ 'm/x': { input: 0.15, output: '1' } }))],
    names: 'models.m/x.input',
    fix: /expected string[^]*prices\/standard\.json/,
  },
  {
    what: 'a price with 13 decimals',
    args: () => ['prices', 'apply', file('p2.json', prices({ 'm/x': { input: '0.0000000000001', output: '1' } }))],
    names: 'input',
    fix: /at most 12 decimals/,
  },
  {
    what: 'a negative price',
    args: () => ['prices', 'apply', file('p5.json', prices({ 'm/x': { input: '1', cacheWrite5m: '-1.25', output: '1' } }))],
    names: 'models.m/x.cacheWrite5m: must be a decimal string such as "0.15" (at most 12 decimals) (got "-1.25")',
    fix: /prices\/standard\.json/,
  },
  {
    what: 'a price version that ends before it starts',
    args: () => [
      'prices',
      'apply',
      file('p6.json', {
        ...prices({}),
        versions: [{ ...prices({ 'm/x': { input: '1', output: '1' } }).versions[0], effectiveTo: '2029-12-31T00:00:00Z' }],
      }),
    ],
    names: 'versions.0.effectiveTo: must be after effectiveFrom (got "2029-12-31T00:00:00Z")',
    fix: /prices\/standard\.json/,
  },
  {
    what: 'an unknown service tier',
    args: () => [
      'prices',
      'apply',
      file('p7.json', prices({ 'm/x': { input: '1', output: '1', tiers: { turbo: { input: '2', output: '2' } } } })),
    ],
    names: '"turbo"',
    fix: /prices\/standard\.json/,
  },
  {
    what: 'a long-context threshold that is no whole number of tokens',
    args: () => [
      'prices',
      'apply',
      file('p8.json', prices({ 'm/x': { input: '1', output: '1', longContext: { aboveInputTokens: 200000.5, input: '2', output: '2' } } })),
    ],
    names: 'models.m/x.longContext.aboveInputTokens: must be a whole number of prompt tokens (got 200000.5)',
    fix: /prices\/standard\.json/,
  },
  {
    what: 'a long-context threshold written as text',
    args: () => [
      'prices',
      'apply',
      file('p9.json', prices({ 'm/x': { input: '1', output: '1', longContext: { aboveInputTokens: '200k', input: '2', output: '2' } } })),
    ],
    names: '(got "200k")',
    fix: /prices\/standard\.json/,
  },
  {
    what: 'a tasks file asking for a service tier that is none',
    args: () => ['tasks', 'apply', file('t-tier.json', task({ serviceTier: 'turbo' }))],
    names: 'serviceTier',
    fix: /"standard"\|"batch"\|"flex"\|"priority"/,
  },
  {
    what: 'a prices file that is not JSON',
    args: () => ['prices', 'apply', file('p3.json', 'input: 0.15')],
    names: 'p3.json',
    fix: /JSON/,
  },
  {
    what: 'a published version with other prices',
    args: () => [
      'prices',
      'apply',
      file('p4.json', {
        ...prices({ 'openai/gpt-4o-mini': { input: '9.99', cachedInput: '0.075', output: '0.60' } }, 'v1'),
        versions: [
          {
            version: 'v1',
            effectiveFrom: '2024-07-18T00:00:00Z',
            models: { 'openai/gpt-4o-mini': { input: '9.99', cachedInput: '0.075', output: '0.60' } },
          },
        ],
      }),
    ],
    names: 'v1',
    fix: /new version|published/,
  },
  {
    what: 'a prices file over its byte cap',
    args: () => ['prices', 'apply', oversized('big-prices.json', prices({ 'm/x': { input: '1', output: '1' } }), PRICES_FILE.maxBytes)],
    names: `big-prices.json is ${(PRICES_FILE.maxBytes + 1).toLocaleString('en-US')} bytes`,
    fix: /the cap is 1,048,576 bytes \(1 MiB\): list only the versions still to apply/,
  },
  {
    what: 'a prices file with too many model prices',
    args: () => [
      'prices',
      'apply',
      file(
        'many-prices.json',
        prices(Object.fromEntries(Array.from({ length: MAX_PRICES + 1 }, (_, i) => [`m/x${i}`, { input: '1', output: '1' }]))),
      ),
    ],
    names: 'has 10,001 model prices',
    fix: /the cap is 10,000: list only the versions still to apply/,
  },
  // budgets files and commands: the same user-ID rule as the tasks file
  {
    what: 'a budgets file naming a user with a zero-width space',
    args: () => ['budgets', 'apply', file('b1.json', budgetsOf({ u1: { monthly: '1' }, [ZERO_WIDTH_USER]: { monthly: '1' } }))],
    names: '"u\\u200b1" contains U+200B',
    fix: /without control or format characters/,
  },
  {
    what: 'a budgets file naming a user with surrounding spaces',
    args: () => ['budgets', 'apply', file('b2.json', budgetsOf({ [SPACED_USER]: { monthly: '1' } }))],
    names: '" u1 " has leading or trailing spaces',
    fix: /1 to 200 characters/,
  },
  {
    what: 'a budgets file naming a user not in NFC',
    args: () => ['budgets', 'apply', file('b3.json', budgetsOf({ [DECOMPOSED_USER]: { monthly: '1' } }))],
    names: 'is not in Unicode NFC',
    fix: /write it composed: "Amélie"/,
  },
  {
    what: 'a budgets file over its byte cap',
    args: () => ['budgets', 'apply', oversized('big-budgets.json', budgetsOf({ u1: { monthly: '1' } }), BUDGETS_FILE.maxBytes)],
    names: `big-budgets.json is ${(BUDGETS_FILE.maxBytes + 1).toLocaleString('en-US')} bytes`,
    fix: /the cap is 16,777,216 bytes \(16 MiB\): give the users without a budget of their own the "default" budget/,
  },
  {
    what: 'a budgets file with too many users',
    args: () => [
      'budgets',
      'apply',
      file(
        'many-budgets.json',
        budgetsOf(Object.fromEntries(Array.from({ length: MAX_BUDGET_USERS + 1 }, (_, i) => [`u${i}`, { monthly: '1' }]))),
      ),
    ],
    names: 'has 100,001 users',
    fix: /the cap is 100,000: give the users without a budget of their own the "default" budget/,
  },
  {
    what: 'budgets set for a user with a zero-width space',
    args: () => ['budgets', 'set', ZERO_WIDTH_USER, '--monthly', '5'],
    names: 'user "u\\u200b1" contains U+200B',
    fix: /without control or format characters/,
  },
  {
    what: 'budgets status of a user with surrounding spaces',
    args: () => ['budgets', 'status', '--user', SPACED_USER],
    names: '--user " u1 " has leading or trailing spaces',
    fix: /1 to 200 characters/,
  },
  // reconcile
  {
    what: 'reconcile a day that does not exist',
    args: () => ['reconcile', 'openai', '--from', '2026-02-30', '--to', '2026-03-01'],
    names: '--from "2026-02-30"',
    fix: /write it as YYYY-MM-DD/,
  },
  {
    what: 'reconcile --to before --from',
    args: () => ['reconcile', 'anthropic', '--from', '2026-03-02', '--to', '2026-03-01'],
    names: '--to 2026-03-01 is before --from 2026-03-02',
    fix: /give --to the same day or later/,
  },
  {
    what: "reconcile without saying which of the organization's spend is cronledger's",
    args: () => ['reconcile', 'openai', '--from', '2026-03-01', '--to', '2026-03-01'],
    names: 'CRONLEDGER_OPENAI_PROJECT_IDS',
    fix: /--whole-organization/,
  },
  {
    what: 'reconcile without an admin key',
    args: () => ['reconcile', 'anthropic', '--from', '2026-03-01', '--to', '2026-03-01', '--whole-organization'],
    names: 'ANTHROPIC_ADMIN_KEY is not set',
    fix: /--file/,
  },
  {
    what: 'reconcile a saved page that is not JSON',
    args: () => [
      'reconcile',
      'openai',
      '--from',
      '2026-03-01',
      '--to',
      '2026-03-01',
      '--whole-organization',
      '--file',
      file('page.json', '{"data": ['),
    ],
    names: 'page.json is not JSON',
    fix: /as the API sent it/,
  },
  // ledger adjust and credit
  {
    what: 'adjust by a word',
    args: () => ['ledger', 'adjust', '--entry', entryId, '--amount', 'ten', '--reason', 'r'],
    names: '"ten"',
    fix: /like 0\.15 or -2\.50/,
  },
  {
    what: 'adjust by zero',
    args: () => ['ledger', 'adjust', '--entry', entryId, '--amount', '0', '--reason', 'r'],
    names: '--amount 0',
    fix: /e\.g\. 0\.25/,
  },
  {
    what: 'adjust by a 21-digit amount',
    args: () => ['ledger', 'adjust', '--entry', entryId, '--amount', AMOUNT_21_DIGITS, '--reason', 'r'],
    names: AMOUNT_21_DIGITS,
    fix: /at most 20 digits fit/,
  },
  {
    what: 'adjust by 19 decimals',
    args: () => ['ledger', 'adjust', '--entry', entryId, '--amount', '0.0000000000000000001', '--reason', 'r'],
    names: '0.0000000000000000001',
    fix: /at most 18/,
  },
  {
    what: 'adjust by an empty amount',
    args: () => ['ledger', 'adjust', '--entry', entryId, '--amount=', '--reason', 'r'],
    names: '--amount ""',
    fix: /like 0\.15 or -2\.50/,
  },
  {
    what: 'adjust an entry id that is a word',
    args: () => ['ledger', 'adjust', '--entry', 'first', '--amount', '1', '--reason', 'r'],
    names: 'first',
    fix: /whole number|ledger entry id/,
  },
  {
    what: 'adjust an entry that does not exist',
    args: () => ['ledger', 'adjust', '--entry', '999999', '--amount', '1', '--reason', 'r'],
    names: '999999',
    fix: /cronledger ledger|list/,
  },
  {
    what: 'adjust without a reason',
    args: () => ['ledger', 'adjust', '--entry', entryId, '--amount', '1', '--reason', ' '],
    names: '--reason',
    fix: /why|say/,
  },
  {
    what: 'a negative credit',
    args: () => ['ledger', 'credit', '--user', 'u1', '--amount=-5', '--reason', 'r'],
    names: '-5',
    fix: /must be positive/,
  },
  {
    what: 'a zero credit',
    args: () => ['ledger', 'credit', '--user', 'u1', '--amount', '0.00', '--reason', 'r'],
    names: '--amount 0.00',
    fix: /e\.g\. 0\.25/,
  },
  {
    what: 'a 21-digit credit',
    args: () => ['ledger', 'credit', '--user', 'u1', '--amount', AMOUNT_21_DIGITS, '--reason', 'r'],
    names: AMOUNT_21_DIGITS,
    fix: /at most 20 digits fit/,
  },
  {
    what: 'a credit of a number with a comma',
    args: () => ['ledger', 'credit', '--user', 'u1', '--amount', '1,50', '--reason', 'r'],
    names: '"1,50"',
    fix: /like 0\.15/,
  },
  {
    what: 'a credit to an empty user ID',
    args: () => ['ledger', 'credit', '--user', '', '--amount', '1', '--reason', 'r'],
    names: '--user ""',
    fix: /1 to 200 characters/,
  },
  {
    what: 'a credit to a 10,000-character user ID',
    args: () => ['ledger', 'credit', '--user', LONG_USER, '--amount', '1', '--reason', 'r'],
    names: /--user "u{40}"\.\.\. has 10000 characters/,
    fix: /1 to 200 characters/,
  },
  {
    what: 'a credit to a user ID with control characters',
    args: () => ['ledger', 'credit', '--user', CONTROL_USER, '--amount', '1', '--reason', 'r'],
    names: '--user "user\\u001b[2J\\u0007"',
    fix: /control or format characters/,
  },
  {
    what: 'a credit to a user ID not in NFC',
    args: () => ['ledger', 'credit', '--user', DECOMPOSED_USER, '--amount', '1', '--reason', 'r'],
    names: '--user "Ame\\u0301lie" is not in Unicode NFC',
    fix: /write it composed: "Amélie"/,
  },
  {
    what: 'a ledger listing of a user with a zero-width space',
    args: () => ['ledger', '--user', ZERO_WIDTH_USER],
    names: '--user "u\\u200b1" contains U+200B',
    fix: /without control or format characters/,
  },
  {
    what: 'a credit for an entry id that is a word',
    args: () => ['ledger', 'credit', '--user', 'u1', '--amount', '1', '--reason', 'r', '--entry', 'abc'],
    names: '"abc"',
    fix: /whole number/,
  },
  { what: 'ledger listing with a bad limit', args: () => ['ledger', '--limit', 'lots'], names: '"lots"', fix: /whole number from 1/ },
  { what: 'runs with a zero limit', args: () => ['runs', '--limit', '0'], names: '"0"', fix: /whole number from 1/ },
  // reports
  { what: 'report month 13', args: () => ['report', '--month', '2026-13'], names: '2026-13', fix: /YYYY-MM/ },
  { what: 'report month without its zero', args: () => ['report', '--month', '2026-6'], names: '2026-6', fix: /YYYY-MM/ },
  {
    what: 'report in an unknown zone',
    args: () => ['report', '--month', '2026-06', '--tz', 'Mars/Olympus'],
    names: 'Mars/Olympus',
    fix: /Europe\/Berlin|IANA/,
  },
  {
    what: 'report by an unknown cut',
    args: () => ['report', '--month', '2026-06', '--by', 'team'],
    names: 'team',
    fix: /user, day or model|user\|day\|model|user, day, model/,
  },
  {
    what: 'report in an unknown format',
    args: () => ['report', '--month', '2026-06', '--format', 'pdf'],
    names: 'pdf',
    fix: /table|json|csv/,
  },
  { what: 'report deliver of month 13', args: () => ['report', 'deliver', '--month', '2026-13'], names: '2026-13', fix: /YYYY-MM/ },
  {
    what: 'rollups rebuild in an unknown zone',
    args: () => ['rollups', 'rebuild', '--month', '2026-06', '--tz', 'Nowhere/Land'],
    names: 'Nowhere/Land',
    fix: /Europe\/Berlin|IANA/,
  },
  // environment
  {
    what: 'DATABASE_URL that is not a URL',
    args: () => ['runs'],
    env: { DATABASE_URL: 'not a url, password hunter2' },
    names: 'DATABASE_URL',
    fix: /postgres:\/\/user:password@host/,
  },
  {
    what: 'DATABASE_URL of another scheme',
    args: () => ['ledger'],
    env: { DATABASE_URL: 'mysql://u:hunter2@127.0.0.1/x' },
    names: 'DATABASE_URL',
    fix: /postgres:\/\/user:password@host/,
  },
  {
    what: 'DATABASE_OWNER_URL that is not a URL',
    args: () => ['db', 'migrate'],
    env: { DATABASE_OWNER_URL: '::hunter2::' },
    names: 'DATABASE_OWNER_URL',
    fix: /postgres:\/\/user:password@host/,
  },
  {
    what: 'TEMPORAL_ADDRESS that is not host:port',
    args: () => ['tasks', 'list'],
    env: { TEMPORAL_ADDRESS: 'http://[nope' },
    names: 'TEMPORAL_ADDRESS',
    fix: /host:port|127\.0\.0\.1:7233/,
  },
  {
    what: 'an admin missed-slot grace that is not a duration',
    args: () => ['admin', '--port', '0', '--missed-slot-grace', '15 minutes'],
    names: '"15 minutes"',
    fix: /15m, 1h30m or 90s/,
  },
  {
    what: 'an admin missed-slot window of zero',
    args: () => ['admin', '--port', '0', '--missed-slot-window', '0s'],
    names: '--missed-slot-window 0',
    fix: /such as 24h/,
  },
];

describe('bad input, as a catalogue', () => {
  it('has at least 40 cases', () => expect(cases.length).toBeGreaterThanOrEqual(40));

  // Each case is a real CLI process, and most of its time is that process starting: the cases run a few at a time
  // (vitest's maxConcurrency). None may change anything, so every case's before and after must still be equal while
  // others run; a case that did change something fails, and so may those that ran beside it.
  it.concurrent.for(cases.map((c) => [c.what, c] as const))('%s', async ([, c], { expect }) => {
    const before = await state();
    const r = await runCli(c.args(), { ...ctx.env, ...c.env });
    expect(r.code, `exit code; stdout:\n${r.stdout}`).not.toBe(0);
    const message = r.stderr.slice(0, 600);
    expect(message).not.toMatch(/\n\s+at |unexpected error/);
    if (typeof c.names === 'string') expect(r.stderr.includes(c.names), `names ${c.names}: ${message}`).toBe(true);
    else expect(c.names.test(r.stderr), `names ${c.names}: ${message}`).toBe(true);
    expect(c.fix.test(r.stderr), `gives the fix ${c.fix}: ${message}`).toBe(true);
    expect(r.stderr).not.toContain('hunter2'); // a URL that might hold a password is never echoed
    expect(r.stderr.length).toBeLessThan(2_000); // a 10,000-character value is not echoed whole
    expect(await state()).toEqual(before);
  });
});

describe("the admin page's query parameters", () => {
  let readonly: pg.Pool;
  let admin: RunningAdmin;

  beforeAll(async () => {
    readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 2);
    admin = await startAdminServer({ pool: readonly, namespace: ctx.namespace, host: '127.0.0.1', port: 0 });
  });

  afterAll(async () => {
    await admin?.close();
    await readonly?.end();
  });

  const user = (id: string) => `/users/${encodeURIComponent(id)}?month=2026-06`;
  const params: [what: string, path: string, names: string, fix: RegExp][] = [
    ['month 13', '/?month=2026-13', '"2026-13"', /write it as YYYY-MM/],
    ['a month that is a word', '/users?month=june', '"june"', /write it as YYYY-MM/],
    ['a 10,000-character month', `/models?month=${'2'.repeat(10_000)}`, `"${'2'.repeat(40)}"...`, /write it as YYYY-MM/],
    ['a zone the rollups do not track', '/?tz=Mars%2FOlympus', '"Mars/Olympus"', /use one of: UTC/],
    ['a zone with a zero-width space', `/users?tz=${encodeURIComponent('U\u200bTC')}`, '"U\\u200bTC"', /use one of: UTC/],
    ['a user with a zero-width space', user(ZERO_WIDTH_USER), '"u\\u200b1" contains U+200B', /without control or format characters/],
    ['a user with surrounding spaces', user(SPACED_USER), '" u1 " has leading or trailing spaces', /1 to 200 characters/],
    ['a user not in NFC', user(DECOMPOSED_USER), 'is not in Unicode NFC', /write it composed: "Amélie"/],
    ['a 10,000-character user', user(LONG_USER), 'has 10000 characters', /1 to 200 characters/],
    ['a user with control characters', user(CONTROL_USER), '"user\\u001b[2J\\u0007"', /control or format characters/],
  ];

  it.each(params)('%s: 400 with the value and the fix, on the page and its /api twin, no stack trace', async (_what, path, names, fix) => {
    for (const url of [path, `/api${path === '/' || path.startsWith('/?') ? '/overview' + path.slice(1) : path}`]) {
      const r = await fetch(`${admin.url}${url}`);
      const body = await r.text();
      expect([url, r.status]).toEqual([url, 400]);
      const message = url.startsWith('/api/') ? (JSON.parse(body) as { error: string }).error : body;
      // the page escapes its text as HTML; the message itself is the same
      const text = url.startsWith('/api/')
        ? message
        : message.replaceAll('&quot;', '"').replaceAll('&#39;', "'").replaceAll('&#96;', '`').replaceAll('&amp;', '&');
      expect(text.includes(names), `${url} names ${names}: ${text.slice(0, 600)}`).toBe(true);
      expect(fix.test(text), `${url} gives the fix ${fix}: ${text.slice(0, 600)}`).toBe(true);
      expect(text).not.toMatch(/\n\s+at |internal error/);
      expect(body.length).toBeLessThan(10_000); // a 10,000-character value is not echoed whole
    }
  });
});
