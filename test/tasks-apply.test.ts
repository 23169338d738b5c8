import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestContext, type TestContext } from './support/context';
import { runCli, runCliOnTerminal } from './support/cli';
import { waitFor } from './support/wait';
import { BUDGET_SWEEP_SCHEDULE_ID } from '../src/constants';
import { describeOrUndefined, describeSchedule } from '../src/schedules/describe-schedule';
import { applyPrices, loadPricesFile } from '../src/ledger/prices';
import { startWorkers } from './support/workers';
import { updateIfUnchanged } from '../src/schedules/update-if-unchanged';
import { reconcileFrom, reconcileSchedule } from '../src/schedules/reconcile-schedule';
import { wantedTaskSchedule } from '../src/schedules/apply-tasks';
import { appliedFingerprintOf } from '../src/schedules/schedule-memos';
import { parseTasksFile } from '../src/tasks/tasks-file';
import { budgetPauseReason, notePausedFor, taskNoteOf } from '../src/task-note';
import { UserError } from '../src/errors';
import { Client } from '@temporalio/client';
import { operateOnTask } from '../src/schedules/manage-task';

let ctx: TestContext;
const dir = mkdtempSync(join(tmpdir(), 'cronledger-tasks-'));

const task = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  cron: '*/15 * * * *',
  userId: 'u1',
  input: `run ${id}`,
  ...extra,
});

/** The definition `tasks apply` recorded for this task under this fingerprint (task_versions). */
const appliedDefinition = async (taskId: string, fingerprint: string) =>
  (await ctx.pool.query('select definition from task_versions where task_id = $1 and fingerprint = $2', [taskId, fingerprint])).rows[0]
    ?.definition as unknown;

/**
 * A client on ctx.client's connection whose every UpdateSchedule first awaits `racer(n)` (n = 1, 2, ...): a change made
 * through the real server exactly between the describe an update was made from and that update. `sent()` counts them.
 */
function racedBeforeEachUpdate(racer: (n: number) => Promise<unknown>): { client: Client; sent: () => number } {
  const service = ctx.client.connection.workflowService;
  let sent = 0;
  const updateSchedule = async (request: Parameters<typeof service.updateSchedule>[0]) => {
    await racer(++sent);
    return service.updateSchedule(request);
  };
  const racedService = Object.create(service) as typeof service;
  Object.defineProperty(racedService, 'updateSchedule', { value: updateSchedule });
  const connection = Object.create(ctx.client.connection) as typeof ctx.client.connection;
  Object.defineProperty(connection, 'workflowService', { value: racedService });
  return { client: new Client({ connection, namespace: ctx.client.options.namespace }), sent: () => sent };
}

