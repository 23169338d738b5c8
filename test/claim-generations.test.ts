import { WorkflowFailedError } from '@temporalio/client';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimRun, completeRun, listRunAttempts, retryableClaim, type ClaimRequest } from '../src/db/runs';
import type { LedgerEntry } from '../src/ledger/entries';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { scheduledRun } from '../src/workflows/scheduled-run';
import { appliedInput, type TestRun } from './support/applied';
import { createTestContext, type TestContext } from './support/context';
import { startWorkers } from './support/workers';

// Claims with generations on real PostgreSQL, and a failed slot run again on purpose through the real workflow.

let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
});

afterAll(async () => ctx?.close());

const request = (key: string, runId: string, over: Partial<ClaimRequest> = {}): ClaimRequest => ({
  idempotencyKey: key,
  taskId: 'gen',
  userId: 'u1',
  workflowId: 'cron-gen-2026-11-02T09:00:00Z',
  temporalRunId: runId,
  scheduledMinute: '2026-11-02T09:00Z',
  workerId: 'test',
  ...over,
});
const freshKey = () => `cron:gen:${randomUUID()}`;
const statusOf = async (key: string) =>
  (
    await ctx.pool.query<{ status: string; generation: number; temporal_run_id: string }>(
      'select status, generation, temporal_run_id from runs where idempotency_key = $1',
      [key],
    )
  ).rows[0];

describe('claimRun and generations', () => {
  it('the first claim is generation 1; the same execution claiming again still owns it; another one is a duplicate', async () => {
    const key = freshKey();
    expect(await claimRun(ctx.pool, request(key, 't1-run-a'))).toEqual({ claimed: true, ownerWorkflowRunId: 't1-run-a', generation: 1 });
    expect(await claimRun(ctx.pool, request(key, 't1-run-a'))).toMatchObject({ claimed: true, generation: 1 });
    expect(await claimRun(ctx.pool, request(key, 't1-run-b'))).toMatchObject({
      claimed: false,
      ownerWorkflowRunId: 't1-run-a',
      ownerStatus: 'running',
    });
    const dup = await ctx.pool.query('select 1 from run_duplicates where temporal_run_id = $1', ['t1-run-b']);
    expect(dup.rowCount).toBe(1);
  });

  it('a schedule firing or native backfill (no retry) never re-claims a failed slot', async () => {
    const key = freshKey();
    await claimRun(ctx.pool, request(key, 't2-run-a'));
    await completeRun(ctx.pool, { idempotencyKey: key, temporalRunId: 't2-run-a', status: 'failed', error: 'boom' });
    expect(await claimRun(ctx.pool, request(key, 't2-run-native'))).toMatchObject({ claimed: false, ownerStatus: 'failed' });
    expect(await statusOf(key)).toMatchObject({ status: 'failed', generation: 1, temporal_run_id: 't2-run-a' });
  });

  it('a retry naming the failed owner takes the claim over as generation 2; both executions stay listed', async () => {
    const key = freshKey();
    await claimRun(ctx.pool, request(key, 't3-run-a'));
    await completeRun(ctx.pool, { idempotencyKey: key, temporalRunId: 't3-run-a', status: 'failed', error: 'boom' });
    expect((await retryableClaim(ctx.pool, key))?.temporal_run_id).toBe('t3-run-a');

    expect(await claimRun(ctx.pool, request(key, 't3-run-b', { supersedesRunId: 't3-run-a' }))).toEqual({
      claimed: true,
      ownerWorkflowRunId: 't3-run-b',
      generation: 2,
    });
    // its claim activity retried: still the owner, still generation 2
    expect(await claimRun(ctx.pool, request(key, 't3-run-b', { supersedesRunId: 't3-run-a' }))).toMatchObject({
      claimed: true,
      generation: 2,
    });
    await completeRun(ctx.pool, { idempotencyKey: key, temporalRunId: 't3-run-b', status: 'completed' });

    expect(await statusOf(key)).toMatchObject({ status: 'completed', generation: 2, temporal_run_id: 't3-run-b' });
    expect((await listRunAttempts(ctx.pool, key)).map((a) => [a.generation, a.temporal_run_id, a.status, a.error])).toEqual([
      [1, 't3-run-a', 'failed', 'boom'],
      [2, 't3-run-b', 'completed', null],
    ]);
    expect(await retryableClaim(ctx.pool, key)).toBeNull();
  });

  it('a retry is refused for a completed claim, and when it names an execution that is not the owner', async () => {
    const done = freshKey();
    await claimRun(ctx.pool, request(done, 't4-run-a'));
    await completeRun(ctx.pool, { idempotencyKey: done, temporalRunId: 't4-run-a', status: 'completed' });
    expect(await claimRun(ctx.pool, request(done, 't4-run-b', { supersedesRunId: 't4-run-a' }))).toMatchObject({
      claimed: false,
      ownerStatus: 'completed',
    });

    const failed = freshKey();
    await claimRun(ctx.pool, request(failed, 't4b-run-a'));
    await completeRun(ctx.pool, { idempotencyKey: failed, temporalRunId: 't4b-run-a', status: 'failed' });
    expect(await claimRun(ctx.pool, request(failed, 't4b-run-c', { supersedesRunId: 't4b-run-someone-else' }))).toMatchObject({
      claimed: false,
    });
    expect(await statusOf(failed)).toMatchObject({ generation: 1, temporal_run_id: 't4b-run-a' });
  });

  it("a retry under another workflow ID than the claim's never takes it over, even naming its running owner", async () => {
    // Temporal runs one execution per workflow ID at a time; a run started by hand under its own ID proves nothing
    // about the owner, which may still be running and calling the model.
    const key = freshKey();
    await claimRun(ctx.pool, request(key, 't4c-run-owner'));
    const forged = request(key, 't4c-run-forged', { supersedesRunId: 't4c-run-owner', workflowId: 'forged-start' });
    expect(await claimRun(ctx.pool, forged)).toMatchObject({ claimed: false, ownerWorkflowRunId: 't4c-run-owner' });
    expect(await statusOf(key)).toMatchObject({ status: 'running', generation: 1, temporal_run_id: 't4c-run-owner' });
  });

  it('a stale claim (running, its execution terminated) is taken over and its attempt closed as stale', async () => {
    const key = freshKey();
    await claimRun(ctx.pool, request(key, 't5-run-terminated'));
    expect(await claimRun(ctx.pool, request(key, 't5-run-retry', { supersedesRunId: 't5-run-terminated' }))).toMatchObject({
      claimed: true,
      generation: 2,
    });
    expect((await listRunAttempts(ctx.pool, key)).map((a) => [a.temporal_run_id, a.status])).toEqual([
      ['t5-run-terminated', 'stale'],
      ['t5-run-retry', 'running'],
    ]);
  });

  it('a superseded execution closing late cannot overwrite the new generation', async () => {
    const key = freshKey();
    await claimRun(ctx.pool, request(key, 't6-run-old'));
    await claimRun(ctx.pool, request(key, 't6-run-new', { supersedesRunId: 't6-run-old' }));
    await completeRun(ctx.pool, { idempotencyKey: key, temporalRunId: 't6-run-old', status: 'failed', error: 'late' });
    expect(await statusOf(key)).toMatchObject({ status: 'running', generation: 2, temporal_run_id: 't6-run-new' });
  });

  it('twenty retries naming the same failed owner, all at once on separate connections: exactly one takes the claim', async () => {
    const key = freshKey();
    await claimRun(ctx.pool, request(key, 't7-run-a'));
    await completeRun(ctx.pool, { idempotencyKey: key, temporalRunId: 't7-run-a', status: 'failed' });
    // The pool holds 10 connections: the claims really run concurrently, and meet on the runs row.
    const racers = Array.from({ length: 20 }, (_, i) => claimRun(ctx.pool, request(key, `t7-racer-${i}`, { supersedesRunId: 't7-run-a' })));
    const outcomes = await Promise.all(racers);
    const winners = outcomes.filter((o) => o.claimed);
    expect(winners).toHaveLength(1);
    expect(new Set(outcomes.map((o) => o.ownerWorkflowRunId))).toEqual(new Set([winners[0].ownerWorkflowRunId]));
    expect(await statusOf(key)).toMatchObject({ generation: 2, temporal_run_id: winners[0].ownerWorkflowRunId });
    expect(await listRunAttempts(ctx.pool, key)).toHaveLength(2);
  });
});

