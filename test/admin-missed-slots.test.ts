import { createTaskSchedules, startTestAdmin } from './support/admin-server';
import parsePrometheus from 'parse-prometheus-text-format';
import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DEFAULT_MISSED_SLOT_CACHE_MS, type RunningAdmin } from '../src/admin/server';
import type { MissedSlotsView } from '../src/admin/pages';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { operateOnTask } from '../src/schedules/manage-task';
import { missedSlots, type TaskSlotCheck } from '../src/schedules/missed-slots';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { startWorkers } from './support/workers';
import { describeSchedule } from '../src/schedules/describe-schedule';

/**
 * Missed slots on the admin page and in /metrics, against real schedules: slots that fire into a task queue nobody
 * polls are never claimed, so they are missed; slots a worker claims (with and without jitter) are not; a paused
 * schedule is not, nor are the slots it skipped while paused once it is resumed. The schedules fire every minute, so
 * this waits for two real minute boundaries, each plus the jitter and the grace (up to about two and a half minutes).
 */

const GRACE_MS = 10_000;
const JITTER_MS = 10_000;
const JITTER = '10s';
const NOBODY_POLLS = 'admin-missed-slots-nobody-polls';

let ctx: TestContext;
let readonly: pg.Pool;
let admin: RunningAdmin;

const TASKS = parseTasksFile({
  tasks: [
    { id: 'unpolled', cron: '* * * * *', userId: 'u-missed', input: 'nobody runs me' },
    { id: 'unpolled-jitter', cron: '* * * * *', jitter: JITTER, userId: 'u-missed', input: 'nobody runs me late' },
    { id: 'claimed', cron: '* * * * *', userId: 'u-claimed', input: 'a worker runs me' },
    { id: 'claimed-jitter', cron: '* * * * *', jitter: JITTER, userId: 'u-claimed', input: 'a worker runs me late' },
    { id: 'paused', cron: '* * * * *', userId: 'u-missed', input: 'paused, then resumed', paused: true },
  ],
  monthlyReport: false,
}).tasks;
const POLLED = new Set(['claimed', 'claimed-jitter']);

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
  readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 4);
  admin = await startTestAdmin(ctx, readonly, { missedSlotGraceMs: GRACE_MS });
});

afterAll(async () => {
  for (const t of TASKS)
    await ctx?.client.schedule
      .getHandle(`cron-${t.id}`)
      .delete()
      .catch(() => undefined);
  await admin?.close();
  await readonly?.end();
  await ctx?.close();
});

const api = async <T>(path: string): Promise<T> => {
  const res = await fetch(`${admin.url}${path}`);
  expect(res.status, path).toBe(200);
  return (await res.json()) as T;
};
/**
 * The page's check, per task. The page shows a Temporal error instead of failing (a call can time out on a loaded
 * machine): such a view is asked again, and an error that persists fails the test with Temporal's own message.
 */
const checks = async () => {
  let view = await api<MissedSlotsView>('/api/missed-slots');
  for (let tries = 1; view.error !== null && tries < 5; tries++) view = await api<MissedSlotsView>('/api/missed-slots');
  expect(view.error, 'the missed-slot check could not run').toBeNull();
  return new Map(view.tasks.map((t) => [t.taskId, t]));
};
const at = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');
const until = (ms: number) => waitFor(async () => Date.now() >= ms, ms - Date.now() + 5_000, `the clock passed ${at(ms)}`);
const claimedMinutes = async (taskId: string) =>
  (await ctx.pool.query<{ m: Date }>('select scheduled_minute as m from runs where task_id = $1', [taskId])).rows.map((r) => r.m.getTime());

