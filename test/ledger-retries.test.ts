import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LedgerEntry } from '../src/ledger/entries';
import { bookCall, LedgerConflictError, recordUsage } from '../src/ledger/record-usage';
import { MockProvider } from '../src/models/mock-provider';
import type { ChatRequest, ChatResult } from '../src/models/provider';
import { costAtPerMillion, parseUsd, sumMoney, toAttoUsd, toExactString } from '../src/money';
import type { TestContext } from './support/context';
import { booking, count, entriesOf, ledgerContext, runScheduled } from './support/ledger';

// Retries and idempotency: what a run books, what a billed failure books, what booking twice does.

let ctx: TestContext;
beforeAll(async () => {
  ctx = await ledgerContext(import.meta.url);
});
afterAll(async () => ctx?.close());

describe('booking model calls of a scheduled run', () => {
  it('one scheduledRun books exactly two usage rows, chat and embedding, keyed <temporal run id>:<step>:1', async () => {
    const { workflowId, runId, result, error } = await runScheduled(ctx, `ledger-one-${randomUUID().slice(0, 6)}`);
    expect(error).toBeUndefined();
    expect(result?.status).toBe('completed');

    const rows = await entriesOf(ctx, workflowId);
    expect(rows.map((r) => [r.idempotency_key, r.entry_type, r.kind, r.status, r.attempt, r.price_version])).toEqual([
      [`${runId}:chat:1`, 'usage', 'chat', 'ok', 1, 'v1'],
      [`${runId}:embed:1`, 'usage', 'embedding', 'ok', 1, 'v1'],
    ]);
    for (const r of rows) expect(toAttoUsd(parseUsd(r.cost_usd))).toBeGreaterThan(0n);
    // The cost on the row is the standard price applied to the row's own token counts.
    const [chat, embed] = rows;
    const chatCost = sumMoney([
      costAtPerMillion(parseUsd('0.15'), BigInt(chat.prompt_tokens) - BigInt(chat.cached_prompt_tokens)),
      costAtPerMillion(parseUsd('0.075'), BigInt(chat.cached_prompt_tokens)),
      costAtPerMillion(parseUsd('0.60'), BigInt(chat.completion_tokens)),
    ]);
    expect(chat.cost_usd).toBe(toExactString(chatCost));
    expect(embed.cost_usd).toBe(toExactString(costAtPerMillion(parseUsd('0.02'), BigInt(embed.prompt_tokens))));
    expect(result?.chatCostUsd).toBe(chat.cost_usd);
  }, 60_000);

  it('failFirstAttempts: 1 books attempt 1 as failed and attempt 2 as ok for each call, all billed', async () => {
    const { workflowId, runId, result, error } = await runScheduled(ctx, `ledger-retry-${randomUUID().slice(0, 6)}`, {
      simulate: { failFirstAttempts: 1, promptTokens: 1234, completionTokens: 321, embeddingTokens: 77 },
    });
    expect(error).toBeUndefined();
    expect(result?.status).toBe('completed');

    const rows = await entriesOf(ctx, workflowId);
    expect(rows.map((r) => [r.idempotency_key, r.status, r.attempt])).toEqual([
      [`${runId}:chat:1`, 'failed', 1],
      [`${runId}:chat:2`, 'ok', 2],
      [`${runId}:embed:1`, 'failed', 1],
      [`${runId}:embed:2`, 'ok', 2],
    ]);
    for (const r of rows) expect(toAttoUsd(parseUsd(r.cost_usd))).toBeGreaterThan(0n);
    // 1234 × 0.15 + 321 × 0.60 per million; 77 × 0.02 per million. The failed attempt cost the same as the good one.
    expect(rows.map((r) => r.cost_usd)).toEqual([
      '0.000377700000000000',
      '0.000377700000000000',
      '0.000001540000000000',
      '0.000001540000000000',
    ]);
    // Distinct provider requests: each attempt was a separate billed call.
    expect(new Set(rows.map((r) => r.provider_request_id)).size).toBe(4);
  }, 60_000);

  it('a reply longer than the embedding model accepts is embedded by its first 8191 tokens, and the row says so', async () => {
    // The model (the only stand-in) answers with a reply far over text-embedding-3-small's 8191-token input limit.
    const longReply = Array.from({ length: 12_000 }, (_, i) => `word${i % 97}`).join(' ');
    const chatty = new (class extends MockProvider {
      override async chat(req: ChatRequest): Promise<ChatResult> {
        return { ...(await super.chat(req)), text: longReply };
      }
    })();
    const { workflowId, result, error } = await runScheduled(ctx, `ledger-long-${randomUUID().slice(0, 6)}`, {
      provider: chatty,
      // the budget guard also caps the embedding input at the task's output cap (default 1024): lift it past the model's limit
      maxOutputTokens: 16_000,
    });
    expect(error).toBeUndefined();
    expect(result?.status).toBe('completed');

    const embed = (await entriesOf(ctx, workflowId)).find((r) => r.kind === 'embedding') as LedgerEntry;
    expect(embed.prompt_tokens).toBe('8191'); // the mock counts the tokens it was sent
    expect(Number(embed.input_truncated_from)).toBeGreaterThan(8191);
    const memory = await ctx.ownerPool.query<{ input_truncated_from: string; content: string }>(
      'select input_truncated_from, content from memories where run_workflow_id = $1',
      [workflowId],
    );
    expect(memory.rows[0].input_truncated_from).toBe(embed.input_truncated_from);
    expect(result?.embeddingInputTruncatedFrom).toBe(Number(embed.input_truncated_from));
    expect(memory.rows[0].content).toBe(longReply); // the memory keeps the whole reply
  }, 60_000);

  it('a prompt and a reply containing a special token’s text are counted as plain text: the run completes, both calls booked', async () => {
    // The tokenizer's default throws on `<|endoftext|>` in its input; the budget decision counts the prompt, and a reply
    // over the embedding limit is cut by tokens, so both must read it as text, as OpenAI does.
    const special = '<|endoftext|> and <|im_start|>';
    const longReply = `${special} ${Array.from({ length: 12_000 }, (_, i) => `word${i % 97}`).join(' ')}`;
    const chatty = new (class extends MockProvider {
      override async chat(req: ChatRequest): Promise<ChatResult> {
        return { ...(await super.chat(req)), text: longReply };
      }
    })();
    const { workflowId, result, error } = await runScheduled(ctx, `ledger-special-${randomUUID().slice(0, 6)}`, {
      provider: chatty,
      input: `Summarise the log; it contains ${special} verbatim.`,
      maxOutputTokens: 16_000,
    });
    expect(error).toBeUndefined();
    expect(result?.status).toBe('completed');
    const rows = await entriesOf(ctx, workflowId);
    expect(rows.map((r) => [r.kind, r.status])).toEqual([
      ['chat', 'ok'],
      ['embedding', 'ok'],
    ]);
    expect(Number(rows[1].input_truncated_from)).toBeGreaterThan(8191);
  }, 60_000);
});

