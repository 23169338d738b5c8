import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowFailedError } from '@temporalio/client';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { bookUsageOrKeepException, type BookingOutcome } from '../src/ledger/book-usage';
import { MAX_TOKENS_PER_CALL } from '../src/constants';
import { recordUsage, type UsageBooking } from '../src/ledger/record-usage';
import { listUsageExceptions } from '../src/ledger/usage-exceptions';
import { InvalidUsageError } from '../src/ledger/validate-usage';
import { MockProvider } from '../src/models/mock-provider';
import {
  fullUsage,
  type ChatRequest,
  type ChatResult,
  type EmbeddingRequest,
  type EmbeddingResult,
  type TokenUsage,
} from '../src/models/provider';
import { runCli } from './support/cli';
import type { TestContext } from './support/context';
import { booking, causeChain, count, entriesOf, ledgerContext, runScheduled } from './support/ledger';

// Bad input: usage that can't be true, an unpriced model at booking time, and bad amounts on the CLI.

let ctx: TestContext;
beforeAll(async () => {
  ctx = await ledgerContext(import.meta.url);
});
afterAll(async () => ctx?.close());

describe('recordUsage refuses bad usage', () => {
  const bad: [string, Partial<TokenUsage>][] = [
    ['negative', { promptTokens: -1 }],
    ['fractional', { completionTokens: 2.5 }],
    ['NaN', { promptTokens: Number.NaN }],
    ['infinite', { completionTokens: Number.POSITIVE_INFINITY }],
    ['absurdly large', { promptTokens: MAX_TOKENS_PER_CALL + 1 }],
    ['cached above prompt', { promptTokens: 10, cachedPromptTokens: 11 }],
    ['cache reads and writes above prompt', { promptTokens: 10, cachedPromptTokens: 4, cacheWrite5mTokens: 4, cacheWrite1hTokens: 3 }],
    ['negative cache write', { cacheWrite1hTokens: -1 }],
    ['a service tier that is no name', { serviceTier: 'Batch Tier!' }],
  ];
  it.each(bad)('rejects %s token counts with InvalidUsageError and writes nothing', async (_what, wrong) => {
    const before = await count(ctx, 'select 1 from usage_ledger');
    const b = booking({ usage: { ...fullUsage({ promptTokens: 100, completionTokens: 10 }), ...wrong } });
    await expect(recordUsage(ctx.pool, b)).rejects.toBeInstanceOf(InvalidUsageError);
    await expect(recordUsage(ctx.pool, { ...b, kind: 'embedding', model: 'openai/text-embedding-3-small' })).rejects.toThrow(
      /nothing was booked|exceed|is not a service tier/,
    );
    expect(await count(ctx, 'select 1 from usage_ledger')).toBe(before);
  });
});

