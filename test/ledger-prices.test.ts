import { WorkflowFailedError } from '@temporalio/client';
import type pg from 'pg';
import { randomUUID } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LedgerEntry } from '../src/ledger/entries';
import { createPriceChecks, PRICE_IN_FORCE_TTL_MS } from '../src/ledger/price-check';
import { applyPrices, loadPricesFile, NoPriceError, type PricesFile } from '../src/ledger/prices';
import { recordUsage } from '../src/ledger/record-usage';
import { runCli } from './support/cli';
import type { TestContext } from './support/context';
import { booking, causeChain, CountingProvider, entriesOf, ledgerContext, runScheduled, STANDARD_PRICES } from './support/ledger';
import { fullUsage } from '../src/models/provider';

// Prices: no call without one, versions by time, and the prices CLI.

let ctx: TestContext;
beforeAll(async () => {
  ctx = await ledgerContext(import.meta.url);
});
afterAll(async () => ctx?.close());

describe('no call without a price', () => {
  it('an unpriced model fails the run with NoPriceError before any call: no provider call, no ledger row, run failed', async () => {
    const provider = new CountingProvider();
    const { workflowId, error } = await runScheduled(ctx, `ledger-noprice-${randomUUID().slice(0, 6)}`, {
      provider,
      model: 'openai/gpt-imaginary-9',
    });

    expect(error).toBeInstanceOf(WorkflowFailedError);
    const chain = causeChain(error);
    expect(chain.types).toContain('NoPriceError');
    expect(chain.messages.join('\n')).toMatch(/no price in force for model "openai\/gpt-imaginary-9"/);
    expect(provider.calls).toBe(0);
    expect(await entriesOf(ctx, workflowId)).toHaveLength(0);
    const run = await ctx.pool.query<{ status: string; error: string }>('select status, error from runs where workflow_id = $1', [
      workflowId,
    ]);
    expect(run.rows).toHaveLength(1);
    expect(run.rows[0].status).toBe('failed');
    expect(run.rows[0].error).toMatch(/openai\/gpt-imaginary-9/);
  }, 60_000);

  it('a model priced only for another kind of call (an embedding model used for chat) is refused before any call too', async () => {
    const provider = new CountingProvider();
    const { workflowId, error } = await runScheduled(ctx, `ledger-wrongkind-${randomUUID().slice(0, 6)}`, {
      provider,
      model: 'openai/text-embedding-3-small',
    });

    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(causeChain(error).types).toContain('NoPriceError');
    expect(causeChain(error).messages.join('\n')).toMatch(
      /no input price \(version v1\) in force for model "openai\/text-embedding-3-small"/,
    );
    expect(provider.calls).toBe(0);
    expect(await entriesOf(ctx, workflowId)).toHaveLength(0);
  }, 60_000);
});

/** The database's clock, as a Date. */
const dbNow = async (): Promise<Date> => (await ctx.pool.query<{ now: Date }>('select clock_timestamp() as now')).rows[0].now;

/** One price version of one chat model, applied as the operator. */
const applyVersion = (model: string, version: string, from: Date, rates: Record<string, unknown>, to?: Date) =>
  applyPrices(
    ctx.operatorPool,
    {
      currency: 'USD',
      unit: 'per_million_tokens',
      versions: [
        { version, effectiveFrom: from.toISOString(), ...(to ? { effectiveTo: to.toISOString() } : {}), models: { [model]: rates } },
      ],
    } as PricesFile,
    'test',
  );

/** A worker's remembered price checks on a pool that counts its round trips. */
const countedChecks = (monotonicNow?: () => number) => {
  let trips = 0;
  const db = {
    query: (...args: unknown[]) => ((trips += 1), (ctx.pool.query as (...a: unknown[]) => unknown)(...args)),
  } as unknown as pg.Pool;
  return { checks: createPriceChecks(db, monotonicNow), trips: () => trips };
};

