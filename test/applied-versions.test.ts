import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { applyBudgets } from '../src/budgets/budgets-store';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { MockProvider } from '../src/models/mock-provider';
import type { ModelProvider } from '../src/models/provider';
import { applyTasks } from '../src/schedules/apply-tasks';
import { taskFingerprint } from '../src/schedules/task-schedule';
import { parseTasksFile } from '../src/tasks/tasks-file';
import type { ScheduledRunResult } from '../src/workflows/scheduled-run';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { startWorkers } from './support/workers';
import { describeSchedule } from '../src/schedules/describe-schedule';

/**
 * A run spends only what `tasks apply` recorded: a start through Temporal alone (the `temporal` CLI, as anyone who can
 * reach the frontend could) that names no applied version, or carries a user or a prompt of its own, ends `rejected`
 * with nothing booked, reserved or claimed, and is listed as rejected; applied schedules, manual runs and retries run.
 */

let ctx: TestContext;
const PROMPT = 'Summarise the overnight alerts for the on-call engineer.';
const file = (input: string) =>
  parseTasksFile({
    tasks: [
      { id: 'legit', cron: '0 9 * * *', userId: 'u-legit', input, paused: true },
      { id: 'other', cron: '0 9 * * *', userId: 'u-other', input: 'Other user task.', paused: true },
    ],
    monthlyReport: false,
    budgetSweep: false,
  });

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  // budgets, so that every run that gets as far as its decision reserves
  const budgets = ['u-legit', 'u-other', 'victim'].map((userId) => ({ userId, monthlyLimitUsd: '100', timeZone: 'UTC' }));
  await applyBudgets(ctx.operatorPool, { budgets }, 'test');
  await applyTasks(ctx.client, file(PROMPT), ctx.taskQueue, ctx.operatorPool);
});

afterAll(async () => ctx?.close());

const fingerprintOf = (input: string, id: string) =>
  taskFingerprint(file(input).tasks.find((t) => t.id === id) ?? file(input).tasks[0], ctx.taskQueue);

/** `temporal workflow start --type scheduledRun --input JSON`: what anyone who can reach Temporal can do. */
async function forgedStart(workflowId: string, input: Record<string, unknown>): Promise<string> {
  const { stdout } = await promisify(execFile)(inject('stack').temporalCli, [
    'workflow',
    'start',
    '--address',
    ctx.temporalAddress,
    '--namespace',
    ctx.namespace,
    '--task-queue',
    ctx.taskQueue,
    '--type',
    'scheduledRun',
    '--workflow-id',
    workflowId,
    '--input',
    JSON.stringify(input),
    '--output',
    'json',
  ]);
  return (JSON.parse(stdout) as { runId: string }).runId;
}

const ledgerRows = async (where: string, value: string) =>
  Number((await ctx.pool.query<{ n: string }>(`select count(*) as n from usage_ledger where ${where} = $1`, [value])).rows[0].n);
const reservations = async (runId: string) =>
  Number((await ctx.pool.query<{ n: string }>('select count(*) as n from budget_reservations where run_id = $1', [runId])).rows[0].n);
const runRow = async (runId: string) =>
  (
    await ctx.pool.query<{ status: string; idempotency_key: string; user_id: string; error: string }>(
      'select status, idempotency_key, user_id, error from runs where temporal_run_id = $1',
      [runId],
    )
  ).rows;

