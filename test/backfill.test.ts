import { TestWorkflowEnvironment } from '@temporalio/testing';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freePort } from '../src/dev/ports';
import { TASK_ID_KEY, TIER_KEY, USER_ID_KEY } from '../src/schedules/task-schedule';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { applyTasks } from '../src/schedules/apply-tasks';
import type { ModelProvider } from '../src/models/provider';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { createTestContext, withoutTls, type TestContext } from './support/context';
import { runCli } from './support/cli';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';

// The window 08:58..09:12 holds 09:00, 09:05, 09:10 for */5 and 09:00 for the daily 9 o'clock task.
const FROM = '2026-11-02T08:58:00Z';
const TO = '2026-11-02T09:12:00Z';

let ctx: TestContext;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  const applied = await runCli(['tasks', 'apply', 'test/fixtures/two-tasks.json'], ctx.env);
  expect(applied.code, applied.stderr).toBe(0);
});

afterAll(async () => ctx?.close());

const backfillJson = async () => {
  const r = await runCli(['backfill', '--all', '--from', FROM, '--to', TO, '--json'], ctx.env);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as {
    results: { taskId: string; slot: string; outcome: string; workflowId: string }[];
    summary: Record<string, number>;
  };
};

const countRows = async (sql: string): Promise<number> => Number((await ctx.pool.query<{ n: string }>(sql)).rows[0].n);

