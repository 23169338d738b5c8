import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyBudgets } from '../src/budgets/budgets-store';
import { releaseReservations } from '../src/budgets/reserve';
import { worstCaseOf } from '../src/budgets/worst-case';
import { taskScheduleId } from '../src/constants';
import { applyPrices, loadPricesFile, priceInForce } from '../src/ledger/prices';
import { formatScaled, LEDGER_SCALE } from '../src/money';
import { applyTasks } from '../src/schedules/apply-tasks';
import { describeTaskSchedule } from '../src/schedules/describe-schedule';
import { missedSlots } from '../src/schedules/missed-slots';
import { runInputOf, taskFingerprint } from '../src/schedules/task-schedule';
import { taskNoteOf } from '../src/task-note';
import { parseTasksFile, type Task } from '../src/tasks/tasks-file';
import { budgetSweep } from '../src/workflows/budget-sweep';
import { scheduledRun } from '../src/workflows/scheduled-run';
import type { ActivityDeps } from '../src/activities';
import { appliedInput, type TestRun } from './support/applied';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { openReservationOfOneRun } from './support/open-reservation';
import { oracleCost } from './support/cost-oracle';
import { startWorkers } from './support/workers';

/**
 * What a task does when money runs short (issue 26 §2), end to end on real Temporal and PostgreSQL with the mock model:
 * maxCostPerRun downgrades or blocks whatever the budget; a run waits for other runs' reservations no longer than the
 * bound; onBudgetExhausted "pause" pauses the schedule, the budget sweeper resumes it when the month turns over in the
 * budget's zone (the sweeper's clock is the test's) or when the limit is raised, and the slots the pause skipped are
 * counted as skipped for budget, not flagged as missed.
 */

let ctx: TestContext;
const PROMPT = 'Summarise the day.';
const MAX_OUTPUT = 1000;
const SIMULATE = { promptTokens: 50, completionTokens: MAX_OUTPUT, embeddingTokens: MAX_OUTPUT };
const tag = randomUUID().slice(0, 6);
const usd = (a: bigint): string => formatScaled(a, LEDGER_SCALE);
let monthStart: Date;

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  await applyBudgets(ctx.operatorPool, { budgets: [], downgrade: { 'openai/gpt-4o-mini': 'openai/gpt-4.1-nano' } }, 'test');
  monthStart = (await ctx.pool.query<{ m: Date }>(`select date_trunc('month', now() at time zone 'UTC') at time zone 'UTC' as m`)).rows[0]
    .m;
});

afterAll(async () => ctx?.close());

/** One run's worst case (chat + embedding) on the given chat model, in atto-USD, priced by the test's own oracle. */
async function worstCase(model: string): Promise<bigint> {
  const now = new Date();
  const w = worstCaseOf({ prompt: PROMPT, maxOutputTokens: MAX_OUTPUT, simulate: SIMULATE });
  const chat = oracleCost('chat', w.chat, await priceInForce(ctx.pool, model, now));
  const embed = oracleCost('embedding', w.embedding, await priceInForce(ctx.pool, 'openai/text-embedding-3-small', now));
  return chat + embed;
}

const limitFor = (userId: string, limit: string, timeZone = 'UTC') =>
  applyBudgets(ctx.operatorPool, { budgets: [{ userId, monthlyLimitUsd: limit, timeZone, effectiveFrom: monthStart }] }, 'test');
/** A new limit from now on. */
const raiseLimit = (userId: string, limit: string) =>
  applyBudgets(ctx.operatorPool, { budgets: [{ userId, monthlyLimitUsd: limit, timeZone: 'UTC' }] }, 'test');

const run = (userId: string, over: Partial<TestRun> = {}): TestRun => ({
  taskId: `policy-${userId}`,
  userId,
  input: PROMPT,
  model: 'openai/gpt-4o-mini',
  embeddingModel: 'openai/text-embedding-3-small',
  maxOutputTokens: MAX_OUTPUT,
  simulate: SIMULATE,
  ...over,
});