it(
  'flags the unclaimed slots of an unpolled schedule, and not the claimed, the paused, or those before creation',
  { timeout: 300_000 },
  async () => {
    // The same schedules `tasks apply` makes, two on a queue a worker polls and three on one nobody polls.
    const queueOf = (task: (typeof TASKS)[number]) => (POLLED.has(task.id) ? ctx.taskQueue : NOBODY_POLLS);
    await createTaskSchedules(ctx, TASKS, queueOf);
    const created = (await describeSchedule(ctx.client, 'cron-unpolled')).info.createdAt.getTime();
    const first = Math.ceil((created + 1) / 60_000) * 60_000; // the first slot after creation
    const second = first + 60_000;

    const fleet = await startWorkers(ctx, 1);
    await fleet.runWhile(async () => {
      // First check: every schedule's first slot is due (fired, jitter included, plus the grace) and the worker's claimed.
      await until(first + JITTER_MS + GRACE_MS + 1_000);
      await waitFor(async () => (await claimedMinutes('claimed')).includes(first), 30_000, 'the worker claimed the first slot');
      await waitFor(async () => (await claimedMinutes('claimed-jitter')).includes(first), 30_000, 'and the jittered one');
      let c = await checks();
      expect(c.get('unpolled')).toMatchObject({ state: 'active', dueSlots: 1, missedCount: 1, missed: [at(first)] });
      // Only slots after creation: the check starts at the schedule's creation, not a day back.
      expect(new Date(c.get('unpolled')!.checkedFrom!).getTime()).toBe(created);
      // A jittered slot fires up to JITTER_MS after its minute, and it is that fire time that is missed.
      const jittered = c.get('unpolled-jitter')!;
      expect(jittered).toMatchObject({ dueSlots: 1, missedCount: 1 });
      expect(new Date(jittered.missed[0]).getTime()).toBeGreaterThanOrEqual(first);
      expect(new Date(jittered.missed[0]).getTime()).toBeLessThan(first + JITTER_MS);
      // Claimed slots, at their minute (with jitter: claimed by nominal minute, fired later), are not missed.
      for (const id of ['claimed', 'claimed-jitter']) expect(c.get(id), id).toMatchObject({ state: 'active', dueSlots: 1, missedCount: 0 });
      // A paused schedule fires nothing and is owed nothing.
      expect(c.get('paused')).toMatchObject({ state: 'paused', checkedFrom: null, missedCount: 0 });

      const firstChecked = Date.now();

      // Resumed (as `cronledger tasks resume` does it): the slot it skipped while paused is still not missed, the next one is.
      await operateOnTask(ctx.client, 'paused', 'resume');
      // The page keeps its check for DEFAULT_MISSED_SLOT_CACHE_MS: the second check comes after that too (the first one
      // can come late, when the worker's claims were slow).
      await until(Math.max(second + JITTER_MS + GRACE_MS + 1_000, firstChecked + DEFAULT_MISSED_SLOT_CACHE_MS + 1_000));
      await waitFor(async () => (await claimedMinutes('claimed')).includes(second), 30_000, 'the worker claimed the second slot');
      await waitFor(async () => (await claimedMinutes('claimed-jitter')).includes(second), 30_000, 'and the jittered one');
      c = await checks();
      expect(c.get('paused')).toMatchObject({ state: 'active', dueSlots: 1, missedCount: 1, missed: [at(second)] });
      expect(c.get('unpolled')).toMatchObject({ dueSlots: 2, missedCount: 2, missed: [at(second), at(first)] });
      expect(c.get('unpolled-jitter')).toMatchObject({ dueSlots: 2, missedCount: 2 });
      for (const id of ['claimed', 'claimed-jitter']) expect(c.get(id), id).toMatchObject({ dueSlots: 2, missedCount: 0 });

      // The grace: with 10 minutes of it, none of these slots is due yet.
      const patient = await missedSlots(ctx.client, readonly, { graceMs: 600_000, windowMs: 86_400_000 });
      expect(patient.map((t: TaskSlotCheck) => [t.taskId, t.dueSlots, t.missedCount])).toEqual(
        ['claimed', 'claimed-jitter', 'paused', 'unpolled', 'unpolled-jitter'].map((id) => [id, 0, 0]),
      );

      // The metric: one series per task, the missed count.
      const families = parsePrometheus(await (await fetch(`${admin.url}/metrics`)).text());
      const gauge = families.find((f) => f.name === 'cronledger_missed_slots')!;
      expect(gauge.type).toBe('GAUGE');
      expect(Object.fromEntries(gauge.metrics.map((m) => [m.labels!.task, m.value]))).toEqual({
        claimed: '0',
        'claimed-jitter': '0',
        paused: '1',
        unpolled: '2',
        'unpolled-jitter': '2',
      });

      // The pages flag them: the overview's figure and section, and each task's row.
      const overview = await (await fetch(`${admin.url}/`)).text();
      expect(overview).toMatch(/<dt>Missed slots \(last 24h\)<\/dt>\s*<dd>5<\/dd>/);
      const tasksPage = await (await fetch(`${admin.url}/tasks`)).text();
      for (const page of [overview, tasksPage]) expect(flaggedRows(page)).toEqual(['paused', 'unpolled', 'unpolled-jitter']);
      const listed = (await (await fetch(`${admin.url}/api/tasks`)).json()) as {
        tasks: {
          id: string;
          missedSlots: TaskSlotCheck | null;
          recentRuns: { taskId: string; scheduledMinute: string }[];
        }[];
      };
      // Each task's recent runs (one query for all tasks): its own, newest first.
      const slotMinute = (ms: number) => `${new Date(ms).toISOString().slice(0, 16)}Z`;
      const recent = Object.fromEntries(listed.tasks.map((t) => [t.id, t.recentRuns.map((r) => [r.taskId, r.scheduledMinute])]));
      const ranAt = async (id: string) => (await claimedMinutes(id)).sort((a, b) => b - a).map((m) => [id, slotMinute(m)]);
      expect(recent).toEqual({
        claimed: await ranAt('claimed'),
        'claimed-jitter': await ranAt('claimed-jitter'),
        paused: [],
        unpolled: [],
        'unpolled-jitter': [],
      });
      expect(recent.claimed.length).toBeGreaterThanOrEqual(2);
      expect(Object.fromEntries(listed.tasks.map((t) => [t.id, t.missedSlots?.missedCount]))).toEqual({
        claimed: 0,
        'claimed-jitter': 0,
        paused: 1,
        unpolled: 2,
        'unpolled-jitter': 2,
      });
    });
  },
);

/** The tasks whose table row a page marks as missed (`<tr ... class="missed" data-task="...">`), sorted. */
const flaggedRows = (page: string) =>
  [...page.matchAll(/<tr\b[^>]*>/g)]
    .map((m) => m[0])
    .filter((tag) => /\bclass="missed"/.test(tag))
    .map((tag) => /data-task="([^"]+)"/.exec(tag)![1])
    .sort();