describe('a failed slot run again through the workflow', () => {
  it("fails, is retried under its own workflow ID, completes as generation 2, and both executions' billed calls are booked", async () => {
    const workflowId = `cron-regen-${randomUUID().slice(0, 6)}-2026-11-02T09:00:00Z`;
    const base: TestRun = {
      taskId: 'regen',
      userId: 'u-regen',
      input: 'Summarise the day.',
      model: 'openai/gpt-4o-mini',
      embeddingModel: 'openai/text-embedding-3-small',
    };
    const fleet = await startWorkers(ctx, 1);
    const { first, second, result } = await fleet.runWhile(async () => {
      // every chat call is billed and fails: the run gives up after MAX_CALLS_PER_STEP billed calls
      const failing = await ctx.client.workflow.start(scheduledRun, {
        args: [await appliedInput(ctx.operatorPool, { ...base, simulate: { failFirstAttempts: 10 } })],
        workflowId,
        taskQueue: ctx.taskQueue,
      });
      await expect(failing.result()).rejects.toBeInstanceOf(WorkflowFailedError);
      const retry = await ctx.client.workflow.start(scheduledRun, {
        args: [await appliedInput(ctx.operatorPool, { ...base, retry: { supersedesRunId: failing.firstExecutionRunId } })],
        workflowId,
        taskQueue: ctx.taskQueue,
        workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
      });
      const done = await retry.result();
      // Temporal itself now refuses another execution of the completed slot under this ID
      await expect(
        ctx.client.workflow.start(scheduledRun, {
          args: [await appliedInput(ctx.operatorPool, base)],
          workflowId,
          taskQueue: ctx.taskQueue,
          workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
        }),
      ).rejects.toThrow(/already/i);
      return { first: failing.firstExecutionRunId, second: retry.firstExecutionRunId, result: done };
    });

    expect(result).toMatchObject({ status: 'completed', generation: 2 });
    const rows = (await ctx.pool.query<LedgerEntry>('select * from usage_ledger where workflow_id = $1 order by id', [workflowId])).rows;
    expect(rows.map((r) => [r.run_id, r.idempotency_key, r.status])).toEqual([
      ...[1, 2, 3, 4, 5].map((n) => [first, `${first}:chat:${n}`, 'failed']),
      [second, `${second}:chat:1`, 'ok'],
      [second, `${second}:embed:1`, 'ok'],
    ]);
    const attempts = await listRunAttempts(ctx.pool, result.idempotencyKey);
    expect(attempts.map((a) => [a.generation, a.temporal_run_id, a.status])).toEqual([
      [1, first, 'failed'],
      [2, second, 'completed'],
    ]);
    expect(attempts[0].error).toMatch(/5 calls were billed and failed/);
  }, 120_000);
});