/** Writes a tasks file (or raw text) and returns its path. */
function tasksFile(name: string, content: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

/** Every schedule ID this file's tasks files could create, plus the one someone else made. */
const KNOWN_SCHEDULES = [
  'alpha',
  'beta',
  'gamma',
  'delta',
  'epsilon',
  'ok-one',
  'bad-cron',
  'bad-zone',
  'twice',
  'typo',
  'x',
  'pre-shape',
  'not-ours',
]
  .map((id) => `cron-${id}`)
  .sort();

/**
 * The schedules that exist, with the fields apply controls, for before/after comparisons. Each known ID is described
 * (which reads the schedule itself), not listed: the schedule list is eventually consistent, so a comparison of two
 * lists could miss a schedule that apply created or deleted a moment ago.
 */
async function scheduleState(): Promise<Record<string, unknown>> {
  const state: Record<string, unknown> = {};
  for (const id of KNOWN_SCHEDULES) {
    const d = await describeOrUndefined(ctx.client, id);
    if (d)
      state[id] = {
        paused: d.state.paused,
        memo: d.action.memo,
        args: d.action.type === 'startWorkflow' ? d.action.args : null,
        tz: d.spec.timezone,
      };
  }
  return state;
}

/** Waits until the schedule list (visibility) shows `count` schedules, which `tasks apply` reads to find deletions. */
async function waitForListed(count: number): Promise<void> {
  let listed = -1;
  await waitFor(
    async () => {
      listed = 0;
      for await (const _ of ctx.client.schedule.list()) listed++;
      return listed === count;
    },
    20_000,
    `the schedule list showing ${count} schedules (it showed ${listed})`,
  );
}

beforeAll(async () => {
  ctx = await createTestContext(import.meta.url);
  // A schedule someone else made, with an ID that looks like ours: apply must never touch it.
  await ctx.client.schedule.create({
    scheduleId: 'cron-not-ours',
    spec: { cronExpressions: ['0 0 * * *'] },
    action: { type: 'startWorkflow', workflowType: 'somethingElse', taskQueue: 'elsewhere', args: [] },
    state: { paused: true },
  });
});

afterAll(async () => ctx?.close());

describe('tasks apply', () => {
  it('creates, then changes nothing on a second run, then updates, pauses and deletes only its own schedules', async () => {
    const v1 = tasksFile('v1.json', { tasks: [task('alpha'), task('beta'), task('gamma')], monthlyReport: false, budgetSweep: false });
    const first = await runCli(['tasks', 'apply', v1], ctx.env);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/created\s+cron-alpha/);
    expect(first.stdout).toContain('3 changes, 0 unchanged');

    const again = await runCli(['tasks', 'apply', v1, '--json'], ctx.env);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).changes.map((c: { action: string }) => c.action)).toEqual(['unchanged', 'unchanged', 'unchanged']);

    await waitForListed(4);
    const v2 = tasksFile('v2.json', {
      tasks: [task('alpha', { input: 'a new prompt' }), task('beta', { paused: true })],
      monthlyReport: false,
      budgetSweep: false,
    });
    // Without a terminal and without --prune, the schedule of the task v2 omits is kept, and the output says so.
    const second = await runCli(['tasks', 'apply', v2, '--json'], ctx.env);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout).changes).toEqual([
      { action: 'updated', scheduleId: 'cron-alpha' },
      { action: 'paused', scheduleId: 'cron-beta' },
      { action: 'kept', scheduleId: 'cron-gamma' },
    ]);
    expect(await describeOrUndefined(ctx.client, 'cron-gamma')).toBeDefined();
    const kept = await runCli(['tasks', 'apply', v2], ctx.env);
    expect(kept.code, kept.stderr).toBe(0);
    expect(kept.stdout).toMatch(/^kept\s+cron-gamma$/m);
    expect(kept.stdout).toContain('0 changes, 2 unchanged');
    expect(kept.stdout).toContain(
      `left 1 schedule in place whose task is not in ${v2}: cron-gamma; \`cronledger tasks apply ${v2} --prune\` deletes it`,
    );
    expect(await describeOrUndefined(ctx.client, 'cron-gamma')).toBeDefined();

    const pruned = await runCli(['tasks', 'apply', v2, '--prune', '--json'], ctx.env);
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(JSON.parse(pruned.stdout).changes).toEqual([
      { action: 'unchanged', scheduleId: 'cron-alpha' },
      { action: 'unchanged', scheduleId: 'cron-beta' },
      { action: 'deleted', scheduleId: 'cron-gamma' },
    ]);

    const state = await scheduleState();
    expect(Object.keys(state)).toEqual(['cron-alpha', 'cron-beta', 'cron-not-ours']);
    // the schedule names the new version; its prompt is in task_versions, never in the schedule
    const alpha = (state['cron-alpha'] as { args: { taskId: string; fingerprint: string }[] }).args[0];
    expect(Object.keys(alpha).sort()).toEqual(['fingerprint', 'taskId']);
    expect(await appliedDefinition('alpha', alpha.fingerprint)).toMatchObject({ input: 'a new prompt' });
    expect((state['cron-beta'] as { paused: boolean }).paused).toBe(true);
    expect((state['cron-not-ours'] as { paused: boolean }).paused).toBe(true);
  });

  it('ends in the same state when two applies run at once', async () => {
    const file = tasksFile('concurrent.json', {
      tasks: [task('alpha'), task('delta', { timezone: 'Europe/Berlin' }), task('epsilon', { cron: '0 9 * * 1-5' })],
      monthlyReport: false,
      budgetSweep: false,
    });
    const apply = () => runCli(['tasks', 'apply', file, '--prune'], ctx.env);
    const [a, b] = await Promise.all([apply(), apply()]);
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    const afterBoth = await scheduleState();
    const third = await runCli(['tasks', 'apply', file, '--json'], ctx.env);
    const changes = (JSON.parse(third.stdout) as { changes: { action: string; scheduleId: string }[] }).changes;
    expect(changes.map((c) => c.scheduleId)).toEqual(['cron-alpha', 'cron-delta', 'cron-epsilon']);
    expect(changes.every((c) => c.action === 'unchanged')).toBe(true);
    expect(await scheduleState()).toEqual(afterBoth);
    expect(Object.keys(afterBoth)).toEqual(['cron-alpha', 'cron-delta', 'cron-epsilon', 'cron-not-ours']);
  });

  it('lists tasks with next fire times, and pauses, resumes, triggers and deletes one', async () => {
    const list = await runCli(['tasks', 'list', '--json'], ctx.env);
    expect(list.code, list.stderr).toBe(0);
    const tasks = JSON.parse(list.stdout).tasks as { id: string; nextFireTimes: string[]; paused: boolean }[];
    expect(tasks.map((t) => t.id)).toEqual(['alpha', 'delta', 'epsilon']);
    const next = tasks[0].nextFireTimes.map((t) => new Date(t));
    expect(next.length).toBeGreaterThan(0);
    expect(next.every((t) => t.getUTCMinutes() % 15 === 0 && t.getUTCSeconds() === 0)).toBe(true);

    expect((await runCli(['tasks', 'pause', 'delta'], ctx.env)).code).toBe(0);
    expect((await describeSchedule(ctx.client, 'cron-delta')).state.paused).toBe(true);
    expect((await runCli(['tasks', 'resume', 'delta'], ctx.env)).code).toBe(0);
    expect((await describeSchedule(ctx.client, 'cron-delta')).state.paused).toBe(false);

    // A trigger is a manual run with its own workflow ID and claim, not a firing of the schedule.
    const triggered = await runCli(['tasks', 'trigger', 'epsilon'], ctx.env);
    expect(triggered.code, triggered.stderr).toBe(0);
    expect(triggered.stdout).toMatch(
      /^started a manual run of epsilon \(not a schedule slot; it claims manual:epsilon:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)$/m,
    );
    const manualId = /^workflow ID: (cron-epsilon-manual-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$/m.exec(triggered.stdout)?.[1];
    expect(manualId).toBeDefined();
    const started = await ctx.client.workflow.getHandle(manualId as string).describe();
    expect(started.type).toBe('scheduledRun');
    expect((await describeSchedule(ctx.client, 'cron-epsilon')).info.numActionsTaken).toBe(0);

    expect((await runCli(['tasks', 'delete', 'epsilon'], ctx.env)).code).toBe(0);
    const gone = await runCli(['tasks', 'pause', 'epsilon'], ctx.env);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toMatch(/task "epsilon" has no cronledger schedule/);
  });

  it('never pauses or deletes a schedule it did not create', async () => {
    const r = await runCli(['tasks', 'delete', 'not-ours'], ctx.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/has no cronledger schedule/);
    await describeSchedule(ctx.client, 'cron-not-ours'); // still there
  });

  it('updates a task whose change is nested inside simulate, and not one whose keys were only reordered', async () => {
    const simulate = { promptTokens: 100, completionTokens: 20 };
    const v1 = tasksFile('simulate-v1.json', { tasks: [task('sim', { simulate })], monthlyReport: false, budgetSweep: false });
    expect((await runCli(['tasks', 'apply', v1], ctx.env)).code).toBe(0);
    const reordered = tasksFile('simulate-reordered.json', {
      tasks: [{ simulate: { completionTokens: 20, promptTokens: 100 }, ...task('sim') }],
      monthlyReport: false,
      budgetSweep: false,
    });
    const same = await runCli(['tasks', 'apply', reordered, '--json'], ctx.env);
    expect(same.code, same.stderr).toBe(0);
    // the other tasks' schedules are kept (no --prune), each listed as such
    const simChanges = (stdout: string) =>
      (JSON.parse(stdout) as { changes: { action: string; scheduleId: string }[] }).changes.filter((c) => c.action !== 'kept');
    expect(simChanges(same.stdout)).toEqual([{ action: 'unchanged', scheduleId: 'cron-sim' }]);

    const v2 = tasksFile('simulate-v2.json', {
      tasks: [task('sim', { simulate: { ...simulate, completionTokens: 900 } })],
      monthlyReport: false,
      budgetSweep: false,
    });
    const changed = await runCli(['tasks', 'apply', v2, '--json'], ctx.env);
    expect(changed.code, changed.stderr).toBe(0);
    expect(simChanges(changed.stdout)).toEqual([{ action: 'updated', scheduleId: 'cron-sim' }]);
    const d = await describeSchedule(ctx.client, 'cron-sim');
    const named = (d.action.type === 'startWorkflow' ? d.action.args?.[0] : undefined) as { fingerprint: string };
    expect(await appliedDefinition('sim', named.fingerprint)).toMatchObject({ simulate: { completionTokens: 900 } });
  });
});