describe('the price check a worker remembers', () => {
  it('trusts a price found in force without asking again, but never past its effective_to by the database clock', async () => {
    const model = `test/ending-${randomUUID().slice(0, 6)}`;
    const endsAt = new Date((await dbNow()).getTime() + 2_000);
    await applyVersion(model, 'e1', new Date('2026-01-01T00:00:00Z'), { input: '1', output: '2' }, endsAt);
    const { checks, trips } = countedChecks();

    await checks.refuseUnpricedCall(model, 'chat');
    await checks.refuseUnpricedCall(model, 'chat');
    expect(trips()).toBe(1);
    // another kind of call (or another tier) of the same model is its own check
    await expect(checks.refuseUnpricedCall(model, 'embedding')).rejects.toThrow(NoPriceError);
    expect(trips()).toBe(2);

    while ((await dbNow()) <= endsAt) await new Promise((resolve) => setTimeout(resolve, 100));
    // well within PRICE_IN_FORCE_TTL_MS of the first check: the price's end, not the TTL, ends the trust
    await expect(checks.refuseUnpricedCall(model, 'chat')).rejects.toThrow(new RegExp(`no price in force for model "${model}"`));
  }, 30_000);

  it('never remembers a refusal, and trusts a price for PRICE_IN_FORCE_TTL_MS at most when a version applied later ends it', async () => {
    const model = `test/repriced-${randomUUID().slice(0, 6)}`;
    let now = 0;
    const { checks, trips } = countedChecks(() => now);
    await expect(checks.refuseUnpricedCall(model, 'chat', 'priority')).rejects.toThrow(NoPriceError);
    await applyVersion(model, 'r1', new Date('2026-01-01T00:00:00Z'), {
      input: '1',
      output: '2',
      tiers: { priority: { input: '2', output: '4' } },
    });
    await checks.refuseUnpricedCall(model, 'chat', 'priority');
    expect(trips()).toBe(2);

    // a version without priority rates, in force from now on: applied after the check, so the check can't know of it
    await applyVersion(model, 'r2', await dbNow(), { input: '1', output: '2' });
    now += PRICE_IN_FORCE_TTL_MS - 1;
    await checks.refuseUnpricedCall(model, 'chat', 'priority');
    expect(trips()).toBe(2);
    now += 1;
    await expect(checks.refuseUnpricedCall(model, 'chat', 'priority')).rejects.toThrow(/no priority tier input price \(version r2\)/);
    await expect(checks.refuseUnpricedCall(model, 'chat', 'priority')).rejects.toThrow(NoPriceError);
    expect(trips()).toBe(4);
  });

  it("stops trusting a version at the next version's start, as applied when it checked", async () => {
    const model = `test/superseded-${randomUUID().slice(0, 6)}`;
    await applyVersion(model, 's1', new Date('2026-01-01T00:00:00Z'), {
      input: '1',
      output: '2',
      tiers: { flex: { input: '1', output: '1' } },
    });
    const startsAt = new Date((await dbNow()).getTime() + 2_000);
    await applyVersion(model, 's2', startsAt, { input: '1', output: '2' });
    const { checks, trips } = countedChecks();
    await checks.refuseUnpricedCall(model, 'chat', 'flex');
    await checks.refuseUnpricedCall(model, 'chat', 'flex');
    expect(trips()).toBe(1);
    while ((await dbNow()) <= startsAt) await new Promise((resolve) => setTimeout(resolve, 100));
    await expect(checks.refuseUnpricedCall(model, 'chat', 'flex')).rejects.toThrow(/no flex tier input price \(version s2\)/);
  }, 30_000);
});