describe('backfill', () => {
  it('runs each slot of the window once, however often it is backfilled, natively or by cronledger', async () => {
    const fleet = await startWorkers(ctx, 2);
    await fleet.runWhile(async () => {
      const first = await backfillJson();
      expect(first.summary).toEqual({ slots: 4, completed: 4, retried: 0, alreadyRan: 0, running: 0, failed: 0 });
      expect(first.results.map((r) => r.workflowId).sort()).toEqual([
        'cron-every-five-2026-11-02T09:00:00Z',
        'cron-every-five-2026-11-02T09:05:00Z',
        'cron-every-five-2026-11-02T09:10:00Z',
        'cron-nine-daily-2026-11-02T09:00:00Z',
      ]);

      const second = await backfillJson();
      expect(second.summary).toEqual({ slots: 4, completed: 0, retried: 0, alreadyRan: 4, running: 0, failed: 0 });

      // Temporal's own backfill uses ALLOW_DUPLICATE, so it really starts a second execution of each closed slot...
      for (const id of ['cron-every-five', 'cron-nine-daily']) {
        await ctx.client.schedule.getHandle(id).backfill({ start: new Date(FROM), end: new Date(TO), overlap: 'ALLOW_ALL' });
      }
      // ...and each of those stops at the PostgreSQL claim as a duplicate, before any model call.
      await waitFor(async () => (await countRows('select count(*) as n from run_duplicates')) === 4, 60_000);
      const started = await ctx.client.workflow.count(`WorkflowId = 'cron-every-five-2026-11-02T09:05:00Z'`);
      expect(started.count).toBe(2);
    });

    expect(await countRows(`select count(*) as n from runs where status = 'completed'`)).toBe(4);
    expect(await countRows('select count(*) as n from runs')).toBe(4);
    // two model calls per executed slot, none for the duplicates
    expect(await countRows(`select count(*) as n from usage_ledger where entry_type = 'usage'`)).toBe(8);
    const keys = await ctx.pool.query<{ scheduled_minute: Date; idempotency_key: string }>(
      'select scheduled_minute, idempotency_key from runs order by idempotency_key',
    );
    expect(keys.rows.map((r) => r.idempotency_key)).toEqual([
      'cron:every-five:2026-11-02T09:00Z',
      'cron:every-five:2026-11-02T09:05Z',
      'cron:every-five:2026-11-02T09:10Z',
      'cron:nine-daily:2026-11-02T09:00Z',
    ]);
  });

  it('prints one line per slot and a summary in its text form', async () => {
    const r = await runCli(['backfill', '--task', 'nine-daily', '--from', FROM, '--to', TO], ctx.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('2026-11-02T09:00:00Z  nine-daily  already ran');
    expect(r.stdout).toContain('slots: 1, completed: 0, retried: 0, already ran: 1, running: 0, failed: 0');
  });

  it.each([
    [['--from', '2026-11-02T10:00:00Z', '--to', '2026-11-02T09:00:00Z'], /--from 2026-11-02T10:00:00Z is after --to/],
    [['--from', '2026-01-01T00:00:00Z', '--to', '2026-03-01T00:00:00Z'], /longer than 31 days/],
    [['--from', 'yesterday', '--to', '2026-11-02T09:00:00Z'], /--from "yesterday" is not an ISO 8601 time/],
  ])('refuses a bad range %j with a clear message and starts nothing', async (range, message) => {
    const before = await ctx.client.workflow.count();
    const r = await runCli(['backfill', '--all', ...range], ctx.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace for a user error
    expect((await ctx.client.workflow.count()).count).toBe(before.count);
  });

  it('refuses a task that has no schedule, naming it and the fix', async () => {
    const r = await runCli(['backfill', '--task', 'no-such-task', '--from', FROM, '--to', TO], ctx.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/task "no-such-task" has no cronledger schedule .* tasks apply/);
  });
});

describe('backfill of a jittered task', () => {
  it('starts nothing for a slot the schedule already fired: it uses the nominal time, as the schedule does', async () => {
    // Jitter moves each firing up to 50 s past its minute; the schedule still names and claims it by the minute.
    const file = parseTasksFile({
      tasks: [{ id: 'jittered', cron: '* * * * *', jitter: '50s', userId: 'u-jit', input: 'jittered' }],
      monthlyReport: false,
      budgetSweep: false,
    });
    await applyTasks(ctx.client, file, ctx.taskQueue, ctx.operatorPool);
    const fleet = await startWorkers(ctx, 1);
    try {
      await fleet.runWhile(async () => {
        const fired = `TaskId = 'jittered'`;
        await waitFor(async () => (await ctx.client.workflow.count(fired)).count > 0, 150_000, 'the jittered schedule fired');
        await ctx.client.schedule.getHandle('cron-jittered').pause('test: one firing is enough');
        const ids: string[] = [];
        for await (const w of ctx.client.workflow.list({ query: fired })) ids.push(w.workflowId);
        expect(ids.length).toBeGreaterThan(0);
        const firstId = ids.sort()[0];
        await ctx.client.workflow.getHandle(firstId).result();
        const nominal = firstId.slice('cron-jittered-'.length);
        expect(nominal).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:00Z$/);

        // Backfill the fired minute: the nominal slot's workflow ID exists, so Temporal refuses the start.
        const to = new Date(new Date(nominal).getTime() + 59_000).toISOString();
        const r = await runCli(['backfill', '--task', 'jittered', '--from', nominal, '--to', to, '--json'], ctx.env);
        expect(r.code, r.stderr).toBe(0);
        const { results } = JSON.parse(r.stdout) as { results: { workflowId: string; outcome: string }[] };
        expect(results.map((x) => [x.workflowId, x.outcome])).toEqual([[firstId, 'already-ran']]);
      });
      // and no second execution of any jittered slot reached the claim
      const claims = await ctx.pool.query<{ n: string }>(`select count(*) as n from run_duplicates where task_id = 'jittered'`);
      expect(claims.rows[0].n).toBe('0');
    } finally {
      await ctx.client.schedule.getHandle('cron-jittered').delete();
    }
  }, 240_000);
});

describe('backfill --all', () => {
  it('finds a task applied a moment ago, even while the schedule list (visibility) has not caught up', async () => {
    // A private server whose visibility never catches up: its schedule list stays empty, while describing a schedule
    // reads the schedule itself. So a task applied a moment ago is, here, a task applied forever ago.
    const port = await freePort();
    const env = await TestWorkflowEnvironment.createLocal({
      server: {
        executable: { type: 'existing-path', path: inject('stack').temporalCli },
        port,
        ip: '127.0.0.1',
        searchAttributes: [TASK_ID_KEY, USER_ID_KEY, TIER_KEY],
        log: { format: 'pretty', level: 'error' },
        extraArgs: ['--dynamic-config-value', 'history.visibilityProcessorSchedulerWorkerCount=0'],
      },
    });
    try {
      const here = { ...withoutTls(ctx.env), TEMPORAL_ADDRESS: `127.0.0.1:${port}`, TEMPORAL_NAMESPACE: 'default' };
      const file = join(mkdtempSync(join(tmpdir(), 'cronledger-all-')), 'tasks.json');
      writeFileSync(
        file,
        JSON.stringify({
          tasks: [{ id: 'just-applied', cron: '0 9 * * *', userId: 'u9', input: 'x', paused: true }],
          monthlyReport: false,
          budgetSweep: false,
        }),
      );
      const applied = await runCli(['tasks', 'apply', file], here);
      expect(applied.code, applied.stderr).toBe(0);

      const listed: string[] = [];
      for await (const s of env.client.schedule.list()) listed.push(s.scheduleId);
      expect(listed).toEqual([]); // the list really lags: without another source, --all would find nothing

      const fleet = await startWorkers({ ...ctx, temporalAddress: `127.0.0.1:${port}`, namespace: 'default', temporalTls: undefined }, 1);
      const r = await fleet.runWhile(() => runCli(['backfill', '--all', '--from', FROM, '--to', TO, '--json'], here));
      expect(r.code, r.stderr).toBe(0);
      const { results } = JSON.parse(r.stdout) as { results: { workflowId: string; outcome: string }[] };
      expect(results.map((x) => [x.workflowId, x.outcome])).toEqual([['cron-just-applied-2026-11-02T09:00:00Z', 'completed']]);

      const list = await runCli(['tasks', 'list', '--json'], here);
      expect(list.code, list.stderr).toBe(0);
      const tasks = (JSON.parse(list.stdout) as { tasks: { id: string; lastRuns: unknown[] }[] }).tasks;
      expect(tasks.map((t) => t.id)).toEqual(['just-applied']);
      expect(tasks[0].lastRuns).toEqual([
        { scheduledMinute: '2026-11-02T09:00:00.000Z', status: 'completed', workflowId: 'cron-just-applied-2026-11-02T09:00:00Z' },
      ]);
    } finally {
      await env.teardown();
    }
  }, 120_000);
});

describe('a failed slot', () => {
  it('is reported failed (not "already ran"), then run again with --retry-failed once its cause is fixed: one completed run, two generations, every billed call booked', async () => {
    // The embedding model has no price: the chat call is billed and booked, then the embedding step is refused.
    const unpriced = 'openai/text-embedding-3-large';
    await applyTasks(
      ctx.client,
      parseTasksFile({
        tasks: [{ id: 'needs-price', cron: '0 9 * * *', userId: 'u-retry', input: 'retry me', embeddingModel: unpriced, paused: true }],
        monthlyReport: false,
        budgetSweep: false,
      }),
      ctx.taskQueue,
      ctx.operatorPool,
    );
    const args = ['backfill', '--task', 'needs-price', '--from', FROM, '--to', TO];
    const slotId = 'cron-needs-price-2026-11-02T09:00:00Z';
    const key = 'cron:needs-price:2026-11-02T09:00Z';
    const fleet = await startWorkers(ctx, 1);
    await fleet.runWhile(async () => {
      const failed = await runCli([...args, '--json'], ctx.env);
      expect(failed.code).toBe(1);
      expect(JSON.parse(failed.stdout).summary).toEqual({ slots: 1, completed: 0, retried: 0, alreadyRan: 0, running: 0, failed: 1 });
      expect(failed.stderr).toContain(`cronledger backfill --task needs-price --from ${FROM} --to ${TO} --retry-failed`);
      expect(failed.stderr).toContain(`cronledger runs retry --workflow-id ${slotId}`);

      // Backfilled again without --retry-failed, it is still failed (not "already ran"), and nothing new starts.
      const again = await runCli(args, ctx.env);
      expect(again.code).toBe(1);
      expect(again.stdout).toMatch(
        /2026-11-02T09:00:00Z {2}needs-price {2}failed: generation 1 failed: no price in force for model "openai\/text-embedding-3-large"/,
      );
      expect((await ctx.client.workflow.count(`WorkflowId = '${slotId}'`)).count).toBe(1);

      const listed = await runCli(['runs', '--task', 'needs-price', '--json'], ctx.env);
      expect(listed.code, listed.stderr).toBe(0);
      expect(JSON.parse(listed.stdout).runs.map((r: { status: string; generation: number }) => [r.status, r.generation])).toEqual([
        ['failed', 1],
      ]);

      // A native backfill (the Web UI's, or the SDK's) may not re-claim it: its execution carries no retry, so it stops
      // at the claim as a duplicate, and the slot stays failed. It also leaves a *completed* execution as the last one
      // under the slot's ID, which ALLOW_DUPLICATE_FAILED_ONLY alone would take for a done slot: the claim decides.
      await ctx.client.schedule.getHandle('cron-needs-price').backfill({ start: new Date(FROM), end: new Date(TO), overlap: 'ALLOW_ALL' });
      await waitFor(
        async () => (await ctx.pool.query(`select 1 from run_duplicates where task_id = 'needs-price'`)).rowCount === 1,
        60_000,
        'the native backfill stopped at the claim',
      );
      expect((await ctx.pool.query('select status, generation from runs where idempotency_key = $1', [key])).rows).toEqual([
        { status: 'failed', generation: 1 },
      ]);

      // Fix the cause (price the model), then retry.
      await applyPrices(
        ctx.operatorPool,
        {
          currency: 'USD',
          unit: 'per_million_tokens',
          versions: [{ version: 'v1', effectiveFrom: '2024-07-18T00:00:00Z', models: { [unpriced]: { embeddingInput: '0.13' } } }],
        },
        'test',
      );
      const retried = await runCli([...args, '--retry-failed', '--json'], ctx.env);
      expect(retried.code, retried.stderr).toBe(0);
      const out = JSON.parse(retried.stdout) as { summary: Record<string, number>; results: { outcome: string; generation: number }[] };
      expect(out.summary).toEqual({ slots: 1, completed: 0, retried: 1, alreadyRan: 0, running: 0, failed: 0 });
      expect(out.results.map((r) => [r.outcome, r.generation])).toEqual([['retried', 2]]);

      // Done is done: neither a retry nor a backfill runs it again.
      const refused = await runCli(['runs', 'retry', '--workflow-id', slotId], ctx.env);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toMatch(
        /cron-needs-price-2026-11-02T09:00:00Z completed \(generation 2, run [\w-]+\); a completed slot is never run again/,
      );
      expect(refused.stderr).not.toMatch(/\n\s+at /);
      const last = await runCli([...args, '--retry-failed', '--json'], ctx.env);
      expect(last.code, last.stderr).toBe(0);
      expect(JSON.parse(last.stdout).summary).toMatchObject({ retried: 0, alreadyRan: 1, failed: 0 });
    });

    // One completed claim, in its second generation; the history keeps both executions.
    const claim = await ctx.pool.query<{ status: string; generation: number; temporal_run_id: string }>(
      'select status, generation, temporal_run_id from runs where idempotency_key = $1',
      [key],
    );
    expect(claim.rows.map((r) => [r.status, r.generation])).toEqual([['completed', 2]]);
    const attempts = await ctx.pool.query<{ generation: number; status: string; temporal_run_id: string }>(
      'select generation, status, temporal_run_id from run_attempts where idempotency_key = $1 order by generation',
      [key],
    );
    expect(attempts.rows.map((r) => [r.generation, r.status])).toEqual([
      [1, 'failed'],
      [2, 'completed'],
    ]);
    // Temporal shows the executions side by side under the slot's own workflow ID: the failed one, the native
    // backfill's duplicate, and the retry. (The execution list is eventually consistent: wait for all three.)
    const duplicate = await ctx.pool.query<{ temporal_run_id: string }>(
      `select temporal_run_id from run_duplicates where task_id = 'needs-price'`,
    );
    const expected = [
      `${attempts.rows[0].temporal_run_id}:FAILED`,
      `${duplicate.rows[0].temporal_run_id}:COMPLETED`,
      `${attempts.rows[1].temporal_run_id}:COMPLETED`,
    ].sort();
    let executions: string[] = [];
    await waitFor(
      async () => {
        executions = [];
        for await (const w of ctx.client.workflow.list({ query: `WorkflowId = '${slotId}'` }))
          executions.push(`${w.runId}:${w.status.name}`);
        return executions.length === expected.length;
      },
      30_000,
      'three executions listed',
    );
    expect(executions.sort()).toEqual(expected);
    // Every billed call of both executions is in the ledger: the first one's chat, the second one's chat and embedding.
    const booked = await ctx.pool.query<{ run_id: string; kind: string; model: string }>(
      `select run_id, kind, model from usage_ledger where workflow_id = $1 and entry_type = 'usage' order by created_at, kind`,
      [slotId],
    );
    expect(booked.rows.map((r) => [r.run_id, r.kind])).toEqual([
      [attempts.rows[0].temporal_run_id, 'chat'],
      [attempts.rows[1].temporal_run_id, 'chat'],
      [attempts.rows[1].temporal_run_id, 'embedding'],
    ]);
  }, 180_000);
});

describe('a slot whose execution was terminated', () => {
  it('shows as stale in `runs` (its claim still says running), and `runs retry` runs it again', async () => {
    await applyTasks(
      ctx.client,
      parseTasksFile({
        tasks: [{ id: 'terminated', cron: '0 9 * * *', userId: 'u-term', input: 'hang', paused: true }],
        monthlyReport: false,
        budgetSweep: false,
      }),
      ctx.taskQueue,
      ctx.operatorPool,
    );
    const slotId = 'cron-terminated-2026-11-02T09:00:00Z';
    const key = 'cron:terminated:2026-11-02T09:00Z';
    // A model that never answers (the model is the one stand-in tests may use): the run claims its slot, then waits.
    const waitForever = (req: { signal?: AbortSignal }) =>
      new Promise<never>((_, reject) => req.signal?.addEventListener('abort', () => reject(new Error('aborted'))));
    const silent: ModelProvider = { name: 'silent', chat: waitForever, embed: waitForever };
    const stuck = await startWorkers(ctx, 1, { provider: silent });
    await stuck.runWhile(async () => {
      const backfilled = runCli(['backfill', '--task', 'terminated', '--from', FROM, '--to', TO, '--json'], ctx.env);
      await waitFor(
        async () => (await ctx.pool.query('select 1 from runs where idempotency_key = $1', [key])).rowCount === 1,
        60_000,
        'slot claimed',
      );
      // A terminate runs no workflow code: nothing can record it in PostgreSQL.
      await ctx.client.workflow.getHandle(slotId).terminate('test: a terminated slot');
      const r = await backfilled;
      expect(r.code).toBe(1);
      expect(JSON.parse(r.stdout).summary).toMatchObject({ slots: 1, failed: 1 });
    });
    expect((await ctx.pool.query<{ status: string }>('select status from runs where idempotency_key = $1', [key])).rows[0].status).toBe(
      'running',
    );

    const listed = await runCli(['runs', '--task', 'terminated', '--json'], ctx.env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout).runs.map((r: { status: string }) => r.status)).toEqual(['stale']);

    const fleet = await startWorkers(ctx, 1);
    const retried = await fleet.runWhile(() => runCli(['runs', 'retry', '--workflow-id', slotId], ctx.env));
    expect(retried.code, retried.stderr).toBe(0);
    expect(retried.stdout).toMatch(/^retried \(was stale\), completed as generation 2: cron-terminated-2026-11-02T09:00:00Z run [\w-]+/);
    const attempts = await ctx.pool.query<{ generation: number; status: string }>(
      'select generation, status from run_attempts where idempotency_key = $1 order by generation',
      [key],
    );
    expect(attempts.rows.map((r) => [r.generation, r.status])).toEqual([
      [1, 'stale'],
      [2, 'completed'],
    ]);
    const after = await runCli(['runs', '--task', 'terminated', '--json'], ctx.env);
    expect(JSON.parse(after.stdout).runs.map((r: { status: string; generation: number }) => [r.status, r.generation])).toEqual([
      ['completed', 2],
    ]);
  }, 180_000);
});