let slot = 0;
const slotId = (taskId: string) => `cron-${taskId}-${new Date(Date.UTC(2026, 0, 1, 0, slot++)).toISOString().slice(0, 19)}Z`;

async function runOnce(r: TestRun, deps: Partial<Omit<ActivityDeps, 'pool' | 'workerId'>> = {}) {
  const fleet = await startWorkers(ctx, 1, deps);
  return fleet.runWhile(async () => {
    const handle = await ctx.client.workflow.start(scheduledRun, {
      workflowId: slotId(r.taskId),
      taskQueue: ctx.taskQueue,
      args: [await appliedInput(ctx.operatorPool, r)],
    });
    return { result: await handle.result(), handle };
  });
}

const ledgerModels = async (userId: string) =>
  (
    await ctx.pool.query<{ model: string }>(`select model from usage_ledger where user_id = $1 and entry_type = 'usage' order by id`, [
      userId,
    ])
  ).rows.map((r) => r.model);

describe('maxCostPerRun', () => {
  it('a run whose worst case is over the cap runs on the cheap model when that one fits, with or without a budget, and says why', async () => {
    const [full, cheap] = [await worstCase('openai/gpt-4o-mini'), await worstCase('openai/gpt-4.1-nano')];
    expect(cheap).toBeLessThan(full);
    const cap = usd((full + cheap) / 2n);
    for (const budget of [null, usd(full * 1000n)]) {
      const user = `cap-down-${budget ? 'budget' : 'none'}-${tag}`;
      if (budget) await limitFor(user, budget);
      const { result } = await runOnce(run(user, { maxCostPerRun: cap }));
      expect(result).toMatchObject({
        status: 'completed',
        tier: 'cheap',
        downgraded: { reason: 'max-cost-per-run', maxCostPerRunUsd: cap },
      });
      expect(await ledgerModels(user)).toEqual(['openai/gpt-4.1-nano', 'openai/text-embedding-3-small']);
      const row = await ctx.pool.query('select status, tier, budget from runs where user_id = $1', [user]);
      expect(row.rows).toEqual([{ status: 'completed', tier: 'cheap', budget: { reason: 'max-cost-per-run', maxCostPerRunUsd: cap } }]);
      const reservations = await ctx.pool.query<{ reason: string | null }>('select reason from budget_reservations where user_id = $1', [
        user,
      ]);
      expect(reservations.rows.map((r) => r.reason)).toEqual(budget ? ['max-cost-per-run', 'max-cost-per-run'] : []);
    }
  });

  it('a run whose cheap worst case is over the cap too is blocked, whatever the budget, with nothing reserved or called', async () => {
    const cheap = await worstCase('openai/gpt-4.1-nano');
    const cap = usd(cheap - 1n);
    for (const budget of [null, usd(cheap * 1000n)]) {
      const user = `cap-block-${budget ? 'budget' : 'none'}-${tag}`;
      if (budget) await limitFor(user, budget);
      const { result, handle } = await runOnce(run(user, { maxCostPerRun: cap }));
      expect(result).toMatchObject({ status: 'blocked', tier: 'blocked', budget: { reason: 'max-cost-per-run', maxCostPerRunUsd: cap } });
      expect(result.budget?.worstCaseUsd).toBe(usd(cheap));
      expect((await handle.describe()).status.name).toBe('COMPLETED');
      expect(await ledgerModels(user)).toEqual([]);
      const reservations = await ctx.pool.query('select 1 from budget_reservations where user_id = $1', [user]);
      expect(reservations.rowCount).toBe(0);
      const row = await ctx.pool.query('select status, budget from runs where user_id = $1', [user]);
      expect(row.rows[0]).toMatchObject({ status: 'blocked', budget: { reason: 'max-cost-per-run', maxCostPerRunUsd: cap } });
    }
  });

  it('is validated in the tasks file and is part of the fingerprint: a changed cap is a new version', () => {
    const task = (maxCostPerRun?: unknown) =>
      parseTasksFile({
        tasks: [{ id: 'capped', cron: '* * * * *', userId: 'u1', input: 'x', ...(maxCostPerRun === undefined ? {} : { maxCostPerRun }) }],
      }).tasks[0];
    const prints = ['0.01', '0.02', undefined].map((c) => taskFingerprint(task(c), 'q'));
    expect(new Set(prints).size).toBe(3);
    for (const bad of [0.01, '0', '-1', 'ten cents', '0.0000000000000000001']) expect(() => task(bad)).toThrow(/maxCostPerRun/);
    expect(() => parseTasksFile({ tasks: [{ id: 'p', cron: '* * * * *', userId: 'u1', input: 'x', onBudgetExhausted: 'stop' }] })).toThrow(
      /onBudgetExhausted/,
    );
  });
});