describe('price versions', () => {
  it('a price change mid-month: the old row keeps its cost and version, the new row uses the new version', async () => {
    const model = 'test/midmonth-model';
    const v1 = { version: 'v1', effectiveFrom: '2026-11-01T00:00:00Z', models: { [model]: { input: '0.40', output: '1.60' } } };
    const v2 = {
      version: 'v2',
      effectiveFrom: '2026-11-15T00:00:00Z',
      models: { [model]: { input: '0.25', cachedInput: '0.125', output: '1.00' } },
    };
    await applyPrices(ctx.operatorPool, { currency: 'USD', unit: 'per_million_tokens', versions: [v1] }, 'test');

    const usage = fullUsage({ promptTokens: 10_000, cachedPromptTokens: 2_000, completionTokens: 3_000, reasoningTokens: 0 });
    const before = await recordUsage(ctx.ownerPool, booking({ model, usage, occurredAt: new Date('2026-11-10T12:00:00Z') }));
    // v1 has no cached rate, so cached tokens are billed at input: 10,000 × 0.40 + 3,000 × 1.60 per million.
    expect(before.price_version).toBe('v1');
    expect(before.cost_usd).toBe('0.008800000000000000');

    const both = await applyPrices(ctx.operatorPool, { currency: 'USD', unit: 'per_million_tokens', versions: [v1, v2] }, 'test');
    expect(both.unchanged).toEqual([{ model, version: 'v1' }]);
    expect(both.added).toEqual([{ model, version: 'v2' }]);

    const after = await recordUsage(ctx.ownerPool, booking({ model, usage, occurredAt: new Date('2026-11-20T12:00:00Z') }));
    // 8,000 × 0.25 + 2,000 × 0.125 + 3,000 × 1.00 per million
    expect(after.price_version).toBe('v2');
    expect(after.cost_usd).toBe('0.005250000000000000');

    const reread = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where id = $1', [before.id])).rows[0];
    expect(reread.cost_usd).toBe('0.008800000000000000');
    expect(reread.price_version).toBe('v1');
    // A late entry for a moment before v2 still gets v1: the price in force when the usage happened.
    const late = await recordUsage(ctx.ownerPool, booking({ model, usage, occurredAt: new Date('2026-11-14T23:59:59Z') }));
    expect(late.price_version).toBe('v1');
  });
});

describe('prices CLI', () => {
  it('apply reports unchanged versions, refuses an edited one, and list prints exact decimal strings', async () => {
    const again = await runCli(['prices', 'apply', STANDARD_PRICES], ctx.env);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/unchanged\s+openai\/gpt-4o-mini v1/);
    const standardVersions = loadPricesFile(STANDARD_PRICES).versions.reduce((n, v) => n + Object.keys(v.models).length, 0);
    expect(again.stdout).toMatch(new RegExp(`0 added, ${standardVersions} unchanged`));

    const dir = await mkdtemp(join(tmpdir(), 'cronledger-prices-'));
    const edited = join(dir, 'edited.json');
    const file = loadPricesFile(STANDARD_PRICES);
    file.versions[0].models['openai/gpt-4o-mini'].input = '0.10';
    await writeFile(edited, JSON.stringify(file));
    const refused = await runCli(['prices', 'apply', edited], ctx.env);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/price version "v1" of openai\/gpt-4o-mini already exists with different prices/);

    const added = join(dir, 'v2.json');
    await writeFile(
      added,
      JSON.stringify({
        currency: 'USD',
        unit: 'per_million_tokens',
        versions: [
          {
            version: 'cli-v1',
            effectiveFrom: '2027-01-01T00:00:00Z',
            models: { 'test/cli-model': { input: '0.000000000001', output: '123.456' } },
          },
        ],
      }),
    );
    const applied = await runCli(['prices', 'apply', added, '--json'], ctx.env);
    expect(applied.code).toBe(0);
    expect(JSON.parse(applied.stdout)).toEqual({ added: [{ model: 'test/cli-model', version: 'cli-v1' }], unchanged: [] });

    const listed = await runCli(['prices', 'list', '--json'], ctx.env);
    expect(listed.code).toBe(0);
    const prices = JSON.parse(listed.stdout).prices as Record<string, unknown>[];
    expect(prices).toContainEqual(
      expect.objectContaining({
        model: 'openai/gpt-4o-mini',
        version: 'v1',
        inputPerMillion: '0.15',
        cachedInputPerMillion: '0.075',
        outputPerMillion: '0.6',
      }),
    );
    expect(prices).toContainEqual(
      expect.objectContaining({
        model: 'test/cli-model',
        inputPerMillion: '0.000000000001',
        outputPerMillion: '123.456',
        embeddingInputPerMillion: null,
      }),
    );
    const table = await runCli(['prices', 'list'], ctx.env);
    expect(table.stdout).toMatch(/openai\/text-embedding-3-small\s+v1\s+2024-07-18T00:00:00.000Z/);
  }, 60_000);
});
