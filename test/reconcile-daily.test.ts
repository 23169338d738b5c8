import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../src/config';
import { RECONCILE_SCHEDULE_ID } from '../src/constants';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import type { ReconcileDailyResult } from '../src/workflows/reconcile-daily';
import { adminReportsEnv } from './support/admin-reports-env';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { startFakeAnthropic, type FakeAnthropic } from './support/fake-anthropic';
import { costAtto } from './support/fake-billing';
import { bookAndBillChat, DEFAULT_BILLING_RATES, startFakeOpenAI, type FakeOpenAI } from './support/fake-openai';
import { atto, STANDARD_PRICES } from './support/ledger';
import { waitFor } from './support/wait';
import { startWorkers, type WorkerFleet } from './support/workers';
import { describeSchedule } from '../src/schedules/describe-schedule';

/**
 * The `reconcile-daily` schedule (issue 25 §3): `cronledger reconcile schedule` creates it, each start reconciles
 * yesterday (UTC) against the fake providers' reports, and its import runs on `cronledger reconcile worker`, a process
 * of its own with the operator URL and the admin keys. The main worker here has neither: the worker role's pool and no
 * admin key. A lost answer billed yesterday is booked by the first start, once; a second start books nothing.
 */

let ctx: TestContext;
let openai: FakeOpenAI;
let anthropic: FakeAnthropic;
let reconcileWorker: ChildProcess;
let workerOutput = '';
let fleet: WorkerFleet;
let stopFleet: () => void;
let fleetDone: Promise<void>;

