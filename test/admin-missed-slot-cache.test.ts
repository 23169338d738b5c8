import { clientThrough, createTaskSchedules, startTestAdmin } from './support/admin-server';
import { InterceptingCall, type Interceptor } from '@grpc/grpc-js';
import { type Client } from '@temporalio/client';
import parsePrometheus from 'parse-prometheus-text-format';
import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { MissedSlotsView } from '../src/admin/pages';
import type { RunningAdmin } from '../src/admin/server';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { runCli } from './support/cli';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';
import { describeSchedule } from '../src/schedules/describe-schedule';

/**
 * The admin process shares one missed-slot check between every page load, API call and scrape for --missed-slot-cache,
 * and runs its per-task Temporal calls 16 at a time. The Temporal calls are counted on the wire: the admin's client
 * connection carries a gRPC interceptor that counts each request by method and how many are in flight. 40 schedules
 * on a task queue nobody polls: one fires every minute (its slots are missed), 39 once a year (they cost calls only).
 */

const GRACE_MS = 5_000;
const CACHE_MS = 60_000;
const NOBODY_POLLS = 'admin-missed-slot-cache-nobody-polls';
const LIMIT = 16;

const TASKS = parseTasksFile({
  tasks: [
    { id: 'every-minute', cron: '* * * * *', userId: 'u-cache', input: 'nobody runs me' },
    ...Array.from({ length: 39 }, (_, i) => ({
      id: `yearly-${String(i).padStart(2, '0')}`,
      cron: '0 0 1 1 *',
      userId: 'u-cache',
      input: 'once a year',
    })),
  ],
  monthlyReport: false,
}).tasks;

/**
 * Answered requests by gRPC method (DescribeSchedule, ...), and the most that were in flight at once since the last
 * reset. Only answers count: a query the busy server timed out (DEADLINE_EXCEEDED) and cronledger asked again is one
 * call that was made, not two.
 */
class RpcCounter {
  calls = new Map<string, number>();
  inFlight = 0;
  maxInFlight = 0;
  readonly interceptor: Interceptor = (options, nextCall) => {
    const method = options.method_definition.path.split('/').pop()!;
    return new InterceptingCall(nextCall(options), {
      start: (metadata, _listener, next) => {
        this.maxInFlight = Math.max(this.maxInFlight, ++this.inFlight);
        next(metadata, {
          onReceiveStatus: (status, nextStatus) => {
            this.inFlight--;
            if (status.code === 0) this.calls.set(method, (this.calls.get(method) ?? 0) + 1);
            nextStatus(status);
          },
        });
      },
    });
  };
  count = (method: string) => this.calls.get(method) ?? 0;
  reset() {
    this.calls.clear();
    this.maxInFlight = this.inFlight;
  }
}

let ctx: TestContext;
let readonly: pg.Pool;
let admin: RunningAdmin;
let adminClient: Client;
const rpcs = new RpcCounter();

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 4);
  // The retry interceptor is Temporal's default; the counter sits inside it and counts each answered request.
  adminClient = await clientThrough(ctx, rpcs.interceptor);
  admin = await startTestAdmin(ctx, readonly, {
    client: adminClient,
    missedSlotGraceMs: GRACE_MS,
    missedSlotCacheMs: CACHE_MS,
    metricsCacheMs: undefined, // the scrapes share the check through the metrics' own cache too, as deployed
  });
});

afterAll(async () => {
  const deleteSchedule = (taskId: string) => ctx?.client.schedule.getHandle(`cron-${taskId}`).delete();
  await Promise.all(TASKS.map((t) => deleteSchedule(t.id)?.catch(() => undefined)));
  await admin?.close();
  await adminClient?.connection.close();
  await readonly?.end();
  await ctx?.close();
});

const at = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');
const until = (ms: number) => waitFor(async () => Date.now() >= ms, ms - Date.now() + 5_000, `the clock passed ${at(ms)}`);
const get = async (path: string) => {
  const res = await fetch(`${admin.url}${path}`);
  expect(res.status, path).toBe(200);
  return res.text();
};

/** Page loads, API calls and scrapes, `each` of every kind, all at once; the missed-slot views and the gauge's values. */
async function burst(each: number, paths = ['/', '/api/overview', '/api/missed-slots', '/metrics']) {
  const bodies = await Promise.all(paths.flatMap((path) => Array.from({ length: each }, async () => ({ path, body: await get(path) }))));
  const views = bodies.flatMap(({ path, body }): MissedSlotsView[] =>
    path === '/api/missed-slots'
      ? [JSON.parse(body) as MissedSlotsView]
      : path === '/api/overview'
        ? [(JSON.parse(body) as { missedSlots: MissedSlotsView }).missedSlots]
        : [],
  );
  for (const v of views) expect(v.error, 'the missed-slot check ran').toBeNull();
  const gauges = bodies
    .filter((b) => b.path === '/metrics')
    .map((b) => {
      const gauge = parsePrometheus(b.body).find((f) => f.name === 'cronledger_missed_slots');
      return Object.fromEntries((gauge?.metrics ?? []).map((m) => [m.labels!.task, Number(m.value)]));
    });
  const pages = bodies.filter((b) => b.path === '/' || b.path === '/tasks').map((b) => b.body);
  return { views, gauges, pages };
}