describe('the wait for other runs’ reservations', () => {
  it('is bounded: a run that waited its longest is decided counting them, blocked with a reason that says it waited', async () => {
    const user = `wait-bound-${tag}`;
    const [full, cheap] = [await worstCase('openai/gpt-4o-mini'), await worstCase('openai/gpt-4.1-nano')];
    // Alone the run fits at the default model; beside another run's open reservation of its worst case not even the
    // cheap one does.
    await limitFor(user, usd(full + cheap / 2n));
    await openReservationOfOneRun(ctx.pool, user, `other-${user}`, { prompt: PROMPT, maxOutputTokens: MAX_OUTPUT, simulate: SIMULATE });
    try {
      const { result, handle } = await runOnce(run(user), { budgetWaitMaxSeconds: 4 });
      expect(result).toMatchObject({
        status: 'blocked',
        budget: { reason: 'waited-for-reservations', reservedUsd: usd(full), spentUsd: usd(0n) },
      });
      expect(result.budget?.waitedSeconds).toBeGreaterThanOrEqual(4);
      // it waited on durable timers, backing off (1 s, 2 s, then the 1 s left), not in a retrying activity
      const timers = (await handle.fetchHistory()).events?.flatMap((e) => e.timerStartedEventAttributes ?? []) ?? [];
      const ms = timers.map(
        (t) => Number(t.startToFireTimeout?.seconds ?? 0) * 1000 + Math.round((t.startToFireTimeout?.nanos ?? 0) / 1e6),
      );
      expect(ms.slice(0, 2)).toEqual([1000, 2000]);
      expect(ms).toHaveLength(3);
      expect(await ledgerModels(user)).toEqual([]);
    } finally {
      await releaseReservations(ctx.pool, `other-${user}`);
    }
  }, 60_000);
});

/** A tasks file of one task of `userId` with onBudgetExhausted "pause"; no report or sweep schedule. */
const pausingTask = (id: string, userId: string, cron: string): Task =>
  parseTasksFile({
    tasks: [{ id, cron, userId, input: PROMPT, maxOutputTokens: MAX_OUTPUT, simulate: SIMULATE, onBudgetExhausted: 'pause' }],
    monthlyReport: false,
    budgetSweep: false,
  }).tasks[0];

const applyTask = (task: Task) =>
  applyTasks(ctx.client, { tasks: [task], monthlyReport: false, budgetSweep: false }, ctx.taskQueue, ctx.operatorPool);

/** A minute before the schedule is created, so that the schedule never fires it (a test starts it, as the schedule would). */
const minuteBefore = () => new Date(Math.floor(Date.now() / 60_000) * 60_000 - 60_000);