const DAY_MS = 86_400_000;
const yesterday = new Date(Date.now() - DAY_MS).toISOString().slice(0, 10);
const CHAT_MODEL = 'gpt-4o-mini-2024-07-18';
const LOST = { prompt_tokens: 500, completion_tokens: 70 };

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile(STANDARD_PRICES), 'test');
  openai = await startFakeOpenAI();
  anthropic = await startFakeAnthropic();
  // Yesterday: a call booked and billed alike (clean), and an answer billed that the ledger never booked (the drift).
  const at = await bookAndBillChat(ctx.ownerPool, openai, 'daily-1', yesterday, CHAT_MODEL);
  openai.plantBilled({ endpoint: 'chat', model: CHAT_MODEL, usage: LOST, billedAt: at.getTime() + 60_000 });

  // The reconcile worker: the only process given the operator URL, the admin keys and the scope.
  reconcileWorker = spawn(process.execPath, [join(repoRoot(), 'bin', 'cronledger.js'), 'reconcile', 'worker'], {
    cwd: repoRoot(),
    env: {
      ...ctx.env,
      ...adminReportsEnv(openai, anthropic),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  reconcileWorker.stdout!.on('data', (c: Buffer) => (workerOutput += c.toString('utf8')));
  reconcileWorker.stderr!.on('data', (c: Buffer) => (workerOutput += c.toString('utf8')));
  await waitFor(async () => workerOutput.includes('reconcile worker polling'), 60_000, `reconcile worker started:\n${workerOutput}`);

  // The main worker (reconcileDaily's workflow code): the worker role's pool, no admin key.
  fleet = await startWorkers(ctx, 1);
  fleetDone = fleet.runWhile(() => new Promise<void>((resolve) => (stopFleet = resolve)));
}, 300_000);

afterAll(async () => {
  stopFleet?.();
  await fleetDone;
  if (reconcileWorker && reconcileWorker.exitCode === null) {
    const exited = new Promise((r) => reconcileWorker.once('exit', r));
    reconcileWorker.kill('SIGTERM');
    await exited;
  }
  await openai?.close();
  await anthropic?.close();
  await ctx?.close();
});

const bookedEntries = async () =>
  (
    await ctx.pool.query<{ model: string; cost: string }>(
      `select model, cost_usd::text as cost from usage_ledger where entry_type = 'reconciliation' order by id`,
    )
  ).rows;

async function triggerAndWait(completed: number): Promise<ReconcileDailyResult> {
  await ctx.client.schedule.getHandle(RECONCILE_SCHEDULE_ID).trigger();
  const query = `WorkflowType = 'reconcileDaily' AND TemporalScheduledById = '${RECONCILE_SCHEDULE_ID}'`;
  await waitFor(
    async () => (await ctx.client.workflow.count(`${query} AND ExecutionStatus = 'Completed'`)).count === completed,
    90_000,
    `${completed} reconcileDaily completed (reconcile worker:\n${workerOutput})`,
  );
  const ids: string[] = [];
  for await (const e of ctx.client.workflow.list({ query })) ids.push(e.workflowId);
  const latest = ids.sort().at(-1)!;
  expect(latest).toMatch(/^reconcile-daily-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  return (await ctx.client.workflow.getHandle(latest).result()) as ReconcileDailyResult;
}

describe('reconcile-daily', () => {
  it('the schedule command creates, keeps and updates the schedule', async () => {
    const args = ['reconcile', 'schedule', '--providers', 'openai,anthropic', '--at', '03:15', '--days', '1'];
    const created = await runCli(args, ctx.env);
    expect(created.stderr).toBe('');
    expect(created.stdout).toMatch(/^created +reconcile-daily \(openai,anthropic, the last 1 day\(s\), daily at 03:15 UTC\)/);
    expect((await runCli(args, ctx.env)).stdout).toMatch(/^unchanged /);
    const described = await describeSchedule(ctx.client, RECONCILE_SCHEDULE_ID);
    expect(described.memo).toEqual({ managedBy: 'cronledger', kind: 'reconcile' });
    expect(described.action).toMatchObject({
      type: 'startWorkflow',
      workflowType: 'reconcileDaily',
      args: [{ providers: ['openai', 'anthropic'], days: 1 }],
    });
    expect(described.info.nextActionTimes[0].toISOString()).toMatch(/T03:15:00\.000Z$/);
  });

  it('a start imports yesterday from both providers on the reconcile worker and books the lost answer once; a second books nothing', async () => {
    const first = await triggerAndWait(1);
    expect(first.from).toBe(yesterday);
    expect(first.to).toBe(yesterday);
    expect(first.imports.map((i) => [i.provider, i.from, i.to])).toEqual([
      ['openai', yesterday, yesterday],
      ['anthropic', yesterday, yesterday],
    ]);
    const rates = DEFAULT_BILLING_RATES[CHAT_MODEL];
    const [o, a] = first.imports;
    expect([o.booked, o.bookedTokens, atto(o.bookedUsd)]).toEqual([
      2,
      String(LOST.prompt_tokens + LOST.completion_tokens),
      costAtto(LOST.prompt_tokens, rates.input) + costAtto(LOST.completion_tokens, rates.output!),
    ]);
    expect([a.booked, atto(a.bookedUsd)]).toEqual([0, 0n]);
    const imports = await ctx.pool.query<{ id: string; provider: string }>(
      'select id::text, provider from reconciliation_imports order by id',
    );
    expect(imports.rows).toEqual([
      { id: o.importId, provider: 'openai' },
      { id: a.importId, provider: 'anthropic' },
    ]);
    const entries = await bookedEntries();
    expect(entries).toHaveLength(2);

    const second = await triggerAndWait(2);
    expect(second.imports.map((i) => [i.provider, i.booked])).toEqual([
      ['openai', 0],
      ['anthropic', 0],
    ]);
    expect(await bookedEntries()).toEqual(entries);
  });

  it.each([
    { args: ['--at', '25:00'], message: /--at "25:00" is not a time of day; write it as HH:MM in UTC/ },
    { args: ['--days', '0'], message: /--days "0" is not a number of days; give a whole number from 1 to 366/ },
    { args: ['--providers', 'openai,gemini'], message: /"gemini" is not a provider; name openai, anthropic or both/ },
  ])('bad input: $message', async ({ args, message }) => {
    const r = await runCli(['reconcile', 'schedule', ...args], ctx.env);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.code).toBe(2);
    const described = await describeSchedule(ctx.client, RECONCILE_SCHEDULE_ID);
    expect(described.info.nextActionTimes[0].toISOString()).toMatch(/T03:15:00\.000Z$/);
  });

  it('--delete removes it; a second --delete finds none', async () => {
    expect((await runCli(['reconcile', 'schedule', '--delete'], ctx.env)).stdout).toMatch(/^deleted +reconcile-daily/);
    expect((await runCli(['reconcile', 'schedule', '--delete'], ctx.env)).stdout).toMatch(/^absent +reconcile-daily/);
    await expect(describeSchedule(ctx.client, RECONCILE_SCHEDULE_ID)).rejects.toThrow();
  });
});