it(
  'concurrent page loads and scrapes within the window make one round of Temporal calls, and one after it recomputes',
  { timeout: 300_000 },
  async () => {
    await createTaskSchedules(ctx, TASKS, () => NOBODY_POLLS);
    const created = (await describeSchedule(ctx.client, 'cron-every-minute')).info.createdAt.getTime();
    // A slot at least 10 s after creation; the first check runs before it is due, with the check range already open.
    const slot = Math.ceil((created + 10_000) / 60_000) * 60_000;
    await until(Math.max(created + GRACE_MS + 1_000, slot - 10_000));

    // 1. Sixteen requests at once (4 page loads, 4 overview and 4 missed-slot API calls, 4 scrapes): one check.
    rpcs.reset();
    const first = await burst(4);
    expect(rpcs.count('ListSchedules')).toBe(1);
    expect(rpcs.count('DescribeSchedule')).toBe(TASKS.length); // one describe per task, not 16 (nor 2) per task
    // per task one call that lists its times and one that finds none left; the yearly ones have none at all
    expect(rpcs.count('ListScheduleMatchingTimes')).toBeGreaterThanOrEqual(TASKS.length);
    expect(rpcs.count('ListScheduleMatchingTimes')).toBeLessThanOrEqual(TASKS.length + 1);
    // the fan-out is bounded, and parallel
    expect(rpcs.maxInFlight).toBeLessThanOrEqual(LIMIT);
    expect(rpcs.maxInFlight).toBeGreaterThan(1);
    const checkedAt = first.views[0].checkedAt!;
    for (const v of first.views) expect(v.checkedAt).toBe(checkedAt);
    const minute = first.views[0].tasks.find((t) => t.taskId === 'every-minute')!;
    expect(minute.missed).not.toContain(at(slot)); // not due yet
    expect(first.views[0].tasks).toHaveLength(TASKS.length);
    for (const g of first.gauges) expect(g['every-minute']).toBe(minute.missedCount);
    for (const page of first.pages) expect(page).toMatch(/Checked \d+ s ago/);

    // 2. The slot is now due (nobody polls its queue), but within the window every request, the Tasks page too, reads
    //    the same figures: not one more matching-times call.
    await until(slot + GRACE_MS + 1_000);
    rpcs.reset();
    const second = await burst(3, ['/', '/api/overview', '/api/missed-slots', '/metrics', '/tasks']);
    expect(rpcs.count('ListScheduleMatchingTimes')).toBe(0);
    for (const v of second.views) {
      expect(v.checkedAt).toBe(checkedAt);
      expect(v.ageSeconds).toBeGreaterThanOrEqual(1);
      expect(v.tasks.find((t) => t.taskId === 'every-minute')!.missed).not.toContain(at(slot));
    }
    for (const page of second.pages) expect(page).toContain(`data-checked-at="${checkedAt}"`);

    // 3. After the window, one new round, and the slot missed meanwhile shows everywhere.
    await until(new Date(checkedAt).getTime() + CACHE_MS + 1_000);
    rpcs.reset();
    const third = await burst(4);
    expect(rpcs.count('DescribeSchedule')).toBe(TASKS.length);
    expect(rpcs.count('ListScheduleMatchingTimes')).toBe(TASKS.length + 1);
    expect(rpcs.maxInFlight).toBeLessThanOrEqual(LIMIT);
    const recheckedAt = third.views[0].checkedAt!;
    expect(new Date(recheckedAt).getTime()).toBeGreaterThan(new Date(checkedAt).getTime() + CACHE_MS);
    for (const v of third.views) {
      expect(v.checkedAt).toBe(recheckedAt);
      const t = v.tasks.find((x) => x.taskId === 'every-minute')!;
      expect(t.missed).toContain(at(slot));
      expect(t.missedCount).toBeGreaterThan(minute.missedCount);
    }
    const missedNow = third.views[0].tasks.find((t) => t.taskId === 'every-minute')!.missedCount;
    for (const g of third.gauges) expect(g['every-minute']).toBe(missedNow);
  },
);

it('refuses a --missed-slot-cache that is not a duration, naming the value and the fix', async () => {
  const r = await runCli(['admin', '--port', '0', '--missed-slot-cache', '30 seconds'], ctx.env);
  expect(r.code).not.toBe(0);
  expect(r.stderr).toContain('--missed-slot-cache "30 seconds"');
  expect(r.stderr).toMatch(/15m, 1h30m or 90s/);
  expect(r.stderr).not.toMatch(/\n\s+at /);
});