describe('bookUsage keeps what the ledger refuses', () => {
  // What the bookUsage activity does with billed usage (the activity only adds its log line), over the real database.
  const book = (b: UsageBooking) => bookUsageOrKeepException(ctx.pool, b);
  const reasonOf = (o: BookingOutcome) => (o.booked === 'exception' ? o.exception.reason : '(booked in the ledger)');
  const input = (over: Partial<UsageBooking> = {}) =>
    booking({ workflowId: 'cron-bad-2026-11-02T09:00:00Z', userId: 'bad-user', providerRequestId: 'req-bad', ...over });

  it('invalid usage the provider billed goes to usage_exceptions (once, however often retried), never nowhere', async () => {
    const ledgerBefore = await count(ctx, 'select 1 from usage_ledger');
    const bad = input({ usage: fullUsage({ promptTokens: -5, cachedPromptTokens: 0, completionTokens: Number.NaN, reasoningTokens: 0 }) });
    const first = await book(bad);
    const again = await book(bad);
    expect(reasonOf(first)).toMatch(/promptTokens = -5 is not a token count/);
    expect(again).toEqual(first);
    const kept = (await listUsageExceptions(ctx.pool, { userId: 'bad-user' })).filter((e) => e.run_id === bad.runId);
    expect(kept).toHaveLength(1);
    expect(kept[0]).toMatchObject({
      idempotency_key: `${bad.runId}:chat:1`,
      workflow_id: bad.workflowId,
      provider_request_id: 'req-bad',
      status: 'ok',
    });
    expect(kept[0].raw_usage).toEqual({ ...fullUsage({ promptTokens: -5, completionTokens: 0 }), completionTokens: 'NaN' });
    expect(await count(ctx, 'select 1 from usage_ledger')).toBe(ledgerBefore);
  });

  it('through a run: a provider reporting impossible usage fails the run, and its usage is kept, not lost', async () => {
    const liar = new (class extends MockProvider {
      override async chat(req: ChatRequest): Promise<ChatResult> {
        const r = await super.chat(req);
        return { ...r, usage: { ...r.usage, promptTokens: -3 } };
      }
    })();
    const { workflowId, runId, error } = await runScheduled(ctx, `bad-usage-${randomUUID().slice(0, 6)}`, { provider: liar });
    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(causeChain(error).types).toContain('UnbookableUsage');
    expect(await entriesOf(ctx, workflowId)).toHaveLength(0);
    const kept = await ctx.pool.query<{ idempotency_key: string; reason: string }>(
      'select idempotency_key, reason from usage_exceptions where workflow_id = $1',
      [workflowId],
    );
    expect(kept.rows).toEqual([{ idempotency_key: `${runId}:chat:1`, reason: expect.stringMatching(/promptTokens = -3/) }]);
    const run = await ctx.pool.query<{ status: string }>('select status from runs where workflow_id = $1', [workflowId]);
    expect(run.rows.map((r) => r.status)).toEqual(['failed']);
  }, 60_000);

  it('through a run: impossible usage on the embedding, whose booking completes the run, fails it and stores no memory', async () => {
    const liar = new (class extends MockProvider {
      override async embed(req: EmbeddingRequest): Promise<EmbeddingResult> {
        const r = await super.embed(req);
        return { ...r, usage: { ...r.usage, promptTokens: -4 } };
      }
    })();
    const { workflowId, runId, error } = await runScheduled(ctx, `bad-embed-${randomUUID().slice(0, 6)}`, { provider: liar });
    expect(causeChain(error).types).toContain('UnbookableUsage');
    expect((await entriesOf(ctx, workflowId)).map((e) => e.kind)).toEqual(['chat']);
    const kept = await ctx.pool.query('select idempotency_key from usage_exceptions where workflow_id = $1', [workflowId]);
    expect(kept.rows).toEqual([{ idempotency_key: `${runId}:embed:1` }]);
    const run = await ctx.pool.query<{ status: string }>('select status from runs where workflow_id = $1', [workflowId]);
    expect(run.rows.map((r) => r.status)).toEqual(['failed']);
    expect((await ctx.ownerPool.query('select 1 from memories where temporal_run_id = $1', [runId])).rows).toEqual([]); // as the owner: the worker may not read replies
  }, 60_000);

  it('usage of a model that has no price when it comes back goes to usage_exceptions too', async () => {
    const unpriced = input({ model: 'acme/priced-yesterday' });
    expect(reasonOf(await book(unpriced))).toMatch(/no price in force for model "acme\/priced-yesterday"/);
    const kept = await ctx.pool.query('select 1 from usage_exceptions where run_id = $1', [unpriced.runId]);
    expect(kept.rowCount).toBe(1);
  });

  it('usage_exceptions is append-only', async () => {
    const row = await book(
      input({ usage: fullUsage({ promptTokens: 1.5, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }) }),
    );
    expect(row.booked).toBe('exception');
    const owner = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
    await owner.connect();
    try {
      // refused to the application role by privilege, and to the owner by the trigger
      await expect(owner.query("update usage_exceptions set reason = 'fine'")).rejects.toThrow(/usage_exceptions is append-only: UPDATE/);
      await expect(owner.query('delete from usage_exceptions')).rejects.toThrow(/usage_exceptions is append-only: DELETE/);
    } finally {
      await owner.end();
    }
    await expect(ctx.pool.query("update usage_exceptions set reason = 'fine'")).rejects.toThrow(/permission denied|append-only/);
    await expect(ctx.pool.query('delete from usage_exceptions')).rejects.toThrow(/permission denied|append-only/);
  });
});

describe('corrections with bad input', () => {
  it.each([
    ['adjust', 'abc', /--amount "abc" is not a decimal number/],
    ['adjust', '1e-3', /--amount "1e-3" is not a decimal number/],
    ['adjust', '0.0000000000000000001', /--amount .* 19 fractional digits/],
    ['credit', '-5', /must be positive/],
    ['credit', '$5', /--amount "\$5" is not a decimal number/],
  ])(
    'ledger %s with --amount %s fails with a clear message and writes nothing',
    async (sub, amount, message) => {
      const original = await recordUsage(ctx.pool, booking({ userId: 'cli-bad' }));
      const before = await count(ctx, 'select 1 from usage_ledger');
      const args =
        sub === 'adjust'
          ? ['ledger', 'adjust', '--entry', original.id, `--amount=${amount}`, '--reason', 'typo']
          : ['ledger', 'credit', '--user', 'cli-bad', `--amount=${amount}`, '--reason', 'typo'];
      const r = await runCli(args, ctx.env);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).not.toMatch(/\n\s+at /); // a message, not a stack trace
      expect(await count(ctx, 'select 1 from usage_ledger')).toBe(before);
    },
    30_000,
  );

  it('ledger adjust of an entry that does not exist says so and writes nothing', async () => {
    const before = await count(ctx, 'select 1 from usage_ledger');
    const r = await runCli(['ledger', 'adjust', '--entry', '999999999', '--amount', '1', '--reason', 'x'], ctx.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/ledger entry 999999999 does not exist/);
    expect(await count(ctx, 'select 1 from usage_ledger')).toBe(before);
  }, 30_000);
});