// recordUsage returns the whole row; bookCall (the worker's booking step) reads back only the entry and its cost.
describe.each([
  ['recordUsage', recordUsage],
  ['bookCall', bookCall],
] as const)('%s', (_, bookOnce) => {
  it('booking the same call twice (one after the other, and racing) yields one row', async () => {
    const b = booking();
    const first = await bookOnce(ctx.pool, b);
    const second = await bookOnce(ctx.pool, b);
    expect(second.id).toBe(first.id);
    const stored = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where id = $1', [first.id])).rows[0];
    expect([first.cost_usd, first.price_version]).toEqual([stored.cost_usd, stored.price_version]);
    expect(stored.cost_usd).toMatch(/^0\.0*[1-9]/);
    expect(await count(ctx, 'select 1 from usage_ledger where run_id = $1', [b.runId])).toBe('1');

    const c = booking();
    const raced = await Promise.all([bookOnce(ctx.pool, c), bookOnce(ctx.pool, c), bookOnce(ctx.pool, c)]);
    expect(new Set(raced.map((r) => r.id)).size).toBe(1);
    expect(await count(ctx, 'select 1 from usage_ledger where run_id = $1', [c.runId])).toBe('1');
  });

  it('a key already booked for a different call fails loudly and leaves the row as it was', async () => {
    const b = booking();
    const first = await bookOnce(ctx.pool, b);
    const other = { ...b, usage: { ...b.usage, completionTokens: b.usage.completionTokens + 1 }, providerRequestId: 'another-request' };
    const err = await bookOnce(ctx.pool, other).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LedgerConflictError);
    expect((err as Error).message).toMatch(/completion_tokens: booked 100, now 101/);
    expect((err as Error).message).toMatch(/provider_request_id: booked null, now another-request/);
    await expect(bookOnce(ctx.pool, { ...b, status: 'failed' })).rejects.toThrow(/status: booked ok, now failed/);
    const rows = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where run_id = $1', [b.runId])).rows;
    expect(rows.map((r) => [r.id, r.completion_tokens, r.status])).toEqual([[first.id, '100', 'ok']]);
  });
});