/** A run of the task's slot at `minute`, as its schedule would start it (its applied version). */
async function runSlot(task: Task, minute: Date) {
  const fleet = await startWorkers(ctx, 1);
  return fleet.runWhile(async () => {
    const handle = await ctx.client.workflow.start(scheduledRun, {
      workflowId: `${taskScheduleId(task.id)}-${minute.toISOString().slice(0, 19)}Z`,
      taskQueue: ctx.taskQueue,
      args: [runInputOf(task, taskFingerprint(task, ctx.taskQueue))],
    });
    return handle.result();
  });
}

/** One pass of the budget sweeper on a worker whose clock reads `now` (its own task queue, so no other worker takes it). */
async function sweepAt(now: Date) {
  const taskQueue = `${ctx.taskQueue}-sweep`;
  const fleet = await startWorkers({ ...ctx, taskQueue }, 1, { now: () => now, budgetWebhookUrl: '' });
  return fleet.runWhile(() => ctx.client.workflow.execute(budgetSweep, { workflowId: `sweep-${randomUUID()}`, taskQueue }));
}

/** As the CLI reads it (describeTaskSchedule): asked again when a loaded server answers DEADLINE_EXCEEDED. */
const scheduleState = async (taskId: string) => (await describeTaskSchedule(ctx.client, taskId)).state;

const pausesOf = async (taskId: string) =>
  (
    await ctx.pool.query<{ paused_at: Date; resumed_at: Date | null; cause: string | null; skipped_slots: number | null; month: string }>(
      `select paused_at, resumed_at, cause, skipped_slots, to_char(month, 'YYYY-MM') as month, reason from budget_pause_intervals
        where task_id = $1 order by id`,
      [taskId],
    )
  ).rows;