describe('tasks trigger', () => {
  it('in an every-minute task, the slot and a manual trigger of the same minute both run and complete', async () => {
    await applyPrices(ctx.operatorPool, loadPricesFile('prices/standard.json'), 'test');
    const file = tasksFile('tick.json', {
      tasks: [{ id: 'tick', cron: '* * * * *', userId: 'u-tick', input: 'tick' }],
      monthlyReport: false,
      budgetSweep: false,
    });
    const applied = await runCli(['tasks', 'apply', file], ctx.env);
    expect(applied.code, applied.stderr).toBe(0);
    const schedule = ctx.client.schedule.getHandle('cron-tick');
    const describeTick = async () => (await describeOrUndefined(ctx.client, 'cron-tick'))!; // retried on DEADLINE_EXCEEDED
    const fleet = await startWorkers(ctx, 1);
    try {
      await fleet.runWhile(async () => {
        // The schedule starts this minute's slot through a backfill over it (as `temporal schedule backfill` does), so
        // no real minute boundary is waited for; paused first, so that it starts no other slot. With under 20 s left in
        // the minute, the next minute's, so that the manual run below is triggered in the slot's minute.
        await schedule.pause('test: one slot is enough');
        if (Date.now() % 60_000 > 40_000) await new Promise((r) => setTimeout(r, 60_500 - (Date.now() % 60_000)));
        const minute = Math.floor(Date.now() / 60_000) * 60_000;
        await schedule.backfill({ start: new Date(minute), end: new Date(minute + 30_000), overlap: 'ALLOW_ALL' });
        // As soon as the schedule has started the slot (describe reads the schedule itself), trigger a manual run that minute.
        let slot: { workflowId: string; scheduledAt: Date } | undefined;
        await waitFor(
          async () => {
            const action = (await describeTick()).info.recentActions[0];
            if (action) slot = { workflowId: action.action.workflow.workflowId, scheduledAt: action.scheduledAt };
            return slot !== undefined;
          },
          90_000,
          'the every-minute schedule started the slot',
        );
        const triggered = await runCli(['tasks', 'trigger', 'tick', '--json'], ctx.env);
        expect(triggered.code, triggered.stderr).toBe(0);
        const manual = JSON.parse(triggered.stdout) as { workflowId: string; idempotencyKey: string; manual: boolean };
        const slotMinute = (slot as { scheduledAt: Date }).scheduledAt.toISOString().slice(0, 16);
        expect(manual.workflowId.slice('cron-tick-manual-'.length, 'cron-tick-manual-'.length + 16)).toBe(slotMinute); // the same minute

        const [slotResult, manualResult] = await Promise.all([
          ctx.client.workflow.getHandle((slot as { workflowId: string }).workflowId).result(),
          ctx.client.workflow.getHandle(manual.workflowId).result(),
        ]);
        expect([slotResult.status, manualResult.status]).toEqual(['completed', 'completed']);
        expect(manualResult.idempotencyKey).toBe(manual.idempotencyKey);
        expect(slotResult.idempotencyKey).toBe(`cron:tick:${slotMinute}Z`);
      });
      const runs = await ctx.pool.query<{ idempotency_key: string; status: string; manual: boolean }>(
        `select idempotency_key, status, manual from runs where task_id = 'tick' order by manual`,
      );
      expect(runs.rows.map((r) => [r.idempotency_key.split(':')[0], r.status, r.manual])).toEqual([
        ['cron', 'completed', false],
        ['manual', 'completed', true],
      ]);
      expect((await ctx.pool.query(`select 1 from run_duplicates where task_id = 'tick'`)).rowCount).toBe(0);
    } finally {
      await schedule.delete();
    }
  }, 150_000);
});