describe('a run spends only what was applied', () => {
  it('keeps the prompt out of the schedule: its action names the task and the fingerprint, and task_versions holds the rest', async () => {
    const d = await describeSchedule(ctx.client, 'cron-legit');
    if (d.action.type !== 'startWorkflow') throw new Error('not a start action');
    expect(d.action.args).toEqual([{ taskId: 'legit', fingerprint: fingerprintOf(PROMPT, 'legit') }]);
    expect(JSON.stringify(d.action.memo)).not.toContain(PROMPT);
    const { rows } = await ctx.pool.query<{ definition: { input: string; userId: string }; applied_by: string }>(
      'select definition, applied_by from task_versions where task_id = $1',
      ['legit'],
    );
    expect(rows).toMatchObject([{ definition: { input: PROMPT, userId: 'u-legit' }, applied_by: expect.any(String) }]);
    // append-only, as the ledger: the application role may not change a version, and not even the owner can
    const owner = new pg.Client({ connectionString: ctx.ownerDatabaseUrl });
    await owner.connect();
    try {
      await expect(ctx.pool.query(`update task_versions set definition = '{}'`)).rejects.toThrow(/permission denied/);
      await expect(owner.query(`update task_versions set definition = '{}' where task_id = 'legit'`)).rejects.toThrow(/append-only/);
      await expect(owner.query(`delete from task_versions where task_id = 'legit'`)).rejects.toThrow(/append-only/);
    } finally {
      await owner.end();
    }
  });

  it('rejects forged starts: nothing booked, nothing reserved, no claim taken, listed as rejected', async () => {
    const fleet = await startWorkers(ctx, 1);
    await fleet.runWhile(async () => {
      // a legitimate slot first: the schedule's own action runs (a one-slot backfill of the paused schedule)
      await ctx.client.schedule
        .getHandle('cron-legit')
        .backfill({ start: new Date('2026-11-02T09:00:00Z'), end: new Date('2026-11-02T09:00:30Z'), overlap: 'ALLOW_ALL' });
      const slotId = 'cron-legit-2026-11-02T09:00:00Z';
      let slot: ScheduledRunResult | undefined;
      for (let i = 0; i < 120 && !slot; i++) {
        slot = await ctx.client.workflow
          .getHandle(slotId)
          .result()
          .catch(async () => {
            await new Promise((r) => setTimeout(r, 500));
            return undefined;
          });
      }
      expect(slot).toMatchObject({ status: 'completed' });
      expect(await ledgerRows('user_id', 'u-legit')).toBe(2);
      const claimBefore = (
        await ctx.pool.query('select temporal_run_id, generation, status from runs where idempotency_key = $1', [
          'cron:legit:2026-11-02T09:00Z',
        ])
      ).rows;
      expect(claimBefore).toMatchObject([{ status: 'completed', generation: 1 }]);
      // a legitimate run reserves (and settles) its worst case: the reservation checks below can fail
      expect(await reservations(claimBefore[0].temporal_run_id)).toBe(2);

      const forged: [string, Record<string, unknown>][] = [
        // the audit's start: a user, a model and a prompt of the attacker's choosing
        ['cron-x-manual-2026-11-02T10:00:00Z', { taskId: 'x', userId: 'victim', model: 'openai/gpt-4o', input: 'spend it', manual: true }],
        // a real task with a wrong fingerprint
        ['cron-legit-manual-2026-11-02T10:00:01Z', { taskId: 'legit', fingerprint: 'not-applied', manual: true }],
        // another user's task with its valid fingerprint, and a user of the attacker's choosing on top
        [
          'cron-other-manual-2026-11-02T10:00:02Z',
          { taskId: 'other', fingerprint: fingerprintOf(PROMPT, 'other'), userId: 'victim', manual: true },
        ],
        // a retry that names the legitimate slot's execution, under its workflow ID, with a wrong fingerprint
        [slotId, { taskId: 'legit', fingerprint: 'not-applied', retry: { supersedesRunId: claimBefore[0].temporal_run_id } }],
      ];
      for (const [workflowId, input] of forged) {
        const runId = await forgedStart(workflowId, input);
        const result = await ctx.client.workflow.getHandle(workflowId, runId).result();
        expect([workflowId, result.status]).toEqual([workflowId, 'rejected']);
        expect(await ledgerRows('run_id', runId)).toBe(0);
        expect(await reservations(runId)).toBe(0);
        expect(await runRow(runId)).toEqual([
          {
            status: 'rejected',
            idempotency_key: `rejected:${runId}`,
            user_id: '',
            error: expect.stringMatching(/applied version|carries/),
          },
        ]);
      }
      expect(await ledgerRows('user_id', 'victim')).toBe(0);
      expect(await ledgerRows('user_id', 'u-other')).toBe(0);
      expect(await ledgerRows('user_id', 'u-legit')).toBe(2);
      // the legitimate slot's claim is as it was
      expect(
        (
          await ctx.pool.query('select temporal_run_id, generation, status from runs where idempotency_key = $1', [
            'cron:legit:2026-11-02T09:00Z',
          ])
        ).rows,
      ).toEqual(claimBefore);

      // `cronledger runs` lists them as rejected
      const listed = await runCli(['runs', '--json'], ctx.env);
      expect(listed.code).toBe(0);
      const runs = (JSON.parse(listed.stdout) as { runs: { status: string; workflowId: string }[] }).runs;
      expect(
        runs
          .filter((r) => r.status === 'rejected')
          .map((r) => r.workflowId)
          .sort(),
      ).toEqual(forged.map(([id]) => id).sort());
    });
  });

  it('runs a re-applied task at its new version, and an older applied version still runs', async () => {
    const changed = 'Summarise the alerts, shorter.';
    await applyTasks(ctx.client, file(changed), ctx.taskQueue, ctx.operatorPool);
    const d = await describeSchedule(ctx.client, 'cron-legit');
    if (d.action.type !== 'startWorkflow') throw new Error('not a start action');
    expect(d.action.args).toEqual([{ taskId: 'legit', fingerprint: fingerprintOf(changed, 'legit') }]);
    const fleet = await startWorkers(ctx, 1);
    await fleet.runWhile(async () => {
      const trigger = await runCli(['tasks', 'trigger', 'legit', '--json'], ctx.env);
      expect(trigger.code).toBe(0);
      const { workflowId } = JSON.parse(trigger.stdout) as { workflowId: string };
      expect(await ctx.client.workflow.getHandle(workflowId).result()).toMatchObject({ status: 'completed' });
      const memory = await ctx.ownerPool.query<{ n: string }>('select count(*) as n from memories where run_workflow_id = $1', [
        workflowId,
      ]);
      expect(memory.rows[0].n).toBe('1');
      // a run of the first version (as one its schedule started before the re-apply): still an applied version
      const old = await ctx.client.workflow.start('scheduledRun', {
        workflowId: 'cron-legit-manual-2026-11-02T11:00:00Z',
        taskQueue: ctx.taskQueue,
        args: [{ taskId: 'legit', fingerprint: fingerprintOf(PROMPT, 'legit'), manual: true }],
      });
      expect(await old.result()).toMatchObject({ status: 'completed' });
    });
    const versions = await ctx.pool.query('select fingerprint from task_versions where task_id = $1', ['legit']);
    expect(versions.rowCount).toBe(2);
  });

  it("honours simulate only with the mock provider: another provider's run is billed on its own counts", async () => {
    const forged = { promptTokens: 777_777, completionTokens: 5, embeddingTokens: 5 };
    const simulated = parseTasksFile({
      tasks: [{ id: 'sim', cron: '0 9 * * *', userId: 'u-sim', input: PROMPT, paused: true, simulate: forged }],
      monthlyReport: false,
      budgetSweep: false,
    });
    await applyTasks(ctx.client, simulated, ctx.taskQueue, ctx.operatorPool);
    const mock = new MockProvider();
    // the mock's answers through a provider that is not the mock: what a real provider is to the worker
    const notMock: ModelProvider = { name: 'not-mock', chat: (r) => mock.chat(r), embed: (r) => mock.embed(r) };
    const fingerprint = taskFingerprint(simulated.tasks[0], ctx.taskQueue);
    const promptTokens = async (provider: ModelProvider, workflowId: string) => {
      const fleet = await startWorkers(ctx, 1, { provider });
      await fleet.runWhile(async () => {
        const h = await ctx.client.workflow.start('scheduledRun', {
          workflowId,
          taskQueue: ctx.taskQueue,
          args: [{ taskId: 'sim', fingerprint, manual: true }],
        });
        expect(await h.result()).toMatchObject({ status: 'completed' });
      });
      const { rows } = await ctx.pool.query<{ prompt_tokens: string }>(
        `select prompt_tokens from usage_ledger where workflow_id = $1 and kind = 'chat'`,
        [workflowId],
      );
      return Number(rows[0].prompt_tokens);
    };
    expect(await promptTokens(mock, 'cron-sim-manual-2026-11-02T12:00:00Z')).toBe(777_777);
    expect(await promptTokens(notMock, 'cron-sim-manual-2026-11-02T12:00:01Z')).toBeLessThan(100);
  });
});