describe('onBudgetExhausted "pause"', () => {
  it('the first blocked run pauses the schedule, naming the reason and the month; the sweeper resumes it when the month turns over in the budget’s zone', async () => {
    const user = `pause-month-${tag}`;
    const zone = 'Pacific/Auckland';
    await limitFor(user, '0', zone);
    const task = pausingTask(`pause-month-${tag}`, user, '0 12 * * *');
    const minute = minuteBefore();
    await applyTask(task);
    const blocked = await runSlot(task, minute);
    expect(blocked).toMatchObject({ status: 'blocked', budget: { reason: 'monthly-limit', timeZone: zone } });
    const month = blocked.budget?.month ?? '';
    const paused = await scheduleState(task.id);
    expect(paused.paused).toBe(true);
    const reason = `budget exhausted: ${user} reached the monthly limit of $0.000000 for ${month} (${zone}); the budget sweeper resumes it when the month turns over or the limit is raised`;
    expect(paused.note).toBe(taskNoteOf(task, reason));
    // a second blocked run (a slot already under way) records no second pause; applying the file again keeps it paused
    expect(await runSlot(task, new Date(minute.getTime() - 60_000))).toMatchObject({ status: 'blocked' });
    await applyTask(task);
    expect((await scheduleState(task.id)).paused).toBe(true);
    expect(await pausesOf(task.id)).toMatchObject([{ month, resumed_at: null }]);
    // a changed cron is applied in the same update that keeps the budget pause and its reason
    const changed = pausingTask(task.id, user, '30 12 * * *');
    expect(await applyTask(changed)).toContainEqual({ action: 'updated', scheduleId: taskScheduleId(task.id) });
    expect(await scheduleState(task.id)).toMatchObject({ paused: true, note: taskNoteOf(changed, reason) });

    // The month turns over at midnight in Auckland, not in UTC.
    const { next } = (
      await ctx.pool.query<{ next: Date }>(
        `select (date_trunc('month', now() at time zone $1) + interval '1 month') at time zone $1 as next`,
        [zone],
      )
    ).rows[0];
    expect(next.getUTCHours()).not.toBe(0);
    expect(await sweepAt(new Date(next.getTime() - 1000))).toMatchObject({ resumed: 0 });
    expect((await scheduleState(task.id)).paused).toBe(true);
    expect(await sweepAt(next)).toMatchObject({ resumed: 1 });
    const resumed = await scheduleState(task.id);
    expect(resumed).toMatchObject({ paused: false, note: taskNoteOf(changed) });
    const [pause] = await pausesOf(task.id);
    expect(pause).toMatchObject({ cause: 'month-turnover', resumed_at: next });
    // the daily slots from the pause to the month's end were skipped for budget
    const days = Math.floor((next.getTime() - pause.paused_at.getTime()) / 86_400_000);
    expect(pause.skipped_slots).toBeGreaterThanOrEqual(days);
    expect(pause.skipped_slots).toBeLessThanOrEqual(days + 1);
    await ctx.client.schedule.getHandle(taskScheduleId(task.id)).delete();
  }, 120_000);

  it('the sweeper resumes it at once when the limit is raised', async () => {
    const user = `pause-raised-${tag}`;
    await limitFor(user, '0');
    const task = pausingTask(`pause-raised-${tag}`, user, '0 12 * * *');
    const minute = minuteBefore();
    await applyTask(task);
    expect(await runSlot(task, minute)).toMatchObject({ status: 'blocked' });
    expect((await scheduleState(task.id)).paused).toBe(true);
    expect(await sweepAt(new Date())).toMatchObject({ resumed: 0 });
    expect((await scheduleState(task.id)).paused).toBe(true);
    await raiseLimit(user, '1');
    expect(await sweepAt(new Date())).toMatchObject({ resumed: 1 });
    expect((await scheduleState(task.id)).paused).toBe(false);
    expect(await pausesOf(task.id)).toMatchObject([{ cause: 'limit-raised' }]);
    await ctx.client.schedule.getHandle(taskScheduleId(task.id)).delete();
  }, 120_000);

  it('counts the slots a pause skipped as skipped for budget in the report, and the missed-slot check does not flag them', async () => {
    const user = `pause-skipped-${tag}`;
    await limitFor(user, '0');
    const task = pausingTask(`pause-skipped-${tag}`, user, '* * * * *');
    const reportSkipped = async () => {
      const month = monthStart.toISOString().slice(0, 7);
      const r = await runCli(['report', '--month', month, '--format', 'json'], ctx.env);
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout).budget.skippedForBudget as { slots: number; pausedTasks: number };
    };
    const before = await reportSkipped();
    const minute = minuteBefore();
    await applyTask(task);
    expect(await runSlot(task, minute)).toMatchObject({ status: 'blocked' });
    const [{ paused_at: pausedAt }] = await pausesOf(task.id);
    expect((await reportSkipped()).pausedTasks).toBe(before.pausedTasks + 1);

    // Raised 3.5 minutes into the pause (the sweeper's clock): the minutes in between were skipped, not missed.
    await raiseLimit(user, '1');
    const resumedAt = new Date(pausedAt.getTime() + 210_000);
    expect(await sweepAt(resumedAt)).toMatchObject({ resumed: 1 });
    const skipped: Date[] = [];
    for (let m = Math.floor(pausedAt.getTime() / 60_000) + 1; m * 60_000 <= resumedAt.getTime(); m++) skipped.push(new Date(m * 60_000));
    expect(await pausesOf(task.id)).toMatchObject([{ cause: 'limit-raised', skipped_slots: skipped.length }]);
    expect(await reportSkipped()).toEqual({ slots: before.slots + skipped.length, pausedTasks: before.pausedTasks });

    const checks = await missedSlots(ctx.client, ctx.pool, { graceMs: 0, windowMs: 3_600_000, now: resumedAt });
    const check = checks.find((c) => c.taskId === task.id);
    expect(check).toMatchObject({ state: 'active', skippedForBudget: skipped.length });
    const flagged = new Set(check?.missed);
    expect(skipped.filter((t) => flagged.has(t.toISOString().replace('.000Z', 'Z')))).toEqual([]);
    await ctx.client.schedule.getHandle(taskScheduleId(task.id)).delete();
  }, 120_000);
});