describe('tasks apply refuses bad input and changes nothing', () => {
  const cases: [string, unknown, RegExp][] = [
    [
      'invalid cron',
      { tasks: [task('ok-one'), task('bad-cron', { cron: '61 * * * *' })] },
      /task "bad-cron": cron "61 \* \* \* \*" .* minute value 61 is outside 0-59/,
    ],
    ['four-field cron', { tasks: [task('bad-cron', { cron: '* * * *' })] }, /has 4 fields, not 5/],
    ['unknown time zone', { tasks: [task('bad-zone', { timezone: 'Mars/Olympus' })] }, /"Mars\/Olympus" is not a known IANA time zone/],
    ['duplicate task ids', { tasks: [task('twice'), task('twice')] }, /task id "twice" appears more than once/],
    ['bad task id', { tasks: [task('Has_Upper')] }, /task "Has_Upper" \(tasks\[0\]\.id\): must be lowercase letters, digits and "-"/],
    ['unknown field', { tasks: [task('typo', { crno: '* * * * *' })] }, /task "typo" \(tasks\[0\]\)/],
    ['malformed JSON', '{ "tasks": [ { "id": "x", ', /is not valid JSON/],
    ['not an object', '[1, 2, 3]', /is invalid/],
  ];
  it.each(cases)('%s', async (_name, content, message) => {
    const before = await scheduleState();
    const r = await runCli(['tasks', 'apply', tasksFile(`bad-${_name.replace(/\W+/g, '-')}.json`, content)], ctx.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(await scheduleState()).toEqual(before);
  });

  it('a missing file', async () => {
    const r = await runCli(['tasks', 'apply', join(dir, 'nope.json')], ctx.env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/cannot read tasks file .*nope\.json: ENOENT/);
  });
});

describe('the budget-sweep schedule', () => {
  it('is kept by tasks apply (created, then unchanged) unless the file says "budgetSweep": false', async () => {
    const off = tasksFile('sweep-off.json', { tasks: [task('x')], monthlyReport: false, budgetSweep: false });
    const without = await runCli(['tasks', 'apply', off, '--json'], ctx.env);
    expect(without.code, without.stderr).toBe(0);
    expect(await describeOrUndefined(ctx.client, BUDGET_SWEEP_SCHEDULE_ID)).toBeUndefined();

    const on = tasksFile('sweep-on.json', { tasks: [task('x')], monthlyReport: false });
    const changes = async () => {
      const r = await runCli(['tasks', 'apply', on, '--json'], ctx.env);
      expect(r.code, r.stderr).toBe(0);
      return (JSON.parse(r.stdout) as { changes: { action: string; scheduleId: string }[] }).changes;
    };
    expect(await changes()).toContainEqual({ action: 'created', scheduleId: BUDGET_SWEEP_SCHEDULE_ID });
    expect(await changes()).toContainEqual({ action: 'unchanged', scheduleId: BUDGET_SWEEP_SCHEDULE_ID });
    try {
      const d = await describeOrUndefined(ctx.client, BUDGET_SWEEP_SCHEDULE_ID);
      expect(d?.action.type === 'startWorkflow' && [d.action.workflowType, d.action.taskQueue]).toEqual(['budgetSweep', ctx.taskQueue]);
      expect(d?.spec.intervals?.map((i) => i.every)).toEqual([60_000]);
      expect(d?.policies.overlap).toBe('SKIP');
    } finally {
      await ctx.client.schedule.getHandle(BUDGET_SWEEP_SCHEDULE_ID).delete();
    }
  });
});

describe('the schedule note (what the Web UI and `temporal schedule describe` show)', () => {
  it('names the cron, zone and task on create and update, and keeps saying why a paused schedule is paused', async () => {
    const noteOf = async () => (await describeOrUndefined(ctx.client, 'cron-noted'))?.state.note;
    const apply = async (name: string, extra: Record<string, unknown>) => {
      const file = tasksFile(name, {
        tasks: [task('noted', { timezone: 'Europe/Berlin', ...extra })],
        monthlyReport: false,
        budgetSweep: false,
      });
      const r = await runCli(['tasks', 'apply', file, '--json'], ctx.env);
      expect(r.code, r.stderr).toBe(0);
      const changes = (JSON.parse(r.stdout) as { changes: { action: string; scheduleId: string }[] }).changes;
      return changes.filter((c) => c.scheduleId === 'cron-noted').map((c) => c.action);
    };
    const line = (cron: string) => `cron "${cron}" in Europe/Berlin, task noted (cronledger tasks apply)`;
    // the signals the schedule's own workflow received (Temporal runs each schedule as a workflow of this ID)
    const schedulerSignals = async () =>
      ((await ctx.client.workflow.getHandle('temporal-sys-scheduler:cron-noted').fetchHistory()).events ?? []).flatMap(
        (e) => e.workflowExecutionSignaledEventAttributes?.signalName ?? [],
      );
    try {
      expect(await apply('note-v1.json', { cron: '0 9 * * 1-5' })).toEqual(['created']);
      expect(await noteOf()).toBe(line('0 9 * * 1-5'));
      expect(await apply('note-v2.json', { cron: '30 9 * * 1-5' })).toEqual(['updated']);
      expect(await noteOf()).toBe(line('30 9 * * 1-5'));

      expect((await runCli(['tasks', 'pause', 'noted'], ctx.env)).code).toBe(0);
      expect(await noteOf()).toBe(`${line('30 9 * * 1-5')} · paused: paused with cronledger tasks pause`);
      expect(await apply('note-v2.json', { cron: '30 9 * * 1-5' })).toEqual(['resumed']);
      expect(await noteOf()).toBe(line('30 9 * * 1-5'));

      // Paused in the Web UI (or `temporal schedule toggle --pause --reason`): Temporal makes the reason the whole note.
      // An update of the paused task leads with the new cron line and keeps that reason.
      await ctx.client.schedule.getHandle('cron-noted').pause('provider outage, see INC-42');
      expect(await apply('note-v3.json', { cron: '45 9 * * 1-5', paused: true })).toEqual(['updated']);
      expect(await noteOf()).toBe(`${line('45 9 * * 1-5')} · paused: provider outage, see INC-42`);
      expect(await apply('note-v3.json', { cron: '45 9 * * 1-5', paused: true })).toEqual(['unchanged']);

      // A schedule whose note says something else (an older cronledger's note) gets the line back on the next apply.
      await ctx.client.schedule
        .getHandle('cron-noted')
        .update((prev) => ({ ...prev, state: { ...prev.state, paused: false, note: 'managed by cronledger tasks apply' } }));
      const before = await schedulerSignals();
      expect(await apply('note-v4.json', { cron: '45 9 * * 1-5', paused: true })).toEqual(['updated', 'paused']);
      expect(await noteOf()).toBe(`${line('45 9 * * 1-5')} · paused: paused by cronledger tasks apply`);
      // One signal: Temporal's scheduler applies a pause received in the same workflow task as an update before the
      // update, which then writes its state over the pause; an update and a pause sent one after the other met there.
      expect((await schedulerSignals()).slice(before.length)).toEqual(['update']);
      expect(await apply('note-v5.json', { cron: '50 9 * * 1-5' })).toEqual(['updated', 'resumed']);
      expect(await noteOf()).toBe(line('50 9 * * 1-5'));
      expect((await schedulerSignals()).slice(before.length)).toEqual(['update', 'update']);
    } finally {
      await ctx.client.schedule.getHandle('cron-noted').delete();
    }
  }, 240_000);
});

describe('a schedule update', () => {
  it('is dropped when a pause landed after the describe it was made from, and applied from a fresh describe', async () => {
    const file = tasksFile('raced.json', { tasks: [task('raced')], monthlyReport: false, budgetSweep: false });
    expect((await runCli(['tasks', 'apply', file], ctx.env)).code).toBe(0);
    const handle = ctx.client.schedule.getHandle('cron-raced');
    try {
      // the racers meet by construction: the pause comes between the describe and the update made from it
      const stale = await describeSchedule(ctx.client, 'cron-raced');
      await handle.pause('paused for budget while apply ran');
      await updateIfUnchanged(ctx.client, stale, { ...stale, state: { paused: false, note: 'from the stale describe' } });
      const kept = await describeSchedule(ctx.client, 'cron-raced');
      expect([kept.state.paused, kept.state.note]).toEqual([true, 'paused for budget while apply ran']);

      await updateIfUnchanged(ctx.client, kept, { ...kept, state: { paused: false, note: 'from a fresh describe' } });
      const updated = await describeSchedule(ctx.client, 'cron-raced');
      expect([updated.state.paused, updated.state.note]).toEqual([false, 'from a fresh describe']);
    } finally {
      await handle.delete();
    }
  });

  it('from apply, made from a describe older than a budget pause, lands the new cron and keeps the pause and its reason', async () => {
    const raced = (cron: string) =>
      parseTasksFile({ tasks: [task('raced-budget', { cron })], monthlyReport: false, budgetSweep: false }).tasks[0]!;
    const taskQueue = ctx.env.CRONLEDGER_TASK_QUEUE as string;
    expect((await reconcileSchedule(ctx.client, wantedTaskSchedule(raced('*/15 * * * *'), taskQueue))).outcome).toBe('created');
    const handle = ctx.client.schedule.getHandle('cron-raced-budget');
    try {
      // the racers meet by construction: a blocked run pauses the task between apply's describe and its update
      const stale = await describeSchedule(ctx.client, 'cron-raced-budget');
      const reason = budgetPauseReason({ userId: 'u1', month: '2026-12', timeZone: 'UTC', limitUsd: '5' });
      await handle.pause(notePausedFor(stale.state.note, reason));
      const changed = wantedTaskSchedule(raced('5 * * * *'), taskQueue);
      expect((await reconcileFrom(ctx.client, changed, stale)).outcome).toBe('updated');
      const after = await describeSchedule(ctx.client, 'cron-raced-budget');
      expect(appliedFingerprintOf(after)).toBe(changed.fingerprint);
      expect([after.state.paused, after.state.note]).toEqual([true, taskNoteOf(raced('5 * * * *'), reason)]);
    } finally {
      await handle.delete();
    }
  });

  it('from tasks resume, made from a describe older than an apply, keeps the cron the apply wrote and resumes with its note', async () => {
    const raced = (cron: string, paused = false) =>
      parseTasksFile({ tasks: [task('raced-resume', { cron, paused })], monthlyReport: false, budgetSweep: false }).tasks[0]!;
    const taskQueue = ctx.env.CRONLEDGER_TASK_QUEUE as string;
    expect((await reconcileSchedule(ctx.client, wantedTaskSchedule(raced('*/15 * * * *'), taskQueue))).outcome).toBe('created');
    const handle = ctx.client.schedule.getHandle('cron-raced-resume');
    await handle.pause('paused with cronledger tasks pause');
    // The racers meet by construction: the resume's first update goes out only after an apply (a new cron, the task
    // paused in its file) landed, so that update was made from a describe older than the apply.
    const applied = wantedTaskSchedule(raced('5 * * * *', true), taskQueue);
    const { client, sent } = racedBeforeEachUpdate(async (n) => {
      if (n === 1) expect((await reconcileSchedule(ctx.client, applied)).outcome).toBe('updated');
    });
    try {
      await operateOnTask(client, 'raced-resume', 'resume');
      const after = await describeSchedule(ctx.client, 'cron-raced-resume');
      expect(appliedFingerprintOf(after)).toBe(applied.fingerprint);
      expect([after.state.paused, after.state.note]).toEqual([false, taskNoteOf(raced('5 * * * *'))]);
      expect(sent()).toBe(2); // the first dropped, the second made from a fresh describe
    } finally {
      await handle.delete();
    }
  });

  it('gives up after 5 updates that each met a change, with an error that says to run the command again, the schedule as the racer left it', async () => {
    const raced = (cron: string) =>
      parseTasksFile({ tasks: [task('raced-often', { cron })], monthlyReport: false, budgetSweep: false }).tasks[0]!;
    const taskQueue = ctx.env.CRONLEDGER_TASK_QUEUE as string;
    const first = wantedTaskSchedule(raced('*/15 * * * *'), taskQueue);
    expect((await reconcileSchedule(ctx.client, first)).outcome).toBe('created');
    const handle = ctx.client.schedule.getHandle('cron-raced-often');
    // The racers meet by construction: every update this client sends is preceded by a real pause or unpause with a
    // new note, made through the test's own client after the describe the update was made from.
    const { client, sent } = racedBeforeEachUpdate((n) => (n % 2 === 1 ? handle.pause(`racer ${n}`) : handle.unpause(`racer ${n}`)));
    try {
      const changed = wantedTaskSchedule(raced('5 * * * *'), taskQueue);
      const failed = await reconcileSchedule(client, changed).catch((err: unknown) => err);
      expect(failed).toBeInstanceOf(UserError);
      expect((failed as UserError).message).toBe(
        'schedule cron-raced-often changed under each of 5 updates (something else keeps pausing or updating it); run the command again',
      );
      expect((failed as UserError).exitCode).toBe(1);
      expect(sent()).toBe(5);
      const after = await describeSchedule(ctx.client, 'cron-raced-often');
      expect(appliedFingerprintOf(after)).toBe(first.fingerprint);
      expect([after.state.paused, after.state.note]).toEqual([true, 'racer 5']);
    } finally {
      await handle.delete();
    }
  });
});

describe('tasks apply on a terminal', () => {
  it('lists the schedules of omitted tasks and deletes them only when the answer is y', async () => {
    const both = tasksFile('tty-both.json', { tasks: [task('tty-a'), task('tty-b')], monthlyReport: false, budgetSweep: false });
    const onlyA = tasksFile('tty-a.json', { tasks: [task('tty-a')], monthlyReport: false, budgetSweep: false });
    const applied = await runCli(['tasks', 'apply', both], ctx.env);
    expect(applied.code, applied.stderr).toBe(0);
    // the prompt lists what the schedule list shows: wait until it shows cron-tty-b
    await waitFor(
      async () => {
        for await (const s of ctx.client.schedule.list()) if (s.scheduleId === 'cron-tty-b') return true;
        return false;
      },
      20_000,
      'the schedule list showing cron-tty-b',
    );
    const dialogue = (answer: string) => ({ prompt: '[y/N]', answer });

    const no = await runCliOnTerminal(['tasks', 'apply', onlyA], ctx.env, dialogue('n'));
    expect(no.code, no.output).toBe(0);
    expect(no.asked, no.output).toBe(true);
    expect(no.output).toMatch(/omits the tasks? of \d+ schedules?:\r\n( {2}cron-[a-z0-9-]+\r\n)* {2}cron-tty-b\r\n/);
    expect(no.output).toMatch(/^kept\s+cron-tty-b\r$/m);
    expect(no.output).toContain('--prune` deletes');
    expect(await describeOrUndefined(ctx.client, 'cron-tty-b')).toBeDefined();

    const yes = await runCliOnTerminal(['tasks', 'apply', onlyA], ctx.env, dialogue('y'));
    expect(yes.code, yes.output).toBe(0);
    expect(yes.asked, yes.output).toBe(true);
    expect(yes.output).toMatch(/^deleted\s+cron-tty-b\r$/m);
    expect(yes.output).not.toContain('left ');
    expect(await describeOrUndefined(ctx.client, 'cron-tty-b')).toBeUndefined();
    expect(await describeOrUndefined(ctx.client, 'cron-tty-a')).toBeDefined();
    await ctx.client.schedule.getHandle('cron-tty-a').delete();
  }, 180_000);
});
