import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LedgerEntry } from '../src/ledger/entries';
import { recordUsage } from '../src/ledger/record-usage';
import { parseUsd, sumMoney, toAttoUsd } from '../src/money';
import { runCli } from './support/cli';
import type { TestContext } from './support/context';
import { booking, count, ledgerContext } from './support/ledger';

// Append-only: the database refuses changes; corrections are new rows.

let ctx: TestContext;
beforeAll(async () => {
  ctx = await ledgerContext(import.meta.url);
});
afterAll(async () => ctx?.close());

describe('append-only ledger', () => {
  it('refuses UPDATE, DELETE and TRUNCATE with the append-only error even to the owner, and the row is untouched', async () => {
    // The application role is refused by privilege (test/grants.test.ts); the triggers are the second guard, which
    // holds even for the owner of the tables.
    const row = await recordUsage(ctx.pool, booking());
    const total = await count(ctx, 'select 1 from usage_ledger');
    const owner = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
    await owner.connect();
    try {
      await expect(owner.query(`update usage_ledger set cost_usd = 0 where id = $1`, [row.id])).rejects.toThrow(
        /usage_ledger is append-only: UPDATE is not allowed/,
      );
      await expect(owner.query('delete from usage_ledger where id = $1', [row.id])).rejects.toThrow(
        /usage_ledger is append-only: DELETE is not allowed/,
      );
      // reconciliation_entries points at the ledger (each reconciliation entry's key): a plain TRUNCATE stops at that
      // foreign key, one with CASCADE gets as far as the append-only triggers (the ledger's or reconciliation_entries').
      await expect(owner.query('truncate usage_ledger')).rejects.toThrow(/cannot truncate a table referenced in a foreign key constraint/);
      await expect(owner.query('truncate usage_ledger cascade')).rejects.toThrow(
        /(usage_ledger|reconciliation_entries) is append-only: TRUNCATE is not allowed/,
      );
      // model_price_rates points at model_prices, so only a TRUNCATE with CASCADE gets as far as their triggers
      await expect(owner.query('truncate model_prices cascade')).rejects.toThrow(
        /model_price(s|_rates) is append-only: TRUNCATE is not allowed/,
      );
    } finally {
      await owner.end();
    }
    const again = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where id = $1', [row.id])).rows[0];
    expect(again.cost_usd).toBe(row.cost_usd);
    expect(await count(ctx, 'select 1 from usage_ledger')).toBe(total);
  });

  it('ledger adjust and ledger credit append entries pointing at the original; the listing shows them', async () => {
    const original = await recordUsage(ctx.pool, booking({ userId: 'cli-user' }));

    const adjusted = await runCli(
      ['ledger', 'adjust', '--entry', original.id, '--amount', '-0.000000000000000001', '--reason', 'provider invoice was lower', '--json'],
      ctx.env,
    );
    expect(adjusted.stderr).toBe('');
    expect(adjusted.code).toBe(0);
    const adj = JSON.parse(adjusted.stdout).entry;
    expect(adj).toMatchObject({
      entryType: 'adjustment',
      originalEntryId: original.id,
      costUsd: '-0.000000000000000001',
      reason: 'provider invoice was lower',
      userId: 'cli-user',
      runId: original.run_id,
    });

    const credited = await runCli(
      ['ledger', 'credit', '--user', 'cli-user', '--amount', '5.00', '--reason', 'outage goodwill', '--entry', original.id, '--json'],
      ctx.env,
    );
    expect(credited.code).toBe(0);
    const credit = JSON.parse(credited.stdout).entry;
    expect(credit).toMatchObject({
      entryType: 'credit',
      originalEntryId: original.id,
      costUsd: '-5.000000000000000000',
      userId: 'cli-user',
    });

    const listed = await runCli(['ledger', '--user', 'cli-user', '--json'], ctx.env);
    expect(listed.code).toBe(0);
    const entries = JSON.parse(listed.stdout).entries as { id: string; entryType: string; costUsd: string }[];
    expect(entries.map((e) => [e.id, e.entryType])).toEqual([
      [original.id, 'usage'],
      [adj.id, 'adjustment'],
      [credit.id, 'credit'],
    ]);
    // The user's net, exact: the usage minus 1e-18 minus 5.
    const net = sumMoney(entries.map((e) => parseUsd(e.costUsd)));
    expect(toAttoUsd(net)).toBe(toAttoUsd(parseUsd(original.cost_usd)) - 1n - 5n * 10n ** 18n);
    // The original is as it was.
    const reread = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where id = $1', [original.id])).rows[0];
    expect(reread.cost_usd).toBe(original.cost_usd);

    const table = await runCli(['ledger', '--run', original.run_id as string], ctx.env);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/ID\s+CREATED\s+TYPE\s+USER\s+RUN\s+MODEL\s+KIND\s+STATUS\s+ATTEMPT\s+TOKENS\s+COST/);
    const adjustmentLine = table.stdout.split('\n').find((l) => l.startsWith(`${adj.id} `) || l.trimStart().startsWith(`${adj.id} `));
    expect(adjustmentLine).toContain(`adjustment→${original.id}`);
    expect(adjustmentLine).toMatch(/ \$0\.000000$/); // the -1e-18 adjustment, rounded half-even only for display
  }, 60_000);
});
