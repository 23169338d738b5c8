import { clientThrough, createTaskSchedules, startTestAdmin } from './support/admin-server';
import { InterceptingCall, type Interceptor } from '@grpc/grpc-js';
import { type Client } from '@temporalio/client';
import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { MissedSlotsView } from '../src/admin/pages';
import type { RunningAdmin } from '../src/admin/server';
import { createPool, readOnlySessionUrl } from '../src/db/pool';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { createTestContext, type TestContext } from './support/context';
import { waitFor } from './support/wait';

/**
 * A page waits at most temporalWaitMs for Temporal's part (the schedule listing, the missed-slot check), then shows
 * the last one computed, or says it is still coming, while the computation goes on. The admin's connection carries a
 * gRPC interceptor that holds every DescribeSchedule and ListScheduleMatchingTimes request until the test opens the
 * gate: a Temporal server as slow as the test wants, with the real server answering once it is open.
 */

const NOBODY_POLLS = 'admin-slow-temporal-nobody-polls';
const WAIT_MS = 500;
const TASKS = parseTasksFile({
  tasks: [{ id: 'slow-temporal', cron: '0 0 1 1 *', userId: 'u-slow', input: 'once a year' }],
  monthlyReport: false,
}).tasks;

/** Holds the schedule queries while closed; opening releases those held and lets later ones through. */
class Gate {
  private open = true;
  private held: (() => void)[] = [];
  heldCount = 0;
  close() {
    this.open = false;
  }
  release() {
    this.open = true;
    for (const go of this.held.splice(0)) go();
  }
  readonly interceptor: Interceptor = (options, nextCall) => {
    const method = options.method_definition.path.split('/').pop()!;
    if (!['DescribeSchedule', 'ListScheduleMatchingTimes'].includes(method)) return new InterceptingCall(nextCall(options));
    return new InterceptingCall(nextCall(options), {
      sendMessage: (message, next) => {
        if (this.open) return next(message);
        this.heldCount++;
        this.held.push(() => next(message));
      },
    });
  };
}

let ctx: TestContext;
let readonly: pg.Pool;
let admin: RunningAdmin;
let adminClient: Client;
const gate = new Gate();

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  readonly = createPool(readOnlySessionUrl(ctx.readonlyDatabaseUrl), 4);
  adminClient = await clientThrough(ctx, gate.interceptor);
  admin = await startTestAdmin(ctx, readonly, {
    client: adminClient,
    missedSlotCacheMs: 0, // every request after a finished check starts a new one
    tasksCacheMs: 0,
    temporalWaitMs: WAIT_MS,
  });
  await createTaskSchedules(ctx, TASKS, () => NOBODY_POLLS);
});

afterAll(async () => {
  gate.release();
  await Promise.all(
    TASKS.map((t) =>
      ctx?.client.schedule
        .getHandle(`cron-${t.id}`)
        .delete()
        .catch(() => undefined),
    ),
  );
  await admin?.close();
  await adminClient?.connection.close();
  await readonly?.end();
  await ctx?.close();
});

const get = async (path: string) => {
  const res = await fetch(`${admin.url}${path}`);
  return { status: res.status, body: await res.text() };
};
const tasksOf = (body: string) => (JSON.parse(body) as { tasks: { id: string }[] }).tasks.map((t) => t.id);

it(
  'answers while Temporal holds its schedule queries: still coming at first, then the last listing and check',
  { timeout: 120_000 },
  async () => {
    // 1. Nothing computed yet and Temporal holding every describe: the pages answer all the same, saying so.
    gate.close();
    const api = await get('/api/tasks');
    expect(api.status).toBe(503);
    expect(JSON.parse(api.body)).toEqual({
      error:
        'the listing of the schedules has not finished within 0.5 s (Temporal is answering slowly); it goes on, and a later load shows it',
    });
    const page = await get('/tasks');
    expect(page.status).toBe(200);
    expect(page.body).toContain('Schedules unavailable: the listing of the schedules has not finished within 0.5 s');
    const check = JSON.parse((await get('/api/missed-slots')).body) as MissedSlotsView;
    expect([check.error, check.checkedAt, check.tasks]).toEqual([
      'the missed-slot check has not finished within 0.5 s (Temporal is answering slowly); it goes on, and a later load shows it',
      null,
      [],
    ]);
    expect(gate.heldCount).toBeGreaterThan(0); // the requests above met the held queries, not a quick answer

    // 2. Temporal answers: the computations that went on finish, and the next loads show them.
    gate.release();
    await waitFor(async () => (await get('/api/tasks')).status === 200, 60_000, 'the listing once Temporal answers');
    expect(tasksOf((await get('/api/tasks')).body)).toContain('slow-temporal');
    const checked = JSON.parse((await get('/api/missed-slots')).body) as MissedSlotsView;
    expect(checked.error).toBeNull();
    expect(checked.tasks.map((t) => t.taskId)).toContain('slow-temporal');

    // 3. Temporal slow again, with a listing and a check behind it: the pages show those, not an error.
    gate.close();
    const held = gate.heldCount;
    const stale = await get('/api/tasks');
    expect(stale.status).toBe(200);
    expect(tasksOf(stale.body)).toContain('slow-temporal');
    const staleCheck = JSON.parse((await get('/api/missed-slots')).body) as MissedSlotsView;
    expect(staleCheck.error).toBeNull();
    expect(staleCheck.checkedAt).not.toBeNull();
    expect(gate.heldCount).toBeGreaterThan(held); // a new listing and check were asked for, and held
    gate.release();
  },
);
